"""Hostile input never crashes edgeconv (issue 17): mutated .tflite files through every target's rules
and mutated pipeline files through validation end as a result or an edgeconv error, never as another
exception (exit 3, a traceback). Fixed seeds: the same cases on every run."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeconv import EdgeconvError
from edgeconv.checking import check
from edgeconv.config import load_pipeline
from edgeconv.targets import builtin_target_names, load_target

from ..conftest import REPO

DATA = REPO / "tests" / "data"
# The seed corpus: the committed small models (every fixture and single-op model, a few KB each).
SEEDS = sorted([*DATA.glob("*.tflite"), *(DATA / "ops").glob("*.tflite")])
# EDGECONV_FUZZ_SCALE=N runs N times as many cases (the README's longer run); 1 in CI.
SCALE = max(1, int(os.environ.get("EDGECONV_FUZZ_SCALE", "1")))
TFLITE_CASES = 2400 * SCALE  # through every rule-checked target: about 5 ms a case
COMPILED_CASES = 60 * SCALE  # through the targets whose real compiler (Vela) runs: up to 1.5 s a case
YAML_CASES = 1500 * SCALE
ALIAS_CASES = 600 * SCALE
CASE_SECONDS = 2.0  # per case: a hang is a failure, not a stuck suite
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


READER_CASES = 1500 * SCALE


def test_mutated_tflite_files_read_as_flatcs_reader_reads_them_or_are_refused() -> None:
    """edgeconv's reader (struct and the schema as data) against flatc's generated reader on mutated models:
    every mutant both read is read alike, options included; one flatc's reader takes may be refused here
    (a string or table past the end of the file, which flatc's Python reader cuts or reads from the other end
    and TFLite's verifier refuses), never the other way round by accident of a crash."""
    from edgeconv.converters.tflite_reader import parse_tflite

    from ..flatc_reader import parse

    rng = random.Random(7)
    outcomes = {"alike": 0, "refused here only": 0, "refused by both": 0}
    for k in range(READER_CASES):
        data = _mutate_bytes(SEEDS[k % len(SEEDS)].read_bytes(), rng)
        try:
            expected = parse(data, "m.tflite")
        except Exception:  # the oracle has no checks: what it cannot read, edgeconv's reader must refuse
            with pytest.raises(EdgeconvError):
                parse_tflite(data, "m.tflite")
            outcomes["refused by both"] += 1
            continue
        try:
            model = parse_tflite(data, "m.tflite")
        except EdgeconvError:
            outcomes["refused here only"] += 1
            continue
        # repr: a NaN a mutant put in a scale is the same value on both sides, not unequal to itself
        assert repr(model) == repr(expected) and model.buffers == expected.buffers, k
        outcomes["alike"] += 1
    assert min(outcomes.values()) > 0, outcomes


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


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail the case (TimeoutError) when it runs longer than ``seconds``: a hang must not stall the suite."""
    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"a case ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


ALIAS_TOKENS = ["&a ", "*a", "&b ", "*b", "[*a, *a, *a, *a]", "&a [*a]", "{k: *a}", "<<: *a", "&a\n", "*a\n  - *a"]


def _mutate_aliases(text: str, rng: random.Random) -> str:
    """Anchors and aliases dropped into the file: cycles, forward references, bombs, merge keys."""
    chars = list(text)
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(chars) or 1)
        chars[i:i] = rng.choice(ALIAS_TOKENS)
    return "".join(chars)


@pytest.mark.parametrize("shard", range(2))
def test_pipeline_files_with_anchors_and_aliases_validate_or_are_refused_in_time(tmp_path: Path, shard: int) -> None:
    base = (REPO / "pipeline.yaml").read_text().replace("examples/", f"{REPO}/examples/")
    rng = random.Random(200 + shard)
    path = tmp_path / "pipeline.yaml"
    for _ in range(ALIAS_CASES // 2):
        path.write_text(_mutate_aliases(base, rng))
        with deadline(CASE_SECONDS):
            try:
                load_pipeline(path)
            except EdgeconvError as exc:
                assert str(exc).strip()


REPORT = json.loads((DATA / "reports" / "digits.report.json").read_text())
REPORT_VALUES: list[Any] = [None, True, 0, -1, 1.5, "", "x", [], {}, [{}], {"a": [1]}, 10**30]


def _report_paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if path:
        yield path
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in items:
        yield from _report_paths(value, (*path, key))


def _field_mutants(document: Any, seed: int) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every field of ``document`` replaced by a kind of JSON value (seeded: every kind on hundreds of fields),
    then deleted (a list item duplicated): the field's path and the mutant, two a field."""
    rng = random.Random(seed)
    for path in list(_report_paths(document)):
        for value in [rng.choice(REPORT_VALUES), KeyError]:
            mutant = copy.deepcopy(document)
            parent = mutant
            for key in path[:-1]:
                parent = parent[key]
            if value is KeyError:
                if isinstance(parent, dict):
                    del parent[path[-1]]
                else:
                    parent.append(copy.deepcopy(parent[path[-1]]))
            else:
                parent[path[-1]] = value
            yield path, mutant


def _report_mutants() -> Iterator[tuple[str, Any]]:
    """Systematic: every field of a real report (about 1,045) replaced and deleted (:func:`_field_mutants`);
    then deep nesting. About 2,100 cases."""
    for path, mutant in _field_mutants(REPORT, 7):
        yield ".".join(map(str, path)), mutant
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    yield "deep", {**REPORT, "memory": deep}


MUTANTS = list(_report_mutants())


@pytest.mark.parametrize("shard", range(4))
def test_mutated_reports_are_compared_or_refused_never_crash(tmp_path: Path, shard: int,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from edgeconv.cli import main

    (tmp_path / "old.json").write_text(json.dumps(REPORT))
    codes: dict[int, int] = {}
    for name, mutant in MUTANTS[shard::4]:
        (tmp_path / "new.json").write_text(json.dumps(mutant))
        with deadline(CASE_SECONDS):
            code = main(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")])
        err = capsys.readouterr().err
        assert code in (0, 1, 2), (name, err)
        assert "internal error" not in err and "Traceback" not in err, name
        codes[code] = codes.get(code, 0) + 1
    assert codes.get(2, 0) > 0 and codes.get(0, 0) + codes.get(1, 0) > 0  # some refused, some compared


@pytest.mark.parametrize("depth", [63, 64, 100_000])
def test_a_deeply_nested_report_is_refused_with_its_path(tmp_path: Path, depth: int,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from edgeconv.cli import main

    text = json.dumps(REPORT)[:-1] + ', "extra": ' + "[" * depth + "]" * depth + "}"
    (tmp_path / "r.json").write_text(text)
    code = main(["diff", str(tmp_path / "r.json"), str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    if depth == 63:  # the report's own level plus 63 lists: 64 levels, at the bound
        assert code == 0, err
    else:
        assert code == 2
        assert err.startswith(f"edgeconv: error: {tmp_path / 'r.json'}: ")
        assert ("$.extra" + "[0]" * 63 + ": nested more than 64 levels deep" in err if depth == 64
                else "not an edgeconv report (maximum recursion depth exceeded" in err)


@pytest.mark.parametrize(("key", "spelled"), [("a b", "['a b']"), ("ok_key-1", ".ok_key-1"), ("1st", "['1st']")])
def test_the_path_of_a_report_nested_too_deep_spells_each_member_as_json_does(key: str, spelled: str) -> None:
    """A report from a pull request nested past the bound under a member that is no plain name: the path
    spells it quoted and the lists by index (the depth walk keeps no paths of its own; it spells the one
    too deep from the containers' parents). The console shows the path's end; the whole is this."""
    from edgeconv.schema_check import depth_problem

    report = {**REPORT, "extra": {key: json.loads("[" * 63 + "]" * 63)}}
    assert depth_problem(report) == f"$.extra{spelled}{'[0]' * 62}: nested more than 64 levels deep"
    report["extra"][key] = json.loads("[" * 62 + "]" * 62)  # the innermost list at the bound itself
    assert depth_problem(report) is None


@pytest.mark.parametrize(("model", "problem"), [
    ("batch_size: 4096", None),
    ("batch_size: 4097", "model.batch_size: must be <= 4096, got 4097"),
    ("batch_size: 99999999999999999999999999", "model.batch_size: must be <= 4096, got 99999999999999999999999999"),
    ("input_shapes: {x: [1, 2147483647]}", None),
    ("input_shapes: {x: [2, 1073741824]}", "model.input_shapes.x: [2, 1073741824] holds 2,147,483,648 values; a "
                                           "model input may hold at most 2,147,483,647"),
])
def test_sizes_that_would_only_exhaust_memory_are_refused_at_their_bound(tmp_path: Path, model: str,
                                                                         problem: str | None) -> None:
    (tmp_path / "m.keras").write_bytes(b"x")
    (tmp_path / "c.npz").write_bytes(b"x")
    (tmp_path / "p.yaml").write_text(f"version: 1\nmodel: {{path: m.keras, {model}}}\n"
                                     "calibration: {path: c.npz, samples: 4096}\n")
    if problem is None:
        load_pipeline(tmp_path / "p.yaml")
        return
    with pytest.raises(EdgeconvError) as info:
        load_pipeline(tmp_path / "p.yaml")
    assert f"{tmp_path / 'p.yaml'}:2: {problem}" in str(info.value).splitlines()


@pytest.fixture(scope="module")
def results_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real results file (edgeconv build --results-json) of two .tflite pipelines, one failing a target."""
    import shutil

    from edgeconv.cli import main

    root = tmp_path_factory.mktemp("results")
    for name in ("conv2d-relu", "sin-island"):
        shutil.copy(DATA / f"{name}.int8.tflite", root / f"{name}.tflite")
        (root / f"{name}.yaml").write_text(f"version: 1\nmodel: {{path: {name}.tflite}}\n"
                                           "targets: [generic-int8, arm-neon]\n")
    with contextlib.redirect_stdout(None), contextlib.redirect_stderr(None):
        code = main(["build", str(root / "conv2d-relu.yaml"), str(root / "sin-island.yaml"), "--no-cache", "-q",
                     "--results-json", str(root / "results.json")])
    assert code == 1
    return root / "results.json"


@pytest.mark.parametrize(("report", "shard"), [("tflite", 0), ("tflite", 1), ("digits", 0), ("digits", 1)])
def test_mutated_results_files_are_merged_or_refused_never_crash(tmp_path: Path, report: str, shard: int,
                                                                 results_file: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The results files `edgeconv summary` merges are artifacts of jobs that built a pull request: every field
    of a real one replaced by a kind of JSON value and deleted, through the merge, the JUnit and the Markdown
    summary; one of two .tflite checks (about 1,000 fields), and one holding the example's whole report (parity,
    accuracy, diagnosis; about 1,100). A target check without its target, a violation without its effect, a
    file without its shard key and an accuracy of another shape ended in exit 3."""
    from edgeconv.cli import main

    base = json.loads(results_file.read_text())
    if report == "digits":  # the first row holds the example's report (a passing build) instead
        base["results"][0].update(report_data=copy.deepcopy(REPORT), exit_code=0, verdict="pass", reasons=[])
    codes: dict[int, int] = {}
    for k, (path, mutant) in enumerate(_field_mutants(base, 11)):
        if k % 2 != shard:  # the replacements in one shard, the deletions in the other
            continue
        (tmp_path / "r.json").write_text(json.dumps(mutant))
        with deadline(CASE_SECONDS):
            code = main(["summary", str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"),
                         "--summary", str(tmp_path / "s.md")])
        err = capsys.readouterr().err
        assert code in (0, 1, 2), (path, k % 2, err)
        assert "internal error" not in err and "Traceback" not in err, (path, k % 2)
        codes[code] = codes.get(code, 0) + 1
    assert codes.get(2, 0) > 0 and codes.get(1, 0) > 0, codes  # some refused, some merged (one build fails)
