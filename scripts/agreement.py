"""How often edgeconv's target verdicts agree with the real compilers and runtimes, per target.

    python scripts/agreement.py [--vela]

Over the differential corpus (tests/oracles.py CORPUS: single-op models, probe models, small fixtures,
third-party models from packages, the Edge TPU oracles' inputs): arm-neon against ai-edge-litert's
XNNPACK delegate (op by op, and whether the model loads), tflm-cmsis-nn against the tflite-micro
interpreter (runs, or which op it refuses), edgetpu against the compiled pairs (the ops the compiler
left on the CPU), and with --vela ethos-u55-128 against Vela's own output model. Prints one row per
target: models exact, ops agreeing, false "supported", false "unsupported", known differences.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vela", action="store_true", help="also compare ethos-u55-128 with Vela (slow)")
    args = parser.parse_args()
    from edgeconv.converters.tflite_reader import read_tflite
    from edgeconv.targets import load_target
    from edgeconv.targets.checker import check_model
    from edgeconv.targets.target import OpStatus
    from tests.oracles import CORPUS, compare_arm_neon, compare_tflm, known_differences

    known = known_differences()
    rows = []
    a = [(p, compare_arm_neon(p)) for p in CORPUS]
    rows.append(("arm-neon (XNNPACK)", len(a), sum(bool(r["exact"]) for _, r in a),
                 sum(int(r["ops"]) for _, r in a) - sum(len({*r["false_supported"], *r["false_unsupported"],  # type: ignore[misc]
                                                             *r.get("not_supported_but_delegated", [])})  # type: ignore[misc]
                                                        for _, r in a),
                 sum(int(r["ops"]) for _, r in a), sum(len(r["false_supported"]) for _, r in a),  # type: ignore[arg-type]
                 sum(len(r["false_unsupported"]) for _, r in a),  # type: ignore[arg-type]
                 sum(len(known.get((p.name, "arm-neon"), [])) for p, _ in a)))
    t = [(p, compare_tflm(p)) for p in CORPUS]
    rows.append(("tflm-cmsis-nn (tflite-micro)", len(t), sum(bool(r["exact"]) for _, r in t), None, None,
                 sum(bool(r["false_supported"]) for _, r in t), sum(bool(r["false_unsupported"]) for _, r in t),
                 sum(len(known.get((p.name, "tflm-cmsis-nn"), [])) for p, _ in t)))
    oracles = REPO / "tests" / "data" / "oracles"
    pairs = sorted(oracles.rglob("*_edgetpu.tflite"))
    exact = agree = total = false_sup = false_unsup = 0
    for compiled in pairs:
        source = compiled.with_name(compiled.name.replace("_edgetpu.tflite", ".tflite"))
        result = check_model(read_tflite(source), load_target("edgetpu"))
        predicted = Counter(r.op.label for r in result.ops if r.status is not OpStatus.SUPPORTED)
        actual = Counter(op.label for op in read_tflite(compiled).ops if op.custom_code != "edgetpu-custom-op")
        total += len(result.ops)
        false_sup += sum((actual - predicted).values())
        false_unsup += sum((predicted - actual).values())
        agree += len(result.ops) - sum((actual - predicted).values()) - sum((predicted - actual).values())
        exact += predicted == actual
    rows.append(("edgetpu (compiled pairs)", len(pairs), exact, agree, total, false_sup, false_unsup, 0))
    if args.vela:
        rows.append(_vela(CORPUS))
    print("| target | models | models exact | ops agreeing | false supported | false unsupported | known differences |")
    print("|---|---|---|---|---|---|---|")
    for name, models, ok, agreeing, ops, fs, fu, kd in rows:
        ops_cell = f"{agreeing} of {ops}" if ops is not None else "-"
        print(f"| {name} | {models} | {ok} | {ops_cell} | {fs} | {fu} | {kd} |")


def _vela(corpus: list[Path]) -> tuple[str, int, int, int, int, int, int, int]:
    """edgeconv's ethos-u55-128 CPU ops (it runs Vela) against the builtins left in Vela's output model."""
    import subprocess
    import tempfile

    from edgeconv.converters.tflite_reader import read_tflite
    from edgeconv.targets import load_target
    from edgeconv.targets.checker import Verdict, check_model
    from edgeconv.targets.target import OpStatus

    models = exact = agree = total = fs = fu = 0
    for path in corpus:
        result = check_model(read_tflite(path), load_target("ethos-u55-128"))
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run([sys.executable, "-c", "import sys; from ethosu.vela.vela import main; "
                                   "sys.exit(main(sys.argv[1:]))", str(path), "--accelerator-config", "ethos-u55-128",
                                   "--output-dir", tmp], capture_output=True, text=True)
            out = Path(tmp) / f"{path.stem}_vela.tflite"
            models += 1
            if proc.returncode != 0 or not out.exists():
                exact += result.verdict is Verdict.ERROR
                continue
            actual = Counter(op.label for op in read_tflite(out).ops if op.custom_code != "ethos-u")
        predicted = Counter(r.op.label for r in result.ops if r.status is not OpStatus.SUPPORTED)
        total += len(result.ops)
        fs += sum((actual - predicted).values())
        fu += sum((predicted - actual).values())
        agree += len(result.ops) - sum((actual - predicted).values()) - sum((predicted - actual).values())
        exact += predicted == actual
    return ("ethos-u55-128 (Vela)", models, exact, agree, total, fs, fu, 0)


if __name__ == "__main__":
    main()
