"""Hostile input never crashes edgeconv (issue 17): mutated .tflite files through every target's rules
and mutated pipeline files through validation end as a result or an edgeconv error, never as another
exception (exit 3, a traceback). Fixed seeds: the same cases on every run."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from edgeconv import EdgeconvError
from edgeconv.config import load_pipeline
from edgeconv.pipeline import check
from edgeconv.targets import builtin_target_names, load_target

from ..conftest import REPO

DATA = REPO / "tests" / "data"
# The seed corpus: the committed small models (every fixture and single-op model, a few KB each).
SEEDS = sorted([*DATA.glob("*.tflite"), *(DATA / "ops").glob("*.tflite")])
TFLITE_CASES = 2400  # through every rule-checked target: about 5 ms a case
COMPILED_CASES = 60  # through the targets whose real compiler (Vela) runs: up to 1.5 s a case
YAML_CASES = 1500
BOUNDARY_WORDS = [b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\xff\xff\xff\x7f", b"\x01\x00\x00\x00"]
YAML_ALPHABET = list(":{}[]-,#&*!|>'\"\n\t 0123456789abcxyz\\%@`é") + ["\x00", "\ud800"]


def _mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Flip, overwrite with boundary values, cut, or duplicate a span: what breaks offsets and counts."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        kind = rng.random()
        i = rng.randrange(len(b))
        if kind < 0.4:
            b[i] ^= 1 << rng.randrange(8)
        elif kind < 0.7:
            b[i:i + 4] = rng.choice(BOUNDARY_WORDS)
        elif kind < 0.85:
            b = b[:i]
        else:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 64)]
        if not b:
            b = bytearray(b"\x00")
    return bytes(b)


def _mutate_text(text: str, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 8)):
        kind = rng.random()
        i = rng.randrange(len(chars) or 1)
        if kind < 0.3 and chars:
            del chars[i]
        elif kind < 0.6:
            chars.insert(i, rng.choice(YAML_ALPHABET))
        elif kind < 0.8 and chars:
            j = rng.randrange(len(chars))
            chars[i], chars[j] = chars[j], chars[i]
        else:
            k = rng.randrange(len(chars) or 1)
            chars[i:i] = chars[k:k + rng.randint(1, 40)]
    return "".join(chars)


def _check_mutants(tmp_path: Path, targets: list[str], cases: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    outcomes = {"checked": 0, "refused": 0}
    for k in range(cases):
        source = SEEDS[(seed * 131 + k) % len(SEEDS)]
        path = tmp_path / f"case{k}.tflite"
        path.write_bytes(_mutate_bytes(source.read_bytes(), rng))
        try:
            check(path, targets)
            outcomes["checked"] += 1
        except EdgeconvError as exc:
            assert str(exc).strip() and "Traceback" not in str(exc)
            outcomes["refused"] += 1
        path.unlink()
    return outcomes


RULE_TARGETS = [t for t in builtin_target_names() if load_target(t).compiler is None]
COMPILED_TARGETS = [t for t in builtin_target_names() if load_target(t).compiler is not None]


@pytest.mark.parametrize("shard", range(8))
def test_mutated_tflite_files_are_checked_or_refused_never_crash(tmp_path: Path, shard: int) -> None:
    outcomes = _check_mutants(tmp_path, RULE_TARGETS, TFLITE_CASES // 8, shard)
    assert sum(outcomes.values()) == TFLITE_CASES // 8
    assert outcomes["refused"] > 0 and outcomes["checked"] > 0  # the mutations break some files, not all


def test_mutated_tflite_files_through_the_real_compiler_never_crash(tmp_path: Path) -> None:
    pytest.importorskip("ethosu.vela")
    outcomes = _check_mutants(tmp_path, COMPILED_TARGETS, COMPILED_CASES, 99)
    assert sum(outcomes.values()) == COMPILED_CASES and outcomes["checked"] > 0


@pytest.mark.parametrize("shard", range(3))
def test_mutated_pipeline_files_validate_or_are_refused_never_crash(tmp_path: Path, shard: int) -> None:
    base = (REPO / "pipeline.yaml").read_text().replace("examples/", f"{REPO}/examples/")
    rng = random.Random(100 + shard)
    refused = 0
    for _ in range(YAML_CASES // 3):
        path = tmp_path / "pipeline.yaml"
        path.write_bytes(_mutate_text(base, rng).encode("utf-8", "surrogatepass"))
        try:
            load_pipeline(path)
        except EdgeconvError as exc:
            assert str(exc).strip()
            refused += 1
    assert refused > YAML_CASES // 6  # most mutations break the file; each said so


@pytest.mark.parametrize("value", ['"build/x\\nverdict=pass"', '"build/\\rx"', '"build/\\tx"'])
def test_an_output_folder_with_a_control_character_is_refused(tmp_path: Path, value: str) -> None:
    (tmp_path / "p.yaml").write_text(f"version: 1\nmodel: {{path: m.keras}}\noutput: {{dir: {value}}}\n")
    with pytest.raises(EdgeconvError) as info:
        load_pipeline(tmp_path / "p.yaml")
    assert any(line.startswith(f"{tmp_path / 'p.yaml'}:3: output.dir: a path cannot contain a control character")
               for line in str(info.value).splitlines())


@pytest.mark.parametrize(("path", "message"), [
    ('"a\\0b.keras"', "model.path: a path cannot contain a NUL character: 'a\\x00b.keras'"),
    ('"a\\nverdict=pass.keras"', "model.path: a path cannot contain a control character (newline, tab, escape, "
     "...): 'a\\nverdict=pass.keras'"),
    ('"a\\x1b[2Jb.keras"', "model.path: a path cannot contain a control character (newline, tab, escape, ...): "
     "'a\\x1b[2Jb.keras'"),
    ('"a\\x7f.keras"', "model.path: a path cannot contain a control character (newline, tab, escape, ...): "
     "'a\\x7f.keras'"),
    ('"\\ud800.keras"', "model.path: a path must be valid Unicode (it holds a lone surrogate): '\\\\ud800.keras'"),
    ("x" * 256 + ".keras", "model.path: a file or folder name in a path must be at most 255 bytes long: '"
     + "x" * 60 + "... (262 characters)'"),
    ("x/" * 2049 + "m.keras", "model.path: a path must be at most 4096 bytes long: '" + ("x/" * 30)
     + "... (4105 characters)'"),
])
def test_a_path_no_file_system_can_hold_is_a_clear_error(tmp_path: Path, path: str, message: str) -> None:
    (tmp_path / "p.yaml").write_text(f"version: 1\nmodel: {{path: {path}}}\ncalibration: {{path: c.npz}}\n")
    with pytest.raises(EdgeconvError) as info:
        load_pipeline(tmp_path / "p.yaml")
    assert [line for line in str(info.value).splitlines() if "model.path" in line] == [
        f"{tmp_path / 'p.yaml'}:2: {message}"]


@pytest.mark.parametrize(("text", "message"), [
    ("version: 1\nmodel: " + "[" * 600 + "]" * 600 + "\n", "p.yaml:2: nested more than 32 levels deep; a pipeline "
     "file nests at most a few"),
    # The file's own mapping is level 1: 31 lists inside it are just inside the limit, 32 just outside.
    ("version: 1\nmodel: " + "[" * 32 + "]" * 32 + "\n", "p.yaml:2: nested more than 32 levels deep; a pipeline "
     "file nests at most a few"),
    ("version: 1\nmodel: " + "[" * 31 + "]" * 31 + "\n", "p.yaml:2: model: expected a mapping, got a list"),
    ("# " + "x" * 1_000_000 + "\n", "p.yaml: 1,000,003 characters; a pipeline file may have at most 1,000,000"),
])
def test_hostile_yaml_shapes_are_refused_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
                                                       message: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(EdgeconvError) as info:
        load_pipeline(tmp_path / "p.yaml")
    assert message in str(info.value).splitlines()
