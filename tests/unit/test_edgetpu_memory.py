"""The Edge TPU parameter-memory estimate against what compiler 16 laid out in the compiled pairs: the
parameters of each compiled file's PARAMETER_CACHING executable (the figure the compiler's summary prints as
"On-chip memory used for caching model parameters")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from edgeconv.converters.edgetpu_package import CompiledParameters, compiled_parameters
from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.errors import ModelFileError
from edgeconv.report import estimates_line
from edgeconv.targets import load_target
from edgeconv.targets.checker import check_model
from edgeconv.targets.parameter_memory import estimate, memory_line
from edgeconv.targets.target import OpStatus

from ..conftest import REPO

ORACLES = REPO / "tests" / "data" / "oracles"
PUBLIC = ORACLES / "edgetpu-public" / "jorgitou98"
CORAL = ORACLES / "edgetpu"

# (compiled file, parameters cached on-chip, streamed, executables): read from the files by hand once
# (libedgetpu's executable.fbs), pinned so a change to the reader shows.
COMPILED = [
    (PUBLIC / "N32-nMACs41287680_quant_edgetpu.tflite", 10_880, 0, 2),
    (PUBLIC / "N34-nMACs46374912_quant_edgetpu.tflite", 18_048, 0, 2),
    (PUBLIC / "N38-nMACs57434112_quant_edgetpu.tflite", 19_776, 0, 2),
    (PUBLIC / "N40-nMACs63406080_quant_edgetpu.tflite", 19_776, 0, 2),
    (PUBLIC / "N100-nMACs379699200_quant_edgetpu.tflite", 121_856, 0, 2),
    (PUBLIC / "N120-nMACs544112640_quant_edgetpu.tflite", 144_896, 0, 2),
    (CORAL / "mobilenet_v1_0.25_128_quant_edgetpu.tflite", 566_912, 0, 2),
    (CORAL / "deeplabv3_mnv2_dm05_pascal_quant_edgetpu.tflite", 766_720, 0, 2),
    (CORAL / "bodypix_mobilenet_v1_075_512_512_16_quant_decoder_edgetpu.tflite", 1_477_888, 0, 2),
    (CORAL / "keras_lstm_mnist_ptq_edgetpu.tflite", 43_968, 576, 2),
    (CORAL / "split_concat_edgetpu.tflite", 192, 0, 2),
]


def _estimated(source: Path) -> dict[str, float]:
    result = check_model(read_tflite(source), load_target("edgetpu"))
    assert result.estimates is not None
    return dict(result.estimates)


def _id(value: object) -> str:
    return getattr(value, "stem", "")


@pytest.mark.parametrize(("compiled", "cached", "streamed", "executables"), COMPILED, ids=_id)
def test_the_reader_finds_the_compilers_parameters(compiled: Path, cached: int, streamed: int,
                                                    executables: int) -> None:
    assert compiled_parameters(compiled) == CompiledParameters(cached, streamed, executables)


@pytest.mark.parametrize(("compiled", "cached", "streamed", "executables"), COMPILED, ids=_id)
def test_the_estimate_is_within_ten_percent_of_the_compiler(compiled: Path, cached: int, streamed: int,
                                                             executables: int) -> None:
    estimated = _estimated(compiled.with_name(compiled.name.replace("_edgetpu.tflite", ".tflite")))
    compiler = cached + streamed
    if compiled.parent == PUBLIC:  # the pairs with the compiler's logs: the layout is exact
        assert estimated["parameter_bytes"] == compiler
    elif compiler < 1024:  # split_concat: no weights; the compiler keeps 192 bytes of its own
        assert estimated["parameter_bytes"] == 0
    else:
        assert abs(estimated["parameter_bytes"] - compiler) <= 0.10 * compiler
    assert estimated["parameters_off_chip_max_bytes"] == 0  # none of them streams, as the compiler says


def test_the_lstm_cell_is_counted_raw_and_said() -> None:
    estimated = _estimated(CORAL / "keras_lstm_mnist_ptq.tflite")
    assert estimated["ops_not_modelled"] == 1
    line = memory_line("edgetpu", estimated)
    assert line.endswith("; 1 op(s) with weights counted at their raw size")


def test_only_the_mapped_ops_count() -> None:
    """DeepLab's last two 1x1 convolutions run on the CPU (after the blocking RESIZE_BILINEAR): their
    parameters are not in the Edge TPU's memory."""
    model = read_tflite(CORAL / "deeplabv3_mnv2_dm05_pascal_quant.tflite")
    target = load_target("edgetpu")
    result = check_model(model, target)
    assert target.parameter_memory is not None
    everything = estimate(model.ops, target.parameter_memory)["parameter_bytes"]
    assert result.estimates is not None
    assert [r.op.type for r in result.ops if r.status is not OpStatus.SUPPORTED and r.op.type == "CONV_2D"] == [
        "CONV_2D", "CONV_2D"]
    assert everything - result.estimates["parameter_bytes"] == 256 * (8 + 512) + 32 * (8 + 256)


