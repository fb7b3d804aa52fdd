from __future__ import annotations

from pathlib import Path

import pytest

from edgeconv import OutputError, cancel
from edgeconv.crash import write_crash_log
from edgeconv.output import MARKER, check_writable, commit

from ..conftest import tree


def test_commit_creates_and_replaces_atomically(tmp_path: Path) -> None:
    out = tmp_path / "build" / "m"
    commit(out, {"a.tflite": b"1", "report.json": b"{}"})
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "a.tflite", "report.json"]
    commit(out, {"b.tflite": b"2"})
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "b.tflite"]
    assert [p.name for p in out.parent.iterdir()] == ["m"]  # no staging or backup folders left


def test_a_failed_commit_keeps_the_previous_output(tmp_path: Path) -> None:
    out = tmp_path / "m"
    commit(out, {"a.tflite": b"good"})
    before = tree(out)

    class Exploding(dict[str, bytes]):
        def items(self):  # type: ignore[no-untyped-def]
            yield "half.tflite", b"x"
            raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        commit(out, Exploding())
    assert tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


@pytest.mark.parametrize("kind", [cancel.Cancelled, KeyboardInterrupt])
def test_a_cancelled_build_never_replaces_the_previous_output(tmp_path: Path, kind: type[BaseException]) -> None:
    """A stop asked for while the build ran (its signal's exception swallowed by a library on the way)
    is honoured at the last moment: after staging, before the old output moves."""
    out = tmp_path / "m"
    commit(out, {"a.tflite": b"good"})
    before = tree(out)
    cancel.request(kind)
    try:
        with pytest.raises(kind):
            commit(out, {"b.tflite": b"new"})
    finally:
        cancel.clear()
    assert tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["m"]
    commit(out, {"b.tflite": b"new"})  # cleared: the next build goes ahead
    assert (out / "b.tflite").read_bytes() == b"new"


def test_the_first_stop_request_wins() -> None:
    cancel.request(KeyboardInterrupt)
    cancel.request(cancel.Cancelled)
    try:
        assert cancel.requested() is KeyboardInterrupt
    finally:
        cancel.clear()
    assert cancel.requested() is None
    cancel.check()  # nothing requested: returns


def test_refuses_folders_it_does_not_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "src"
    mine.mkdir()
    (mine / "train.py").write_text("precious")
    with pytest.raises(OutputError) as info:
        check_writable(mine)
    assert str(info.value) == ("output folder src exists, is not empty and was not created by edgeconv; choose "
                               "another folder (--out) or empty it")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match=r"^output folder file exists and is not a folder$"):
        check_writable(tmp_path / "file")
    assert (mine / "train.py").read_text() == "precious" and len(list(mine.iterdir())) == 1


