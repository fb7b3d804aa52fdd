"""The build cache's key changes with every input of a build (issue 17): each part of the toolchain,
each of edgeconv's own source files, the model, the data, custom modules and user target files. A key
that missed one would serve a stale build. No TensorFlow: the key is computed from files and versions."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edgeconv import cache as cache_module
from edgeconv.cache import BuildCache
from edgeconv.config import TOOLCHAIN, installed_toolchain, load_pipeline

PACKAGE = Path(cache_module.__file__).resolve().parent
EDGECONV_SOURCES = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*")
                          if p.is_file() and p.suffix in (".py", ".yaml", ".json") and "__pycache__" not in p.parts)
TARGET = """schema_version: 1
name: my-mcu
title: A user's target file
sources: {ME: "the firmware team's LiteRT build"}
quantization: {modes: [int8], float_fallback: true, source: ME}
unlisted: {source: ME}
ops:
  FULLY_CONNECTED: {source: ME}
"""


@pytest.fixture(autouse=True)
def facts_worked_out_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests change a version or a source under a running process (which never happens outside them):
    the installation's facts are then worked out for each key, not read from the memo an earlier key kept
    (the memo's own tests are at the end)."""
    monkeypatch.setattr(cache_module, "install_facts",
                        lambda root: cache_module._computed_facts(cache_module._PACKAGE_INSTALLED))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    np.savez(tmp_path / "cal.npz", x=np.zeros((4, 3), np.float32))
    np.savez(tmp_path / "eval.npz", x=np.ones((4, 3), np.float32))
    (tmp_path / "m.keras").write_bytes(b"model bytes")
    (tmp_path / "layers.py").write_text("X = 1\n")
    (tmp_path / "my-mcu.yaml").write_text(TARGET)
    (tmp_path / "pipeline.yaml").write_text(
        "version: 1\nmodel: {path: m.keras, custom_modules: [layers], trust_code: true}\n"
        "calibration: {path: cal.npz}\nevaluation: {path: eval.npz}\n"
        f"targets: [generic-int8, {tmp_path / 'my-mcu.yaml'}]\n")
    return tmp_path


def _key(project: Path) -> str:
    config = load_pipeline(project / "pipeline.yaml")
    key, why = BuildCache(project / "cache").key(config, project / "out", False)
    assert key is not None, why
    return key


@pytest.mark.parametrize("part", sorted(TOOLCHAIN))
def test_every_toolchain_part_is_in_the_key(project: Path, monkeypatch: pytest.MonkeyPatch, part: str) -> None:
    before = _key(project)
    versions = {**installed_toolchain(), part: "0.0.0-other"}
    monkeypatch.setattr(cache_module, "installed_toolchain", lambda: versions)
    assert _key(project) != before


@pytest.mark.parametrize("source", EDGECONV_SOURCES)
def test_every_edgeconv_source_file_is_in_the_key(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                  source: str) -> None:
    copy = project / "pkg" / "edgeconv"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache_module, "_PACKAGE", copy)
    before = _key(project)
    with (copy / source).open("a") as f:
        f.write("\n")
    assert _key(project) != before


@pytest.mark.parametrize("file", ["m.keras", "cal.npz", "eval.npz", "layers.py", "my-mcu.yaml"])
def test_every_input_file_is_in_the_key(project: Path, file: str) -> None:
    before = _key(project)
    with (project / file).open("a") as f:
        f.write("\n# changed\n" if file.endswith((".py", ".yaml")) else "\x00")
    assert _key(project) != before


def test_the_pipeline_is_in_the_key_by_what_it_says(project: Path) -> None:
    before = _key(project)
    with (project / "pipeline.yaml").open("a") as f:
        f.write("# a comment changes nothing the build does\n")
    assert _key(project) == before
    with (project / "pipeline.yaml").open("a") as f:
        f.write("quantization: {per_channel: false}\n")
    assert _key(project) != before


def test_the_same_inputs_give_the_same_key(project: Path) -> None:
    assert _key(project) == _key(project)


@pytest.fixture
def objects_project(tmp_path: Path) -> Path:
    np.savez(tmp_path / "cal.npz", x=np.zeros((4, 3), np.float32))
    (tmp_path / "m.keras").write_bytes(b"model bytes")
    (tmp_path / "mylayers").mkdir()
    (tmp_path / "mylayers" / "__init__.py").write_text("")
    (tmp_path / "mylayers" / "scale.py").write_text("class Scale:\n    factor = 2\n")
    (tmp_path / "pipeline.yaml").write_text(
        "version: 1\nmodel: {path: m.keras, custom_objects: {Scale: 'mylayers.scale:Scale'}, trust_code: true}\n"
        "calibration: {path: cal.npz}\n")
    return tmp_path


