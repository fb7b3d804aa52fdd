"""What a build costs next to the hand-written script it replaces, side by side in one run.

    python scripts/bench_build.py [--models digits mobilenetv2-0.35-96 ...] [--repeat 1] [--work DIR]
                                  [--edgeconv-from OTHER_CHECKOUT]

Every variant runs in a fresh process, one after the other, on the same model and the same
calibration (200 samples) and evaluation data:

- ``hand``: what people write: load the Keras model, ``TFLiteConverter.from_keras_model`` with a
  representative dataset, full INT8 (int8 I/O), write the file.
- ``hand+check``: the same, plus ``tf.lite.experimental.Analyzer`` and a hand parity loop (the
  Keras model on the evaluation data in chunks vs the .tflite one sample at a time: SQNR, top-1).
- ``edgeconv (no verification)``: ``edgeconv build`` with ``verify.parity: false``, ``culprits: 0``.
- ``edgeconv (default)``: ``edgeconv build`` of the pipeline as users write it (evaluation data,
  parity, per-op error ranking, the built model run on every sample).

Per variant: wall time, CPU time (the process and its children), and the peak of the whole process
tree's memory (sampled every 50 ms) two ways: the sum of RSS, which counts the pages a forked worker
shares with the build twice, and the sum of PSS, which splits them (the physical memory; the ratio column
uses it). ``--edgeconv-from`` adds the same two edgeconv rows run
from another checkout (an older commit), for a before/after table.

Models: ``digits`` (the shipped example), ``mobilenetv2-0.35-96``, ``mobilenetv2-1.0-224``,
``efficientnetb0-224``, and, held out from the goals' models, ``mobilenetv3small-224``, ``resnet50-224`` and
``densenet121-224``
(keras.applications, random weights, seed 0), and ``tf1-tagger-96x64``: a TF1
frozen graph of 318 nodes with batch norm and dropout in ``tf.cond`` behind an ``is_training``
placeholder (see ``TF1_TAGGER``; its hand script imports the graph with the placeholder fed False and
converts from the session, edgeconv binds it: ``model.bind: {is_training: false}``).
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
APPS = {
    "mobilenetv2-0.35-96": ("MobileNetV2", {"alpha": 0.35}, 96),
    "mobilenetv2-1.0-224": ("MobileNetV2", {"alpha": 1.0}, 224),
    "efficientnetb0-224": ("EfficientNetB0", {}, 224),
    # Held out from the goals' models (other ops: hard-swish and squeeze-excite; a deep residual network).
    "mobilenetv3small-224": ("MobileNetV3Small", {}, 224),
    "resnet50-224": ("ResNet50", {}, 224),
    "densenet121-224": ("DenseNet121", {}, 224),  # held out too: dense blocks of concatenations
}
CALIBRATION, EVALUATION = 200, 100
TF1 = "tf1-tagger-96x64"
# A TF1 audio tagger as TF1 projects froze them (318 graph nodes): log-mel patches (96 x 64) -> 4 blocks of
# 2 x (conv 3x3 -> batch norm in a tf.cond on the is_training placeholder -> ReLU), max pool, dropout in a
# tf.cond (what tf.layers.dropout(training=tensor) builds) -> global average pool -> dense 256 -> dropout ->
# 10 sigmoid tags. Control flow v1 (Switch/Merge), reference variables, convert_variables_to_constants.
TF1_TAGGER = '''
import sys
import numpy as np, tensorflow as tf
out = sys.argv[1]
tf.compat.v1.disable_eager_execution()
tf.compat.v1.disable_resource_variables()
tf.compat.v1.disable_control_flow_v2()
rng = np.random.default_rng(0)
graph = tf.Graph()
with graph.as_default():
    tf.compat.v1.set_random_seed(0)
    x = tf.compat.v1.placeholder(tf.float32, [None, 96, 64, 1], name="logmel")
    training = tf.compat.v1.placeholder(tf.bool, [], name="is_training")

    def batch_norm(h, name):
        c = h.shape[-1]
        with tf.compat.v1.variable_scope(name):
            gamma = tf.compat.v1.get_variable("gamma", initializer=rng.uniform(0.5, 1.5, c).astype(np.float32))
            beta = tf.compat.v1.get_variable("beta", initializer=rng.uniform(-0.2, 0.2, c).astype(np.float32))
            mean = tf.compat.v1.get_variable("moving_mean", trainable=False,
                                             initializer=rng.uniform(-0.2, 0.2, c).astype(np.float32))
            var = tf.compat.v1.get_variable("moving_variance", trainable=False,
                                            initializer=rng.uniform(0.5, 2.0, c).astype(np.float32))
            return tf.cond(training,
                           lambda: tf.compat.v1.nn.fused_batch_norm(h, gamma, beta, epsilon=1e-3, is_training=True)[0],
                           lambda: tf.compat.v1.nn.fused_batch_norm(h, gamma, beta, mean=mean, variance=var,
                                                                    epsilon=1e-3, is_training=False)[0])

    def dropout(h, rate, name):
        with tf.compat.v1.variable_scope(name):
            return tf.cond(training, lambda: tf.nn.dropout(h, rate=rate), lambda: tf.identity(h))

    h = x
    for block, width in enumerate((16, 32, 64, 128)):
        for k in range(2):
            name = f"block{block + 1}/conv{k + 1}"
            with tf.compat.v1.variable_scope(name):
                fan_in = 9 * int(h.shape[-1])
                w = tf.compat.v1.get_variable("kernel", initializer=rng.normal(
                    0, np.sqrt(2 / fan_in), (3, 3, int(h.shape[-1]), width)).astype(np.float32))
                h = tf.nn.conv2d(h, w, 1, "SAME")
            h = tf.nn.relu(batch_norm(h, name + "/bn"))
        h = tf.nn.max_pool2d(h, 2, 2, "VALID", name=f"block{block + 1}/pool")
        h = dropout(h, 0.1, f"block{block + 1}/dropout")
    h = tf.reduce_mean(h, axis=[1, 2], name="pool")
    with tf.compat.v1.variable_scope("fc1"):
        w = tf.compat.v1.get_variable("kernel", initializer=rng.normal(0, 0.1, (128, 256)).astype(np.float32))
        h = tf.nn.relu(tf.matmul(h, w))
    h = dropout(h, 0.5, "fc1/dropout")
    with tf.compat.v1.variable_scope("logits"):
        w = tf.compat.v1.get_variable("kernel", initializer=rng.normal(0, 0.1, (256, 10)).astype(np.float32))
        b = tf.compat.v1.get_variable("bias", initializer=np.zeros(10, np.float32))
        logits = tf.nn.bias_add(tf.matmul(h, w), b)
    tags = tf.nn.sigmoid(logits, name="tags")
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        frozen = tf.compat.v1.graph_util.convert_variables_to_constants(session, graph.as_graph_def(), ["tags"])
with open(out, "wb") as f:
    f.write(frozen.SerializeToString())
'''

# What people write, per model kind: load the model, make the converter, and the float reference the
# hand parity loop compares against; then the common part (HAND_BODY).
HAND_KERAS = textwrap.dedent('''
    import sys, numpy as np, tensorflow as tf, keras
    model_path, cal_path, eval_path, out, check = sys.argv[1:6]
    def first(path):
        data = np.load(path)
        return data[data.files[0]]
    cal = first(cal_path)
    model = keras.models.load_model(model_path, compile=False)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    def reference(x):
        return np.concatenate([np.asarray(model(x[i:i + 64], training=False)) for i in range(0, len(x), 64)])
''')
# A TF1 frozen graph: import it with the training switch fed False, convert from the session.
HAND_TF1 = textwrap.dedent('''
    import sys, numpy as np, tensorflow as tf
    model_path, cal_path, eval_path, out, check = sys.argv[1:6]
    def first(path):
        data = np.load(path)
        return data[data.files[0]]
    cal = first(cal_path)
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(open(model_path, "rb").read())
    graph = tf.Graph()
    with graph.as_default():
        image = tf.compat.v1.placeholder(tf.float32, [1, *cal.shape[1:]], name="logmel")
        tags, = tf.import_graph_def(graph_def, {"logmel:0": image, "is_training:0": tf.constant(False)},
                                    ["tags:0"], name="")
    session = tf.compat.v1.Session(graph=graph)
    converter = tf.compat.v1.lite.TFLiteConverter.from_session(session, [image], [tags])
    def reference(x):
        return np.concatenate([session.run(tags, {image: x[i:i + 1]}) for i in range(len(x))])
''')
HAND_BODY = textwrap.dedent('''
    def representative():
        for i in range(len(cal)):
            yield [cal[i:i + 1]]
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    data = converter.convert()
    open(out, "wb").write(data)
    if check == "1":
        tf.lite.experimental.Analyzer.analyze(model_content=data)
        x = first(eval_path)
        want = reference(x)
        from ai_edge_litert.interpreter import Interpreter
        it = Interpreter(model_content=data)
        it.allocate_tensors()
        i, o = it.get_input_details()[0], it.get_output_details()[0]
        (si, zi), (so, zo) = i["quantization"], o["quantization"]
        got = []
        for k in range(len(x)):
            it.set_tensor(i["index"], np.clip(np.round(x[k:k + 1] / si + zi), -128, 127).astype(np.int8))
            it.invoke()
            got.append((it.get_tensor(o["index"]).astype(np.float32) - zo) * so)
        got = np.concatenate(got).reshape(want.shape)
        sqnr = 10 * np.log10(np.sum(want ** 2) / np.sum((want - got) ** 2))
        print("sqnr", sqnr, "top1", np.mean(want.argmax(-1) == got.argmax(-1)))
''')


def make_model(work: Path, name: str) -> tuple[Path, Path, Path]:
    """The model, its calibration .npz and its evaluation .npz (key = the model's input name)."""
    if name == "digits":
        src = REPO / "examples" / "digits"
        return src / "model.keras", src / "calibration.npz", src / "eval.npz"
    folder = work / name
    if name == TF1:
        model_path = folder / "model.pb"
        if not model_path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "-c", TF1_TAGGER, str(model_path)], check=True,
                           stderr=subprocess.DEVNULL)
            rng = np.random.default_rng(0)
            time_axis, mel_axis = np.linspace(0, 1, 96)[None, :, None, None], np.linspace(0, 1, 64)[None, None, :, None]

            def log_mel(n: int) -> np.ndarray:
                """Log-mel-like patches: a level, a tone sweeping in time that fades up the mel axis, noise."""
                def draw(lo: float, hi: float) -> np.ndarray:
                    return rng.uniform(lo, hi, (n, 1, 1, 1))
                tone = 2 * np.sin(draw(2, 12) * time_axis + draw(0, 6.3)) * np.exp(-draw(1, 4) * mel_axis)
                return (draw(-4, 0) + tone + rng.normal(0, 0.3, (n, 96, 64, 1))).astype(np.float32)
            np.savez(folder / "calibration.npz", logmel=log_mel(CALIBRATION))
            np.savez(folder / "eval.npz", logmel=log_mel(EVALUATION))
        return model_path, folder / "calibration.npz", folder / "eval.npz"
    model_path = folder / "model.keras"
    if not model_path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", textwrap.dedent(f'''
            import numpy as np, keras
            keras.utils.set_random_seed(0)
            cls, kw, size = {APPS[name]!r}
            model = getattr(keras.applications, cls)(input_shape=(size, size, 3), weights=None, **kw)
            model.save({str(model_path)!r})
            name = model.layers[0].name  # the InputLayer: what edgeconv calls the model input
            rng = np.random.default_rng(0)
            yy, xx = np.mgrid[0:size, 0:size]
            def images(n):
                phase = rng.uniform(0, 6.3, size=(n, 1, 1, 3))
                freq = rng.uniform(0.02, 0.2, size=(n, 1, 1, 3))
                return (np.sin(freq * (xx + yy)[None, :, :, None] + phase)).astype(np.float32)
            np.savez({str(folder / "calibration.npz")!r}, **{{name: images({CALIBRATION})}})
            np.savez({str(folder / "eval.npz")!r}, **{{name: images({EVALUATION})}})
        ''')], check=True)
    return model_path, folder / "calibration.npz", folder / "eval.npz"


def pipeline(folder: Path, model: Path, cal: Path, ev: Path, name: str, *, verify: bool) -> Path:
    labels = "\n  labels: label" if name == "digits" else ""
    bind = ", bind: {is_training: false}" if name == TF1 else ""
    text = textwrap.dedent(f"""\
        version: 1
        name: {name}
        model: {{path: {model}, batch_size: 1{bind}}}
        calibration: {{source: npz, path: {cal}, samples: {CALIBRATION}, seed: 0}}
        """)
    if verify:
        text += f"evaluation:\n  path: {ev}{labels}\n"
    else:
        text += "verify: {parity: false, culprits: 0}\n"
    text += ("passes: [strip-training]\nquantization: {mode: int8, input_type: int8, output_type: int8}\n"
             "targets: [generic-int8]\noutput: {dir: out}\n")
    path = folder / ("default.yaml" if verify else "noverify.yaml")
    path.write_text(text)
    return path


def _tree_memory(root: int) -> tuple[int, int]:
    """Resident memory of ``root`` and every process below it, in bytes: the sum of RSS (a forked child's
    pages shared with its parent count twice) and the sum of PSS (each shared page split between the
    processes that map it: the physical memory the tree holds)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            rss[int(entry.name)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    total, pss, todo = 0, 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        pss += _pss(pid)
        todo += children.get(pid, [])
    return total, pss


def _pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def run(cmd: list[str], cwd: Path, env: dict[str, str], memory: bool = True,
        stdout: list[str] | None = None) -> tuple[float, float, float, float]:
    """Wall s, CPU s (children), peak tree RSS MiB and peak tree PSS MiB of one command (``memory=False``:
    no sampling, NaN for both). The sampler costs about 30 ms of a core per sample on a tree of 1-2 GB
    (the kernel walks every page table for PSS), and takes it from the command when the command keeps
    every core busy: measure wall and CPU of parallel work without it. ``stdout``: the command's standard
    output is appended to it (else thrown away)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL if stdout is None else subprocess.PIPE,
                            stderr=subprocess.PIPE)
    peak, peak_pss = (0, 0) if memory else (math.nan, math.nan)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak, peak_pss
        while not done.is_set():
            rss, pss = _tree_memory(proc.pid)
            peak, peak_pss = max(peak, rss), max(peak_pss, pss)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    if memory:
        sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    if stdout is not None:
        stdout.append(out.decode())
    done.set()
    if memory:
        sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.decode()[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, peak / 2 ** 20, peak_pss / 2 ** 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["digits", "mobilenetv2-0.35-96"],
                        choices=["digits", *APPS, TF1])
    parser.add_argument("--repeat", type=int, default=1, help="runs per variant; the table shows the median")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--edgeconv-from", type=Path, default=None,
                        help="another checkout of edgeconv (e.g. an older commit) to run side by side")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-build-"))
    work.mkdir(parents=True, exist_ok=True)
    hands = {kind: work / f"hand-{kind}.py" for kind in ("keras", "tf1")}
    hands["keras"].write_text(HAND_KERAS + HAND_BODY)
    hands["tf1"].write_text(HAND_TF1 + HAND_BODY)
    # Each run's pipeline reads a model and data outside its folder: the benchmark, as a workflow would, grants
    # those folders (a pipeline reads only inside its project otherwise; docs/RELIABILITY.md).
    env = {**os.environ, "EDGECONV_NO_CACHE": "1",
           "EDGECONV_READ_ROOTS": os.pathsep.join([str(work.resolve()), str(REPO / "examples" / "digits")])}
    rows = []
    for name in args.models:
        model, cal, ev = make_model(work, name)
        folder = work / f"run-{name}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        default, noverify = (pipeline(folder, model, cal, ev, name, verify=v) for v in (True, False))
        hand = hands["tf1" if name == TF1 else "keras"]
        variants = {
            "hand": [sys.executable, str(hand), str(model), str(cal), str(ev), str(folder / "hand.tflite"), "0"],
            "hand+check": [sys.executable, str(hand), str(model), str(cal), str(ev), str(folder / "hand.tflite"),
                           "1"],
            "edgeconv (no verification)": [sys.executable, "-m", "edgeconv", "build", str(noverify), "-q"],
            "edgeconv (default)": [sys.executable, "-m", "edgeconv", "build", str(default), "-q"],
        }
        envs = {k: env for k in variants}
        if args.edgeconv_from is not None:
            other = {**env, "PYTHONPATH": str(args.edgeconv_from.resolve())}
            for k in ("edgeconv (no verification)", "edgeconv (default)"):
                variants[f"{k} @ {args.edgeconv_from.name}"] = variants[k]
                envs[f"{k} @ {args.edgeconv_from.name}"] = other
        measured: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in variants}
        for _ in range(args.repeat):
            for label, cmd in variants.items():
                measured[label].append(run(cmd, folder, envs[label]))
                print(f"{name:22} {label:40} wall {measured[label][-1][0]:6.1f} s  cpu {measured[label][-1][1]:6.1f} s"
                      f"  peak RSS {measured[label][-1][2]:6.0f} MiB  PSS {measured[label][-1][3]:6.0f} MiB",
                      file=sys.stderr, flush=True)
        for label, runs in measured.items():
            wall, cpu, peak, pss = (sorted(r[i] for r in runs)[len(runs) // 2] for i in range(4))
            base = measured["hand+check" if "default" in label else "hand"]
            bwall, _, _, bpss = (sorted(r[i] for r in base)[len(base) // 2] for i in range(4))
            rows.append((name, label, wall, cpu, peak, pss, wall / bwall, pss / bpss))
    print("| model | variant | wall s | CPU s | peak RSS MiB (tree) | peak PSS MiB (tree) | wall / hand "
          "| PSS / hand |")
    print("|---|---|---|---|---|---|---|---|")
    for name, label, wall, cpu, peak, pss, ratio, mem in rows:
        print(f"| {name} | {label} | {wall:.1f} | {cpu:.1f} | {peak:.0f} | {pss:.0f} | {ratio:.2f}x | {mem:.2f}x |")


if __name__ == "__main__":
    main()
