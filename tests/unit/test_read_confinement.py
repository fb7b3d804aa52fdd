"""A pipeline reads only inside its project. A pull request's pipeline named /proc/self/environ as CSV
calibration data, and the error that listed the file's "columns" printed the runner's environment, secrets
included. Every file a pipeline names (model, data, target files, and the pipeline file where the workflow
finds it), its links followed, must lie in the project (the git work tree; outside git, the working directory
or the pipeline's folder) or a folder the workflow grants in $EDGECONV_READ_ROOTS. Each refusal is exit 2 at
validation, naming the file, before anything is read or written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeconv.inputs import project_of

from ..conftest import REPO, tree

MODEL = REPO / "examples" / "digits" / "model.keras"  # input 'image' (16, 16, 1)
GRANT = ("a pipeline reads only files in its project; move it into the project, or grant its folder in "
         "$EDGECONV_READ_ROOTS (set by the workflow, never by a pull request)")
SECRET = "hunter2-must-not-be-printed"


def edgeconv(*args: str, cwd: Path, grant: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EDGECONV_READ_ROOTS"}
    env.update({"EDGECONV_TEST_SECRET": SECRET, "EDGECONV_NO_CACHE": "1"})
    if grant is not None:
        env["EDGECONV_READ_ROOTS"] = grant
    return subprocess.run([sys.executable, "-m", "edgeconv", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env)


def _project(root: Path, body: str) -> Path:
    """A git work tree (a `.git` folder is what marks one) holding a model, its data and ``pipeline.yaml``
    (``body``: the lines after the model's; calibration data of its own unless ``body`` names some)."""
    (root / ".git").mkdir(parents=True)
    shutil.copy(MODEL, root / "m.keras")
    np.savez(root / "cal.npz", image=_images())
    if "calibration:" not in body:
        body = "calibration: {path: cal.npz, samples: 10}\n" + body
    (root / "pipeline.yaml").write_text(f"version: 1\nmodel: {{path: m.keras}}\n{body}targets: [generic-int8]\n")
    return root / "pipeline.yaml"


def _images() -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, (10, 16, 16, 1)).astype(np.float32)


@pytest.mark.parametrize("command", ["validate", "build"])
def test_the_environment_of_the_runner_is_not_read_as_data(tmp_path: Path, command: str) -> None:
    project = tmp_path / "repo"
    _project(project, "calibration: {source: csv, path: /proc/self/environ, samples: 10, columns: {image: [x]}}\n")
    before = tree(tmp_path)
    result = edgeconv(command, "pipeline.yaml", cwd=project)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"edgeconv: error: pipeline.yaml:3: calibration.path: '/proc/self/environ' is "
                                      f"outside the pipeline's project ({project}): {GRANT}")
    assert SECRET not in result.stdout + result.stderr and tree(tmp_path) == before