def test_a_custom_objects_module_is_in_the_key(objects_project: Path) -> None:
    """An edited custom layer (x*2 -> x*5) must miss: it was served from the cache with the old bytes."""
    before = _key(objects_project)
    (objects_project / "mylayers" / "scale.py").write_text("class Scale:\n    factor = 5\n")
    assert _key(objects_project) != before


def test_a_custom_objects_module_from_elsewhere_is_not_cacheable(objects_project: Path) -> None:
    shutil.rmtree(objects_project / "mylayers")
    config = load_pipeline(objects_project / "pipeline.yaml")
    assert BuildCache(objects_project / "cache").key(config, objects_project / "out", False) == (
        None, "custom module 'mylayers.scale' is not a file next to the pipeline")


@pytest.mark.parametrize("library", sorted(cache_module.LIBRARIES))
def test_every_library_between_the_data_and_the_bytes_is_in_the_key(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    library: str) -> None:
    before = _key(project)
    versions = {**cache_module.library_versions(), library: "0.0.0-other"}
    monkeypatch.setattr(cache_module, "library_versions", lambda: versions)
    assert _key(project) != before


@pytest.mark.parametrize("library", ["pillow", "h5py", "protobuf", "flatbuffers"])
def test_the_libraries_that_decode_and_write_are_read_from_the_installed_packages(library: str) -> None:
    import importlib.metadata as md

    assert cache_module.library_versions()[library] == md.version(library)


# -- the installation's facts, kept once per installation ------------------------------------------------


@pytest.fixture
def fresh_memo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The real install_facts (not the fixture above), its per-process copy cleared; a folder on sys.path
    standing for site-packages (what pip changes when it installs)."""
    monkeypatch.undo()
    monkeypatch.setattr(cache_module, "install_facts", INSTALL_FACTS)
    cache_module._kept_facts.cache_clear()
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    yield site
    cache_module._kept_facts.cache_clear()


INSTALL_FACTS = cache_module.install_facts


def test_the_facts_are_worked_out_once_per_installation_and_kept(project: Path, fresh_memo: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The first key works the facts out and keeps them in <cache>/installs/<fingerprint>.json (written whole);
    a later process (the per-process copy cleared) reads them back without reading a version or a source, and
    gets the same key."""
    first = _key(project)
    (memo,) = (project / "cache" / "installs").iterdir()
    assert memo.name == f"{cache_module.install_fingerprint()}.json"
    kept = json.loads(memo.read_text())
    assert kept["edgeconv_sources"] == cache_module.sources_sha256(PACKAGE)
    assert kept["toolchain"] == installed_toolchain() and kept["libraries"] == cache_module.library_versions()
    assert not [p for p in memo.parent.iterdir() if p.name.startswith(".")]  # no temporary file left

    cache_module._kept_facts.cache_clear()

    def not_again(*_: object) -> dict[str, object]:
        raise AssertionError("worked out again")

    monkeypatch.setattr(cache_module, "_computed_facts", not_again)
    assert _key(project) == first


def test_installing_something_changes_the_key_through_the_memo(project: Path, fresh_memo: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """pip upgrading a library replaces its .dist-info folder in site-packages: the folder's modification time
    moves, the fingerprint with it, and the new versions are read (a stale memo never serves an old build)."""
    first = _key(project)
    versions = {**cache_module.library_versions(), "h5py": "0.0.0-upgraded"}
    monkeypatch.setattr(cache_module, "library_versions", lambda: versions)
    cache_module._kept_facts.cache_clear()
    assert _key(project) == first  # nothing installed: the memo stands
    time.sleep(0.01)
    (fresh_memo / "h5py-0.0.0.dist-info").mkdir()
    cache_module._kept_facts.cache_clear()
    assert _key(project) != first
    assert len(list((project / "cache" / "installs").iterdir())) == 2


@pytest.mark.parametrize("entry", ["", "cwd"])
def test_a_file_written_in_the_working_folder_leaves_the_fingerprint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str) -> None:
    """`python -m edgeconv` puts the working folder first on sys.path (`-c`: ""): a CI step writing its results
    there, or a build replacing an output folder there, must not make the next build work the facts out again;
    a site folder on the path still counts."""
    work, site = tmp_path / "project", tmp_path / "site-packages"
    work.mkdir()
    site.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "path", [str(work) if entry == "cwd" else "", *sys.path, str(site)])
    before = cache_module.install_fingerprint()
    time.sleep(0.01)
    (work / "results.json").write_text("{}")
    assert cache_module.install_fingerprint() == before
    (site / "h5py-0.0.0.dist-info").mkdir()
    assert cache_module.install_fingerprint() != before


