"""edgeconv.verify.recorded: a model's outputs recorded by its first run, read back by parity."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv.verify.recorded import Recording, Recordings

DATA = Path(__file__).resolve().parent.parent / "data"

# Three batches of two samples: outputs of 2 x 3 float32 (24 bytes) and 2 int8 (2 bytes) each.
BATCHES: list[dict[str, np.ndarray]] = [{"scores": np.full((2, 3), k, np.float32), "label": np.full(2, k, np.int8)}
                                        for k in range(3)]
BATCH_BYTES = 26


def _real(calls: list[int]) -> Any:
    def make() -> Any:
        calls.append(0)

        def run(feeds: Mapping[str, Any]) -> dict[str, Any]:
            return {"scores": np.full((2, 3), -1, np.float32), "label": np.full(2, -1, np.int8)}

        return run

    return make


def _recorded(limit: int, batches: int = 3, finish: int = 3) -> Recording:
    r = Recording("the built .tflite", "evaluation", 2, limit)
    for b in BATCHES[:batches]:
        r.add(b)
    r.finish(finish)
    return r


@pytest.mark.parametrize(("limit", "kept"), [(3 * BATCH_BYTES, True), (3 * BATCH_BYTES - 1, False)])
def test_a_recording_is_bounded_by_bytes(limit: int, kept: bool) -> None:
    r = _recorded(limit)
    assert r.complete is kept and r.bytes == (3 * BATCH_BYTES if kept else 0)
    assert (r.batches is not None) is kept


def test_the_recorded_outputs_are_copies_read_back_in_order_from_the_start_asked() -> None:
    source = [{k: v.copy() for k, v in b.items()} for b in BATCHES]
    r = Recording("the float .tflite", "evaluation", 2, 10_000)
    for b in source:
        r.add(b)
        b["scores"][...] = 99  # an interpreter reuses its buffers: what was recorded must not change
    r.finish(3)
    calls: list[int] = []
    run = Recordings(float_tflite=r).replay("float_tflite", _real(calls), "evaluation", 2, start=2)
    assert [run({})["scores"][0, 0] for _ in range(2)] == [1, 2]
    assert run({})["scores"][0, 0] == -1 and calls == [0]  # past the recording: the model itself, made once
    assert run({})["scores"][0, 0] == -1 and calls == [0]


@pytest.mark.parametrize(("role", "batch", "batches", "finish"), [
    ("calibration", 2, 3, 3),  # recorded on other samples
    ("evaluation", 4, 3, 3),  # in other batches
    ("evaluation", 2, 2, 3),  # the run stopped before the last batch
    ("evaluation", 2, 3, -1),  # a batch failed
])
def test_an_incomplete_or_other_recording_is_not_read(role: str, batch: int, batches: int, finish: int) -> None:
    calls: list[int] = []
    r = _recorded(10_000, batches, finish)
    run = Recordings(built=r).replay("built", _real(calls), role, batch)
    assert calls == []  # nothing is set up before the first call
    assert run({})["label"][0] == -1 and calls == [0]


def test_without_a_recording_the_model_runs_and_is_made_once() -> None:
    calls: list[int] = []
    run = Recordings().replay("float_tflite", _real(calls), "evaluation", 2)
    assert [run({})["label"][0] for _ in range(3)] == [-1, -1, -1] and calls == [0]



@pytest.mark.parametrize(("samples", "batch", "any_batch", "chunk"), [
    (5.0, 1, True, 5),  # five samples' activations fit exactly
    (5.0 - 1e-6, 1, True, 4),  # a byte short of five
    (5.0, 2, True, 4),  # whole batches only
    (1.0, 2, True, 2),  # never less than one batch
    (1e4, 1, True, 256),  # never more than SOURCE_CHUNK
    (1e4, 3, False, 3),  # a model that takes only its batch size
])
def test_the_source_model_runs_on_as_many_samples_as_their_activations_bytes_allow(
        monkeypatch: pytest.MonkeyPatch, samples: float, batch: int, any_batch: bool, chunk: int) -> None:
    from edgeconv.converters.tflite_reader import parse_tflite
    from edgeconv.verify import stage

    model = parse_tflite((DATA / "conv2d-relu.int8.tflite").read_bytes(), "conv2d-relu.int8.tflite")
    # What the model computes, as float32, for the ``batch`` samples it is taken to hold.
    per_sample = 4 * sum(t.elements for t in model.main.tensors if not t.constant) / batch
    assert per_sample > 500
    monkeypatch.setattr(stage, "SOURCE_BYTES", int(samples * per_sample))
    assert stage.source_chunk(model, batch, any_batch) == chunk
