"""The pieces of the diagnosis (edgeconv/verify/diagnosis.py) that need no TensorFlow: the inputs as the built
model quantizes them, the path from an id input to its index op, the groups of tensors that share a range,
the share of the INT8 model's error an input explains (at its confirmation boundary), and the ranking.
The .tflite files under tests/data/diagnosis are the integration tests' models, built by edgeconv."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv import report_model as rm
from edgeconv.calibration.checks import DataWarning, shared_range_groups
from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.verify import diagnosis

DATA = Path(__file__).resolve().parents[1] / "data" / "diagnosis"


def test_an_id_input_is_followed_through_dequantize_and_cast_to_its_gather() -> None:
    model = read_tflite(DATA / "ids-embedding.int8.tflite")
    (view,) = diagnosis.input_views(model)
    assert (view.name, view.dtype, view.zero_point) == ("ids", "int8", -128)
    assert view.scale == pytest.approx(0.6941176652908325)
    assert diagnosis.index_path(model, view.index) == ["CAST", "GATHER"]


def test_a_value_input_reaches_no_index() -> None:
    model = read_tflite(DATA / "wine-mlp.int8.tflite")
    (view,) = diagnosis.input_views(model)
    assert diagnosis.index_path(model, view.index) == []


def test_the_round_trip_is_the_runtime_s_float32_arithmetic() -> None:
    """2 / 0.6666667f is 3.0 in float32 (2.9999999 in float64): the id survives as the runtime computes it."""
    view = diagnosis.InputView("ids", "int8", float(np.float32(2 / 3)), -128, 0)
    back = view.roundtrip(np.array([0.0, 1.0, 2.0, 200.0, -5.0], np.float32))
    assert back.dtype == np.float32
    np.testing.assert_array_equal(np.trunc(back), [0.0, 1.0, 2.0, 170.0, 0.0])  # 255 levels x 2/3: the top clips


def test_tensors_joined_by_concatenation_and_maximum_share_one_group() -> None:
    groups = shared_range_groups(read_tflite(DATA / "shared-range.int8.tflite"))
    narrow = next(name for name in groups if name.endswith("db_1/MatMul1"))
    members, ops = groups[narrow]
    assert ops == {"CONCATENATION", "MAXIMUM"}
    assert any(m.endswith("big_1/mul") for m in members) and len(members) == 5
    assert all(groups[m] == (members, ops) for m in members)
    assert not any(name.startswith("PartitionedCall") for name in groups)  # the head's output has its own


def _parity(sqnr: float | None, top1: float | None, accuracy: float | None = None,
            model: str = "built") -> rm.Parity:
    out: dict[str, Any] = {"max_abs_error": 0.1, "mean_abs_error": 0.1, "cosine": 0.9, "sqnr_db": sqnr,
                           "top1_agreement": top1}
    acc = None if accuracy is None else {"output": "y", "source": 0.9, model: accuracy, "drop": {model: 0.9 - accuracy}}
    return {"samples": 10, "outputs": {"y": {model: out}}, "accuracy": acc}  # type: ignore[typeddict-item]


@pytest.mark.parametrize(("alone", "built", "share"), [
    ((13.0103, None), (10.0, None), 0.5),  # half the noise power: 10 log10(2) dB better
    ((16.0, None), (10.0, None), 10 ** -0.6),
    ((None, None), (10.0, None), 0.0),  # the input alone adds no error
    ((3.0, None), (10.0, None), 1.0),  # worse alone than the whole model: capped
    ((40.0, 0.8), (30.0, 0.6), 0.5),  # 20 % of the decisions against 40 %
])
def test_the_share_an_input_explains(alone: tuple[float | None, float | None], built: tuple[float, float | None],
                                     share: float) -> None:
    got, said = diagnosis.explained(_parity(*alone, model="input"), _parity(*built))
    assert got == pytest.approx(share, abs=1e-4)
    assert said


def test_an_accuracy_drop_counts_as_error() -> None:
    got, said = diagnosis.explained(_parity(40.0, None, 0.6, model="input"), _parity(30.0, None, 0.3))
    assert got == pytest.approx(0.5)
    assert said == "accuracy 60.00% (the float model 90.00%, the INT8 model 30.00%)"


@pytest.mark.parametrize(("alone_db", "confirmed"), [(13.0, True), (13.05, False)])  # 10 log10(2) = 3.0103 dB
def test_an_input_is_confirmed_at_half_the_error(alone_db: float, confirmed: bool) -> None:
    assert (diagnosis.explained(_parity(alone_db, None, model="input"), _parity(10.0, None))[0]
            >= diagnosis.CONFIRMS) is confirmed


def _culprit(rank: int, tensor: str) -> rm.Culprit:
    return {"rank": rank, "op": "CONV_2D", "tensor": tensor, "source_layers": [f"layer{rank}"], "model_output": False,
            "erased": 0.0, "sqnr_db": 5.0, "rmse_per_scale": 0.3, "scale": 0.1}


@pytest.mark.parametrize(("place", "confirmed"), [(3, True), (4, False)])
def test_a_tensor_finding_is_confirmed_by_the_first_three_ops_of_the_ranking(place: int, confirmed: bool) -> None:
    setting = diagnosis.Setting(None, lambda f: {}, None, 1, {}, None, {}, ["t"])  # type: ignore[arg-type]
    ranked = [_culprit(i + 1, "t/x" if i + 1 == place else f"other{i}") for i in range(5)]
    finding = DataWarning("imposed_range", "t/x", "tensor 't/x' spans [0, 1]; advice", advice="advice")
    (cause,) = diagnosis.finding_causes(setting, [finding], ranked)
    assert (cause["id"], cause["confirmed"]) == ("imposed_range", confirmed)
    assert cause["sentence"] == f"tensor 't/x' spans [0, 1] (layer t; its op ranks #{place} of the ops that add " \
                                "the most error)"


def test_the_op_cause_skips_an_op_a_cause_above_names() -> None:
    ranked = [_culprit(1, "a"), _culprit(2, "b")]
    (cause,) = diagnosis.op_cause(ranked, {"a"})
    assert cause["subject"] == "b" and cause["sentence"].startswith("CONV_2D (layer2) is #2 of the quantized ops")
    assert diagnosis.op_cause(ranked, {"a", "b"}) == []