def test_crash_logs_go_to_their_own_folder_and_do_not_pile_up(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from edgeconv.crash import KEEP_CRASH_LOGS, crash_log_dir

    monkeypatch.setenv("EDGECONV_LOG_DIR", str(tmp_path / "logs"))
    assert crash_log_dir() == tmp_path / "logs"
    for i in range(KEEP_CRASH_LOGS + 3):
        log = write_crash_log(crash_log_dir(), f"Traceback {i}")
        assert log is not None
        os.utime(log, (1000 + i, 1000 + i))  # distinct ages (the names can share a second)
    write_crash_log(crash_log_dir(), "last")
    kept = sorted((tmp_path / "logs").iterdir())
    assert len(kept) == KEEP_CRASH_LOGS
    assert "last" in {p.read_text() for p in kept} and "Traceback 0" not in {p.read_text() for p in kept}


OLD = {"model.tflite": b"old release", "report.json": b"{}"}
NEW = {"model.tflite": b"new release", "report.json": b"{\"new\": 1}", "report.md": b"# new"}


@pytest.mark.parametrize(("step", "after", "exchange"), [
    ("staged", OLD, True),  # the new files written beside the output, nothing renamed yet
    ("exchanged", NEW, True),  # one atomic swap: the new release in place, the old one under the staging name
    ("new_moved", NEW, True),  # the new release is in place; only the old one is left to remove
    ("", NEW, True),  # not killed
    # Where the swap cannot be one step (not Linux, a file system without RENAME_EXCHANGE): two renames.
    ("staged", OLD, False),
    ("old_moved", OLD, False),  # between the two renames: no output folder until recovery puts the old one back
    ("new_moved", NEW, False),
])
def test_a_commit_killed_at_any_step_leaves_the_old_or_the_new_release(tmp_path: Path, step: str,
                                                                       after: dict[str, bytes], exchange: bool) -> None:
    """SIGKILL injected at each step of the commit (EDGECONV_TEST_KILL_AT), then what the next build does
    first (output.recover): a complete release, and no staging or backup folder left (issue 17)."""
    import os
    import subprocess
    import sys

    from edgeconv.output import MARKER, commit, recover

    out = tmp_path / "build" / "m"
    commit(out, OLD)
    code = ("import sys; from pathlib import Path; import edgeconv.output as o; "
            f"o._exchange = o._exchange if {exchange} else (lambda new, current: False); "
            f"o.commit(Path(sys.argv[1]), {NEW!r})")
    proc = subprocess.run([sys.executable, "-c", code, str(out)], env={**os.environ, "EDGECONV_TEST_KILL_AT": step},
                          capture_output=True, text=True)
    assert proc.returncode == (-9 if step else 0), proc.stderr
    if step == "exchanged":
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != MARKER} == NEW  # never absent
    recover(out)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != MARKER} == after
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]


def test_a_full_disk_is_a_clear_error_and_keeps_the_previous_output(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "m"
    commit(out, {"a.tflite": b"good"})
    before = tree(out)
    real = Path.write_bytes

    def full(self: Path, data: bytes) -> int:
        if self.name == "report.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(OutputError) as info:
        commit(out, {"b.tflite": b"new", "report.json": b"{}"})
    assert str(info.value) == ("cannot write the output folder m: No space left on device; nothing was changed "
                               "(the previous output, if any, is as it was)")
    assert tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # the staging folder is gone


@pytest.mark.parametrize(("make", "expected"), [
    ("parent_is_a_file", "cannot create the output folder blocker/m: blocker is a file"),
    ("read_only", "cannot write the output folder ro/m: ro: Read-only file system"),
])
def test_an_output_folder_that_cannot_be_written_is_refused_before_any_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: str, expected: str) -> None:
    import errno
    import tempfile

    monkeypatch.chdir(tmp_path)
    if make == "parent_is_a_file":
        (tmp_path / "blocker").write_text("x")
        target = tmp_path / "blocker" / "m"
    else:  # what a read-only mount answers (tests may run as root, where a chmod would not stop a write)
        (tmp_path / "ro").mkdir()
        target = tmp_path / "ro" / "m"

        def refuse(*args: object, **kwargs: object) -> None:
            raise OSError(errno.EROFS, "Read-only file system")

        monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    with pytest.raises(OutputError) as info:
        check_writable(target)
    assert str(info.value) == expected
    assert not target.exists()


def test_the_write_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    check_writable(tmp_path / "a" / "b")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("out", "role", "held"), [
    (".", "pipeline file", "pipeline.yaml"),  # a marker planted in the project does not make it ours
    ("models", "model", "models/m.keras"),
    ("data/cal", "calibration data", "data/cal/c.npz"),
])
def test_an_output_folder_holding_the_pipelines_inputs_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  out: str, role: str, held: str) -> None:
    import edgeconv

    monkeypatch.chdir(tmp_path)
    for name in ("models/m.keras", "data/cal/c.npz", "src/train.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"precious")
    (tmp_path / MARKER).write_text("planted")
    (tmp_path / "models" / MARKER).write_text("planted")
    (tmp_path / "pipeline.yaml").write_text("version: 1\nmodel: {path: models/m.keras}\n"
                                            f"calibration: {{path: data/cal/c.npz}}\noutput: {{dir: {out}}}\n")
    before = tree(tmp_path)
    with pytest.raises(OutputError) as info:
        edgeconv.build(tmp_path / "pipeline.yaml")
    shown = "." if out == "." else out
    assert str(info.value) == (f"output folder {shown} holds the {role} {held}; every build replaces that folder. "
                               "Choose an output folder of its own (output.dir or --out)")
    assert tree(tmp_path) == before


def test_a_tmpdir_that_cannot_hold_a_work_folder_is_refused_before_any_work(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    import edgeconv

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.keras").write_bytes(b"x")
    np_file = tmp_path / "c.npz"
    np_file.write_bytes(b"x")
    (tmp_path / "pipeline.yaml").write_text("version: 1\nmodel: {path: m.keras}\ncalibration: {path: c.npz}\n")
    (tmp_path / "not-a-folder").write_text("x")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "not-a-folder"))
    with pytest.raises(OutputError) as info:
        edgeconv.build(tmp_path / "pipeline.yaml")
    assert str(info.value) == (f"cannot create a work folder in {tmp_path / 'not-a-folder'}: Not a directory; set "
                               "TMPDIR to a writable folder with free space")
    assert not (tmp_path / "build").exists()


