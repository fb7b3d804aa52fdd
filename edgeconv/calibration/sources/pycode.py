"""A Python function that yields samples: ``module:function`` returning an iterable of
``{input_name: array}``. It runs code from the pipeline's folder, so the pipeline must
say ``trust_code: true``. The function is called once to count and once to read; it
must give the same samples both times."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..._lazy import lazy_import
from ...errors import DataError
from ...ir import TensorSpec
from ..config import DataConfig
from .base import Field, Reader, Sample, Source

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

UNTRUSTED = ("runs Python code from the pipeline's folder ({function}), which edgeconv does not do unless the "
             "pipeline says so: set trust_code: true if you trust that code")


class _FunctionReader(Reader):
    def __init__(self, function: str, call: Callable[[], Iterable[Any]]) -> None:
        self.location, self.call = function, call
        self._count: int | None = None
        self._fields: list[Field] | None = None

    def _samples(self) -> Iterator[Sample]:
        try:
            items = self.call()
            iterator = iter(items)
        except Exception as exc:  # the user's code: any exception is its failure
            raise DataError(f"{self.location}: raised {type(exc).__name__}: {exc}") from None
        index = 0
        while True:
            try:
                item = next(iterator)
            except StopIteration:
                return
            except Exception as exc:
                raise DataError(f"{self.location}: raised {type(exc).__name__} after {index} samples: {exc}") \
                    from None
            if not isinstance(item, Mapping):
                raise DataError(f"{self.location}: sample {index} is a {type(item).__name__}, expected a dict of "
                                "{input_name: array}")
            try:
                yield {str(k): np.asarray(v) for k, v in item.items()}
            except (TypeError, ValueError) as exc:
                raise DataError(f"{self.location}: sample {index} holds something that is not an array ({exc})") \
                    from None
            index += 1

    def fields(self) -> list[Field]:
        if self._fields is None:
            first = next(self._samples(), None)
            if first is None:
                raise DataError(f"{self.location}: returned no samples")
            self._fields = [Field(k, tuple(v.shape), v.dtype) for k, v in first.items()]
        return self._fields

    def count(self) -> int:
        if self._count is None:
            self._count = sum(1 for _ in self._samples())
            if not self._count:
                raise DataError(f"{self.location}: returned no samples")
        return self._count

    def read(self, indices: Sequence[int]) -> Iterator[tuple[int, Sample]]:
        wanted = iter(indices)
        pending = next(wanted, None)
        seen = 0
        for i, sample in enumerate(self._samples()):
            seen = i + 1
            if pending is None:
                continue  # keep counting: the second pass must match the first
            if i == pending:
                yield i, sample
                pending = next(wanted, None)
        if seen != self.count():
            raise DataError(f"{self.location}: returned {seen} samples on the second call and {self.count()} on the "
                            "first; it must give the same samples every time it is called")

    def where(self, index: int) -> str:
        return f"{self.location} sample {index}"


class PythonSource(Source):
    name: ClassVar[str] = "python"
    summary: ClassVar[str] = ("module:function returning an iterable of {input_name: array} (needs trust_code: true)")

    def open(self, cfg: DataConfig, inputs: Sequence[TensorSpec], base_dir: Path) -> Reader:
        assert cfg.function is not None
        if not cfg.trust_code:
            raise DataError(f"function: {UNTRUSTED.format(function=cfg.function)}")
        module_name, _, attr = cfg.function.partition(":")
        sys.path.insert(0, str(base_dir))
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # importing runs the module: any failure is the user's
            raise DataError(f"function: cannot import {module_name!r} ({type(exc).__name__}: {exc}); it is looked "
                            f"up next to the pipeline file ({base_dir}) and on the Python path") from None
        finally:
            sys.path.remove(str(base_dir))
        call = getattr(module, attr, None)
        if not callable(call):
            raise DataError(f"function: {module_name!r} has no function {attr!r}")
        return _FunctionReader(cfg.function, call)
