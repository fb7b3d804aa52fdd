from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "digits"
ORACLES = REPO / "tests" / "data" / "oracles" / "edgetpu"  # copied from ../shared/oracles (Apache-2.0)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
# Every test builds fresh (a test of the cache turns it on with its own folder under tmp_path), and
# nothing is written to the user's ~/.cache.
os.environ["EDGECONV_NO_CACHE"] = "1"


# How an unknown-target error lists the choices (the registry of built-in targets, plus files).
TARGET_CHOICES = ("arm-neon, edgetpu, ethos-u55-128, ethos-u85-256, generic-int8, tflm-cmsis-nn, or a path to a "
                  "target .yaml file")


def run_edgeconv(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh process, as a user would."""
    return subprocess.run([sys.executable, "-m", "edgeconv", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def _signals_taken() -> int:
    """SIGINT and SIGTERM, as bits, where this process ignores them or its main thread blocks them, as the
    kernel has it (a C library can change either unseen by Python; a process started from here inherits
    both)."""
    import signal

    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    masks = 0
    for line in status.splitlines():
        if line.startswith(("SigIgn:", "SigBlk:")):
            masks |= int(line.split()[1], 16)
    return masks & ((1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1)))


def _give_signals_back() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT, signal.SIGTERM])


@pytest.fixture(autouse=True)
def _sigint_stays_ours() -> Iterator[None]:
    """A test that leaves SIGINT or SIGTERM ignored or blocked fails here: every process the tests start
    afterwards would inherit it (an `edgeconv view` then ignored Ctrl-C, as a background job does)."""
    before = _signals_taken()
    yield
    if added := _signals_taken() & ~before:
        _give_signals_back()
        pytest.fail(f"the test left signals ignored or blocked in the test process (bits {added:#x})")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """The same for a fixture of a wider scope (made or torn down around this test): said as a warning naming
    the test, and undone."""
    import warnings

    before = _signals_taken()
    result = yield
    if added := _signals_taken() & ~before:
        _give_signals_back()
        said = f"{item.nodeid} (or a fixture around it) left signals ignored or blocked (bits {added:#x})"
        print(f"\n{said}", file=sys.__stderr__, flush=True)
        warnings.warn(said, stacklevel=1)
    return result


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    """The shipped example (pipeline.yaml + examples/digits) copied under tmp_path."""
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "digits")
    shutil.copy(REPO / "pipeline.yaml", tmp_path / "pipeline.yaml")
    return tmp_path


def tree(path: Path) -> dict[str, bytes]:
    """Every file under path with its bytes, to prove nothing changed."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


class S3Server:
    """The running test S3 server (tests/s3_server.py): its address, and the environment of each user."""

    def __init__(self, endpoint: str, writer: list[str], reader: list[str], home: Path) -> None:
        self.endpoint = endpoint
        self._keys = {"writer": writer, "reader": reader}
        self._home = home

    def env(self, user: str = "writer", endpoint: str | None = None) -> dict[str, str]:
        """AWS variables as a CI job sets them (no ~/.aws file is read)."""
        key, secret = self._keys[user]
        return {"AWS_ENDPOINT_URL": endpoint or self.endpoint, "AWS_ACCESS_KEY_ID": key,
                "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_CONFIG_FILE": str(self._home / "config"), "AWS_SHARED_CREDENTIALS_FILE": str(self._home / "creds"),
                "AWS_EC2_METADATA_DISABLED": "true"}

    def bucket(self, name: str) -> str:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self._keys["writer"][0],
                     aws_secret_access_key=self._keys["writer"][1], region_name="us-east-1").create_bucket(Bucket=name)
        return name


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 server (moto's) on 127.0.0.1 for the session, stopped at its end."""
    import json

    server = subprocess.Popen([sys.executable, "-P", str(REPO / "tests" / "s3_server.py")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert server.stdout is not None and server.stdin is not None
    line = server.stdout.readline()
    if not line:
        server.kill()
        raise RuntimeError("the test S3 server did not start (pip install 'moto[server]')")
    found = json.loads(line)
    try:
        yield S3Server(found["endpoint"], found["writer"], found["reader"], tmp_path_factory.mktemp("aws"))
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
