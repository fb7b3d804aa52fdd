"""A zoo as a CI matrix (issue 35): `build --shard K/N` and `edgeconv summary RESULTS...`. The shards cover
the zoo once and stay put as pipelines are added; the merged verdict equals one build of every pipeline
(exit code, Markdown summary, JUnit); and the merge refuses what would hide a failure. The zoo here is
.tflite pipelines (checked, not converted: no TensorFlow)."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from edgeconv import shards
from edgeconv.cli import main
from edgeconv.shards import Shard, identity, parse_shard, select, shard_of

from ..conftest import REPO, tree

MODELS = ("conv2d-relu", "softmax-dense", "add-uint8io", "sin-island", "dense-dynamic")  # sin-island fails


@pytest.fixture
def zoo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Five pipelines in pipelines/ of a project (the working directory), one of them failing."""
    for name in MODELS:
        shutil.copy(REPO / "tests" / "data" / f"{name}.int8.tflite", tmp_path / f"{name}.tflite")
        (tmp_path / "pipelines").mkdir(exist_ok=True)
        (tmp_path / "pipelines" / f"{name}.yaml").write_text(
            f"version: 1\nmodel: {{path: ../{name}.tflite}}\ntargets: [generic-int8, edgetpu]\n"
            f"output: {{dir: ../out/{name}}}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("text", "found"), [("1/1", Shard(1, 1)), ("4/4", Shard(4, 4)), (" 2/4 ", Shard(2, 4)),
                                             ("10000/10000", Shard(10000, 10000))])
def test_a_shard_is_k_of_n(text: str, found: Shard) -> None:
    assert parse_shard(text) == found


@pytest.mark.parametrize(("text", "message"), [
    ("0/4", "--shard 0/4: the shard must be 1 to 4, got 0"),
    ("5/4", "--shard 5/4: the shard must be 1 to 4, got 5"),
    ("1/0", "--shard 1/0: the number of shards must be 1 to 10000, got 0"),
    ("1/10001", "--shard 1/10001: the number of shards must be 1 to 10000, got 10001"),
    ("2", "--shard: expected K/N (this job's shard and the number of shards, e.g. 2/4), got '2'"),
    ("1/4/2", "--shard: expected K/N (this job's shard and the number of shards, e.g. 2/4), got '1/4/2'"),
    ("-1/4", "--shard: expected K/N (this job's shard and the number of shards, e.g. 2/4), got '-1/4'"),
])
def test_a_bad_shard_is_refused_before_any_build(zoo: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                 message: str) -> None:
    before = tree(zoo)
    assert main(["build", "pipelines/*.yaml", f"--shard={text}", "--results-json", "r.json"]) == 2
    assert capsys.readouterr().err == f"edgeconv: error: {message}\n"
    assert tree(zoo) == before


def test_shards_cover_the_zoo_once_and_stay_put_as_it_grows() -> None:
    zoo = [Path(f"pipelines/model-{i:03d}.yaml") for i in range(100)]
    parts = [select(zoo, Shard(k, 4)) for k in range(1, 5)]
    assert sorted(p for part in parts for p in part) == sorted(zoo)
    assert [len(part) for part in parts] == [25, 27, 22, 26]  # sha256 of the path, modulo 4
    grown = zoo + [Path(f"pipelines/new-{i:03d}.yaml") for i in range(50)]
    assert all(shard_of(p, 4) == next(k for k in range(1, 5) if p in parts[k - 1]) for p in zoo)
    assert [p for p in grown if p in zoo and p not in select(grown, Shard(shard_of(p, 4), 4))] == []
    assert sum(shard_of(p, 4) != shard_of(p, 5) for p in zoo) > 50  # N changed: most move


def test_a_pipeline_is_the_same_however_its_path_is_written(zoo: Path) -> None:
    written = [Path("pipelines/a.yaml"), Path("./pipelines/a.yaml"), Path("pipelines/../pipelines/a.yaml"),
               zoo / "pipelines" / "a.yaml"]
    assert {identity(p) for p in written} == {"pipelines/a.yaml"}
    assert len({shard_of(p, 7) for p in written}) == 1


