"""The GitHub Action, its install step, the example workflow and the pre-commit hook, without building."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import REPO

ACTION = yaml.safe_load((REPO / "action.yml").read_text())
WORKFLOW = yaml.safe_load((REPO / "examples" / "github-workflow.yml").read_text())
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for v in node.values() for s in strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return [node] if isinstance(node, str) else []


def test_action_metadata_follows_the_rules() -> None:
    assert {"name", "description", "runs"} <= ACTION.keys()
    assert set(ACTION) <= {"name", "author", "description", "inputs", "outputs", "runs", "branding"}
    assert ACTION["branding"]["icon"] and ACTION["branding"]["color"] in (
        "white", "black", "yellow", "blue", "green", "orange", "red", "purple", "gray-dark")
    for name, spec in ACTION["inputs"].items():
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", name), name
        assert spec["description"] and set(spec) <= {"description", "required", "default", "deprecationMessage"}
        assert isinstance(spec.get("default", ""), str), f"{name}: defaults are strings"
    runs = ACTION["runs"]
    assert runs["using"] == "composite"
    ids = {step["id"] for step in runs["steps"] if "id" in step}
    for step in runs["steps"]:
        assert ("run" in step) != ("uses" in step), step
        if "run" in step:
            assert step["shell"] == "bash", "a composite run step must name its shell"
            script = re.search(r'scripts/action/\w+\.sh', step["run"])
            assert script and (REPO / script.group(0)).is_file()
    used = {m.group(1) for s in strings(ACTION) for m in re.finditer(r"\binputs\.([A-Za-z0-9_-]+)", s)}
    assert used <= set(ACTION["inputs"]), used - set(ACTION["inputs"])
    assert used == set(ACTION["inputs"]), f"declared but never used: {set(ACTION['inputs']) - used}"
    for name, spec in ACTION["outputs"].items():
        match = re.fullmatch(r"\$\{\{ steps\.([\w-]+)\.outputs\.([\w-]+) \}\}", spec["value"])
        assert match and match.group(1) in ids, f"output {name}: {spec['value']}"
    written = set(re.findall(r'echo "([\w-]+)[=<]', (REPO / "scripts" / "action" / "build.sh").read_text()))
    assert {m.group(2) for spec in ACTION["outputs"].values()
            for m in [re.fullmatch(r"\$\{\{ steps\.([\w-]+)\.outputs\.([\w-]+) \}\}", spec["value"])] if m} <= written


def test_example_workflow_uses_the_action_as_declared() -> None:
    assert WORKFLOW[True]["pull_request"]["paths"]  # `on:` parses as True in YAML 1.1
    job = WORKFLOW["jobs"]["build"]
    assert job["strategy"]["matrix"]["pipeline"] and job["strategy"]["fail-fast"] is False
    step = next(s for s in job["steps"] if s.get("id") == "edgeconv")
    assert set(step["with"]) <= set(ACTION["inputs"])
    outputs = {m for s in strings(WORKFLOW) for m in re.findall(r"steps\.edgeconv\.outputs\.([\w-]+)", s)}
    assert outputs <= set(ACTION["outputs"])


def fake_python(tmp_path: Path) -> Path:
    log = tmp_path / "calls.txt"
    fake = tmp_path / "python"
    fake.write_text(f"#!/usr/bin/env bash\nprintf '%s\\n' \"$*\" >> {log}\n")
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize(("extras", "tf", "expected"), [
    ("tf", "", ["-I -m pip install --upgrade pip", "-I -m pip install /src/edgeconv[tf]",
                "-I -m edgeconv --version"]),
    # One pip run with the pin: one resolution, one TensorFlow download (not edgeconv[tf]'s, then the pin's).
    ("tf, onnx", "==2.21.*", ["-I -m pip install --upgrade pip",
                              "-I -m pip install /src/edgeconv[tf,onnx] tensorflow-cpu==2.21.*",
                              "-I -m edgeconv --version"]),
])
def test_install_step(tmp_path: Path, extras: str, tf: str, expected: list[str]) -> None:
    if os.uname().sysname != "Linux" or os.uname().machine != "x86_64":
        expected = [e.replace("tensorflow-cpu", "tensorflow") for e in expected]
    env = {**os.environ, "PYTHON": str(fake_python(tmp_path)), "EDGECONV_SOURCE": "/src/edgeconv",
           "INPUT_EXTRAS": extras, "INPUT_TENSORFLOW_VERSION": tf}
    subprocess.run(["bash", str(REPO / "scripts" / "action" / "install.sh")], env=env, check=True)
    assert (tmp_path / "calls.txt").read_text().splitlines() == expected


def test_pre_commit_hook_validates_every_changed_pipeline(tmp_path: Path) -> None:
    hook, config_only = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert (config_only["id"], config_only["entry"]) == ("edgeconv-validate-config", "edgeconv validate --no-files")
    assert config_only["files"] == hook["files"] and config_only["types"] == hook["types"]
    files = re.compile(hook["files"])
    assert [bool(files.search(p)) for p in (
        "pipeline.yaml", "models/kws/pipeline-int8.yml", "kws.pipeline.yaml", "pipelines/keyword-spotting.yaml",
        "ml/pipelines/person-detection.yml", "config.yaml", "pipeline.py", "pipelines/README.md",
        "pipelines/old/kws.yaml")] == [True, True, True, True, True, False, False, False, False]
    # Every pipeline the example workflow builds is one the hook checks.
    assert all(files.search(p) for p in WORKFLOW["jobs"]["build"]["strategy"]["matrix"]["pipeline"])
    bad = tmp_path / "pipeline-bad.yaml"
    bad.write_text("version: 1\nmodel: {path: m.keras}\n")
    entry = hook["entry"].split()
    assert entry[:2] == ["edgeconv", "validate"]
    done = subprocess.run([sys.executable, "-m", "edgeconv", *entry[1:], str(REPO / "pipeline.yaml"), str(bad)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stdout.startswith(f"{REPO / 'pipeline.yaml'}: valid") or "pipeline.yaml: valid" in done.stdout
    assert "pipeline-bad.yaml:2: model.path: file not found" in done.stderr


@pytest.mark.parametrize(("schema", "path"), [
    ("vendor.github-actions", "action.yml"),
    ("vendor.github-workflows", "examples/github-workflow.yml"),
    ("vendor.github-workflows", "examples/zoo-workflow.yml"),
    ("vendor.github-workflows", ".github/workflows/action-from-tag.yml"),
])
def test_action_and_workflow_follow_githubs_published_schemas(schema: str, path: str) -> None:
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(REPO / path)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_action_step_hashes_files_outside_the_workspace() -> None:
    """Used from another repository, the action's own files are outside the workspace, where
    setup-python's cache-dependency-path and hashFiles() see nothing (actions/setup-python#361)."""
    for step in ACTION["runs"]["steps"]:
        given = step.get("with", {})
        assert "cache-dependency-path" not in given, step
        assert given.get("cache") in (None, ""), step
        assert not any("hashFiles" in v and "action_path" in v for v in strings(step)), step


