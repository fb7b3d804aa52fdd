"""The GitHub Action as another repository uses it (issue 18): the composite action's steps run the way
the runner runs them. The action's checkout lies outside the workspace (GITHUB_ACTION_PATH), the
workspace is a fresh repository holding only pipelines, a model and its data, inputs arrive as the
expressions of action.yml expand them, and each step gets its own GITHUB_OUTPUT file; GITHUB_STEP_SUMMARY
is shared. The `uses:` steps (setup-python, actions/cache) are GitHub's own; in their place the test
gives the steps a fresh Python environment, and the install step really installs edgeconv into it from
the action's checkout. The pre-commit hook runs through `pre-commit try-repo` on a scratch repository."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import REPO, S3Server, tree

pytestmark = pytest.mark.tf

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def parse_output_file(path: Path) -> dict[str, str]:
    """GITHUB_OUTPUT's two forms: ``name=value`` and ``name<<DELIMITER`` ... ``DELIMITER``."""
    out: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        name, value = line.split("=", 1)
        out[name] = value
        i += 1
    return out


class Runner:
    """Runs action.yml's composite steps as GitHub's runner does, for the expressions action.yml uses."""

    def __init__(self, action_path: Path, workspace: Path, temp: Path, python_bin: Path) -> None:
        self.action_path, self.workspace, self.temp = action_path, workspace, temp
        self.action = yaml.safe_load((action_path / "action.yml").read_text())
        self.summary = temp / "step_summary.md"
        self.env = {**os.environ, "PATH": f"{python_bin}{os.pathsep}{os.environ['PATH']}", "CI": "true",
                    "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(workspace),
                    "GITHUB_ACTION_PATH": str(action_path),
                    "GITHUB_STEP_SUMMARY": str(self.summary), "RUNNER_TEMP": str(temp), "RUNNER_OS": "Linux",
                    "GITHUB_SHA": "0" * 40}
        for name in ("VIRTUAL_ENV", "PYTHONPATH", "EDGECONV_NO_CACHE"):
            self.env.pop(name, None)
        self.steps: dict[str, dict[str, str]] = {}

    def expand(self, text: str, inputs: dict[str, str]) -> str:
        def value(match: re.Match[str]) -> str:
            expr = match.group(1)
            if expr.startswith("inputs."):
                return inputs[expr.removeprefix("inputs.")]
            if expr == "github.action_path":
                return str(self.action_path)
            if expr == "github.sha":
                return "0" * 40
            if expr == "runner.temp":
                return str(self.temp)
            if expr == "runner.os":
                return "Linux"
            found = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expr)
            if found:
                return self.steps.get(found[1], {}).get(found[2], "")
            raise AssertionError(f"action.yml uses an expression this runner does not know: {expr}")
        return EXPRESSION.sub(value, text)

    def run(self, given: dict[str, str], skip: tuple[str, ...] = ()) -> tuple[int, str, str]:
        """The steps with the inputs ``given``; ``skip``: steps (by name) a job of the same runner already ran."""
        inputs = {name: spec.get("default", "") for name, spec in self.action["inputs"].items()}
        assert set(given) <= set(inputs), set(given) - set(inputs)
        inputs.update(given)
        out, err = [], []
        failed = 0  # after a failing step only `always()` steps run, and the run ends with the first failure
        for n, step in enumerate(self.action["runs"]["steps"]):
            if "uses" in step:  # GitHub's own actions; their inputs must still expand
                for value in step.get("with", {}).values():
                    self.expand(str(value), inputs)
                continue
            if step.get("name") in skip:
                continue
            condition = step.get("if", "")
            always = condition.startswith("always() && ")
            if failed and not always:
                continue
            if condition and not self._condition(condition.removeprefix("always() && "), inputs):
                continue
            output = self.temp / f"output-{n}"
            env = {**self.env, "GITHUB_OUTPUT": str(output),
                   **{k: self.expand(str(v), inputs) for k, v in step.get("env", {}).items()}}
            script = self.temp / f"step-{n}.sh"
            script.write_text(self.expand(step["run"], inputs))
            done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                                  cwd=self.workspace, env=env, capture_output=True, text=True, timeout=900)
            out.append(done.stdout)
            err.append(done.stderr)
            if "id" in step:
                self.steps[step["id"]] = parse_output_file(output)
            if done.returncode != 0 and not failed:
                failed = done.returncode
        return failed, "".join(out), "".join(err)

    def _condition(self, text: str, inputs: dict[str, str]) -> bool:
        """``inputs.NAME == 'VALUE'`` and ``!=``, joined by ``&&``."""
        held = True
        for part in text.split("&&"):
            found = re.fullmatch(r"inputs\.([\w-]+) (==|!=) '(.*)'", part.strip())
            assert found, f"unknown condition {text}"
            held = held and (inputs[found[1]] == found[3]) == (found[2] == "==")
        return held


