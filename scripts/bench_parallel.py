"""``edgeconv build -j N`` over four copies of the shipped example, side by side in one run.

    python scripts/bench_parallel.py [--copies 4] [--jobs 1 2] [--repeat 1] [--model digits]
                                     [--edgeconv-from OTHER_CHECKOUT] [--memory] [--ceiling]

Each copy is the example's pipeline with its own output folder (paths point at the shipped model
and data); ``--model`` copies bench_build's default pipeline of one of its models instead. Every run
is a fresh ``python -m edgeconv build a.yaml b.yaml ... -j N`` with ``EDGECONV_NO_CACHE=1``; per run:
wall time and CPU time (the process and all its children), medians over ``--repeat``, and the CPU
over ``-j 1`` (the goal allows one TensorFlow import per process of the pool). These runs sample no
memory: with every core busy the sampler's 30 ms per sample came out of the builds (MobileNetV2 0.35,
``-j 2``: 16.7 s unsampled, 20.3 s sampled, the sampler 6 s of CPU); ``--memory`` adds one sampled run
per variant for the process tree's peak PSS (``bench_build.run``). ``--edgeconv-from`` runs the same
from another checkout (an older commit) for a before/after table; the variants take turns in each
repeat. ``--ceiling`` measures what the machine itself allows: one build alone against N separate
``edgeconv build`` processes started together (each imports TensorFlow, no serial part): two builds
side by side each run slower than one alone (memory bandwidth, shared caches), which bounds any ``-j``.
``--bound`` measures the bound of this very work (Amdahl's law on the measured parts): each run's builds'
own times (``timings.total_s`` of their reports) and the TensorFlow import ``-j N`` reports it made before
its pool. ``-j 1`` is W1 = outside + its builds (the first build's load imports TensorFlow); ``-j N`` pays
the same outside, the import before the pool (which forks after it), then its builds N at a time, so no
scheduling makes it faster than outside + import + (its builds' sum) / N (or its longest build): the best
speed-up this work allows is W1 over that. The builds' sum at ``-j N`` against ``-j 1``'s less the import
says how much slower builds run side by side (shared caches and memory bandwidth, and each pool process's
first build warming up)."""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median_high

from bench_build import (
    APPS,
    TF1,
    make_model,
    pipeline,
    run,  # the same measurement: wall, CPU with children, the tree's peak RSS and PSS
)

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
    parser.add_argument("--memory", action="store_true",
                        help="one more run per variant, sampling the process tree's peak PSS")
    parser.add_argument("--ceiling", action="store_true",
                        help="also the machine's own limit: one build alone against N separate edgeconv "
                             "processes (N = the largest -j) started together, per repeat")
    parser.add_argument("--bound", action="store_true",
                        help="also the best speed-up this work allows, from each run's build times and the "
                             "TensorFlow import -j N reports making before its pool")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-parallel-"))
    pipelines = [str(p) for p in copies(work, args.copies, args.model)]
    builds: dict[tuple[str, int], list[list[float]]] = {}  # each run's builds' own times (their reports)
    imports: list[float] = []
    # The pipelines read the shipped example's files outside their folder: granted, as a workflow would
    # (a pipeline reads only inside its project otherwise; docs/RELIABILITY.md).
    env = {**os.environ, "EDGECONV_NO_CACHE": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
           "EDGECONV_READ_ROOTS": os.pathsep.join([str(work.resolve()), str(REPO / "examples" / "digits")])}
    checkouts = {"this checkout": env}
    if args.edgeconv_from is not None:
        checkouts[f"@ {args.edgeconv_from.name}"] = {**env, "PYTHONPATH": str(args.edgeconv_from.resolve())}
    measured: dict[tuple[str, int], list[tuple[float, ...]]] = {}
    for _ in range(args.repeat):  # the variants take turns, so that a slow minute of the machine hits them all
        for label, run_env in checkouts.items():
            for jobs in args.jobs:
                runs = measured.setdefault((label, jobs), [])
                said: list[str] = []  # what the run prints (--bound reads its TensorFlow import from it)
                runs.append(run([sys.executable, "-m", "edgeconv", "build", *pipelines, "-j", str(jobs), "-q"],
                                work, run_env, memory=False, stdout=said if args.bound else None))
                print(f"{label:20} -j {jobs}: wall {runs[-1][0]:6.1f} s  cpu {runs[-1][1]:6.1f} s",
                      file=sys.stderr, flush=True)
                if args.bound:
                    builds.setdefault((label, jobs), []).append(build_seconds(pipelines, work))
                    found = re.search(r"TensorFlow imported once, in ([0-9.]+) s", said[0])
                    if found is not None:
                        imports.append(float(found.group(1)))
    if args.ceiling:
        n = max(args.jobs)
        alone, together = [], []
        for _ in range(args.repeat):
            alone.append(run([sys.executable, "-m", "edgeconv", "build", pipelines[0], "-q"], work, env,
                             memory=False)[0])
            together.append(_together(pipelines[:n], work, env))
            print(f"one build alone {alone[-1]:.1f} s, {n} side by side {together[-1]:.1f} s", file=sys.stderr,
                  flush=True)
        a, t = median_high(alone), median_high(together)
        print(f"Ceiling: one build alone {a:.1f} s; {n} separate processes started together {t:.1f} s (each "
              f"{t / a:.2f}x slower side by side, each importing TensorFlow): {n} at a time this way gives "
              f"{n * a / t:.2f}x the throughput of one at a time.\n")
    if args.bound:
        print(bound_table(measured, builds, imports, args.jobs))
    peaks = {}
    if args.memory:  # runs of their own: the sampler would take CPU from the builds it measures
        for label, run_env in checkouts.items():
            for jobs in args.jobs:
                peaks[label, jobs] = run([sys.executable, "-m", "edgeconv", "build", *pipelines, "-j", str(jobs),
                                          "-q"], work, run_env)[3]
                print(f"{label:20} -j {jobs}: peak PSS {peaks[label, jobs]:6.0f} MiB", file=sys.stderr, flush=True)
    rows = []
    for (label, jobs), runs in measured.items():
        wall, cpu = (median_high(r[i] for r in runs) for i in range(2))
        rows.append((label, jobs, wall, cpu, peaks.get((label, jobs), math.nan)))
    print(f"| edgeconv | -j | wall s ({args.copies} pipelines) | CPU s | peak PSS MiB | speed-up over -j "
          f"{args.jobs[0]} | CPU over -j {args.jobs[0]} |")
    print("|---|---|---|---|---|---|---|")
    for label, jobs, wall, cpu, pss in rows:
        base_wall, base_cpu = next(r[2:4] for r in rows if r[0] == label and r[1] == args.jobs[0])
        memory = "-" if math.isnan(pss) else f"{pss:.0f}"
        print(f"| {label} | {jobs} | {wall:.1f} | {cpu:.1f} | {memory} | {base_wall / wall:.2f}x | "
              f"{cpu - base_cpu:+.1f} s |")