def test_the_workflow_publishes_the_junit() -> None:
    steps = WORKFLOW["jobs"]["build"]["steps"]
    report = next(s for s in steps if "junit" in s.get("uses", "") or "test-report" in s.get("uses", ""))
    assert "steps.edgeconv.outputs.junit" in report["with"]["report_paths"]
    assert WORKFLOW["permissions"]["checks"] == "write"


def run_build_step(tmp_path: Path, pipelines: str, args: str, **inputs: str
                   ) -> tuple[subprocess.CompletedProcess[str], list[str], dict[str, str]]:
    """build.sh with edgeconv replaced by a script that records its arguments, one per line; ``inputs``: more
    INPUT_* variables (shard="1/4" is INPUT_SHARD)."""
    record = tmp_path / "argv.txt"
    fake = tmp_path / "fake-edgeconv"
    fake.write_text(f"#!/usr/bin/env bash\nprintf '%s\\n' \"$@\" > {record}\n")
    fake.chmod(0o755)
    output = tmp_path / "github_output"
    env = {**os.environ, "EDGECONV": str(fake), "PYTHON": sys.executable, "GITHUB_OUTPUT": str(output),
           "RUNNER_TEMP": str(tmp_path), "INPUT_PIPELINES": pipelines, "INPUT_ARGS": args, "INPUT_JOBS": "2",
           **{f"INPUT_{k.upper().replace('-', '_')}": v for k, v in inputs.items()}}
    done = subprocess.run(["bash", str(REPO / "scripts" / "action" / "build.sh")], env=env, capture_output=True,
                          text=True, cwd=tmp_path)
    argv = record.read_text().splitlines() if record.exists() else []
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return done, argv, outputs


