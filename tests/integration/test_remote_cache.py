"""The remote build cache through real builds (issue 35), against a real S3 server (moto's, IAM enforced):
the example built cold into a bucket, then served on a fresh runner (another checkout, no local cache)
byte for byte; a read-only consumer (a fork's pull request) is served and stores nothing, said once; a
server that is down builds uncached, said once, and the exit code is still the verdict."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from ..conftest import REPO, S3Server, tree


def _project(root: Path) -> Path:
    """A checkout: the example, and two .tflite pipelines (one passing, one failing) in zoo/."""
    shutil.copytree(REPO / "examples", root / "examples")
    shutil.copy(REPO / "pipeline.yaml", root / "pipeline.yaml")
    (root / "zoo").mkdir()
    for name in ("conv2d-relu", "sin-island"):
        shutil.copy(REPO / "tests" / "data" / f"{name}.int8.tflite", root / "zoo" / f"{name}.tflite")
        (root / "zoo" / f"{name}.yaml").write_text(f"version: 1\nmodel: {{path: {name}.tflite}}\n"
                                                   f"targets: [generic-int8]\noutput: {{dir: ../build/{name}}}\n")
    return root


def _edgeconv(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    import os

    full = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **env}
    full.pop("EDGECONV_NO_CACHE", None)
    return subprocess.run([sys.executable, "-m", "edgeconv", *args], cwd=project, env=full, capture_output=True,
                          text=True)


def _objects(s3_server: S3Server, bucket: str) -> dict[str, bytes]:
    import boto3

    env = s3_server.env("writer")
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


@pytest.fixture(scope="module")
def cold(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The example built on a first runner into an empty bucket."""
    bucket = s3_server.bucket(f"zoo-{uuid.uuid4().hex[:12]}")
    project = _project(tmp_path_factory.mktemp("runner1"))
    url = f"s3://{bucket}/edgeconv"
    env = {**s3_server.env("writer"), "EDGECONV_CACHE_LOCAL": str(project / "local-cache")}
    done = _edgeconv(project, env, "build", "pipeline.yaml", "--cache-dir", url, "-q")
    assert done.returncode == 0, done.stderr
    return {"bucket": bucket, "url": url, "out": tree(project / "build" / "digits"),
            "objects": _objects(s3_server, bucket)}


def test_a_fresh_runner_is_served_the_build_from_the_bucket(s3_server: S3Server, cold: dict[str, Any],
                                                            tmp_path: Path) -> None:
    assert sum(k.startswith("edgeconv/entries/") for k in cold["objects"]) == 1
    project = _project(tmp_path / "runner2")
    env = {**s3_server.env("writer"), "EDGECONV_CACHE_LOCAL": str(tmp_path / "empty-local")}
    done = _edgeconv(project, env, "build", "pipeline.yaml", "--cache-dir", cold["url"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"cache: unchanged since the cached build; artifacts and report from {cold['url']}\n")
    assert tree(project / "build" / "digits") == cold["out"]
    assert list((tmp_path / "empty-local").glob("*/*/entry.json"))  # the read-through copy


def test_a_read_only_consumer_is_served_and_stores_nothing_said_once(s3_server: S3Server, cold: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    project = _project(tmp_path / "fork")
    before = _objects(s3_server, cold["bucket"])
    env = {**s3_server.env("reader"), "EDGECONV_CACHE_LOCAL": str(tmp_path / "local")}
    done = _edgeconv(project, env, "build", "pipeline.yaml", "zoo/conv2d-relu.yaml", "--cache-dir", cold["url"])
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "cache" in line]
    assert said == [f"edgeconv: cache: {cold['url']} is read-only for these credentials: hits are served, builds are "
                    "not stored"]
    assert "pipeline.yaml: PASS, served from the cache in" in done.stdout
    assert "zoo/conv2d-relu.yaml: PASS in" in done.stdout
    assert _objects(s3_server, cold["bucket"]) == before  # not even the use of the entry


def test_a_server_that_is_down_builds_uncached_and_the_exit_code_is_the_verdict(
        s3_server: S3Server, cold: dict[str, Any], tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    project = _project(tmp_path / "offline")
    env = {**s3_server.env("writer", endpoint=f"http://127.0.0.1:{port}"),
           "EDGECONV_CACHE_LOCAL": str(tmp_path / "local")}
    done = _edgeconv(project, env, "build", "pipeline.yaml", "zoo/sin-island.yaml", "--cache-dir", cold["url"])
    assert done.returncode == 1, done.stderr  # sin-island fails generic-int8
    said = [line for line in done.stderr.splitlines() if "cache" in line]
    assert len(said) == 1 and said[0].startswith(f"edgeconv: cache: {cold['url']} is unreachable (")
    assert said[0].endswith("); building without it (only the local copy serves)")
    assert "pipeline.yaml: PASS in" in done.stdout and "zoo/sin-island.yaml: FAIL in" in done.stdout
    assert tree(project / "build" / "digits")["digits.tflite"] == cold["out"]["digits.tflite"]  # built, the same
    assert len(list((tmp_path / "local").glob("*/*/entry.json"))) == 1  # the local copy still keeps it
    again = _edgeconv(project, env, "build", "pipeline.yaml", "zoo/sin-island.yaml", "--cache-dir", cold["url"])
    assert again.returncode == 1
    assert "pipeline.yaml: PASS, served from the cache in" in again.stdout


def test_a_tampered_remote_entry_is_said_once_rebuilt_and_replaced_by_a_j2_run(
        s3_server: S3Server, cold: dict[str, Any], tmp_path: Path) -> None:
    """`build -j 2` fetches while it serves: the corrupt entry's warning still reaches stderr once (said by the
    fetching thread, after the served builds set their own logging), the pipeline is built, and its build
    replaces the bad entry, so the next runner is served."""
    import re

    import boto3

    env_writer = s3_server.env("writer")
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, aws_access_key_id=env_writer["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env_writer["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    bucket = s3_server.bucket(f"zoo-{uuid.uuid4().hex[:12]}")
    for key, data in cold["objects"].items():
        if key.startswith("edgeconv/entries/"):
            data = data[:-1] + bytes([data[-1] ^ 1])  # the last byte of the inline pack: its last file
        client.put_object(Bucket=bucket, Key=key, Body=data)
    url = f"s3://{bucket}/edgeconv"
    project = _project(tmp_path / "runner3")
    env = {**env_writer, "EDGECONV_CACHE_LOCAL": str(tmp_path / "local3")}
    done = _edgeconv(project, env, "build", "pipeline.yaml", "zoo/conv2d-relu.yaml", "-j", "2", "--cache-dir", url)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "cache" in line]
    assert len(said) == 1, said
    corrupt = r"edgeconv: warning: cache: remote entry [0-9a-f]{12} is corrupt \(.+ not as recorded\); building"
    assert re.fullmatch(corrupt, said[0]), said
    assert "pipeline.yaml: PASS in" in done.stdout and "served from the cache" not in done.stdout
    assert tree(project / "build" / "digits")["digits.tflite"] == cold["out"]["digits.tflite"]
    fresh = _project(tmp_path / "runner4")
    again = _edgeconv(fresh, {**env_writer, "EDGECONV_CACHE_LOCAL": str(tmp_path / "local4")}, "build",
                      "pipeline.yaml", "--cache-dir", url)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"cache: unchanged since the cached build; artifacts and report from {url}\n")