@pytest.mark.parametrize(("total", "where"), [
    (6_000, "all cached on-chip (the compiler caches 5.86 KiB to 7.81 KiB)"),
    (6_001, "up to 1 B may stream from host memory on every inference (the compiler caches 5.86 KiB to 7.81 KiB, "
            "less with large activations)"),
    (8_000, "up to 1.95 KiB may stream from host memory on every inference (the compiler caches 5.86 KiB to "
            "7.81 KiB, less with large activations)"),
    (8_001, "1 B to 1.95 KiB stream from host memory on every inference (the compiler caches 5.86 KiB to 7.81 KiB)"),
])
def test_the_cache_range_at_its_ends(total: int, where: str) -> None:
    """At the smallest cache size the compiler reported, everything is cached; one byte more may stream; past
    the largest one, some streams whatever the activations."""
    e = {"parameter_bytes": float(total), "parameters_off_chip_min_bytes": float(max(0, total - 8_000)),
         "parameters_off_chip_max_bytes": float(max(0, total - 6_000)), "parameter_cache_min_bytes": 6_000.0,
         "parameter_cache_max_bytes": 8_000.0, "ops_not_modelled": 0.0}
    size = f"{total / 1024:,.2f} KiB"
    assert memory_line("edgetpu", e) == f"edgetpu (parameter memory, estimated): {size} of parameters, {where}"


@pytest.mark.parametrize("shift", [-1, 0, 1])
def test_the_estimate_splits_at_the_cache_size(shift: int) -> None:
    target = load_target("edgetpu")
    assert target.parameter_memory is not None
    model = read_tflite(CORAL / "mobilenet_v1_0.25_128_quant.tflite")
    total = int(estimate(model.ops, target.parameter_memory)["parameter_bytes"])
    layout = dataclasses.replace(target.parameter_memory, cache_min_bytes=total - shift,
                                 cache_max_bytes=total - shift + 1000)
    e = estimate(model.ops, layout)
    assert (e["parameters_off_chip_min_bytes"], e["parameters_off_chip_max_bytes"]) == (0, max(0, shift))


def test_the_report_line_and_the_vela_basis() -> None:
    e = _estimated(PUBLIC / "N34-nMACs46374912_quant.tflite")
    assert estimates_line({"name": "edgetpu", "estimates": e}) == (
        "edgetpu (parameter memory, estimated): 17.62 KiB of parameters, all cached on-chip (the compiler caches "
        "6.08 MiB to 7.84 MiB)")
    vela = {"name": "u55", "estimates": {"sram_kib": 2.0}, "estimates_basis": "system config X, memory mode Y"}
    assert estimates_line(vela) == "u55 (Vela estimate with system config X, memory mode Y): SRAM 2.0 KiB"


def test_a_model_without_an_edgetpu_op_has_no_package() -> None:
    assert compiled_parameters(CORAL / "mobilenet_v1_0.25_128_quant.tflite") is None


@pytest.mark.parametrize("cut", [0.3, 0.6, 0.9])
def test_a_corrupt_package_is_a_model_error(tmp_path: Path, cut: float) -> None:
    """The package's bytes zeroed from some point on: an error naming the file, never a crash."""
    data = bytearray((PUBLIC / "N32-nMACs41287680_quant_edgetpu.tflite").read_bytes())
    marker = data.find(b"DWN1")
    assert marker > 0
    start = marker + int((len(data) - marker) * cut) // 2
    data[start:start + 4096] = bytes(min(4096, len(data) - start))
    broken = tmp_path / "broken_edgetpu.tflite"
    broken.write_bytes(bytes(data))
    try:
        found = compiled_parameters(broken)
    except ModelFileError as exc:
        assert str(exc).startswith(f"{broken}: corrupt")
    else:
        assert found is not None and found.executables >= 1  # the zeroed bytes were weights: still a package
