"""Child process of tflite_export: runs the TFLite converter on prepared job folders.

``--serve FD`` (how the parent runs it) takes job folders on stdin, one per line, and
reports each job's code on FD; ``JOB_DIR`` alone runs one job and exits with its code.
Code 0: ``model.tflite`` written. Code 2: the converter raised; ``error.json`` says
why. Anything else (a crash, a signal) is reported by the parent as an internal error.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import traceback
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from edgeconv.converters.aeq import PatternError, matching

_NOISE = re.compile(r"^(W|I)\d{4} |^WARNING: All log messages|^loc\(|^\s*$")


def _summary(message: str) -> str:
    """The converter's message without MLIR location noise, on one line."""
    lines = [ln.strip() for ln in message.splitlines() if not _NOISE.match(ln)]
    text = " ".join(lines)
    return text[:1500] + (" ..." if len(text) > 1500 else "")


def samples(job: dict[str, Any], report: IO[str] | None, limit: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Calibration batches streamed from the spool files: one batch in memory at a time."""
    batch: int = job["batch_size"]
    count = job["count"] if limit is None else min(limit, job["count"])
    every = max(batch, count // 200)  # about 200 progress reports, whatever the count
    files = [open(spec["file"], "rb") for spec in job["inputs"]]  # noqa: SIM115 - closed below
    try:
        for done in range(batch, count + 1, batch):
            out = {}
            for f, spec in zip(files, job["inputs"]):
                dtype = np.dtype(spec["dtype"])
                shape = (batch, *spec["shape"])
                out[spec["name"]] = np.frombuffer(f.read(int(np.prod(shape)) * dtype.itemsize), dtype).reshape(shape)
            yield out
            if report is not None and (done % every < batch or done + batch > count):
                report.write(f"{done}\n")
                report.flush()
    finally:
        for f in files:
            f.close()


def serve(message_fd: int) -> int:
    """Import TensorFlow, then run the job folders named on stdin, one per line, until stdin closes.
    Messages on ``message_fd``: ``N`` (samples calibrated) while a job runs, ``exit RC`` when it ends."""
    from edgeconv._tf import import_tf
    from edgeconv.converters.tflite_export import give_back_memory

    import_tf()  # while the parent loads the model
    _calibrate_once()
    _one_blas_thread()
    messages = os.fdopen(message_fd, "w")
    for line in sys.stdin:
        try:
            code = convert(Path(line.strip()), messages)
        except BaseException:  # a bug of ours: said in the log; this worker's state is unknown, so it ends
            traceback.print_exc()
            sys.stderr.flush()
            messages.write("exit 1\n")
            messages.flush()
            return 1
        sys.stdout.flush()
        sys.stderr.flush()
        give_back_memory()  # idle until the next job (a keep_float trial, a repair): holding only what it keeps
        messages.write(f"exit {code}\n")
        messages.flush()
    return 0


def _one_blas_thread() -> None:
    """NumPy's BLAS (OpenBLAS: a thread per CPU, each spinning a while for work after a call) on one thread.
    The worker calls it only for the per-op metrics' dot products, as fast on one thread; with a thread per
    CPU, the threads woken by every dot product spun on the CPUs the converter and TFLite needed: two builds
    side by side (``-j 2`` on 2 cores) took 14-17 s for a 2.5-s conversion stage (MobileNetV2 0.35)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # without it (an install missing the tf extra's pin), BLAS keeps its own threads
        return
    threadpool_limits(limits=1, user_api="blas")


def convert(job_dir: Path, report: IO[str] | None = None) -> int:
    from edgeconv._tf import import_tf

    tf = import_tf()
    _calibrate_once()
    job = json.loads((job_dir / "job.json").read_text())
    global _DATA_KEY
    _DATA_KEY = json.dumps([job["saved_model"], job["inputs"], job["count"], job["batch_size"]])

    def representative() -> Any:
        yield from samples(job, report)

    try:
        model, denied = _convert(tf, job_dir, job, representative)
        if job["debug"] is not None:
            layers = _layer_errors(job, _input_order(model, job), denied)
            (job_dir / "layers.json").write_text(json.dumps(layers))
        if job["float_reference"]:
            (job_dir / "float.tflite").write_bytes(_float_model(tf, job_dir, job, representative))
    except PatternError as exc:
        (job_dir / "error.json").write_text(json.dumps({"type": "pattern", "message": str(exc)}))
        return 2
    except Exception as exc:  # the converter's errors are many types; all mean "rejected" ...
        if _raised_by_edgeconv(exc):  # ... unless our own code raised it: a bug, said as one (exit 3)
            raise
        by = "AI Edge Quantizer" if _raised_in(exc, "ai_edge_quantizer") else "the TFLite converter"
        (job_dir / "error.json").write_text(json.dumps({"type": type(exc).__name__, "message": _summary(str(exc)),
                                                        "by": by}))
        return 2
    (job_dir / "model.tflite").write_bytes(model)
    return 0


_CONVERTER_PACKAGES = ("tensorflow", "ai_edge_litert", "ai_edge_quantizer")


def _package(tb: Any) -> str:
    """The top-level package of the code a traceback entry ran: by its module's name, not its file's path
    (a virtualenv inside a clone named edgeconv puts "/edgeconv/" in every path). A module run with
    ``python -m`` (this worker) is ``__main__`` by name and itself by its spec."""
    spec = tb.tb_frame.f_globals.get("__spec__")
    name = getattr(spec, "name", None) or tb.tb_frame.f_globals.get("__name__") or ""
    return str(name).partition(".")[0]


def _raised_by_edgeconv(exc: BaseException) -> bool:
    """Whether edgeconv's code, not TensorFlow's converter, raised ``exc``: no converter frame comes after
    the innermost edgeconv frame of its traceback (numpy or the standard library called from edgeconv
    count as edgeconv)."""
    ours = False
    tb = exc.__traceback__
    while tb is not None:
        package = _package(tb)
        if package == "edgeconv":
            ours = True
        elif package in _CONVERTER_PACKAGES:
            ours = False
        tb = tb.tb_next
    return ours


def _raised_in(exc: BaseException, package: str) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if _package(tb) == package:
            return True
        tb = tb.tb_next
    return False


# Per calibration data (of one SavedModel): the float model the build's conversion calibrated, and the result.
_CALIBRATED: dict[str, tuple[bytes, Any]] = {}
_KEEP = 8  # calibrations kept (a build's own, its keep_float and repair trials'); a worker several builds
# share forgets the oldest (one needed again is made again: the same bytes)
_DATA_KEY = ""  # the running job's SavedModel and calibration data: part of the key of a reused calibration


def _calibrate_once() -> None:
    """Calibration runs once per build. The build's conversion, the per-op error measurement (TF's
    QuantizationDebugger), keep_float's denylisted conversion and keep_float trials each calibrate
    the same float model on the same samples; the first result is kept, keyed by the exact model
    bytes calibrated and the job's calibration data, so the others reuse it and produce the same
    bytes they would have produced by calibrating again."""
    from tensorflow.lite.python.optimize import calibrator

    original = calibrator.Calibrator.calibrate
    if getattr(original, "edgeconv_once", False):
        return
    done: dict[str, Any] = {}

    def calibrate(self: Any, dataset_gen: Any) -> Any:
        key = hashlib.sha256(self._model_content + _DATA_KEY.encode()).hexdigest()
        if key not in done:
            done[key] = original(self, dataset_gen)
            # the first: the build's own model
            _CALIBRATED.setdefault(_DATA_KEY, (bytes(self._model_content), done[key]))
            for kept in (done, _CALIBRATED):
                while len(kept) > _KEEP:
                    del kept[next(iter(kept))]
        else:
            print(f"edgeconv worker: calibration of {key[:12]} reused", file=sys.stderr, flush=True)
        return done[key]

    calibrate.edgeconv_once = True  # type: ignore[attr-defined]
    calibrator.Calibrator.calibrate = calibrate


DEBUG_SAMPLES = 64  # evaluation samples the per-op error is measured on, at most
# ... and fewer, not under DEBUG_LEAST, once every op has averaged DEBUG_VALUES output values: a large model's
# smallest op (an ImageNet head, 1,000 values a sample) has 32,000 at 32 samples. On ResNet50 @ 224 the two
# halves of 64 samples rank the same ten ops first, their SQNRs within 0.05 dB of the 64 samples' (and the
# second 32 samples cost 5.7 s); on the shipped example (10 values at its smallest op) 32 samples swap two ops
# of the first five that are 0.1 dB apart, so it keeps 64.
DEBUG_LEAST = 32
DEBUG_VALUES = 32_000


_NUMERIC_VERIFY = "NumericVerify"


def _tensor_metrics(diffs: np.ndarray, float_tensor: np.ndarray, quant_tensor: np.ndarray, scale: float,
                    zero_point: int) -> tuple[Any, ...]:
    """One quantized op output on one sample, next to the same op in float on the same inputs: the element
    count, the max abs error and the mean squared error of NumericVerify's difference (what TF's
    QuantizationDebugger's default metrics give), the signal power (the float output's mean square), the
    noise power (the difference's: the float output minus the dequantized one) and the share of the float
    op's non-zero values that quantization maps to the zero level (information its output quantization
    erases: a wide-range tensor crushes its small channels this way).

    The arrays are read in place and the squares summed by float32 dot products, with no temporary copy:
    16x faster than widening to float64 on a 1.2-million-value tensor (1.2 vs 18.7 ms,
    scripts/bench_layer_metrics.py; an EfficientNetB0 debug model has 255 such tensors a sample). The sums
    differ from float64 ones by a few parts in a million (2.4e-6 there: an SQNR by 0.00001 dB); the max and
    the erased share are exact."""
    d, f, q = np.ravel(diffs), np.ravel(float_tensor), np.ravel(quant_tensor)
    noise = float(np.dot(d, d)) / d.size if d.size else 0.0
    live = np.abs(f) > 1e-6
    count = np.count_nonzero(live)
    erased = float(np.count_nonzero((q == zero_point) & live) / count) if count else 0.0
    return (d.size, max(float(d.max()), -float(d.min())) if d.size else 0.0, noise, erased,
            float(np.dot(f, f)) / f.size if f.size else 0.0, noise)


# The columns of _tensor_metrics, in order (the first three are the debugger's own names).
_METRICS = ("num_elements", "max_abs_error", "mean_squared_error", "erased", "signal_power", "noise_power")


def _input_order(model: bytes, job: dict[str, Any]) -> list[str]:
    """Input names in the order of the interpreter's input details (how the debug model is fed a list)."""
    from ai_edge_litert.interpreter import Interpreter

    details = Interpreter(model_content=model).get_input_details()
    names = [spec["name"] for spec in job["inputs"]]
    order: list[str] = []
    for d in details:
        match = [n for n in names if d["name"] in (n, f"serving_default_{n}:0", f"serving_default_{n}")]
        order.append(match[0] if match else names[len(order)])
    return order


def debug_statistics(debug_model: bytes, batches: Iterable[Sequence[np.ndarray]], *, least: int | None = None,
                     values: int | None = None) -> list[dict[str, Any]]:
    """Per NumericVerify op of a debug model (``mlir_quantize(..., enable_numeric_verify=True)``): the quantized
    op's name and output tensor, its scale and zero point, and each of _METRICS averaged over the samples
    (NaN ignored). With ``least`` and ``values``, the samples stop after the batch that brings the samples run to
    at least ``least`` and every op's output values to at least ``values`` (DEBUG_LEAST, DEBUG_VALUES). This is
    what TF's QuantizationDebugger gives with its default metrics and _tensor_metrics' others
    as direct-compare metrics (TF 2.21 debugger.py ``_collect_layer_statistics`` and
    ``layer_statistics_dump``), to a few parts in a million. One pass per tensor and sample, reading the
    interpreter's tensors in place: the debugger copies the float and quantized tensors once per metric and
    looks up each op's details per sample. LiteRT's interpreter runs it, the runtime of the build's other
    checks (tested: the debugger's numbers, with TF's interpreter, on a real debug model); a sample it does
    not run on (LiteRT's int8 DIV stops on a divisor at its zero point; the runtime check names that op) is
    left out."""
    import warnings

    from ai_edge_litert.interpreter import Interpreter

    with warnings.catch_warnings():  # LiteRT's note that keeping every tensor is for debugging: it is here
        warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors")
        interpreter = Interpreter(model_content=debug_model, experimental_preserve_all_tensors=True)
    ops = interpreter._get_ops_details()
    defining = {t: op for op in ops for t in op["outputs"]}
    tensors = {d["index"]: d for d in interpreter.get_tensor_details()}
    verify = []
    for op in ops:
        if op["op_name"] != _NUMERIC_VERIFY:
            continue
        q_idx, f_idx = op["inputs"]
        params = tensors[q_idx]["quantization_parameters"]
        # The debugger's name for the quantized tensor: the NumericVerify output's name without the prefix,
        # the index after ":" and a trailing digit (TF 2.21 debugger.py _get_operand_name_and_index).
        name = tensors[op["outputs"][0]]["name"].rsplit(":", 1)[0][len(_NUMERIC_VERIFY) + 1:]
        if re.match(r"\d", name[-1]):
            name = name[:-1]
        verify.append((op["outputs"][0], q_idx, f_idx, float(params["scales"][0]), int(params["zero_points"][0]),
                       {"op_name": defining[q_idx]["op_name"], "tensor_name": name,
                        "scale": float(params["scales"][0]), "zero_point": int(params["zero_points"][0])}))
    if not verify:
        raise ValueError("the debug model has no NumericVerify op")
    inputs = interpreter.get_input_details()
    metrics: list[list[tuple[Any, ...]]] = [[] for _ in verify]
    failed = ran = smallest = 0
    for k, data in enumerate(batches):
        if k == 0:
            for detail, x in zip(inputs, data):
                interpreter.resize_tensor_input(detail["index"], x.shape)
            interpreter.allocate_tensors()
        elif least is not None and values is not None and ran >= least and ran * smallest >= values:
            break
        for detail, x in zip(inputs, data):
            if x.dtype == np.float32 and detail["dtype"] == np.int8 and detail["quantization_parameters"]["scales"]:
                p = detail["quantization_parameters"]
                x = np.round(x / p["scales"][0] + p["zero_points"][0]).astype(np.int8)
            interpreter.set_tensor(detail["index"], x)
        try:
            interpreter.invoke()
        except RuntimeError as exc:  # an op that stops on this sample (int8 DIV by its zero point): the
            if not failed:  # runtime check names it; the analysis stands on the samples that run
                print(f"edgeconv worker: per-op analysis: sample {k} does not run "
                      f"({' '.join(str(exc).split())[-200:]})", file=sys.stderr, flush=True)
            failed += 1
            continue
        batch = len(data[0]) if data and np.ndim(data[0]) else 1
        ran += batch
        if not smallest:  # output values per sample of the smallest op (its tensor has data once a sample ran)
            smallest = min(interpreter.tensor(q_idx)().size for _, q_idx, *_ in verify) // batch
        for into, (out, q_idx, f_idx, scale, zero_point, _) in zip(metrics, verify):
            into.append(_tensor_metrics(interpreter.tensor(out)(), interpreter.tensor(f_idx)(),
                                        interpreter.tensor(q_idx)(), scale, zero_point))
    if failed:
        print(f"edgeconv worker: per-op analysis: {failed} sample(s) left out", file=sys.stderr, flush=True)
    return [{**row, **{m: float(np.nanmean(column)) for m, column in zip(_METRICS, zip(*v))}}
            for v, (*_, row) in zip(metrics, verify) if v]


def _layer_errors(job: dict[str, Any], order: list[str], denied: list[str] | None) -> list[dict[str, Any]]:
    """Per quantized op, next to the same op in float on the same dequantized inputs (TF's debug model, as
    its QuantizationDebugger builds and reads it): the error it adds, the SQNR of its output, and how much
    of the float op's output its quantization erases."""
    debug_job = {**job, **job["debug"]}
    # The debug model straight from the build's calibration (the job's conversion ran first): what the
    # debugger makes from a converter (TF 2.21, debugger.py _init_from_converter), without converting and
    # calibrating the graph once more. Its intermediate tensors are kept (a converter-built debugger's
    # interpreter does not keep them, so the values it reads after invoke() may already be overwritten by
    # later ops: measured, a logits op reported at 7.1 dB that is 39.6 dB end to end).
    from tensorflow.lite.python import convert as tf_convert

    print("edgeconv worker: debug model from the build's calibration", file=sys.stderr, flush=True)
    quant_debug_model = tf_convert.mlir_quantize(
        _CALIBRATED[_DATA_KEY][1], disable_per_channel=not job["per_channel"], fully_quantize=False,
        enable_numeric_verify=True, denylisted_ops=None, denylisted_nodes=denied)
    rows = debug_statistics(quant_debug_model, ([batch[name] for name in order]
                                                    for batch in samples(debug_job, None, limit=DEBUG_SAMPLES)),
                            least=DEBUG_LEAST, values=DEBUG_VALUES)
    out = []
    for row in rows:
        entry: dict[str, Any] = {"op": row["op_name"], "tensor": row["tensor_name"]}
        for key in ("num_elements", "mean_squared_error", "max_abs_error", "scale", "erased"):
            entry[key] = float(row[key])
        signal, noise = row["signal_power"], row["noise_power"]
        # No signal or no noise on these samples: no ratio to give.
        entry["sqnr_db"] = float(10 * np.log10(signal / noise)) if signal > 0 and noise > 0 else None
        entry["zero_point"] = row["zero_point"]
        scale = entry["scale"]
        entry["rmse_per_scale"] = float(np.sqrt(entry["mean_squared_error"]) / scale) if scale else 0.0
        out.append(entry)
    return out


def _converter(tf: Any, job_dir: Path, job: dict[str, Any], representative: Any) -> Any:
    types = {"int8": tf.int8, "uint8": tf.uint8, "int16": tf.int16, "float32": tf.float32}
    converter = tf.lite.TFLiteConverter.from_saved_model(job["saved_model"], signature_keys=["serving_default"])
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


def _convert(tf: Any, job_dir: Path, job: dict[str, Any], representative: Any) -> tuple[bytes, list[str] | None]:
    """The converted model, and the op output names keep_float left in float (None: no keep_float)."""
    if job.get("engine") == "ai-edge-quantizer" and job["mode"] in ("int8", "int16x8"):
        from edgeconv.converters import aeq

        float_model = _float_model(tf, job_dir, job, representative)
        print("edgeconv worker: quantizing the float model with AI Edge Quantizer", file=sys.stderr, flush=True)
        model, _ = aeq.quantize(float_model, representative, mode=job["mode"], per_channel=job["per_channel"],
                                int16_ops=job["int16_ops"], percentile=job["range_percentile"], data_key=_DATA_KEY)
        return model, None
    converter = _converter(tf, job_dir, job, representative)
    key = json.dumps([_DATA_KEY, *(job[k] for k in ("mode", "input_type", "output_type", "per_channel"))])
    if not job["keep_float"]:
        model = bytes(converter.convert())
        _NAMES.clear()  # the op output names of this conversion, for keep_float jobs after it
        _NAMES[key] = _op_output_names(model)
        return model, None
    # Selective quantization: the ops whose output names match keep_float stay float
    # (TF's QuantizationDebugger with denylisted nodes; names as in the quantized model). The names come
    # from the same conversion without keep_float: the build's own when it was this one (a keep_float trial
    # or repair), else converted here once for the keep_float jobs with these options (the trials of
    # --suggest-keep-float, float in and out, share theirs).
    names = _NAMES.get(key)
    if names is None:
        names = _NAMES[key] = _op_output_names(bytes(converter.convert()))
    denied = matching("keep_float", job["keep_float"], names)
    options = tf.lite.experimental.QuantizationDebugOptions(denylisted_nodes=denied)
    debugger = tf.lite.experimental.QuantizationDebugger(converter=_converter(tf, job_dir, job, representative),
                                                         debug_dataset=representative, debug_options=options)
    return bytes(debugger.get_nondebug_quantized_model()), denied


# The op output names of a conversion without keep_float, by its data and options (a conversion is
# deterministic: the same job gives the same names); cleared by each conversion without keep_float.
_NAMES: dict[str, list[str]] = {}
_FLOAT: dict[str, bytes] = {}  # the float conversion of each SavedModel: the reference and AI Edge Quantizer's input


def _float_model(tf: Any, job_dir: Path, job: dict[str, Any], representative: Any) -> bytes:
    """The graph converted without quantization. After a calibrated conversion by the TFLite converter it is
    the float model that conversion made and calibrated (the same ops, tensors and outputs as converting
    again with quantization off, at no cost); otherwise a conversion of its own."""
    calibrated = _CALIBRATED.get(_DATA_KEY) if job.get("engine") != "ai-edge-quantizer" else None
    if calibrated is not None:
        return calibrated[0]
    key = job["saved_model"]
    if key not in _FLOAT:
        _FLOAT.clear()
        _FLOAT[key] = bytes(_converter(tf, job_dir, {**job, "mode": "none", "keep_float": []}, representative)
                            .convert())
    return _FLOAT[key]


def _op_output_names(model: bytes) -> list[str]:
    from edgeconv.converters.tflite_reader import parse_tflite

    return sorted({t.name for op in parse_tflite(model, "model.tflite").ops for t in op.outputs})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(serve(int(sys.argv[2])))
    sys.exit(convert(Path(sys.argv[1])))
