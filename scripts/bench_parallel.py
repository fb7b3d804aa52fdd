"""``edgeconv build -j N`` over four copies of the shipped example, side by side in one run.

    python scripts/bench_parallel.py [--copies 4] [--jobs 1 2] [--repeat 1] [--model digits]
                                     [--edgeconv-from OTHER_CHECKOUT]

Each copy is the example's pipeline with its own output folder (paths point at the shipped model
and data); ``--model`` copies bench_build's default pipeline of one of its models instead. Every run
is a fresh ``python -m edgeconv build a.yaml b.yaml ... -j N`` with ``EDGECONV_NO_CACHE=1``; per run:
wall time, CPU time (the process and all its children) and the process tree's peak memory
(``bench_build.run``). ``--edgeconv-from`` runs the same from another
checkout (an older commit) for a before/after table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench_build import APPS, TF1, make_model, pipeline
from bench_build import run  # the same measurement: wall, CPU with children, the tree's peak RSS and PSS

REPO = Path(__file__).resolve().parent.parent


def copies(work: Path, n: int, model: str = "digits") -> list[Path]:
    """``n`` copies of the example's pipeline, or of bench_build's default pipeline of ``model``, each
    writing its own output folder."""
    if model == "digits":
        text = (REPO / "pipeline.yaml").read_text().replace("examples/digits/", f"{REPO}/examples/digits/")
        old, new = "dir: build/digits", "dir: out/digits{i}"
    else:
        files = make_model(work, model)
        text = pipeline(work, *files, model, verify=True).read_text()
        old, new = "output: {dir: out}", "output: {{dir: out/{model}{i}}}"
    paths = []
    for i in range(n):
        path = work / f"{model}{i}.yaml"
        path.write_text(text.replace(old, new.format(i=i, model=model)))
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--model", default="digits", choices=["digits", *APPS, TF1],
                        help="the example (default), or a model of bench_build with its default pipeline")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=1, help="runs per variant; the table shows the median")
    parser.add_argument("--edgeconv-from", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-parallel-"))
    pipelines = [str(p) for p in copies(work, args.copies, args.model)]
    env = {**os.environ, "EDGECONV_NO_CACHE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    checkouts = {"this checkout": env}
    if args.edgeconv_from is not None:
        checkouts[f"@ {args.edgeconv_from.name}"] = {**env, "PYTHONPATH": str(args.edgeconv_from.resolve())}
    rows = []
    for label, run_env in checkouts.items():
        for jobs in args.jobs:
            runs = []
            for _ in range(args.repeat):
                runs.append(run([sys.executable, "-m", "edgeconv", "build", *pipelines, "-j", str(jobs), "-q"],
                                work, run_env))
                print(f"{label:20} -j {jobs}: wall {runs[-1][0]:6.1f} s  cpu {runs[-1][1]:6.1f} s"
                      f"  peak PSS {runs[-1][3]:6.0f} MiB", file=sys.stderr, flush=True)
            wall, cpu, _, pss = (sorted(r[i] for r in runs)[len(runs) // 2] for i in range(4))
            rows.append((label, jobs, wall, cpu, pss))
    print(f"| edgeconv | -j | wall s ({args.copies} pipelines) | CPU s | peak PSS MiB | speed-up over -j "
          f"{args.jobs[0]} |")
    print("|---|---|---|---|---|---|")
    for label, jobs, wall, cpu, pss in rows:
        base = next(r[2] for r in rows if r[0] == label and r[1] == args.jobs[0])
        print(f"| {label} | {jobs} | {wall:.1f} | {cpu:.1f} | {pss:.0f} | {base / wall:.2f}x |")


if __name__ == "__main__":
    main()
