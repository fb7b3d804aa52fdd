"""Facts from an Edge TPU compiled pair, for models that may not be redistributed.

    python scripts/edgetpu_pair_facts.py MODEL.tflite MODEL_edgetpu.tflite --repo OWNER/NAME --commit SHA \
        [--log MODEL_edgetpu.log] [--ops RESHAPE,TRANSPOSE]

Prints one YAML entry: where the pair comes from (repository, commit, paths, sha256 of both files), the
compiler's version line, how many ops stayed on the CPU, and for each op of the listed types its index,
input and output shapes, where the compiler put it (``tpu``: inside the edgetpu-custom-op; ``cpu``: left
in the compiled model as it was) and whether it reads the output of an op left on the CPU (then it stays
there whatever its own size: the segment does not resume). tests/data/oracles/edgetpu-public/yolo-heads.yaml
is made of such entries; tests/unit/test_target_proofs.py holds the edgetpu target to them.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from edgeconv.converters.tflite_reader import read_tflite  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("compiled", type=Path)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--path", help="the model's path in the repository (default: its file name)")
    parser.add_argument("--log", type=Path)
    parser.add_argument("--ops", default="RESHAPE,TRANSPOSE")
    args = parser.parse_args()
    model, compiled = read_tflite(args.model), read_tflite(args.compiled)
    on_cpu = {tuple(t.name for t in op.outputs) for op in compiled.ops if op.custom_code != "edgetpu-custom-op"}
    version = next((line for line in args.log.read_text().splitlines() if "version" in line), "") if args.log else ""
    kinds = set(args.ops.split(","))
    cpu_tensors = {t.index for op in model.ops if tuple(t.name for t in op.outputs) in on_cpu for t in op.outputs}
    print(f"- repo: {args.repo}\n  commit: {args.commit}\n  path: {args.path or args.model.name}")
    print(f"  sha256: {hashlib.sha256(args.model.read_bytes()).hexdigest()}")
    print(f"  compiled_sha256: {hashlib.sha256(args.compiled.read_bytes()).hexdigest()}")
    if version:
        print(f"  compiler: {version.strip()}")
    print(f"  ops: {len(model.ops)}\n  ops_on_cpu: {len(on_cpu)}\n  placed:")
    for op in model.ops:
        if op.type not in kinds:
            continue
        where = "cpu" if tuple(t.name for t in op.outputs) in on_cpu else "tpu"
        src = op.inputs[0]
        after = any(t is not None and t.index in cpu_tensors for t in op.inputs)
        print(f"    - {{index: {op.index}, op: {op.type}, input: {list(src.shape) if src else []}, "
              f"output: {list(op.outputs[0].shape)}, compiler: {where}, reads_cpu_op: {str(after).lower()}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