def test_editing_an_edgeconv_source_changes_the_fingerprint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "edgeconv"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache_module, "_PACKAGE_INSTALLED", copy)
    before = cache_module.install_fingerprint()
    assert cache_module.install_fingerprint() == before
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "x.pyc").write_bytes(b"compiled")  # bytecode is not a source
    assert cache_module.install_fingerprint() == before
    with (copy / "targets" / "data" / "edgetpu.yaml").open("a") as f:
        f.write("\n")
    assert cache_module.install_fingerprint() != before


@pytest.mark.parametrize("memo", [
    "{", "[]", '{"fingerprint": "FP"}',
    '{"fingerprint": "other", "toolchain": {}, "libraries": {}, "edgeconv_sources": "' + "a" * 64 + '"}',
    '{"fingerprint": "FP", "toolchain": {"tensorflow": 2}, "libraries": {}, "edgeconv_sources": "' + "a" * 64 + '"}',
    '{"fingerprint": "FP", "toolchain": {}, "libraries": {}, "edgeconv_sources": "not a digest"}',
])
def test_a_memo_that_is_not_one_is_worked_out_again(project: Path, fresh_memo: Path, memo: str) -> None:
    """A truncated, foreign-shaped or mislabelled memo is not read: the facts are worked out and the memo
    rewritten."""
    first = _key(project)
    (path,) = (project / "cache" / "installs").iterdir()
    path.write_text(memo.replace("FP", path.stem))
    cache_module._kept_facts.cache_clear()
    assert _key(project) == first
    assert json.loads(path.read_text())["fingerprint"] == path.stem


def test_a_cache_folder_that_cannot_be_written_still_gives_the_key(project: Path, fresh_memo: Path) -> None:
    (project / "cache").mkdir()
    (project / "cache" / "installs").write_text("a file where the folder goes")
    first = _key(project)
    cache_module._kept_facts.cache_clear()
    assert _key(project) == first
    assert (project / "cache" / "installs").read_text() == "a file where the folder goes"
    assert sorted(p.name for p in (project / "cache").iterdir()) == ["installs"]


@pytest.mark.parametrize("planted", ["fifo", "huge", "link"])
def test_a_planted_memo_is_not_read_and_nothing_waits(project: Path, fresh_memo: Path, tmp_path: Path,
                                                      planted: str) -> None:
    """A cache folder shared with others (EDGECONV_CACHE_SHARED=1) may hold what they put there: a FIFO where the
    memo goes (reading it would wait forever), a file too large to be one, a link to a file elsewhere. None
    is read (the facts are worked out: the same key), and the link's target is not touched."""
    first = _key(project)
    (path,) = (project / "cache" / "installs").iterdir()
    kept = path.read_text()
    path.unlink()
    elsewhere = tmp_path / "elsewhere.json"
    if planted == "fifo":
        os.mkfifo(path)
    elif planted == "huge":
        path.write_text(kept[:-1] + " " * cache_module.MEMO_LIMIT + "}")
    else:
        elsewhere.write_text(kept)
        os.utime(elsewhere, (1e9, 1e9))
        path.symlink_to(elsewhere)
    cache_module._kept_facts.cache_clear()
    assert _key(project) == first
    if planted == "link":
        assert elsewhere.read_text() == kept and elsewhere.stat().st_mtime == 1e9  # not read as a use either


def test_an_installs_folder_that_is_a_link_is_neither_read_nor_written(project: Path, fresh_memo: Path,
                                                                         tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / "cache").mkdir()
    (project / "cache" / "installs").symlink_to(elsewhere, target_is_directory=True)
    first = _key(project)
    assert list(elsewhere.iterdir()) == []
    cache_module._kept_facts.cache_clear()
    assert _key(project) == first
