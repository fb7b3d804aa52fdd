"""The build cache: an unchanged rebuild is written from the cache, any change builds again."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from edgeconv.cli import main

from ..conftest import REPO, tree


@pytest.fixture(scope="module")
def primed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The example built once into an empty cache: the project, its cache, the cold build time."""
    root = tmp_path_factory.mktemp("primed")
    shutil.copytree(REPO / "examples", root / "examples")
    shutil.copy(REPO / "pipeline.yaml", root / "pipeline.yaml")
    with pytest.MonkeyPatch.context() as env:
        env.delenv("EDGECONV_NO_CACHE")
        env.setenv("EDGECONV_CACHE_DIR", str(root / "cache"))
        code, cold = timed_build(root)
    assert code == 0
    return {"root": root, "cold": cold}


@pytest.fixture
def project(primed: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the primed project and its cache (the cache key does not depend on where it lies)."""
    root = primed["root"]
    assert isinstance(root, Path)
    shutil.copytree(root, tmp_path / "p")
    monkeypatch.delenv("EDGECONV_NO_CACHE")
    monkeypatch.setenv("EDGECONV_CACHE_DIR", str(tmp_path / "p" / "cache"))
    return tmp_path / "p"


def timed_build(project: Path) -> tuple[int, float]:
    start = time.perf_counter()
    code = main(["build", str(project / "pipeline.yaml"), "-q"])
    return code, time.perf_counter() - start


def test_unchanged_rebuild_comes_from_the_cache_and_any_change_builds(primed: dict[str, object], project: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = project / "build" / "digits"
    first = tree(out)
    entries = list((project / "cache").glob("*/*/entry.json"))
    assert len(entries) == 1
    cold = primed["cold"]
    assert isinstance(cold, float)

    code, warm = timed_build(project)
    assert code == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("cache: unchanged since the cached build")
    # This run's time, not the cached build's stage times as if they were this run's.
    (timing,) = [line for line in said if line.startswith("time: ")]
    cached_total = json.loads((out / "report.json").read_text())["timings"]["total_s"]
    assert re.fullmatch(rf"time: served from the cache in \d+\.\d s \(the build it holds took {cached_total:.1f} s\)",
                        timing), timing
    assert tree(out) == first  # the same artifacts and report, byte for byte
    assert warm < 0.1 * cold, (warm, cold)

    # --no-cache builds (a new report timestamp, the same model).
    assert main(["build", str(project / "pipeline.yaml"), "-q", "--no-cache"]) == 0
    assert "cache:" not in capsys.readouterr().out
    assert (out / "digits.tflite").read_bytes() == first["digits.tflite"]

    # Changed calibration data: a miss, a second entry.
    data = dict(np.load(project / "examples" / "digits" / "calibration.npz"))
    data["image"] = data["image"][::-1].copy()
    np.savez(project / "examples" / "digits" / "calibration.npz", **data)
    assert main(["build", str(project / "pipeline.yaml"), "-q"]) == 0
    assert "cache:" not in capsys.readouterr().out
    assert len(list((project / "cache").glob("*/*/entry.json"))) == 2


def test_a_cached_rebuild_imports_no_build_stage(project: Path) -> None:
    """A served build as a CI step runs it, a fresh process: the pipeline validated, the key, the entry
    verified, the targets checked again on the served .tflite; not NumPy, TensorFlow, the stages, the -j pool,
    the remote cache (a local one is in use) or its event loop, nor importlib.metadata (versions are read from
    the dist-info folders).
    The first process works out the installation's facts (versions and sources digest) and keeps them in the
    cache folder; the next reads them back and keeps nothing new. Both are served, so the kept facts make the
    same key."""
    import subprocess
    import sys

    heavy = ("numpy", "tensorflow", "edgeconv.pipeline", "edgeconv.calibration.checks", "edgeconv.verify.stage",
             "multiprocessing", "asyncio", "importlib.metadata", "edgeconv.cache_remote", "uuid")
    probe = (f"import sys\nfrom edgeconv.cli import main\ncode = main(['build', 'pipeline.yaml'])\n"
             f"print(code, sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")
    seen, kept = [], []
    installs = project / "cache" / "installs"
    before = set(installs.glob("*.json"))  # the test process's
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", probe], cwd=project, capture_output=True, text=True, check=True)
        assert done.stdout.startswith("cache: unchanged since the cached build"), done.stdout
        seen.append(done.stderr.strip().splitlines()[-1])
        kept.append(set(installs.glob("*.json")) - before)
    assert seen == ["0 []", "0 []"], seen
    # The first probe kept its facts (or read the test process's: the same installation and sys.path but for
    # the working folder); the second read them and kept nothing new.
    assert len(kept[0]) <= 1 and kept[1] == kept[0] and before | kept[0]


@pytest.mark.parametrize("change", ["pipeline", "model", "out"])
def test_each_input_is_part_of_the_key(project: Path, change: str, capsys: pytest.CaptureFixture[str]) -> None:
    if change == "pipeline":
        text = (project / "pipeline.yaml").read_text().replace("seed: 0", "seed: 1")
        (project / "pipeline.yaml").write_text(text)
    elif change == "model":
        with (project / "examples" / "digits" / "model.keras").open("ab") as f:
            f.write(b"\0")  # a zip with trailing bytes still loads
    args = ["--out", str(project / "elsewhere")] if change == "out" else []
    capsys.readouterr()
    assert main(["build", str(project / "pipeline.yaml"), "-q", *args]) == 0
    assert "cache:" not in capsys.readouterr().out


def test_a_python_source_is_not_cached(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "digits_data.py").write_text(
        "from pathlib import Path\nimport numpy as np\n\ndef samples():\n"
        "    d = np.load(Path(__file__).parent / 'examples/digits/calibration.npz')\n"
        "    return [{'image': x} for x in d['image']]\n")
    text = (project / "pipeline.yaml").read_text().replace(
        "  source: npz\n  path: examples/digits/calibration.npz   # key \"image\" = the model input's name\n",
        "  source: python\n  function: digits_data:samples\n  trust_code: true\n")
    assert "source: python" in text
    (project / "pipeline.yaml").write_text(text)
    assert main(["build", str(project / "pipeline.yaml"), "-q"]) == 0
    assert "cache:" not in capsys.readouterr().out
    assert len(list((project / "cache").glob("*/*/entry.json"))) == 1  # the primed build's: nothing to hit later
    report = json.loads((project / "build" / "digits" / "report.json").read_text())
    assert report["gate"]["verdict"] == "pass"


def _entry(project: Path) -> Path:
    (meta,) = list((project / "cache").glob("*/*/entry.json"))
    return meta.parent


@pytest.mark.parametrize("damage", ["truncated_tflite", "flipped_report", "other_model_patched_report",
                                    "name_leaving_the_entry"])
def test_a_damaged_or_planted_entry_is_never_served(project: Path, damage: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A cached .tflite truncated, a report bit-flipped, or another valid model planted with its report and
    entry patched to match: a miss (warning), a real build, and an output that is the real one."""
    import hashlib

    out = project / "build" / "digits"
    good = tree(out)
    entry = _entry(project)
    files = entry / "files"
    if damage == "truncated_tflite":
        data = (files / "digits.tflite").read_bytes()
        (files / "digits.tflite").write_bytes(data[: len(data) // 2])
        expected = "is corrupt (digits.tflite changed since it was stored)"
    elif damage == "flipped_report":
        data = bytearray((files / "report.json").read_bytes())
        data[100] ^= 0x01
        (files / "report.json").write_bytes(bytes(data))
        expected = "is corrupt (report.json changed since it was stored)"
    elif damage == "name_leaving_the_entry":  # an entry.json that would read (and write) outside the cache
        meta = json.loads((entry / "entry.json").read_text())
        meta["files"]["../../../pipeline.yaml"] = meta["files"].pop("report.json")
        (entry / "entry.json").write_text(json.dumps(meta))
        expected = "is unreadable (a file name leaves the entry); building"
    else:  # the planted model carries a report that names it; only the entry's own hashes are stale
        planted = (REPO / "tests" / "data" / "ops" / "conv2d.int8.tflite").read_bytes()
        (files / "digits.tflite").write_bytes(planted)
        report = json.loads((files / "report.json").read_text())
        report["artifacts"]["tflite"]["sha256"] = hashlib.sha256(planted).hexdigest()
        (files / "report.json").write_text(json.dumps(report))
        meta = json.loads((entry / "entry.json").read_text())
        meta["files"]["digits.tflite"] = hashlib.sha256(planted).hexdigest()
        (entry / "entry.json").write_text(json.dumps(meta))
        expected = "is corrupt (report.json changed since it was stored)"
    assert main(["build", str(project / "pipeline.yaml")]) == 0
    captured = capsys.readouterr()
    assert expected in captured.err
    assert "cache: unchanged since the cached build" not in captured.out
    now = tree(out)
    assert now["digits.tflite"] == good["digits.tflite"]  # the real build, byte for byte ...
    unstamped = {"created": None, "timings": None}  # when it ran and how long it took differ, nothing else
    assert {**json.loads(now["report.json"]), **unstamped} == {**json.loads(good["report.json"]), **unstamped}


def test_a_cache_other_users_can_write_is_not_used(project: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cache = project / "cache"
    cache.chmod(0o777)
    assert main(["build", str(project / "pipeline.yaml")]) == 0
    captured = capsys.readouterr()
    assert "is writable by other users (mode 777); building" in captured.err
    assert "cache: unchanged since the cached build" not in captured.out
    monkeypatch.setenv("EDGECONV_CACHE_SHARED", "1")  # explicitly allowed: used, still verified
    assert main(["build", str(project / "pipeline.yaml"), "-q"]) == 0
    assert "cache: unchanged since the cached build" in capsys.readouterr().out
