"""A model zoo as a CI matrix against a real S3 server (issue 35): cold, then warm on fresh runners.

    python scripts/bench_zoo.py [--pipelines 100] [--shards 4] [--jobs 2] [--keep DIR]

The zoo: N pipelines, each its own model (the shipped example's digits CNN with its weights perturbed
by a seeded 10 % noise: a different file and different weights each; every 10th pipeline also gates
TFLite Micro's CPU fallback at 0, which the digits model's RESHAPE fails). The server: moto's S3, on
127.0.0.1 (tests/s3_server.py). A runner is a fresh `edgeconv build 'pipelines/*.yaml' --shard K/N`
process with an empty local cache; the matrix's jobs run one after another here (2 cores), so the
totals below are the runner time a CI bill counts.

1. cold: every shard builds its pipelines into the bucket;
2. warm: every shard again, on fresh runners (no local cache): each pipeline must be served from the bucket;
3. `edgeconv summary` of each run's results, against one `edgeconv build` of every pipeline (no cache):
   the Markdown summaries must be the same (but for "(cached)").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def make_zoo(root: Path, count: int) -> None:
    """count pipelines under root/pipelines, each with a model of its own under root/models."""
    script = f"""
import numpy as np, keras
base = keras.saving.load_model({str(REPO / 'examples' / 'digits' / 'model.keras')!r}, safe_mode=True)
for i in range({count}):
    rng = np.random.default_rng(i)
    model = keras.models.clone_model(base)
    model.set_weights([w * (1 + 0.1 * rng.standard_normal(w.shape)).astype(w.dtype) for w in base.get_weights()])
    model.save({str(root / 'models')!r} + f"/digits-{{i:03d}}.keras")
"""
    (root / "models").mkdir(parents=True)
    (root / "pipelines").mkdir()
    shutil.copy(REPO / "examples" / "digits" / "calibration.npz", root / "models" / "calibration.npz")
    shutil.copy(REPO / "examples" / "digits" / "eval.npz", root / "models" / "eval.npz")
    subprocess.run([sys.executable, "-P", "-c", script], check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    for i in range(count):
        strict = "gates:\n  max_cpu_fallback_ops: {tflm-cmsis-nn: 0}\n" if i % 10 == 9 else ""
        (root / "pipelines" / f"digits-{i:03d}.yaml").write_text(
            f"version: 1\nname: digits-{i:03d}\nmodel: {{path: ../models/digits-{i:03d}.keras}}\n"
            "calibration: {source: npz, path: ../models/calibration.npz, samples: 200, seed: 0}\n"
            "evaluation: {path: ../models/eval.npz, labels: label}\n"
            "targets: [generic-int8, arm-neon, edgetpu, tflm-cmsis-nn]\n"
            f"output: {{dir: ../build/digits-{i:03d}}}\n{strict}")


def start_server() -> tuple[subprocess.Popen[str], dict[str, str]]:
    server = subprocess.Popen([sys.executable, "-P", str(REPO / "tests" / "s3_server.py")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert server.stdout is not None
    found = json.loads(server.stdout.readline())
    env = {"AWS_ENDPOINT_URL": found["endpoint"], "AWS_ACCESS_KEY_ID": found["writer"][0],
           "AWS_SECRET_ACCESS_KEY": found["writer"][1], "AWS_DEFAULT_REGION": "us-east-1"}
    import boto3

    boto3.client("s3", endpoint_url=found["endpoint"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1").create_bucket(
        Bucket="zoo-bench")
    return server, env


def edgeconv(root: Path, env: dict[str, str], *args: str) -> tuple[int, float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "edgeconv", *args], cwd=root, env=env, capture_output=True,
                          text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"edgeconv {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done.returncode, time.perf_counter() - start, done.stderr


def matrix(root: Path, env: dict[str, str], run: str, shards: int, jobs: int, url: str) -> list[float]:
    """Every shard on a fresh runner (an empty local cache); each one's wall time."""
    took = []
    (root / "results" / run).mkdir(parents=True)
    for k in range(1, shards + 1):
        shutil.rmtree(root / "build", ignore_errors=True)
        runner = {**env, "EDGECONV_CACHE_LOCAL": str(root / "runners" / f"{run}-{k}")}
        _, seconds, _ = edgeconv(root, runner, "build", "pipelines/*.yaml", "--shard", f"{k}/{shards}", "-j",
                                 str(jobs), "--cache-dir", url, "--results-json", f"results/{run}/{k}.json", "-q")
        took.append(seconds)
        print(f"  {run} shard {k}/{shards}: {seconds:.1f} s", flush=True)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipelines", type=int, default=100)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep the zoo and its results here")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="edgeconv-zoo-"))
    make_zoo(root, args.pipelines)
    server, aws = start_server()
    env = {**{k: v for k, v in os.environ.items() if k not in ("EDGECONV_NO_CACHE", "EDGECONV_CACHE_DIR")}, **aws}
    url = "s3://zoo-bench/edgeconv"
    try:
        cold = matrix(root, env, "cold", args.shards, args.jobs, url)
        warm = matrix(root, env, "warm", args.shards, args.jobs, url)
        results = [json.loads(p.read_text()) for p in sorted((root / "results" / "warm").glob("*.json"))]
        rows = [r for doc in results for r in doc["results"]]
        served = sum(r["cached"] for r in rows)
        hits = [r["seconds"] for r in rows]
        merged = {}
        for run in ("cold", "warm"):
            files = sorted(str(p.relative_to(root)) for p in (root / "results" / run).glob("*.json"))
            code, _, _ = edgeconv(root, env, "summary", *files, "--summary", f"results/{run}.md")
            merged[run] = (code, (root / "results" / f"{run}.md").read_text())
        shutil.rmtree(root / "build", ignore_errors=True)
        whole_code, whole_s, _ = edgeconv(root, env, "build", "pipelines/*.yaml", "-j", str(args.jobs), "--no-cache",
                                          "--summary", "results/one-build.md", "-q")
        whole = (root / "results" / "one-build.md").read_text()
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
    sizes = [len(doc["results"]) for doc in results]
    print(f"zoo: {args.pipelines} pipelines, {args.shards} shards of {', '.join(map(str, sizes))} (-j {args.jobs})")
    print(f"cold matrix: {sum(cold):.1f} s of runner time (slowest shard {max(cold):.1f} s)")
    print(f"warm matrix: {sum(warm):.1f} s of runner time (slowest shard {max(warm):.1f} s); "
          f"{served} of {len(rows)} served from the bucket")
    print(f"warm / cold: {sum(warm) / sum(cold):.1%}")
    print(f"a remote hit, per pipeline: median {statistics.median(hits):.2f} s in its build "
          f"(max {max(hits):.2f}); {sum(warm) / len(rows):.2f} s of runner time with the process and probe")
    print(f"one build of all {args.pipelines}, no cache: {whole_s:.1f} s, exit {whole_code}")
    same_cold = merged["cold"][1] == whole
    same_warm = merged["warm"][1].replace(" (cached)", "") == whole
    print(f"merged summary = one build's: cold {same_cold}, warm {same_warm} (exit codes: merged "
          f"{merged['cold'][0]}/{merged['warm'][0]}, one build {whole_code})")
    if not (served == len(rows) == args.pipelines and same_cold and same_warm
            and merged["cold"][0] == merged["warm"][0] == whole_code):
        raise SystemExit("the zoo's warm run or merged verdict is not what it should be")


if __name__ == "__main__":
    main()