def build_seconds(pipelines: list[str], work: Path) -> list[float]:
    """The builds' own times (``timings.total_s``) in the reports the last run wrote."""
    import json

    times = []
    for path in pipelines:
        out = re.search(r"\bdir: ([^\s}]+)", Path(path).read_text())  # the output folder copies() set
        assert out is not None, path
        times.append(json.loads((work / out.group(1) / "report.json").read_text())["timings"]["total_s"])
    return times


def bound_table(measured: dict[tuple[str, int], list[tuple[float, ...]]],
                builds: dict[tuple[str, int], list[list[float]]], imports: list[float], jobs: list[int]) -> str:
    """For each checkout and -j: medians of wall, the builds' sum, the TensorFlow import, and the bound."""
    if not imports:  # only -j 1 ran, or the pool's processes were spawned (each imports TensorFlow itself)
        return "No run reported a TensorFlow import before its pool: no bound to compute (needs -j N > 1 forked).\n"
    imp = median_high(imports)
    lines = [f"TensorFlow import before the pool (as -j N reports it): {imp:.2f} s (median of {len(imports)})", "",
             "| edgeconv | -j | wall s | builds' sum s | outside the builds s | best wall this work allows s "
             "| measured speed-up | best speed-up | builds side by side vs alone |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (label, n), runs in measured.items():
        one = measured[label, jobs[0]]
        w1 = median_high(r[0] for r in one)
        sums1 = [sum(b) for b in builds[label, jobs[0]]]
        outside = median_high(r[0] - b for r, b in zip(one, sums1, strict=True))
        wall = median_high(r[0] for r in runs)
        sums = [sum(b) for b in builds[label, n]]
        longest = median_high(max(b) for b in builds[label, n])
        if n == jobs[0]:
            best, slower = w1, 1.0
        else:
            best = outside + imp + max(median_high(sums) / n, longest)
            slower = median_high(sums) / (median_high(sums1) - imp)
        lines.append(f"| {label} | {n} | {wall:.1f} | {median_high(sums):.1f} | {outside:.2f} | {best:.1f} | "
                     f"{w1 / wall:.2f}x | {w1 / best:.2f}x | {slower:.2f}x |")
    return "\n".join(lines) + "\n"


def _together(pipelines: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Wall s until the last of ``edgeconv build P -q``, one process per pipeline, all started at once."""
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "edgeconv", "build", p, "-q"], cwd=cwd, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for p in pipelines]
    codes = [proc.wait() for proc in procs]
    if any(code not in (0, 1) for code in codes):
        raise SystemExit(f"a build side by side failed: exit codes {codes}")
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
