"""Child process of tflite_export: runs the TFLite converter on a prepared job folder.

Exit 0: ``model.tflite`` written. Exit 2: the converter raised; ``error.json`` says
why. Anything else (a crash, a signal) is reported by the parent as an internal error.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

_NOISE = re.compile(r"^(W|I)\d{4} |^WARNING: All log messages|^loc\(|^\s*$")


def _summary(message: str) -> str:
    """The converter's message without MLIR location noise, on one line."""
    lines = [ln.strip() for ln in message.splitlines() if not _NOISE.match(ln)]
    text = " ".join(lines)
    return text[:1500] + (" ..." if len(text) > 1500 else "")


def samples(job: dict[str, Any], report: IO[str] | None) -> Iterator[dict[str, np.ndarray]]:
    """Calibration batches streamed from the spool files: one batch in memory at a time."""
    batch: int = job["batch_size"]
    every = max(batch, job["count"] // 200)  # about 200 progress reports, whatever the count
    files = [open(spec["file"], "rb") for spec in job["inputs"]]  # noqa: SIM115 - closed below
    try:
        for done in range(batch, job["count"] + 1, batch):
            out = {}
            for f, spec in zip(files, job["inputs"]):
                dtype = np.dtype(spec["dtype"])
                shape = (batch, *spec["shape"])
                out[spec["name"]] = np.frombuffer(f.read(int(np.prod(shape)) * dtype.itemsize), dtype).reshape(shape)
            yield out
            if report is not None and (done % every < batch or done + batch > job["count"]):
                report.write(f"{done}\n")
                report.flush()
    finally:
        for f in files:
            f.close()


def convert(job_dir: Path, progress_fd: int | None = None) -> int:
    from edgeconv._tf import import_tf

    tf = import_tf()
    job = json.loads((job_dir / "job.json").read_text())
    report = os.fdopen(progress_fd, "w") if progress_fd is not None else None

    def representative() -> Any:
        yield from samples(job, report)

    try:
        model = _convert(tf, job_dir, job, representative)
    except KeepFloatError as exc:
        (job_dir / "error.json").write_text(json.dumps({"type": "keep_float", "message": str(exc)}))
        return 2
    except Exception as exc:  # the converter's errors are many types; all mean "rejected"
        (job_dir / "error.json").write_text(json.dumps({"type": type(exc).__name__, "message": _summary(str(exc))}))
        return 2
    (job_dir / "model.tflite").write_bytes(model)
    return 0


class KeepFloatError(Exception):
    """A keep_float pattern matches no op of the model."""


def _converter(tf: Any, job_dir: Path, job: dict[str, Any], representative: Any) -> Any:
    types = {"int8": tf.int8, "uint8": tf.uint8, "int16": tf.int16, "float32": tf.float32}
    converter = tf.lite.TFLiteConverter.from_saved_model(str(job_dir / "saved_model"),
                                                         signature_keys=["serving_default"])
    converter.exclude_conversion_metadata = True  # no environment details: same input, same bytes
    mode = job["mode"]
    if mode == "none":
        return converter
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if mode in ("int8", "int16x8"):
        converter.representative_dataset = representative
        builtins = (tf.lite.OpsSet.TFLITE_BUILTINS_INT8 if mode == "int8"
                    else tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8)
        # Quantized builtins only; a TF op with no builtin becomes a Flex op, which the target checks
        # then name (a converter error would not say which layer it came from).
        converter.target_spec.supported_ops = [builtins, tf.lite.OpsSet.SELECT_TF_OPS]
        converter.inference_input_type = types[job["input_type"]]
        converter.inference_output_type = types[job["output_type"]]
    if not job["per_channel"]:
        converter._experimental_disable_per_channel = True
    return converter


def _convert(tf: Any, job_dir: Path, job: dict[str, Any], representative: Any) -> bytes:
    converter = _converter(tf, job_dir, job, representative)
    if not job["keep_float"]:
        return bytes(converter.convert())
    # Selective quantization: the ops whose output names match keep_float stay float
    # (TF's QuantizationDebugger with denylisted nodes; names as in the quantized model).
    names = _op_output_names(bytes(converter.convert()))
    denied = set()
    for pattern in job["keep_float"]:
        matched = {n for n in names if re.search(pattern, n)}
        if not matched:
            raise KeepFloatError(f"quantization.keep_float: {pattern!r} matches no op output of the model (e.g. "
                                 f"{', '.join(sorted(names)[:5])})")
        denied |= matched
    options = tf.lite.experimental.QuantizationDebugOptions(denylisted_nodes=sorted(denied))
    debugger = tf.lite.experimental.QuantizationDebugger(converter=_converter(tf, job_dir, job, representative),
                                                         debug_dataset=representative, debug_options=options)
    return bytes(debugger.get_nondebug_quantized_model())


def _op_output_names(model: bytes) -> list[str]:
    from edgeconv.converters.tflite_reader import parse_tflite

    return sorted({t.name for op in parse_tflite(model, "model.tflite").ops for t in op.outputs})


if __name__ == "__main__":
    sys.exit(convert(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None))