@pytest.fixture(scope="module")
def consumer(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("consumer")
    # The action's checkout, as `uses: OWNER/edgeconv@v1` fetches it: the repository, outside the workspace.
    action_path = root / "_actions" / "edgeconv" / "v1"
    shutil.copytree(REPO, action_path, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".mypy_cache", ".pytest_cache"))
    workspace = root / "work" / "models-repo"
    (workspace / "models").mkdir(parents=True)
    shutil.copytree(REPO / "examples" / "digits", workspace / "models" / "digits")
    (workspace / "pipelines").mkdir()
    base = textwrap.dedent("""\
        version: 1
        name: {name}
        model: {{path: ../models/digits/model.keras}}
        calibration: {{source: npz, path: ../models/digits/calibration.npz, samples: 100}}
        evaluation: {{path: ../models/digits/eval.npz, labels: label}}
        targets: [generic-int8, tflm-cmsis-nn]
        output: {{dir: ../build/{name}}}
        """)
    (workspace / "pipelines" / "digits.yaml").write_text(base.format(name="digits"))
    # The digits model's RESHAPE runs on TFLM's reference kernel: a cpu_fallback this gate refuses.
    (workspace / "pipelines" / "digits strict.yaml").write_text(
        base.format(name="digits-strict") + "gates:\n  max_cpu_fallback_ops: {tflm-cmsis-nn: 0}\n")
    # A hostile pull request: modules named as the standard library's and edgeconv's dependencies, which
    # any Python run with the workspace on its path would import. None may run (the probe stays absent).
    probe = root / "probe"
    for name in ("json", "shlex", "re", "platform", "hashlib", "numpy", "yaml", "sitecustomize", "typing"):
        (workspace / f"{name}.py").write_text(f"open({str(probe)!r}, 'a').write(__name__ + '\\n')\n")
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    # setup-python's part: a Python environment of the runner's own, where the install step installs.
    # It sees the packages this test environment has, so pip downloads only what is missing.
    venv = root / "python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (next((venv / "lib").glob("python3*")) / "site-packages" / "test-environment.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n")
    temp = root / "runner-temp"
    temp.mkdir()
    before = tree(action_path)
    runner = Runner(action_path, workspace, temp, venv / "bin")
    code, out, err = runner.run({"pipelines": 'pipelines/digits.yaml "pipelines/digits strict.yaml"',
                                 "args": "--no-cache"})
    return {"runner": runner, "code": code, "out": out, "err": err, "workspace": workspace, "venv": venv,
            "action_path": action_path, "before": before, "probe": probe}


def test_no_step_ran_code_from_the_hostile_workspace(consumer: dict[str, Any]) -> None:
    assert not consumer["probe"].exists(), consumer["probe"].read_text()


def test_the_action_installs_edgeconv_from_its_own_checkout(consumer: dict[str, Any]) -> None:
    venv: Path = consumer["venv"]
    done = subprocess.run([str(venv / "bin" / "python"), "-c", "import edgeconv; print(edgeconv.__file__)"],
                          capture_output=True, text=True, check=True, cwd=venv)
    assert Path(done.stdout.strip()).is_relative_to(venv), done.stdout  # installed there, not the test's copy
    assert "edgeconv " in consumer["out"]  # the install step's `edgeconv --version`
    assert consumer["runner"].steps["pip-cache"]["key"].startswith("edgeconv-pip-Linux-")


