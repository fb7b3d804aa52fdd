"""`edgeconv cache stats` and `edgeconv cache prune --older-than AGE` (issue 37: the Action's build cache
was never pruned): entries by their last use, the boundary of the age, what a dead writer left, and
folders that are not entries or not ours."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from edgeconv.cache import STAGING_AGE_S, BuildCache, entries, parse_age, prune
from edgeconv.cli import main
from edgeconv.errors import EdgeconvError

from ..conftest import REPO

NOW = time.time()  # the CLI and the cache use the real clock
DAY = 86400.0


def _entry(root: Path, seed: str, used: float, size: int = 100) -> Path:
    """A cache entry as BuildCache.store writes one, last used at ``used``."""
    key = hashlib.sha256(seed.encode()).hexdigest()
    entry = root / key[:2] / key
    (entry / "files").mkdir(parents=True)
    data = bytes(size)
    (entry / "files" / "m.tflite").write_bytes(data)
    (entry / "entry.json").write_text(json.dumps({"key": key, "files": {"m.tflite": hashlib.sha256(data).hexdigest()}}))
    os.utime(entry / "entry.json", (used, used))
    return entry


@pytest.mark.parametrize(("age_days", "removed"), [(29.0, False), (30.0, False), (30.0 + 1 / DAY, True)])
def test_an_entry_goes_only_when_it_is_older_than_the_age(tmp_path: Path, age_days: float, removed: bool) -> None:
    entry = _entry(tmp_path, "a", NOW - age_days * DAY)
    done = prune(tmp_path, parse_age("30d"), now=NOW)
    assert entry.exists() is not removed
    assert (done.removed, done.kept) == ((1, 0) if removed else (0, 1))


def test_prune_keeps_what_was_used_and_counts_the_bytes(tmp_path: Path) -> None:
    old = _entry(tmp_path, "old", NOW - 40 * DAY, size=1000)
    new = _entry(tmp_path, "new", NOW - 1 * DAY, size=10)
    done = prune(tmp_path, 30 * DAY, now=NOW)
    assert not old.exists() and new.exists() and not old.parent.joinpath(old.name).exists()
    assert done.removed == 1 and done.removed_bytes > 1000 and done.kept == 1 and done.kept_bytes < 1000


@pytest.mark.parametrize(("age", "removed"), [(STAGING_AGE_S - 60, False), (STAGING_AGE_S + 60, True)])
def test_a_dead_writers_staging_folder_goes_after_a_day(tmp_path: Path, age: float, removed: bool) -> None:
    staging = tmp_path / "ab" / ".abcdef012345-xyz"
    staging.mkdir(parents=True)
    os.utime(staging, (NOW - age, NOW - age))
    assert prune(tmp_path, 30 * DAY, now=NOW).staging == int(removed)
    assert staging.exists() is not removed


@pytest.mark.parametrize(("age_days", "removed"), [(30.0, False), (30.0 + 1 / DAY, True)])
def test_an_installations_facts_go_when_unused_for_the_age(tmp_path: Path, age_days: float, removed: bool) -> None:
    """<cache>/installs/<fingerprint>.json (an installation's versions and sources digest, cache.install_facts)
    goes as an entry does; a file there that is a link, and what is not a memo, stay."""
    installs = tmp_path / "installs"
    installs.mkdir()
    memo = installs / ("f" * 64 + ".json")
    memo.write_text("{}")
    os.utime(memo, (NOW - age_days * DAY, NOW - age_days * DAY))
    (tmp_path / "elsewhere.json").write_text("keep")
    os.utime(tmp_path / "elsewhere.json", (NOW - 400 * DAY, NOW - 400 * DAY))
    (installs / ("e" * 64 + ".json")).symlink_to(tmp_path / "elsewhere.json")
    os.utime(installs / ("e" * 64 + ".json"), (NOW - 400 * DAY, NOW - 400 * DAY), follow_symlinks=False)
    (installs / "notes.txt").write_text("x")
    os.utime(installs / "notes.txt", (NOW - 400 * DAY, NOW - 400 * DAY))
    prune(tmp_path, parse_age("30d"), now=NOW)
    assert memo.exists() is not removed
    assert (installs / ("e" * 64 + ".json")).is_symlink() and (tmp_path / "elsewhere.json").read_text() == "keep"
    assert (installs / "notes.txt").exists()


def test_an_installs_folder_that_is_a_link_is_not_pruned_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "old.json").write_text("{}")
    os.utime(elsewhere / "old.json", (NOW - 400 * DAY, NOW - 400 * DAY))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "installs").symlink_to(elsewhere, target_is_directory=True)
    prune(tmp_path / "cache", DAY, now=NOW)
    assert (elsewhere / "old.json").exists()


def test_nothing_but_entries_is_touched(tmp_path: Path) -> None:
    """A folder whose name is not a key of its shard, a file, and a link to a folder elsewhere stay."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "keep").mkdir(parents=True)
    root = tmp_path / "cache"
    (root / "ab" / "not-a-key").mkdir(parents=True)
    key = "cd" + "0" * 62
    (root / "ef").mkdir()
    (root / "ef" / key).mkdir()  # a key in the wrong shard
    (root / "notes.txt").write_text("x")
    link_key = "12" + "3" * 62
    (root / "12").mkdir()
    (root / "12" / link_key).symlink_to(elsewhere, target_is_directory=True)
    for path in (root / "ab" / "not-a-key", root / "ef" / key):
        os.utime(path, (NOW - 400 * DAY, NOW - 400 * DAY))
    assert entries(root) == []
    assert prune(root, 1.0, now=NOW).removed == 0
    assert (root / "ab" / "not-a-key").exists() and (root / "ef" / key).exists() and (elsewhere / "keep").exists()


def test_a_cache_others_can_write_is_not_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGECONV_CACHE_SHARED", raising=False)
    _entry(tmp_path / "cache", "a", NOW - 90 * DAY)
    (tmp_path / "cache").chmod(0o777)
    with pytest.raises(EdgeconvError) as caught:
        prune(tmp_path / "cache", DAY, now=NOW)
    assert "not pruned: " in str(caught.value) and "EDGECONV_CACHE_SHARED=1" in str(caught.value)
    monkeypatch.setenv("EDGECONV_CACHE_SHARED", "1")
    assert prune(tmp_path / "cache", DAY, now=NOW).removed == 1


def test_serving_an_entry_is_a_use(tmp_path: Path) -> None:
    entry = _entry(tmp_path, "served", NOW - 90 * DAY)
    assert BuildCache(tmp_path).load(entry.name) == {"m.tflite": bytes(100)}
    assert (entry / "entry.json").stat().st_mtime > NOW - DAY  # touched now
    assert prune(tmp_path, 30 * DAY).kept == 1


@pytest.mark.parametrize(("text", "seconds"), [("30d", 30 * DAY), ("12h", 43200.0), ("90m", 5400.0), ("45s", 45.0),
                                               ("0s", 0.0)])
def test_ages(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["30", "30x", "-1d", "1.5d", "d", "", "1234567d"])
def test_a_bad_age_is_refused(text: str) -> None:
    with pytest.raises(EdgeconvError) as caught:
        parse_age(text)
    assert str(caught.value) == ("--older-than: expected a number and a unit (30d, 12h, 90m, 45s), "
                                 f"got {text!r}")


def test_the_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    assert main(["cache", "stats", "--cache-dir", str(root)]) == 0
    assert capsys.readouterr().out == f"cache {root}: empty\n"
    _entry(root, "a", NOW - 40 * DAY, size=2 << 20)
    _entry(root, "b", NOW)
    assert main(["cache", "stats", "--cache-dir", str(root)]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"cache {root}: 2 entries, 2.0 MiB; last used ") and said.endswith(" (oldest)\n")
    assert main(["cache", "prune", "--older-than", "30d", "--cache-dir", str(root)]) == 0
    assert capsys.readouterr().out == (f"cache {root}: removed 1 entry not used for 30d (2.0 MiB); kept 1 "
                                       "(0.0 MiB)\n")
    assert main(["cache", "prune", "--older-than", "30 days", "--cache-dir", str(root)]) == 2
    assert capsys.readouterr().err == ("edgeconv: error: --older-than: expected a number and a unit (30d, 12h, "
                                       "90m, 45s), got '30 days'\n")


@pytest.mark.parametrize(("edgeconv", "warned"), [("false", True), ("true", False), ("/nonexistent/edgeconv", False)])
def test_the_actions_prune_step_never_fails_the_job(tmp_path: Path, edgeconv: str, warned: bool) -> None:
    done = subprocess.run(["bash", str(REPO / "scripts" / "action" / "prune_cache.sh")], capture_output=True,
                          text=True, env={"PATH": os.environ["PATH"], "EDGECONV": edgeconv,
                                          "INPUT_CACHE_MAX_AGE": "30d"}, cwd=tmp_path)
    assert done.returncode == 0
    assert ("::warning title=edgeconv::the build cache was not pruned" in done.stdout) is warned


def test_a_hostile_cache_max_age_runs_nothing_and_fails_no_job(tmp_path: Path) -> None:
    """The workflow's `cache-max-age` input reaches the prune step as text: a shell expansion in it is not run,
    and the refused age is a warning, not a failed job."""
    import sys

    edgeconv = Path(sys.executable).with_name("edgeconv")
    done = subprocess.run(["bash", str(REPO / "scripts" / "action" / "prune_cache.sh")], capture_output=True,
                          text=True, cwd=tmp_path,
                          env={"PATH": os.environ["PATH"], "EDGECONV": str(edgeconv),
                               "EDGECONV_CACHE_DIR": str(tmp_path / "cache"),
                               "INPUT_CACHE_MAX_AGE": "$(touch pwned)`touch pwned2`; touch pwned3"})
    assert done.returncode == 0
    assert "edgeconv: error: --older-than: expected a number and a unit" in done.stderr
    assert "::warning title=edgeconv::the build cache was not pruned" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing run, nothing written
