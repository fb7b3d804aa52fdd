"""Make each listed bug alone in a copy of the tree and run the fast tests: each must fail them.

    python scripts/mutation_check.py [--only SUBSTRING] [--tests tests/unit]

The mutations are the ones a gate must not survive: every threshold comparison of a gate turned just
inside out (``<=`` <-> ``<``, ``>=`` <-> ``>``), in the verdict, the gate limits, the baseline regression
gates, the passes' equivalence proof, the ONNX float check and the calibration findings; and the
uncertain gate no longer failing. For each, the
first failing test is printed (``SURVIVED`` when none fails). The tree is copied to a temporary folder,
so the working tree is never touched. Exit 1 when a mutation survives.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (file, the exact text on one line, what it becomes)
MUTATIONS: list[tuple[str, str, str]] = [
    ("edgeconv/verdict.py", "            ok = share >= limit\n", "            ok = share > limit\n"),
    ("edgeconv/verdict.py", "ok = fallback <= limit_ops", "ok = fallback < limit_ops"),
    ("edgeconv/verdict.py", "\n    ok = share >= limit\n", "\n    ok = share > limit\n"),
    ("edgeconv/verdict.py", 'ok = m["sqnr_db"] >= limits.min_sqnr_db', 'ok = m["sqnr_db"] > limits.min_sqnr_db'),
    ("edgeconv/verdict.py", 'ok = m["cosine"] >= limits.min_cosine', 'ok = m["cosine"] > limits.min_cosine'),
    ("edgeconv/verdict.py", 'ok = m["top1_agreement"] >= limits.min_top1_agreement',
     'ok = m["top1_agreement"] > limits.min_top1_agreement'),
    ("edgeconv/verdict.py", "ok = drop <= limits.max_accuracy_drop", "ok = drop < limits.max_accuracy_drop"),
    ("edgeconv/verdict.py", "ok = arena <= limits.max_arena_bytes", "ok = arena < limits.max_arena_bytes"),
    ("edgeconv/verdict.py", "ok = flash <= limits.max_flash_bytes", "ok = flash < limits.max_flash_bytes"),
    ("edgeconv/verdict.py", "Outcome.FAIL if gated else Outcome.WARN", "Outcome.WARN"),
    ("edgeconv/gates.py", 'share < DEFAULTS["min_accelerator_mac_share"]',
     'share <= DEFAULTS["min_accelerator_mac_share"]'),
    ("edgeconv/gates.py", '"accuracy", lambda v, d: v > d)', '"accuracy", lambda v, d: v >= d)'),
    ("edgeconv/gates.py", '"min_top1_agreement", "agreement", lambda v, d: v < d)',
     '"min_top1_agreement", "agreement", lambda v, d: v <= d)'),
    ("edgeconv/gates.py", '"min_sqnr_db", "agreement", lambda v, d: v < d)',
     '"min_sqnr_db", "agreement", lambda v, d: v <= d)'),
    ("edgeconv/diff.py", 'size["delta"] > gates.max_size_growth', 'size["delta"] >= gates.max_size_growth'),
    ("edgeconv/diff.py", 'arena["delta"] > gates.max_arena_growth', 'arena["delta"] >= gates.max_arena_growth'),
    ("edgeconv/diff.py", '-acc["delta"] > gates.max_accuracy_regression',
     '-acc["delta"] >= gates.max_accuracy_regression'),
    ("edgeconv/verify/equivalence.py", '"passed": max_diff <= tolerance', '"passed": max_diff < tolerance'),
    ("edgeconv/verdict.py", "Kind.CONVERSION, worst <= tolerance,", "Kind.CONVERSION, worst < tolerance,"),
    ("edgeconv/calibration/checks.py", "if overlap / span < COVERS:", "if overlap / span <= COVERS:"),
    ("edgeconv/calibration/checks.py", "if (b - a) / span > WIDER:", "if (b - a) / span >= WIDER:"),
    ("edgeconv/calibration/checks.py", "if calib.count < min_samples:", "if calib.count <= min_samples:"),
    ("edgeconv/calibration/checks.py", "if corr is not None and corr < NOISE_CORRELATION:",
     "if corr is not None and corr <= NOISE_CORRELATION:"),
    ("edgeconv/calibration/checks.py", "if n and out / n > limit)", "if n and out / n >= limit)"),
]


def run(tree: Path, tests: list[str]) -> tuple[bool, str, float]:
    """Whether the tests pass in ``tree``, the first failure, and the seconds taken."""
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                          cwd=tree, env=env, capture_output=True, text=True)
    failed = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    if done.returncode not in (0, 1):  # no tests collected, a usage error, an interrupted run: not a verdict
        raise SystemExit(f"pytest exited {done.returncode}: {done.stdout.strip().splitlines()[-1:]}")
    return done.returncode == 0, (failed[0] if failed else done.stdout.strip().splitlines()[-1]), \
        time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="only the mutations whose file or text holds this")
    parser.add_argument("--tests", nargs="+", default=["tests/unit"], help="test paths (default tests/unit)")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if args.only in m[0] or args.only in m[1]]
    survived = 0
    with tempfile.TemporaryDirectory(prefix="edgeconv-mutants-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".venv", ".git", "build", "__pycache__",
                                                                  "*.egg-info", ".mypy_cache", ".ruff_cache"))
        for file, old, new in chosen:
            path = tree / file
            text = path.read_text()
            if text.count(old) != 1:
                print(f"{file}: {old!r} found {text.count(old)} times; the list is out of date")
                survived += 1
                continue
            path.write_text(text.replace(old, new))
            try:
                passed, said, seconds = run(tree, args.tests)
            finally:
                path.write_text(text)
            survived += passed
            print(f"{'SURVIVED' if passed else 'caught  '} {file}: {old.strip()!r} -> {new.strip()!r} "
                  f"({seconds:.0f} s){'' if passed else ': ' + said}", flush=True)
    print(f"{len(chosen) - survived} of {len(chosen)} mutations caught")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
