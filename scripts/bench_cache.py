"""Cold build vs cached rebuild of the shipped example, each as a fresh `edgeconv build` process.

    python scripts/bench_cache.py [--runs 3]

Cold: --no-cache. Cached: after one build filled an empty cache folder. Same machine, same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(root: Path, env: dict[str, str], *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "edgeconv", "build", "pipeline.yaml", "-q", *args], cwd=root,
                          env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "examples", root / "examples")
        shutil.copy(REPO / "pipeline.yaml", root / "pipeline.yaml")
        env = {k: v for k, v in os.environ.items() if k != "EDGECONV_NO_CACHE"}
        env["EDGECONV_CACHE_DIR"] = str(root / "cache")
        cold = [run(root, env, "--no-cache") for _ in range(args.runs)]
        run(root, env)  # fills the cache
        cached = [run(root, env) for _ in range(args.runs)]
    c, w = statistics.median(cold), statistics.median(cached)
    print(f"cold build   : median {c:.2f} s  ({', '.join(f'{t:.2f}' for t in cold)})")
    print(f"cached build : median {w:.2f} s  ({', '.join(f'{t:.2f}' for t in cached)})")
    print(f"cached / cold: {w / c:.1%}")


if __name__ == "__main__":
    main()