def _junit(path: Path) -> str:
    return re.sub(r' time="[0-9.]+"', "", path.read_text())


def test_the_shards_merged_are_one_build_of_the_zoo(zoo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "pipelines/*.yaml", "--no-cache", "--summary", "all.md", "--junit", "all.xml"]) == 1
    capsys.readouterr()
    codes = [main(["build", "pipelines/*.yaml", "--no-cache", "--shard", f"{k}/3", "--results-json", f"r{k}.json"])
             for k in (1, 2, 3)]
    said = capsys.readouterr().err
    assert [f"edgeconv: shard {k}/3: {n} of 5 pipelines" for k, n in ((1, 3), (2, 2), (3, 0))] == [
        line for line in said.splitlines() if line.startswith("edgeconv: shard")]
    assert codes == [0, 1, 0]  # shard 3 is empty: built nothing, passes, and says so in its results
    empty = json.loads((zoo / "r3.json").read_text())
    assert (empty["shard"], empty["results"], len(empty["pipelines"])) == ({"index": 3, "count": 3}, [], 5)
    assert main(["summary", "r3.json", "r1.json", "r2.json", "--summary", "merged.md", "--junit", "merged.xml"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "5 pipelines from 3 shards of 3; 0 served from the cache"
    assert "3 unsupported op(s): DEQUANTIZE x1, QUANTIZE x1, SIN x1" in out
    assert (zoo / "merged.md").read_text() == (zoo / "all.md").read_text()
    assert _junit(zoo / "merged.xml") == _junit(zoo / "all.xml")


def test_the_step_summary_of_the_merge_is_appended(zoo: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "pipelines/conv2d-relu.yaml", "--no-cache", "--shard", "1/1", "--results-json",
                 "r.json"]) == 0
    (zoo / "step.md").write_text("before\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(zoo / "step.md"))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert main(["summary", "r.json"]) == 0
    step = (zoo / "step.md").read_text()
    assert step.startswith("before\n## edgeconv: PASS\n") and "| `pipelines/conv2d-relu.yaml` | **pass** |" in step


@pytest.fixture
def sharded(zoo: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The zoo built as 3 shards, results in r1.json .. r3.json."""
    for k in (1, 2, 3):
        main(["build", "pipelines/*.yaml", "--no-cache", "--shard", f"{k}/3", "--results-json", f"r{k}.json"])
    capsys.readouterr()
    return zoo


def _edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _move_row(data: dict[str, Any]) -> None:
    data["results"].append(data["results"].pop(0))


@pytest.mark.parametrize(("files", "edit", "message"), [
    (["r1.json", "r2.json"], None,
     "shard 3/3 has no results: the job did not finish or its results file was not given; no verdict without every "
     "shard"),
    (["r1.json"], None, "shards 2/3, 3/3 have no results: the job did not finish or its results file was not given; "
                        "no verdict without every shard"),
    (["r1.json", "r2.json", "r3.json", "r2.json"], None, "shard 2/3 is given twice: r2.json and r2.json"),
    (["r1.json", "r2.json", "r3.json"], ("r3.json", lambda d: d["shard"].update(count=4)),
     "the results mix shard counts: 3, 4"),
    (["r1.json", "r2.json", "r3.json"], ("r3.json", lambda d: d["pipelines"].pop()),
     "the jobs were given different pipelines: r1.json: 5; r2.json: 5; r3.json: 4 (every job of the matrix gets the "
     "whole list; --shard picks its part)"),
    (["r1.json", "r2.json", "r3.json"], ("r1.json", lambda d: d["results"].pop()),
     "1 pipeline(s) of the zoo have no result: pipelines/softmax-dense.yaml"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d["results"].__setitem__(
        1, {**d["results"][1], "exit_code": 0, "verdict": "pass"})),
     "r2.json: pipelines/sin-island.yaml: exit_code 0 is not its report's verdict (fail); the results were changed "
     "after the build"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d["results"][1].update(report_data=None)),
     "r2.json: pipelines/sin-island.yaml: exit_code 1 without its report"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d["results"][1]["report_data"]["gate"].update(
        verdict="pass")),
     "r2.json: pipelines/sin-island.yaml: its report's verdict (pass) is not its checks' (a check fails only in a "
     "failing build); the results were changed after the build"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: (d["results"][1]["report_data"]["gate"].update(
        verdict="pass"), d["results"][1].update(exit_code=0))),
     "r2.json: pipelines/sin-island.yaml: its report's verdict (pass) is not its checks' (a check fails only in a "
     "failing build); the results were changed after the build"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d["results"][1].update(exit_code=7)),
     "r2.json: pipelines/sin-island.yaml: exit_code 7 is not an exit code of edgeconv build"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d["results"][0].update(exit_code=True)),
     "r2.json: pipelines/add-uint8io.yaml: exit_code is True"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d["results"].append(d["results"][0])),
     "pipelines/add-uint8io.yaml is built twice: in r2.json and r2.json"),
    (["r1.json", "r2.json", "r3.json"], ("r3.json", lambda d: d["results"].append({
        **json.loads(Path("r2.json").read_text())["results"][0]})),
     "pipelines/add-uint8io.yaml is built twice: in r2.json and r3.json"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d["results"][0].update(pipeline="pipelines/x.yaml")),
     "r2.json: pipelines/x.yaml is not one of the pipelines the jobs were given"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d["shard"].update(index=3)),
     "shard 3/3 is given twice: r2.json and r3.json"),
    (["r1.json", "r2.json"], ("r2.json", lambda d: d["shard"].update(index=3)),
     "shard 2/3 has no results: the job did not finish or its results file was not given; no verdict without every "
     "shard"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d.update(shard={"index": 0, "count": 3})),
     "r2.json: shard is {'index': 0, 'count': 3}"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d.pop("shard")),
     "r2.json: shard is missing (null for a build of every pipeline)"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d["results"][1]["report_data"]["targets"][0]["ops"][
        1]["violations"][0].pop("effect")),  # what JUnit lists for each op a target fails
     "r2.json: pipelines/sin-island.yaml: not a valid edgeconv report: $.targets[0].ops[1].violations[0]: missing "
     "'effect'"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d.update(format=1)),
     "r2.json: not an edgeconv results file of format 2 (written by edgeconv build --results-json of this release)"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d.update(pipelines="all")),
     "r2.json: pipelines is not a list of paths"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d["results"][0].update(pipeline="a`b\n| x |")),
     "r2.json: pipeline is 'a`b\\n| x |'"),
    (["r1.json", "r2.json", "r3.json"], ("r2.json", lambda d: d["results"][0].update(output_dir="out\n## PASS")),
     "r2.json: pipelines/add-uint8io.yaml: output_dir is 'out\\n## PASS'"),
])
def test_a_merge_that_would_hide_a_failure_is_refused_and_writes_nothing(
        sharded: Path, capsys: pytest.CaptureFixture[str], files: list[str], edit: Any, message: str) -> None:
    if edit is not None:
        _edit(sharded / edit[0], edit[1])
    before = tree(sharded)
    code = main(["summary", *files, "--summary", "merged.md", "--junit", "merged.xml"])
    assert code == 2
    assert message in capsys.readouterr().err
    assert tree(sharded) == before


def test_summary_without_results_files_is_a_usage_error(zoo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["summary"])
    assert ended.value.code == 2
    assert capsys.readouterr().err.endswith("edgeconv summary: error: the following arguments are required: RESULTS\n")


def test_a_moved_result_is_refused(sharded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A result listed under another shard's file than its own (files swapped or edited)."""
    one, two = (json.loads((sharded / f"r{k}.json").read_text()) for k in (1, 2))
    two["results"].append(one["results"].pop(0))
    (sharded / "r1.json").write_text(json.dumps(one))
    (sharded / "r2.json").write_text(json.dumps(two))
    assert main(["summary", "r1.json", "r2.json", "r3.json"]) == 2
    assert capsys.readouterr().err == ("edgeconv: error: r2.json: pipelines/conv2d-relu.yaml belongs to shard 1/3, "
                                       "not 2/3\n")


@pytest.mark.parametrize(("content", "message"), [
    (b"", "r.json: not an edgeconv results file (Expecting value: line 1 column 1 (char 0))"),
    (b"[]", "r.json: not an edgeconv results file of format 2"),
    (b"[" * 100_000, "r.json: not an edgeconv results file ("),
    (b"\xff", "r.json: not an edgeconv results file ("),
])
def test_a_results_file_that_is_not_one_is_a_clear_error(zoo: Path, capsys: pytest.CaptureFixture[str],
                                                          content: bytes, message: str) -> None:
    (zoo / "r.json").write_bytes(content)
    assert main(["summary", "r.json"]) == 2
    assert capsys.readouterr().err.startswith(f"edgeconv: error: {message}")


@pytest.mark.parametrize(("over", "ok"), [(0, True), (1, False)])
def test_a_results_file_may_be_up_to_its_limit(sharded: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], over: int, ok: bool) -> None:
    sizes = [(sharded / f"r{k}.json").stat().st_size for k in (1, 2, 3)]
    monkeypatch.setattr(shards, "MAX_RESULTS_BYTES", max(sizes) - over)
    assert main(["summary", "r1.json", "r2.json", "r3.json"]) == (1 if ok else 2)
    if not ok:
        assert capsys.readouterr().err.endswith(
            f"bytes; a results file (edgeconv build --results-json) may have at most {max(sizes) - 1:,}\n")


def test_unsharded_results_merge_alone(zoo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "pipelines/*.yaml", "--no-cache", "--results-json", "all.json"]) == 1
    assert main(["summary", "all.json"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "5 pipelines from 1 job; 0 served from the cache"
    assert main(["summary", "all.json", "all.json"]) == 2
    assert capsys.readouterr().err == ("edgeconv: error: 2 results files of unsharded builds: merge the shards of one "
                                       "matrix\n")


def test_the_regressions_against_the_baseline_come_first(zoo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A zoo built against last release's report: what got worse leads the merged summary and the table."""
    assert main(["build", "pipelines/conv2d-relu.yaml", "--no-cache", "--out", "base"]) == 0
    with (zoo / "pipelines" / "sin-island.yaml").open("a") as f:
        f.write("gates: {max_size_growth: 0.1}\n")
    for k in (1, 2, 3):
        main(["build", "pipelines/*.yaml", "--no-cache", "--baseline", "base", "--shard", f"{k}/3", "--results-json",
              f"r{k}.json"])
    capsys.readouterr()
    assert main(["summary", "r1.json", "r2.json", "r3.json", "--summary", "merged.md"]) == 1
    grew = ("model size grew +344 bytes (+30.7%: 1,120 -> 1,464) > max_size_growth 10.0%")
    assert (zoo / "merged.md").read_text().startswith(
        "## edgeconv: FAIL\n\n### Regressions against the baseline\n\n"
        f"- `pipelines/sin-island.yaml` (sin-island): {grew}\n\n| pipeline |")
    out = capsys.readouterr().out
    assert out.index("Regressions against the baseline") < out.index("Why")


def test_a_target_check_without_its_target_is_named_by_its_id(sharded: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`target` is optional in a check (only target checks carry it): one left out crashed the JUnit writer."""
    def drop(d: dict[str, Any]) -> None:
        for c in d["results"][1]["report_data"]["gate"]["checks"]:
            c.pop("target", None)

    _edit(sharded / "r2.json", drop)
    assert main(["summary", "r1.json", "r2.json", "r3.json", "--junit", "merged.xml"]) == 1
    capsys.readouterr()
    names = [case.get("name") for case in ET.parse(sharded / "merged.xml").iter("testcase")]
    assert "target.generic-int8" in names and "target generic-int8" in names  # this pipeline's, and the others'