@pytest.mark.parametrize(("place", "body", "key", "line"), [
    ("../outside.npz", "calibration: {path: ../outside.npz, samples: 10}\n", "calibration.path", 3),
    ("data/cal.npz", "calibration: {path: data/cal.npz, samples: 10}\n", "calibration.path", 3),
    ("eval.npz", "evaluation: {path: eval.npz}\n", "evaluation.path", 4),
    ("m.keras", "", "model.path", 2),
])
def test_a_file_or_a_link_that_leads_out_of_the_project_is_refused(tmp_path: Path, place: str, body: str,
                                                                   key: str, line: int) -> None:
    """Named past the project's edge (`..`), or a link planted in the project to a file outside it."""
    outside = tmp_path / ("outside.keras" if place.endswith(".keras") else "outside.npz")
    if place.endswith(".keras"):
        shutil.copy(MODEL, outside)
    else:
        np.savez(outside, image=_images())
    project = tmp_path / "repo"
    pipeline = _project(project, body)
    if not place.startswith(".."):
        link = project / place
        link.parent.mkdir(exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(outside)
    result = edgeconv("validate", str(pipeline), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"edgeconv: error: repo/pipeline.yaml:{line}: {key}: {place!r} is outside "
                                      f"the pipeline's project ({project}): {GRANT}")
    # The workflow may grant the folder: then the same pipeline is valid.
    granted = edgeconv("validate", str(pipeline), cwd=tmp_path, grant=str(tmp_path))
    assert granted.returncode == 0, granted.stderr


def test_a_folder_of_data_with_a_link_out_is_refused(tmp_path: Path) -> None:
    """An image folder is read file by file: one link below it that leads out is enough."""
    project = tmp_path / "repo"
    _project(project, "calibration: {source: images, path: photos, samples: 10, preprocess: {scale: 0.0039}}\n")
    (project / "photos" / "cats").mkdir(parents=True)
    (project / "photos" / "cats" / "a.png").write_bytes(b"not read")
    (project / "photos" / "cats" / "b.png").symlink_to("/etc/hostname")
    result = edgeconv("validate", "pipeline.yaml", cwd=project)
    assert result.returncode == 2
    assert result.stderr.strip() == ("edgeconv: error: pipeline.yaml:3: calibration.path: 'photos' holds "
                                     f"'cats/b.png', a link that leads outside the pipeline's project ({project}): "
                                     f"{GRANT}")


def test_a_target_file_that_leads_out_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    pipeline = _project(project, "")
    shutil.copy(REPO / "edgeconv" / "targets" / "data" / "generic-int8.yaml", tmp_path / "mine.yaml")
    (project / "mine.yaml").symlink_to(tmp_path / "mine.yaml")
    pipeline.write_text(pipeline.read_text().replace("targets: [generic-int8]", "targets: [mine.yaml]"))
    result = edgeconv("validate", "pipeline.yaml", cwd=project)
    assert result.returncode == 2
    assert result.stderr.strip() == ("edgeconv: error: pipeline.yaml:4: targets[0]: target file 'mine.yaml' is "
                                     f"outside the pipeline's project ({project}): {GRANT}")


def test_a_pipeline_file_that_is_a_link_out_of_its_project_is_not_read(tmp_path: Path) -> None:
    """The workflow builds `pipelines/*.yaml`; a pull request planted one that is a link to a file of the
    runner. Its content never reaches the console (a YAML error would quote it)."""
    project = tmp_path / "repo"
    _project(project, "")
    (tmp_path / "creds").write_text(f"token: {SECRET}\n")
    (project / "pipelines").mkdir()
    (project / "pipelines" / "evil.yaml").symlink_to(tmp_path / "creds")
    for command in ("validate", "build"):
        result = edgeconv(command, "pipelines/evil.yaml", cwd=project)
        assert result.returncode == 2
        assert result.stderr.strip() == (f"edgeconv: error: pipelines/evil.yaml: a link that leads outside its "
                                         f"project ({project}): a pipeline file is read only from its project; "
                                         "move it into the project, or grant its folder in $EDGECONV_READ_ROOTS (set "
                                         "by the workflow, never by a pull request)")
        assert SECRET not in result.stdout + result.stderr


def test_links_inside_the_project_are_followed(tmp_path: Path) -> None:
    """Data kept once in the project and linked from where a pipeline looks for it (DVC's links into its
    cache in the project) is read as before."""
    project = tmp_path / "repo"
    pipeline = _project(project, "calibration: {path: data/cal.npz, samples: 10}\n")
    (project / ".dvc" / "cache").mkdir(parents=True)
    np.savez(project / ".dvc" / "cache" / "ab12.npz", image=_images())
    (project / "data").mkdir()
    (project / "data" / "cal.npz").symlink_to(project / ".dvc" / "cache" / "ab12.npz")
    result = edgeconv("validate", str(pipeline), cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_project_is_the_git_work_tree_else_the_working_directory_else_the_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "clone" / "models" / "kws").mkdir(parents=True)
    (tmp_path / "clone" / ".git").mkdir()
    assert project_of(tmp_path / "clone" / "models" / "kws") == tmp_path / "clone"
    (tmp_path / "clone" / "vendor" / "sub").mkdir(parents=True)
    (tmp_path / "clone" / "vendor" / ".git").write_text("gitdir: ../.git/modules/vendor\n")  # a submodule
    assert project_of(tmp_path / "clone" / "vendor" / "sub") == tmp_path / "clone" / "vendor"
    (tmp_path / "plain" / "pipelines").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "plain")
    assert project_of(tmp_path / "plain" / "pipelines") == tmp_path / "plain"  # run from the project
    monkeypatch.chdir(tmp_path / "clone")
    assert project_of(tmp_path / "plain" / "pipelines") == tmp_path / "plain" / "pipelines"  # run from elsewhere


def test_a_pipeline_never_reads_inside_git(tmp_path: Path) -> None:
    """`.git/config` is in the project, and holds the token actions/checkout persists: named as data, or
    reached through a link, it is refused."""
    project = tmp_path / "repo"
    pipeline = _project(project, "calibration: {source: csv, path: .git/config, samples: 10, "
                                 "columns: {image: [x]}}\n")
    (project / ".git" / "config").write_text(f"[http]\n\textraheader = AUTHORIZATION: basic {SECRET}\n")
    result = edgeconv("validate", str(pipeline), cwd=project)
    assert result.returncode == 2
    assert result.stderr.strip() == ("edgeconv: error: pipeline.yaml:3: calibration.path: '.git/config' is in a .git "
                                     "folder: a pipeline never reads git's own files (a clone's config holds its "
                                     "credentials)")
    (project / "cal.csv").symlink_to(project / ".git" / "config")
    pipeline.write_text(pipeline.read_text().replace(".git/config", "cal.csv"))
    result = edgeconv("build", str(pipeline), cwd=project)
    assert result.returncode == 2 and "'cal.csv' is in a .git folder" in result.stderr
    assert SECRET not in result.stdout + result.stderr


def test_a_data_folder_with_a_link_into_git_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    _project(project, "calibration: {source: images, path: photos, samples: 10, preprocess: {scale: 0.0039}}\n")
    (project / ".git" / "config").write_text("[core]\n")
    (project / "photos").mkdir()
    (project / "photos" / "a.png").symlink_to(project / ".git" / "config")
    result = edgeconv("validate", "pipeline.yaml", cwd=project)
    assert result.returncode == 2
    assert result.stderr.strip() == ("edgeconv: error: pipeline.yaml:3: calibration.path: 'photos' holds 'a.png', a "
                                     "link into a .git folder: a pipeline never reads git's own files (a clone's "
                                     "config holds its credentials)")


def test_a_project_may_itself_lie_below_a_folder_named_git(tmp_path: Path) -> None:
    """Only a .git folder inside the project is git's own: a clone kept under some `.git` folder reads its files."""
    project = tmp_path / ".git" / "worktrees-here" / "repo"
    pipeline = _project(project, "")
    result = edgeconv("validate", str(pipeline), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