def test_work_folders_of_killed_builds_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from edgeconv.output import WORK_PREFIX, remove_stale_work_folders

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(done.stdout)  # a process that has ended
    names = [f"{WORK_PREFIX}{dead}-abc", f"{WORK_PREFIX}{os.getpid()}-def", f"{WORK_PREFIX}x-1", "edgeconv-crash",
             "someone-else"]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "spool.bin").write_bytes(b"x")
    (tmp_path / f"{WORK_PREFIX}{dead}-file").write_text("a file, not a work folder")
    remove_stale_work_folders(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names[1:], f"{WORK_PREFIX}{dead}-file"])


def _released(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if p.name != MARKER}


@pytest.mark.parametrize(("step", "after", "said"), [
    ("staged", OLD, "the previous output is unchanged"),
    ("exchanged", NEW, "the new output is in place in build/m (written before the stop)"),
    ("new_moved", NEW, "the new output is in place in build/m (written before the stop)"),
])
def test_a_stop_signal_during_the_commit_says_what_it_left(tmp_path: Path, step: str, after: dict[str, bytes],
                                                           said: str) -> None:
    """SIGTERM delivered at each step of the commit (as CI's cancel would): the swap is never cut in two,
    no old release is left beside the new one, exit 143, and the last line says which release is there."""
    import os
    import subprocess
    import sys

    out = tmp_path / "build" / "m"
    commit(out, OLD)
    code = ("import signal, sys; from pathlib import Path; from edgeconv import cli, cancel, output\n"
            "signal.signal(signal.SIGTERM, cli._terminate)\n"
            "try:\n"
            f"    output.commit(Path(sys.argv[1]), {NEW!r}); cancel.check()\n"
            "except cli.Terminated:\n"
            "    print('terminated; ' + cli._what_was_written(), file=sys.stderr); sys.exit(143)\n")
    proc = subprocess.run([sys.executable, "-c", code, "build/m"], env={**os.environ, "EDGECONV_TEST_TERM_AT": step},
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"terminated; {said}"
    assert _released(out) == after
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]


def test_the_marker_lists_every_file_with_its_hash(tmp_path: Path) -> None:
    import hashlib
    import json

    out = tmp_path / "m"
    commit(out, {"a.tflite": b"1", "explorer/x.json": b"{}"})
    listed = json.loads((out / MARKER).read_text())["files"]
    assert listed == {"a.tflite": hashlib.sha256(b"1").hexdigest(),
                      "explorer/x.json": hashlib.sha256(b"{}").hexdigest()}


def _make_foreign(out: Path, case: str) -> str:
    """An output folder edgeconv wrote, then changed as ``case`` says; the file name the refusal names."""
    commit(out, {"m.tflite": b"release", "report.json": b"{}"})
    if case == "extra_file":
        (out / "notes.txt").write_text("mine")
        return "notes.txt"
    if case == "changed_file":
        (out / "report.json").write_text('{"edited": 1}')
        return "report.json"
    if case == "git_inside":
        (out / ".git").mkdir()
        (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        return ".git"
    if case == "symlink_inside":
        (out / "link").symlink_to("/etc/hostname")
        return "link"
    if case == "nested_extra":
        (out / "explorer").mkdir()
        (out / "explorer" / "mine.json").write_text("{}")
        return "explorer/mine.json"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["extra_file", "changed_file", "git_inside", "symlink_inside", "nested_extra"])
