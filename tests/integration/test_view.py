"""`edgeconv view` in a real headless Chromium (issue 18): a build of a third-party model (Coral's deeplabv3,
which the Edge TPU compiler leaves partly on the CPU) opened in Model Explorer, and the verdict seen on the
page: the overlays listed, each op's status in the node data table with its colour, the rule and fix, and
the colour drawn on the graph itself.

Needs Chromium (Debian's package; .ci/run installs it) and playwright (the dev extra). Without Chromium the
test is skipped on a developer's machine and fails in CI."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from ..conftest import ORACLES, run_edgeconv

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("Chromium is not installed (apt-get install chromium)", allow_module_level=True)
pytest.importorskip("model_explorer")
sync_api = pytest.importorskip("playwright.sync_api")

ORANGE = (255, 204, 128)  # explorer.STATUS_COLOURS["cpu_fallback"]


def _as_from_a_terminal() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _signal_masks(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "gone"
    return ", ".join(line.replace("\t", " ") for line in status.splitlines() if line.startswith(("SigBlk", "SigIgn")))


class Viewer:
    """`edgeconv view ...` as a user starts it; its stdout lines as they come."""

    def __init__(self, *args: str, cwd: Path) -> None:
        # As from a terminal: no signal blocked or ignored (in full runs on a loaded machine a viewer inherited
        # a state where Ctrl-C never reached it). PYTHONFAULTHANDLER: a viewer that still does not stop is sent
        # SIGABRT, and its threads' stacks and both processes' signal masks are in the failure.
        self.proc = subprocess.Popen([sys.executable, "-m", "edgeconv", "view", *args, "--no-browser"], cwd=cwd,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONFAULTHANDLER": "1"}, preexec_fn=_as_from_a_terminal)
        self.lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        threading.Thread(target=lambda: [self.lines.put(line.rstrip("\n")) for line in stdout], daemon=True).start()

    def until_ready(self, timeout: float = 120) -> list[str]:
        said = []
        while not said or not said[-1].startswith("Model Explorer: "):
            try:
                said.append(self.lines.get(timeout=timeout))
            except queue.Empty:
                self.proc.kill()
                raise AssertionError(f"no address within {timeout} s; said {said}; stderr "
                                     f"{self.proc.stderr.read() if self.proc.stderr else ''}") from None
        return said

    def stop(self, sig: int) -> tuple[int, str]:
        self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=120)  # a loaded CI machine took over 30 s once
        except subprocess.TimeoutExpired:
            masks = f"viewer {_signal_masks(self.proc.pid)}; tests {_signal_masks(os.getpid())}"
            self.proc.send_signal(signal.SIGABRT)  # the fault handler prints each thread's stack
            try:
                _, err = self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # never left running after the test
                _, err = self.proc.communicate()
            raise AssertionError(f"the viewer did not stop within 120 s of signal {sig} ({masks}); its stderr:\n"
                                 f"{err[-6000:]}") from None
        return self.proc.returncode, err


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("view")
    shutil.copy(ORACLES / "deeplabv3_mnv2_dm05_pascal_quant.tflite", root / "seg.tflite")
    (root / "pipeline.yaml").write_text("version: 1\nname: seg\nmodel: {path: seg.tflite}\n"
                                        "targets: [edgetpu, arm-neon]\noutput: {dir: build/seg}\n")
    done = run_edgeconv("build", "pipeline.yaml", cwd=root)
    assert done.returncode in (0, 1), done.stderr
    return root


def test_the_build_writes_the_overlays_and_lists_them(built: Path) -> None:
    out = built / "build" / "seg"
    report = json.loads((out / "report.json").read_text())
    names = ["explorer/edgetpu.status.json", "explorer/edgetpu.why.json", "explorer/arm-neon.status.json",
             "explorer/arm-neon.why.json"]
    assert [a["path"] for a in report["artifacts"]["explorer"]] == names
    assert all((out / n).is_file() for n in names)


def test_view_shows_the_verdict_on_the_graph_in_a_real_browser(built: Path, tmp_path: Path) -> None:
    viewer = Viewer("build/seg", cwd=built)
    try:
        said = viewer.until_ready()
        gate = json.loads((built / "build" / "seg" / "report.json").read_text())["gate"]
        reasons = [f"  - {r}" for r in gate["reasons"]]
        start = len(reasons) + 1
        assert said[:start + 6] == [f"gate: {gate['verdict'].upper()}", *reasons,
            "model build/seg/seg.tflite; overlays (Model Explorer's 'Add per-node data' loads them too):",
            "  build/seg/explorer/edgetpu.why.json", "  build/seg/explorer/arm-neon.why.json",
            "  build/seg/explorer/arm-neon.status.json", "  build/seg/explorer/edgetpu.status.json",
            said[start + 5]]
        address = said[start + 5].removeprefix("Model Explorer: ")
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/edgeconv", address)  # short: it redirects to the long one
        # The version check every page load makes answers (it was an HTTP 500 and a traceback), asking no one.
        import urllib.request

        base = address.removesuffix("/edgeconv")
        with urllib.request.urlopen(base + "/api/v1/check_new_version", timeout=30) as answer:
            assert answer.status == 200 and json.loads(answer.read())["version"] == ""
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.goto(address)
            page.get_by_text("edgetpu status", exact=True).first.wait_for(timeout=60_000)
            # The verdict is the model's title on the page.
            assert page.get_by_text(f"seg - gate {gate['verdict'].upper()}").count() >= 1
            providers = page.locator("text=/^(edgetpu|arm-neon) (status|rule and fix)$/")
            assert sorted(set(providers.all_inner_texts())) == [
                "arm-neon rule and fix", "arm-neon status", "edgetpu rule and fix", "edgetpu status"]
            # The node data table, filtered to the op the compiler leaves on the CPU last: its status cell is
            # coloured, and the rule and fix are there.
            page.get_by_placeholder("regex to filter nodes").last.fill("arg_max")
            cell = page.get_by_text("cpu_fallback", exact=True).first
            cell.wait_for(timeout=30_000)
            assert cell.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(255, 204, 128)"
            row = cell.locator("xpath=..").inner_text()
            assert "edgetpu.ARG_MAX.op_listed: not in the Edge TPU table; it runs on the CPU; fix: " in row
            assert "edgetpu.ARG_MAX.single_segment: depends on the output of blocking op #64 RESIZE_BILINEAR" in row
            # The op that blocks the segment has a colour of its own (the one to fix).
            page.get_by_placeholder("regex to filter nodes").last.fill("resize")
            blocking = page.get_by_text("cpu_fallback (blocking)", exact=True).first
            blocking.wait_for(timeout=30_000)
            assert blocking.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(229, 57, 53)"
            page.get_by_placeholder("regex to filter nodes").last.fill("arg_max")
            # Select the op: the graph (drawn with WebGL) zooms to it, and the overlay colour is on the canvas.
            page.get_by_text("arg_max", exact=True).last.click()
            page.wait_for_timeout(2_000)
            page.screenshot(path=str(tmp_path / "view.png"))
            browser.close()
        from PIL import Image

        with Image.open(tmp_path / "view.png") as shot:
            graph = shot.convert("RGB").crop((0, 80, int(shot.width * 0.66), shot.height))
            pixels = Counter(graph.get_flattened_data() if hasattr(graph, "get_flattened_data")
                             else graph.getdata())
        assert pixels[ORANGE] > 2_000  # the cpu_fallback nodes' fill (a node is ~130 x 38 px)
    finally:
        code, err = viewer.stop(signal.SIGINT)
    assert (code, err.strip().splitlines()[-1]) == (0, "edgeconv: Model Explorer stopped")
    assert "Traceback" not in err and "Internal Server Error" not in err, err
    assert "oneDNN" not in err and "tensorflow" not in err.lower(), err  # TensorFlow's log lines stay out


def test_viewing_a_tflite_checks_it_now_and_removes_its_overlays_when_stopped(built: Path) -> None:
    viewer = Viewer("seg.tflite", "--target", "edgetpu", "-q", cwd=built)
    try:
        said = viewer.until_ready()
        assert len(said) == 1 and said[0].startswith("Model Explorer: http://127.0.0.1:")  # -q: the address only
        import urllib.request
        from urllib.parse import unquote

        class Keep(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: object, **kwargs: object) -> None:
                return None  # keep the redirect: its Location is the long address

        try:
            urllib.request.build_opener(Keep).open(said[0].removeprefix("Model Explorer: "), timeout=30)
            raise AssertionError("the short address did not redirect")
        except urllib.error.HTTPError as redirect:
            assert redirect.code == 302
            location = redirect.headers["Location"]
        config = json.loads(unquote(location.split("data=", 1)[1]))
        files = [Path(f) for f in config["nodeData"]]
        assert [f.name for f in files] == ["edgetpu.why.json", "edgetpu.status.json"]
        assert all(f.is_file() for f in files)
        (model,) = [Path(m["url"]) for m in config["models"]]
        assert model.name == "seg - targets PASS.tflite" and model.resolve() == built / "seg.tflite"
    finally:
        code, err = viewer.stop(signal.SIGTERM)
    assert (code, err.strip()) == (143, "edgeconv: terminated; Model Explorer stopped")
    assert not any(f.exists() for f in files) and not model.is_symlink()
    assert not files[0].parent.parent.exists()  # the whole scratch folder
