"""Each model runs over the build's samples once: its outputs recorded by the run that needs more than them.

The float .tflite runs over the evaluation samples for the activation-range check (every tensor kept) and
the built .tflite for the runtime check (every sample must run); parity needs both models' outputs on the
same samples. Rather than run each model a second time, those first runs record the outputs, batch by
batch, and parity reads them back (:meth:`Recording.replay`). A recording is bounded by bytes
(RECORD_BYTES): past it, it is dropped and parity runs the model itself, as it would without one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_import
from .._log import get_logger

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

log = get_logger(__name__)

RECORD_BYTES = 256 * 2 ** 20  # outputs kept per recording; a larger one is dropped (the model runs again)
Run = Callable[[Mapping[str, Any]], dict[str, Any]]


class Recording:
    """One model's outputs on one sample set's batches (``batch`` samples each, from the first sample on),
    in the order they ran. Complete only when every batch ran and the outputs fit in ``limit`` bytes."""

    def __init__(self, what: str, role: str, batch: int, limit: int = RECORD_BYTES) -> None:
        self.what, self.role, self.batch, self.limit = what, role, batch, limit
        self.batches: list[dict[str, np.ndarray]] | None = []
        self.bytes = 0
        self.complete = False

    def add(self, outputs: Mapping[str, np.ndarray]) -> None:
        """The next batch's outputs (copied: an interpreter reuses its buffers)."""
        if self.batches is None:
            return
        size = sum(int(v.nbytes) for v in outputs.values())
        if self.bytes + size > self.limit:
            log.debug("recording %s on the %s samples: past %d bytes, dropped (parity runs it again)", self.what,
                      self.role, self.limit)
            self.batches, self.bytes = None, 0
            return
        self.batches.append({name: np.array(value) for name, value in outputs.items()})
        self.bytes += size

    def drop(self) -> None:
        """Not to be read back (the run stopped early, or failed)."""
        self.batches, self.bytes, self.complete = None, 0, False

    def finish(self, batches: int) -> None:
        """The run is over: complete when it recorded ``batches`` batches."""
        self.complete = self.batches is not None and len(self.batches) == batches
        if not self.complete:
            self.drop()

    def usable(self, role: str, batch: int) -> bool:
        return self.complete and self.role == role and self.batch == batch

    def replay(self, make: Callable[[], Run], start: int = 0) -> Run:
        """A run that gives the recorded outputs of batch ``start // batch`` on, in order; past the recording
        (it does not go past when the batches are the recorded ones) the real run, made by ``make``."""
        step = start // self.batch
        real = lazy_run(make)

        def run(feeds: Mapping[str, Any]) -> dict[str, Any]:
            nonlocal step
            k, step = step, step + 1
            return self.batches[k] if self.batches is not None and k < len(self.batches) else real(feeds)

        return run


def lazy_run(make: Callable[[], Run]) -> Run:
    """The run ``make`` builds, built when first called (an interpreter costs its set-up only if it runs)."""
    made: list[Run] = []

    def run(feeds: Mapping[str, Any]) -> dict[str, Any]:
        if not made:
            made.append(make())
        return made[0](feeds)

    return run


@dataclasses.dataclass
class Recordings:
    """What a build's first runs recorded for parity: the float .tflite's and the built .tflite's outputs."""

    float_tflite: Recording | None = None
    built: Recording | None = None

    def replay(self, what: str, make: Callable[[], Run], role: str, batch: int, start: int = 0) -> Run:
        """The recorded run of ``what`` ("float_tflite" or "built") on ``role``'s samples when there is a
        complete one, else the real run (made when first called)."""
        found: Recording | None = getattr(self, what)
        if found is not None and found.usable(role, batch):
            return found.replay(make, start)
        return lazy_run(make)


def recordings(data: Any, batch: int, with_float: bool) -> Recordings:
    """What the build's first runs record for parity on the samples it measures (the evaluation samples, or
    without any the calibration ones): the built .tflite's outputs (the runtime check runs it on every
    sample) and, ``with_float``, the float .tflite's (the activation-range check runs it)."""
    role = data.evaluation.role if data.evaluation is not None else data.calib.role
    return Recordings(Recording("the float .tflite", role, batch, RECORD_BYTES) if with_float else None,
                      Recording("the built .tflite", role, batch, RECORD_BYTES))