def test_a_folder_holding_anything_edgeconv_did_not_write_is_never_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "m"
    name = _make_foreign(out, case)
    before = tree(tmp_path)
    with pytest.raises(OutputError) as info:
        commit(out, {"new.tflite": b"new"})
    assert str(info.value) == (f"output folder m holds {name!r}, which edgeconv did not write there (or it changed "
                               "since); every build replaces that folder. Choose another folder (--out) or move that "
                               "file out")
    assert tree(tmp_path) == before


def test_a_file_edgeconv_wrote_and_someone_removed_is_no_obstacle(tmp_path: Path) -> None:
    out = tmp_path / "m"
    commit(out, {"m.tflite": b"release", "report.md": b"# r"})
    (out / "report.md").unlink()
    commit(out, {"n.tflite": b"new"})
    assert _released(out) == {"n.tflite": b"new"}


def test_a_folder_an_older_edgeconv_wrote_is_refused_with_what_to_do(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Its marker lists no files: safe to refuse (a planted one looks the same), and said precisely."""
    from edgeconv.output import LEGACY_MARKER

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / MARKER).write_text(LEGACY_MARKER)
    (tmp_path / "m" / "m.tflite").write_bytes(b"old release")
    before = tree(tmp_path)
    with pytest.raises(OutputError) as info:
        commit(tmp_path / "m", {"m.tflite": b"new"})
    assert str(info.value) == ("output folder m was written by an older edgeconv, whose marker does not list the "
                               "files it wrote, so nothing shows that only edgeconv's files are in it; look at it, "
                               "remove it, and build again")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("marker", ["planted", '{"files": []}', '{"files": {"a": 1}}', "{"])
def test_a_planted_marker_that_lists_no_files_does_not_make_a_folder_edgeconvs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str) -> None:
    """``output.dir: ../docs`` next to a marker planted in docs/: the marker lists nothing edgeconv wrote."""
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("precious")
    (docs / MARKER).write_text(marker)
    before = tree(tmp_path)
    with pytest.raises(OutputError) as info:
        commit(docs, {"m.tflite": b"new"})
    assert str(info.value) == ("output folder docs exists, is not empty and was not created by edgeconv; choose "
                               "another folder (--out) or empty it")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("out", [".git", ".git/refs", "sub/.git"])
def test_a_git_folder_is_never_an_output_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git" / "refs").mkdir(parents=True)
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / ".git" / MARKER).write_text(_marker_for_nothing())
    before = tree(tmp_path)
    with pytest.raises(OutputError) as info:
        commit(tmp_path / out, {"m.tflite": b"new"})
    assert str(info.value) == (f"output folder {out} is inside a .git folder; every build replaces its output "
                               "folder. Choose an output folder of its own (output.dir or --out)")
    assert tree(tmp_path) == before


def _marker_for_nothing() -> str:
    from edgeconv.output import marker_text

    return marker_text({})


@pytest.mark.parametrize("dangling", [True, False])
def test_an_output_folder_that_is_a_symbolic_link_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             dangling: bool) -> None:
    from edgeconv.output import check_not_a_link

    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    if not dangling:
        elsewhere.mkdir()
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "build").symlink_to(elsewhere)
    before = tree(tmp_path)
    with pytest.raises(OutputError) as info:
        check_not_a_link(Path("repo/build"))
    assert str(info.value) == (f"output folder repo/build is a symbolic link (-> {elsewhere}); name a real folder "
                               "(output.dir or --out)")
    if not dangling:  # a folder below a link to a real folder (build -> /mnt/fast/build) is fine
        check_not_a_link(Path("repo/build/m"))
    else:
        with pytest.raises(OutputError) as below:
            check_not_a_link(Path("repo/build/m"))
        assert str(below.value) == (f"output folder repo/build/m is below repo/build, a symbolic link to nothing "
                                    f"(-> {elsewhere}); name a real folder (output.dir or --out)")
    assert tree(tmp_path) == before and elsewhere.exists() is not dangling


@pytest.mark.parametrize("dangling", [True, False])
def test_output_dir_that_is_a_symbolic_link_is_a_pipeline_error(tmp_path: Path, dangling: bool) -> None:
    """Found with the pipeline, before any work: resolving output.dir would follow the link."""
    from edgeconv import ConfigError, load_pipeline

    elsewhere = tmp_path / "elsewhere"
    if not dangling:
        elsewhere.mkdir()
    (tmp_path / "build").symlink_to(elsewhere)
    (tmp_path / "m.keras").write_bytes(b"x")
    (tmp_path / "p.yaml").write_text("version: 1\nmodel: {path: m.keras}\noutput: {dir: build}\n")
    with pytest.raises(ConfigError) as info:
        load_pipeline(tmp_path / "p.yaml")
    assert f"{tmp_path / 'p.yaml'}:3: output.dir: 'build' is a symbolic link (-> {elsewhere}); name a real folder" \
        in str(info.value).splitlines()
    assert elsewhere.exists() is not dangling


def test_the_default_output_folder_below_a_dangling_link_is_refused(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import edgeconv

    monkeypatch.chdir(tmp_path)
    (tmp_path / "build").symlink_to(tmp_path / "outside" / "build")
    (tmp_path / "m.keras").write_bytes(b"x")
    (tmp_path / "c.npz").write_bytes(b"x")
    (tmp_path / "p.yaml").write_text("version: 1\nname: m\nmodel: {path: m.keras}\ncalibration: {path: c.npz}\n")
    with pytest.raises(OutputError) as info:
        edgeconv.build(tmp_path / "p.yaml")
    assert str(info.value) == (f"output folder build/m is below build, a symbolic link to nothing (-> "
                               f"{tmp_path / 'outside' / 'build'}); name a real folder (output.dir or --out)")
    assert not (tmp_path / "outside").exists()


def test_an_output_folder_holding_a_target_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import edgeconv

    from ..conftest import REPO

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    commit(out, {})  # a folder edgeconv wrote (only its marker) ...
    shutil.copy(REPO / "edgeconv" / "targets" / "data" / "generic-int8.yaml", out / "npu.yaml")  # ... then a target
    (tmp_path / "m.keras").write_bytes(b"x")
    (tmp_path / "c.npz").write_bytes(b"x")
    (tmp_path / "p.yaml").write_text("version: 1\nmodel: {path: m.keras}\ncalibration: {path: c.npz}\n"
                                     "targets: [out/npu.yaml]\noutput: {dir: out}\n")
    before = tree(tmp_path)
    with pytest.raises(OutputError) as info:
        edgeconv.build(tmp_path / "p.yaml")
    assert str(info.value) == ("output folder out holds the target file out/npu.yaml; every build replaces that "
                               "folder. Choose an output folder of its own (output.dir or --out)")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("exchange", [True, False])
def test_a_swap_that_fails_restores_the_previous_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        exchange: bool) -> None:
    """The swap itself fails (a file system error at the last step): the previous release is back in place,
    whole, and nothing of the new one is left beside it. With two renames, the first has already moved
    the old release aside: the commit must move it back."""
    import errno
    import os

    from edgeconv import output

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "m"
    commit(out, OLD)
    before = tree(tmp_path)
    real_rename = os.rename

    def failing_exchange(new: Path, current: Path) -> bool:
        raise OSError(errno.EIO, "Input/output error", str(current))

    def failing_second_rename(src: object, dst: object) -> None:
        if ".staging-" in str(src):
            raise OSError(errno.EIO, "Input/output error")
        real_rename(src, dst)  # type: ignore[arg-type]

    if exchange:
        monkeypatch.setattr(output, "_exchange", failing_exchange)
    else:
        monkeypatch.setattr(output, "_exchange", lambda new, current: False)
        monkeypatch.setattr(os, "rename", failing_second_rename)
    with pytest.raises(OutputError) as info:
        commit(out, NEW)
    assert str(info.value) == ("cannot write the output folder m: Input/output error; nothing was changed (the "
                               "previous output, if any, is as it was)")
    assert tree(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