def test_a_failing_pipeline_fails_the_step_with_every_output_agreeing(consumer: dict[str, Any]) -> None:
    runner: Runner = consumer["runner"]
    assert consumer["code"] == 1, consumer["err"][-3000:]
    outputs = runner.steps["build"]
    assert (outputs["verdict"], outputs["exit-code"]) == ("fail", "1")
    workspace: Path = consumer["workspace"]
    assert outputs["reports"].splitlines() == [str(workspace / "build" / "digits" / "report.json"),
                                               str(workspace / "build" / "digits-strict" / "report.json")]
    assert all(Path(r).is_file() for r in outputs["reports"].splitlines())
    junit = ET.parse(outputs["junit"]).getroot()
    assert (junit.get("failures"), junit.get("errors")) == ("1", "0")
    (failure,) = junit.iter("failure")
    assert failure.get("message") == ("target tflm-cmsis-nn: 1 op(s) fall back to the CPU, more than "
                                      "gates.max_cpu_fallback_ops.tflm-cmsis-nn = 0")
    assert "INFO: Created TensorFlow Lite XNNPACK delegate" not in consumer["err"]  # LiteRT's chatter stays out
    # The failing build ended the job, but the build cache was still pruned before its save.
    assert re.search(r"\ncache \S+edgeconv-cache: removed 0 entries not used for 30d \(0\.0 MiB\); kept 0 ",
                     consumer["out"]), consumer["out"][-2000:]
    annotations = [line for line in consumer["out"].splitlines() if line.startswith("::error")]
    assert len(annotations) == 1
    assert annotations[0].startswith("::error file=pipelines/digits strict.yaml,title=edgeconv gate (digits-strict)::")
    summary = runner.summary.read_text()
    assert summary.startswith("## edgeconv: FAIL")
    assert Path(outputs["summary"]).read_text() in summary
    assert "<details open><summary>pipelines/digits strict.yaml (digits-strict): " in summary
    assert "1 failed (JUnit)</summary>" in summary
    assert "<details><summary>pipelines/digits.yaml (digits): " in summary and "0 failed (JUnit)" in summary


def test_the_action_writes_nothing_into_its_own_checkout(consumer: dict[str, Any]) -> None:
    """Only pip's own build folders (pip builds a source folder in place); the builds go to the workspace."""
    def ours(files: dict[str, bytes]) -> dict[str, bytes]:
        return {k: v for k, v in files.items() if not k.startswith("build/") and ".egg-info/" not in k}

    assert ours(tree(consumer["action_path"])) == ours(consumer["before"])
    assert sorted(p.name for p in consumer["workspace"].iterdir() if p.suffix != ".py") == [
        ".git", "build", "models", "pipelines"]


def test_the_zoo_workflow_shares_one_cache_and_gives_one_verdict(consumer: dict[str, Any], s3_server: S3Server,
                                                                 tmp_path: Path) -> None:
    """examples/zoo-workflow.yml as GitHub runs it: a matrix of 2 shard jobs on fresh runners building into one
    S3 cache (moto's), each job's results handed to the summarize job as artifacts; then the same matrix on
    fresh runners again, every pipeline served from the bucket, and the same verdict."""
    workflow = yaml.safe_load((REPO / "examples" / "zoo-workflow.yml").read_text())
    build_with = next(s for s in workflow["jobs"]["build"]["steps"] if s.get("id") == "edgeconv")["with"]
    verdict_with = next(s for s in workflow["jobs"]["verdict"]["steps"] if "with" in s and "mode" in s["with"])["with"]
    workspace = tmp_path / "work"
    shutil.copytree(consumer["workspace"], workspace, ignore=shutil.ignore_patterns("build"))
    url = f"s3://{s3_server.bucket('zoo-workflow')}/zoo"
    installed = ("Install edgeconv",)  # this runner's Python has it (the consumer fixture's install step)

    def runner(name: str) -> Runner:
        temp = tmp_path / name
        temp.mkdir()
        job = Runner(consumer["action_path"], workspace, temp, consumer["venv"] / "bin")
        job.env.update({**s3_server.env("writer"), "XDG_CACHE_HOME": str(temp / "home-cache")})
        return job

    def matrix(run: str) -> tuple[list[int], int, Runner]:
        shutil.rmtree(workspace / "results", ignore_errors=True)
        shutil.rmtree(workspace / "build", ignore_errors=True)
        codes = []
        for k in (1, 2):
            job = runner(f"{run}-shard{k}")
            inputs = {**{n: str(v) for n, v in build_with.items() if n not in ("tensorflow-version",)},
                      "shard": f"{k}/2", "cache-url": url, "extras": "tf"}
            code, _, err = job.run(inputs, skip=installed)
            codes.append(code)
            assert "build" in job.steps, err[-3000:]
            artifact = workspace / "results" / f"edgeconv-results-{k}"  # actions/download-artifact's layout
            artifact.mkdir(parents=True)
            shutil.copy(job.steps["build"]["results"], artifact / "results.json")
        final = runner(f"{run}-verdict")
        code, _, err = final.run({n: str(v) for n, v in verdict_with.items()}, skip=installed)
        assert final.steps["build"]["verdict"] == "fail", err[-3000:]
        return codes, code, final

    codes, code, final = matrix("cold")
    assert code == 1 and sorted(codes) == [0, 1]  # digits strict fails in its shard, and in the verdict
    summary = Path(final.steps["build"]["summary"]).read_text()
    assert "| `pipelines/digits.yaml` | **pass** |" in summary
    assert "| `pipelines/digits strict.yaml` | **fail** |" in summary
    junit = ET.parse(final.steps["build"]["junit"]).getroot()
    assert (junit.get("failures"), junit.get("errors"), len(list(junit.iter("testsuite")))) == ("1", "0", 2)

    codes, code, final = matrix("warm")  # fresh runners: empty local caches, the bucket only
    assert code == 1 and sorted(codes) == [0, 1]
    warm = Path(final.steps["build"]["summary"]).read_text()
    assert "| **pass** (cached) |" in warm and "| **fail** (cached) |" in warm
    assert warm.replace(" (cached)", "") == summary


