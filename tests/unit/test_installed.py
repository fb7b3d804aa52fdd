"""Installed versions read without importlib.metadata (edgeconv/installed.py): the same answer as
importlib.metadata for every distribution a cache key or report names, and for made-up site folders that
test the finding rules (first folder on the path wins, names normalised, METADATA read, eggs, zips)."""

from __future__ import annotations

import importlib.metadata as md
import sys
import zipfile
from pathlib import Path

import pytest

from edgeconv import installed
from edgeconv.cache import LIBRARIES
from edgeconv.config import TOOLCHAIN


def _metadata(version: str | None, extra: str = "") -> str:
    return "Metadata-Version: 2.1\nName: x\n" + (f"Version: {version}\n" if version else "") + extra + "\nBody\n"


def _imd(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


@pytest.mark.parametrize("name", sorted({d for dists in TOOLCHAIN.values() for d in dists} | set(LIBRARIES)
                                        | {"PyYAML", "pyyaml", "Rich", "not-installed-anywhere", "ml_dtypes"}))
def test_every_version_a_key_names_is_importlib_metadatas(name: str) -> None:
    assert installed.version(name) == _imd(name)


@pytest.fixture
def sites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, dists in ((first, {"Foo_Bar-1.0.dist-info": _metadata("1.0.post1"),  # METADATA is the word
                                   "eggy-2.0-py3.11.egg-info": None, "old.egg-info": None,
                                   "noversion-3.0.dist-info": _metadata(None),
                                   "Late-0.1.dist-info": _metadata("0.1", "Version: 9.9\n")}),
                          (second, {"foo.bar-7.0.dist-info": _metadata("7.0"),
                                    "only_here-4.2.dist-info": _metadata("4.2"),
                                    "ZEBRA-5.dist-info": _metadata("5")})):
        for entry, text in dists.items():
            (folder / entry).mkdir(parents=True)
            name = "METADATA" if entry.endswith(".dist-info") else "PKG-INFO"
            version = "2.0" if entry.startswith("eggy") else "0.0.1"
            (folder / entry / name).write_text(text if text is not None else _metadata(version))
    monkeypatch.setattr(sys, "path", [str(first), str(tmp_path / "missing"), str(second)])
    return first, second


@pytest.mark.parametrize(("name", "found"), [
    ("foo-bar", "1.0.post1"), ("FOO.BAR", "1.0.post1"), ("foo__bar", "1.0.post1"),  # the first folder's
    ("only-here", "4.2"), ("zebra", "5"), ("eggy", "2.0"), ("old", "0.0.1"),
    ("late", "0.1"),  # the first Version header
    ("noversion", None), ("absent", None),
])
def test_the_finding_rules_are_importlib_metadatas(sites: tuple[Path, Path], name: str, found: str | None) -> None:
    assert installed.version(name) == found == _imd(name)


def test_a_zip_on_the_path_is_asked_of_importlib_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "dists.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped-3.1.dist-info/METADATA", _metadata("3.1"))
    monkeypatch.setattr(sys, "path", [str(archive)])
    assert installed.version("zipped") == _imd("zipped") == "3.1"
    assert installed.version("absent") is None


def test_a_planted_metadata_fifo_is_not_opened(tmp_path: Path) -> None:
    """`python -m edgeconv` puts the working folder (a pull request's checkout) first on sys.path: a
    `tensorflow-9.9.dist-info/METADATA` there that is a FIFO would block the build forever where it is opened
    as importlib.metadata opens it. It is passed over: the installed version is found further on the path."""
    import os
    import subprocess

    planted = tmp_path / "checkout" / "pyyaml-9.9.dist-info"
    planted.mkdir(parents=True)
    os.mkfifo(planted / "METADATA")
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from edgeconv import installed; "
             "print(installed.version('PyYAML'))")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "checkout")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == md.version("PyYAML")


def test_a_distribution_planted_in_the_working_folder_is_not_the_installed_one(tmp_path: Path) -> None:
    """`python -m edgeconv` (and `-c`) put the folder it runs in first on sys.path: in CI a pull request's
    checkout. A `pyyaml-0.0.1.dist-info` (or `protobuf-...`) there is not the installation: the version a
    cache key and a report name is the installed one, and the planted folder leaves the installation's
    fingerprint as it was (so the kept facts are not worked out from it either)."""
    import subprocess

    checkout = tmp_path / "checkout"
    for dist in ("pyyaml-0.0.1.dist-info", "protobuf-0.0.1.dist-info"):
        (checkout / dist).mkdir(parents=True)
        (checkout / dist / "METADATA").write_text(_metadata("0.0.1"))
    probe = ("from edgeconv import installed, cache, config; import sys; "
             "print(installed.version('PyYAML'), cache.library_versions().get('protobuf'), "
             "config.toolchain_version('tensorflow'), cache.install_fingerprint())")
    said = [subprocess.run([sys.executable, "-c", probe], cwd=folder, capture_output=True, text=True, timeout=60,
                           check=True).stdout.split() for folder in (checkout, tmp_path)]
    assert said[0][:2] == [md.version("PyYAML"), _imd("protobuf") or "None"]
    assert said[0] == said[1]  # the same answers, and the same fingerprint, as from a folder with no plants