def test_build_step_splits_inputs_as_a_shell_would(tmp_path: Path) -> None:
    done, argv, outputs = run_build_step(tmp_path, "a.yaml 'my models/b.yaml'", "--out 'build/my model' -q")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "edgeconv"
    assert argv == ["build", "a.yaml", "my models/b.yaml", "--jobs", "2", "--junit", f"{out}/junit.xml",
                    "--summary", f"{out}/summary.md", "--results-json", f"{out}/results.json",
                    "--out", "build/my model", "-q"]
    assert outputs["verdict"] == "pass"


@pytest.mark.parametrize(("pipelines", "args", "message"), [
    ("a.yaml", "--out 'build/x", "edgeconv action: error: inputs.args: No closing quotation: --out 'build/x"),
    ('"a.yaml', "", "edgeconv action: error: inputs.pipelines: No closing quotation: \"a.yaml"),
])
def test_build_step_refuses_an_unbalanced_quote(tmp_path: Path, pipelines: str, args: str, message: str) -> None:
    done, argv, outputs = run_build_step(tmp_path, pipelines, args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == message
    assert argv == []  # edgeconv never ran
    assert (outputs["verdict"], outputs["exit-code"]) == ("error", "2")


def test_a_matrix_job_passes_its_shard_and_the_remote_cache(tmp_path: Path) -> None:
    done, argv, _ = run_build_step(tmp_path, "'pipelines/*.yaml'", "", shard="2/4", cache_url="s3://b/zoo")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "edgeconv"
    assert argv == ["build", "pipelines/*.yaml", "--jobs", "2", "--junit", f"{out}/junit.xml", "--summary",
                    f"{out}/summary.md", "--results-json", f"{out}/results.json", "--shard", "2/4", "--cache-dir",
                    "s3://b/zoo"]


def test_the_summarize_job_merges_the_results_it_is_given(tmp_path: Path) -> None:
    for k in (2, 1):
        (tmp_path / "results" / f"edgeconv-results-{k}").mkdir(parents=True)
        (tmp_path / "results" / f"edgeconv-results-{k}" / "results.json").write_text("{}")
    (tmp_path / "-h.json").write_text("{}")
    done, argv, outputs = run_build_step(tmp_path, "", "", mode="summarize",
                                         results="'results/*/results.json' -h.json")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "edgeconv"
    assert argv == ["summary", "--junit", f"{out}/junit.xml", "--summary", f"{out}/summary.md", "--",
                    "results/edgeconv-results-1/results.json", "results/edgeconv-results-2/results.json", "-h.json"]
    assert "results" not in outputs  # a build's results file, not the merge's


@pytest.mark.parametrize(("inputs", "message"), [
    ({"mode": "deploy $(touch pwned)"}, "edgeconv action: error: inputs.mode: expected build or summarize, got "
                                        "'deploy $(touch pwned)'"),
    ({"mode": "summarize", "results": ""}, "edgeconv action: error: inputs.results: mode summarize needs the jobs' "
                                           "results files"),
    ({"mode": "summarize", "results": "'a.json"}, "edgeconv action: error: inputs.results: No closing quotation: "
                                                  "'a.json"),
])
def test_a_bad_mode_or_results_input_runs_nothing(tmp_path: Path, inputs: dict[str, str], message: str) -> None:
    done, argv, outputs = run_build_step(tmp_path, "p.yaml", "", **inputs)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == message
    assert argv == [] and not (tmp_path / "pwned").exists()
    assert (outputs["verdict"], outputs["exit-code"]) == ("error", "2")


def test_a_hostile_shard_or_cache_url_is_one_argument_to_edgeconv(tmp_path: Path) -> None:
    """Values are never shell code: they reach edgeconv as one argument each, and edgeconv judges them."""
    _, argv, _ = run_build_step(tmp_path, "p.yaml", "", shard="1/4; touch pwned", cache_url="$(touch pwned)")
    assert argv[-4:] == ["--shard", "1/4; touch pwned", "--cache-dir", "$(touch pwned)"]
    assert not (tmp_path / "pwned").exists()


# A pull request's workspace: modules named as the standard library's that the steps' Python would import.
PLANTED = ("shlex", "json", "re", "platform", "hashlib", "sys", "os", "pip", "edgeconv")


def hostile_workspace(tmp_path: Path) -> tuple[Path, Path]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    probe = tmp_path / "probe"
    code = f"open({str(probe)!r}, 'a').write(__name__ + '\\n')\n"
    for name in PLANTED:
        (workspace / f"{name}.py").write_text(code)
    (workspace / "sitecustomize.py").write_text(code)
    return workspace, probe


def test_no_step_runs_code_from_the_workspace(tmp_path: Path) -> None:
    workspace, probe = hostile_workspace(tmp_path)
    output = tmp_path / "github_output"
    env = {**os.environ, "PYTHON": sys.executable, "GITHUB_OUTPUT": str(output), "EDGECONV_SOURCE": str(REPO),
           "RUNNER_TEMP": str(tmp_path), "INPUT_PIPELINES": "a.yaml 'b c.yaml'", "INPUT_ARGS": "-q",
           "EDGECONV": "true", "PYTHONPATH": str(workspace)}
    for script in ("pip_cache_key.sh", "build.sh"):
        done = subprocess.run(["bash", str(REPO / "scripts" / "action" / script)], env=env, cwd=workspace,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert not probe.exists(), probe.read_text()
    assert "key=edgeconv-pip-" in output.read_text()


def test_no_python_in_the_action_runs_without_isolation() -> None:
    for script in sorted((REPO / "scripts" / "action").glob("*.sh")):
        text = script.read_text()
        calls = re.findall(r'"\$PYTHON"( -I)?', text)
        assert all(calls), f"{script.name}: every \"$PYTHON\" runs with -I"
        assert not re.search(r"(^|[\s;(|&])python3?\s", text), f"{script.name}: Python only as \"$PYTHON\" -I"


@pytest.mark.parametrize(("pipelines", "same"), [("pipelines/kws.yaml", True), ("pipelines/person.yaml", False)])
def test_each_matrix_job_has_a_build_cache_key_of_its_own(tmp_path: Path, pipelines: str, same: bool) -> None:
    """The key hashes the pipelines a job builds: the jobs of a matrix no longer share one (only one saved)."""
    def key(listed: str) -> str:
        output = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
        env = {**os.environ, "GITHUB_OUTPUT": str(output), "INPUT_PIPELINES": listed, "RUNNER_OS": "Linux",
               "INPUT_PYTHON_VERSION": "3.11"}
        subprocess.run(["bash", str(REPO / "scripts" / "action" / "build_cache_key.sh")], env=env, check=True)
        (line,) = output.read_text().splitlines()
        assert re.fullmatch(r"key=edgeconv-build-Linux-3\.11-[0-9a-f]{16}", line), line
        return line

    assert (key("pipelines/kws.yaml") == key(pipelines)) is same


@pytest.mark.parametrize("path", [
    "evil\nverdict=pass\nEDGECONV_EOF\nexit-code=0", "it's/report.json", 'a"b/report.json', "$(id)/report.json",
    "tab\there/report.json", "`id`/report.json"])
def test_a_crafted_report_path_never_reaches_the_step_outputs(tmp_path: Path, path: str) -> None:
    """The report paths come from the pipelines' output.dir: a control character or a quote keeps a path
    out of $GITHUB_OUTPUT (said on stderr), and the heredoc delimiter is random each run."""
    import json

    fake = tmp_path / "fake-edgeconv"
    good = str(tmp_path / "ok" / "report.json")
    results = json.dumps({"format": 2, "results": [{"report": path}, {"report": good}, {"report": None}]})
    fake.write_text(f"#!/usr/bin/env bash\nwhile [[ $# -gt 0 ]]; do [[ $1 == --results-json ]] && "
                    f"printf '%s' {shlex.quote(results)} > \"$2\"; shift; done\nexit 1\n")
    fake.chmod(0o755)
    output = tmp_path / "github_output"
    env = {**os.environ, "EDGECONV": str(fake), "PYTHON": sys.executable, "GITHUB_OUTPUT": str(output),
           "RUNNER_TEMP": str(tmp_path), "INPUT_PIPELINES": "p.yaml"}
    done = subprocess.run(["bash", str(REPO / "scripts" / "action" / "build.sh")], env=env, capture_output=True,
                          text=True)
    assert done.returncode == 1
    lines = output.read_text().splitlines()
    assert lines[:4] == ["verdict=fail", "exit-code=1", f"junit={tmp_path}/edgeconv/junit.xml",
                         f"summary={tmp_path}/edgeconv/summary.md"]
    delimiter = lines[4].removeprefix("reports<<")
    assert re.fullmatch(r"EDGECONV_[0-9a-f]{32}", delimiter)
    assert lines[5:] == [good, delimiter, f"results={tmp_path}/edgeconv/results.json"]
    assert f"edgeconv action: warning: report path {path!r} left out of the outputs" in done.stderr


@pytest.mark.parametrize("path", ["action.yml", "examples/github-workflow.yml", "examples/zoo-workflow.yml",
                                  ".github/workflows/action-from-tag.yml"])
def test_no_expression_is_expanded_inside_a_run_script(path: str) -> None:
    """A value expanded into run: is shell code; values reach scripts through env:."""
    document = yaml.safe_load((REPO / path).read_text())
    steps = document["runs"]["steps"] if "runs" in document else [
        s for job in document["jobs"].values() for s in job["steps"]]
    assert all("${{" not in step.get("run", "") for step in steps)


def test_a_hostile_pipelines_input_is_only_hashed_into_the_build_cache_key(tmp_path: Path) -> None:
    """The pipelines input comes from the workflow (a pull request can change it): command substitution, a
    newline and a forged output line are hashed, never run or written to $GITHUB_OUTPUT."""
    output = tmp_path / "out"
    hostile = '$(touch pwned)\n`touch pwned2`\nkey=evil"; touch pwned3'
    env = {**os.environ, "GITHUB_OUTPUT": str(output), "INPUT_PIPELINES": hostile, "RUNNER_OS": "Linux",
           "INPUT_PYTHON_VERSION": "3.11"}
    subprocess.run(["bash", str(REPO / "scripts" / "action" / "build_cache_key.sh")], env=env, check=True,
                   cwd=tmp_path)
    (line,) = output.read_text().splitlines()
    assert re.fullmatch(r"key=edgeconv-build-Linux-3\.11-[0-9a-f]{16}", line), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# -- a pull request from a fork: a read-only token ----------------------------------------------------------

def _evaluate(condition: str, context: dict[str, str], failed: bool) -> bool:
    """The `if:` expressions the example workflow uses: `always()`, `success()` by default, and `&&` of
    comparisons of context values and string literals (GitHub's expression syntax, the part used here)."""
    if not condition.strip():
        return not failed  # success(), GitHub's default
    result = True
    has_status = False
    for term in (t.strip() for t in condition.split("&&")):
        if term == "always()":
            has_status = True
            continue
        found = re.fullmatch(r"(\S+) (==|!=) (\S+)", term)
        assert found, f"an expression this evaluator does not know: {term}"

        def value(token: str) -> str:
            return token[1:-1] if token.startswith("'") else context[token]

        same = value(found[1]) == value(found[3])
        result = result and (same if found[2] == "==" else not same)
    return result and (has_status or not failed)


@pytest.mark.parametrize(("fork", "failed"), [(True, True), (True, False), (False, True), (False, False)])
def test_a_fork_pull_request_gets_a_notice_instead_of_the_comment_and_the_check_run(tmp_path: Path, fork: bool,
                                                                                     failed: bool) -> None:
    """As GitHub runs the example workflow for a pull request from a fork (a read-only token: a comment or a
    check run would fail the job) and from the repository itself, when the build failed and when it passed."""
    context = {"github.repository": "acme/models",
               "github.event.pull_request.head.repo.full_name": "stranger/models" if fork else "acme/models",
               "steps.edgeconv.outputs.summary": "/tmp/edgeconv/summary.md",
               "steps.edgeconv.outputs.junit": "/tmp/edgeconv/junit.xml"}
    steps = WORKFLOW["jobs"]["build"]["steps"]
    after = steps[next(i for i, s in enumerate(steps) if s.get("id") == "edgeconv") + 1:]
    ran = {s["name"] for s in after if _evaluate(s.get("if", ""), context, failed)}
    writes = {"Comment on the pull request", "Test report"}  # the steps that need a token that can write
    assert ("Pull request from a fork" in ran) is fork
    assert (writes & ran) == (set() if fork else writes)
    assert "Upload the build" in ran  # the artifacts either way
    notice = next(s for s in after if s["name"] == "Pull request from a fork")
    done = subprocess.run(["bash", "-c", notice["run"]], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("::notice title=edgeconv::a pull request from a fork")
