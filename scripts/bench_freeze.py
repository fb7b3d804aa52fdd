"""Freezing a traced model: TensorFlow's whole ``convert_variables_to_constants_v2`` against edgeconv's
shortcut (``edgeconv.converters.freeze._constants_v2``), side by side in one run.

    python scripts/bench_freeze.py [--models MobileNetV2 ResNet50] [--runs 3]

Each keras.applications model (untrained weights, 224 x 224, batch 1) is traced with ``training=False``
once; then, taking turns, the whole function (frozen, imported into a new concrete function, exported back
to a GraphDef) and the shortcut (frozen, pruned to what the outputs need) freeze it. CPU seconds (this
process's user + system), medians of --runs, and whether both give the same nodes (the attributes the import
adds or drops left out; tests/integration/test_freeze.py also builds with both and compares the .tflite).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgeconv.converters.freeze import _constants_v2
from tests.integration.test_freeze import _nodes  # the attributes the import adds or drops left out


def _whole(cf: Any) -> Any:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    return convert_variables_to_constants_v2(cf, lower_control_flow=False).graph.as_graph_def()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["MobileNetV2", "ResNet50"])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import keras
    import tensorflow as tf

    print("| model | whole function | shortcut | saved | same nodes |\n|---|---|---|---|---|")
    for name in args.models:
        model = getattr(keras.applications, name)(weights=None, input_shape=(224, 224, 3))
        fn = tf.function(lambda x, m=model: m(x, training=False),
                         input_signature=[tf.TensorSpec((1, 224, 224, 3), tf.float32, name="image")])
        cf = fn.get_concrete_function()
        times: dict[str, list[float]] = {"whole": [], "shortcut": []}
        graphs = {}
        for _ in range(args.runs):
            for label, freeze in (("whole", _whole), ("shortcut", _constants_v2)):
                start = time.process_time()
                graphs[label] = freeze(cf)
                times[label].append(time.process_time() - start)
        whole, short = (statistics.median(times[k]) for k in ("whole", "shortcut"))
        same = _nodes(graphs["whole"]) == _nodes(graphs["shortcut"])
        print(f"| {name} | {whole:.2f} s | {short:.2f} s | {whole - short:.2f} s | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