def test_pre_commit_try_repo_checks_every_pipeline_layout(tmp_path: Path) -> None:
    """The hook as a user's repository runs it, on the layouts the README and the example workflow use."""
    repo = tmp_path / "scratch"
    (repo / "pipelines").mkdir(parents=True)
    (repo / "models" / "kws").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "digits" / "model.keras", repo / "model.keras")
    shutil.copy(REPO / "examples" / "digits" / "calibration.npz", repo / "cal.npz")
    (repo / "pipeline.yaml").write_text("version: 1\nmodel: {path: model.keras}\ncalibration: {path: cal.npz}\n")
    (repo / "pipelines" / "keyword-spotting.yaml").write_text("version: 1\nmodel: {path: ../kws.keras}\n")
    (repo / "models" / "kws" / "pipeline-int8.yml").write_text("version: 1\nmodel: {path: ../../model.keras}\n"
                                                                "quantization: {mode: int7}\n")
    (repo / "config.yaml").write_text("not: a pipeline\n")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    hook_repo = tmp_path / "hook-repo"  # a committed copy: try-repo reads the hook definition from git
    shutil.copytree(REPO, hook_repo, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".mypy_cache", ".pytest_cache", "tests", "examples"))
    subprocess.run(["git", "init", "-q"], cwd=hook_repo, check=True)
    subprocess.run(["git", "add", "."], cwd=hook_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "hook"], cwd=hook_repo, check=True, env=env)
    done = subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo), "edgeconv-validate",
                           "--all-files", "--verbose"], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=900)
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "pipeline.yaml: valid" in text
    assert "pipelines/keyword-spotting.yaml:2: model.path: file not found" in text
    assert "models/kws/pipeline-int8.yml:3: quantization.mode: " in text
    assert "config.yaml:" not in text  # not a pipeline: the hook is not given it
    # The config-only hook, for models and data that come from DVC, LFS or a bucket: absent files are no error,
    # everything else still is.
    (repo / "pipelines" / "from-dvc.yaml").write_text("version: 1\nmodel: {path: ../dvc/kws.keras}\n"
                                                      "calibration: {path: ../dvc/calib.npz}\ntargets: [arm-neon]\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    done = subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo),
                           "edgeconv-validate-config", "--all-files", "--verbose"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900)
    text = done.stdout + done.stderr
    assert done.returncode == 1, text  # the keys that are wrong are still wrong
    assert ("pipelines/from-dvc.yaml: valid (model dvc/kws.keras (keras), targets arm-neon, passes strip-training; "
            "not checked, absent: model, calibration data)") in text
    assert "file not found" not in text
    assert "pipelines/keyword-spotting.yaml:1: top level: missing required key 'calibration'" in text
    assert "models/kws/pipeline-int8.yml:3: quantization.mode: " in text
