"""TFRecord files of ``tf.train.Example`` (a file or a folder of them), read with tf.data:
declared features feed model inputs (numbers, raw bytes, or encoded images that are
decoded and preprocessed like an image folder)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..._lazy import lazy_import
from ..._tf import import_tf
from ...errors import DataError, rel
from ...ir import TensorSpec
from ..config import ColorOrder, DataConfig, Decode, FeatureSpec, FeatureType, Layout, Preprocess
from .base import Field, Reader, Sample, Source
from .images import preprocess_image, spatial_size

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

SUFFIXES = (".tfrecord", ".tfrecords", ".tfrec")


class _RecordReader(Reader):
    def __init__(self, location: str, paths: list[Path], features: dict[str, FeatureSpec],
                 inputs: dict[str, TensorSpec], pre: Preprocess | None) -> None:
        self.location, self.paths, self.features, self.pre = location, paths, features, pre
        self.sizes = {name: spatial_size(inputs[name], pre) for name, f in features.items()
                      if f.decode is Decode.IMAGE and pre is not None and name in inputs}
        self._counts: list[int] | None = None

    def fields(self) -> list[Field]:
        out = []
        for name, f in self.features.items():
            if f.decode is Decode.IMAGE:
                assert self.pre is not None
                h, w = self.sizes[name]
                c = 1 if self.pre.color is ColorOrder.GRAYSCALE else 3
                out.append(Field(name, (h, w, c) if self.pre.layout is Layout.NHWC else (c, h, w),
                                 np.dtype(np.float32)))
            else:
                dtype = {FeatureType.FLOAT32: np.float32, FeatureType.INT64: np.int64}.get(f.dtype, np.uint8)
                out.append(Field(name, tuple(f.shape), np.dtype(dtype if f.decode is Decode.NONE else np.uint8)))
        return out

    def _records(self, path: Path) -> Iterator[Any]:
        tf = import_tf()
        index = 0
        iterator = iter(tf.data.TFRecordDataset(str(path)))
        while True:
            try:
                record = next(iterator)
            except StopIteration:
                return
            except (tf.errors.DataLossError, tf.errors.OpError) as exc:
                detail = re.sub(r"\{\{.*?\}\}\s*", "", str(exc).splitlines()[0]).split(" [Op:")[0].replace("'", "")
                raise DataError(f"{rel(path)}: record {index} is truncated or unreadable ({detail}); is it a complete "
                                "TFRecord file?") from None
            yield record
            index += 1

    def counts(self) -> list[int]:
        if self._counts is None:
            self._counts = [sum(1 for _ in self._records(p)) for p in self.paths]
        return self._counts

    def count(self) -> int:
        return sum(self.counts())

    def _spec(self) -> dict[str, Any]:
        tf = import_tf()
        spec = {}
        for name, f in self.features.items():
            if f.decode is Decode.NONE:
                dtype = tf.float32 if f.dtype is FeatureType.FLOAT32 else tf.int64
                spec[f.key or name] = tf.io.FixedLenFeature(list(f.shape), dtype)
            else:
                spec[f.key or name] = tf.io.FixedLenFeature([], tf.string)
        return spec

    def _parse(self, record: Any, spec: dict[str, Any], where: str) -> Sample:
        tf = import_tf()
        try:
            parsed = tf.io.parse_single_example(record, spec)
        except (tf.errors.InvalidArgumentError, ValueError) as exc:
            raise DataError(f"{where}: does not match the declared features ("
                            f"{str(exc).splitlines()[0][:300]})") from None
        out: Sample = {}
        for name, f in self.features.items():
            value = parsed[f.key or name]
            if f.decode is Decode.IMAGE:
                from PIL import Image

                assert self.pre is not None
                try:
                    pixels = tf.io.decode_image(value, expand_animations=False).numpy()
                except tf.errors.InvalidArgumentError as exc:
                    raise DataError(f"{where}: feature {f.key or name!r} is not a decodable image "
                                    f"({str(exc).splitlines()[0][:200]})") from None
                image = Image.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels)
                out[name] = preprocess_image(image, self.pre, self.sizes[name])
            elif f.decode is Decode.RAW:
                raw = np.frombuffer(value.numpy(), np.uint8)
                if raw.size != int(np.prod(f.shape)):
                    raise DataError(f"{where}: feature {f.key or name!r} has {raw.size} bytes, shape {list(f.shape)} "
                                    f"needs {int(np.prod(f.shape))}")
                out[name] = raw.reshape(f.shape)
            else:
                out[name] = value.numpy()
        return out

    def read(self, indices: Sequence[int]) -> Iterator[tuple[int, Sample]]:
        spec = self._spec()
        wanted = iter(indices)
        pending = next(wanted, None)
        base = 0
        for path, n in zip(self.paths, self.counts()):
            if pending is None:
                return
            if pending >= base + n:
                base += n
                continue
            for k, record in enumerate(self._records(path)):
                while pending is not None and pending == base + k:
                    yield pending, self._parse(record, spec, f"{rel(path)} record {k}")
                    pending = next(wanted, None)
                if pending is None or pending >= base + n:
                    break
            base += n

    def where(self, index: int) -> str:
        base = 0
        for path, n in zip(self.paths, self.counts()):
            if index < base + n:
                return f"{rel(path)} record {index - base}"
            base += n
        return f"{self.location} record {index}"

    def files(self) -> list[Path]:
        return self.paths


class TFRecordSource(Source):
    name: ClassVar[str] = "tfrecord"
    suffixes: ClassVar[tuple[str, ...]] = SUFFIXES
    summary: ClassVar[str] = ("TFRecord files of tf.train.Example (a file or a folder of them): declared features "
                              "per model input, numeric, raw bytes or encoded images")

    def open(self, cfg: DataConfig, inputs: Sequence[TensorSpec], base_dir: Path) -> Reader:
        assert cfg.path is not None
        if cfg.path.is_dir():
            paths = sorted(p for p in cfg.path.iterdir() if p.suffix.lower() in SUFFIXES and p.is_file())
            location = rel(cfg.path) + "/"
        else:
            paths, location = [cfg.path], rel(cfg.path)
        if not paths:
            raise DataError(f"{location}: holds no TFRecord files ({', '.join(SUFFIXES)})")
        return _RecordReader(location, paths, dict(cfg.features), {i.name: i for i in inputs}, cfg.preprocess)
