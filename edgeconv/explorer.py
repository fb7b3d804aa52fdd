"""The verdict as Model Explorer overlays: per-node data files, and a local viewer (``edgeconv view``).

Model Explorer (``ai-edge-model-explorer``, Google's graph viewer for TFLite) colours a model's nodes by
"node data": JSON files mapping each graph (a subgraph, by name) to a value per node (an op, by its index
in that subgraph). The build writes these files next to the report, so a user can load them later
("Add per-node data" in any Model Explorer), and ``edgeconv view`` opens the model with them:

- ``explorer/<target>.status.json``: each op's status on the target (supported, uncertain, cpu_fallback,
  unsupported), coloured;
- ``explorer/<target>.why.json``: for each op that is not supported, each rule it fails, what was found and
  the fix (an op after a blocking op names it);
- ``explorer/quantization-sqnr.json``: each op's quantization SQNR in dB against the float model, from the
  per-op error ranking, coloured by bands.

Building the files needs neither TensorFlow nor Model Explorer; only the viewer imports Model Explorer.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import report_model as rm
from ._log import get_logger
from ._record import record
from .converters.tflite_reader import TFLiteModel, read_tflite
from .errors import ConfigError, EdgeconvError, ModelFileError, did_you_mean, rel

log = get_logger(__name__)

FOLDER = "explorer"
#: Background colour of each status (light, so the node's label stays readable).
STATUS_COLOURS = {"supported": "#c8e6c9", "uncertain": "#fff59d", "cpu_fallback": "#ffcc80",
                  "unsupported": "#ef9a9a"}
#: A blocking op (segment placement: it cannot be mapped and ends the accelerator's segment) stands out from
#: the ops that merely follow it onto the CPU: the one to fix.
BLOCKING_COLOUR = "#e53935"
#: SQNR bands (upper bound in dB, colour): below 10 dB the op's output is mostly noise, 8-bit
#: quantization done well gives 30 dB and more.
SQNR_BANDS = ((10.0, "#ef9a9a"), (20.0, "#ffcc80"), (30.0, "#fff59d"), (1e9, "#c8e6c9"))
SQNR_FILE = "quantization-sqnr.json"


def graph_id(model: TFLiteModel, subgraph: int) -> str:
    """The id Model Explorer's TFLite adapter gives a subgraph: its name, else ``main`` / ``subgraph_N``."""
    name = model.subgraphs[subgraph].name
    if name:
        return name
    return "main" if subgraph == 0 else f"subgraph_{subgraph}"


def _why(op: rm.OpVerdict) -> str:
    """Each rule the op fails: its id, what was found, and the fix."""
    return " | ".join(f"{v['rule']}: {v['detail'] or v['text']}" + (f"; fix: {v['fix']}" if v.get("fix") else "")
                      for v in op["violations"] if v.get("effect") != "warning")


def _file(name: str, graphs: Mapping[str, Mapping[str, Any]], **extra: Any) -> bytes:
    """A ModelNodeData file: {graph id: {"name": ..., "results": {node id: {"value": ...}}, ...}}."""
    data = {g: {"name": name, "results": dict(results), **extra} for g, results in graphs.items() if results}
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def node_data(model: TFLiteModel, targets: Sequence[rm.TargetVerdict],
              op_errors: Sequence[Mapping[str, Any]] | None = None) -> dict[str, bytes]:
    """The overlay files (path inside the output folder -> bytes) for the targets' verdicts
    (``report.json``'s ``targets``) and the per-op quantization errors (``culprits`` entries, all ops)."""
    files: dict[str, bytes] = {}
    for target in targets:
        if target.get("error"):
            continue
        by_index = {(op.get("subgraph", 0), op["index"]): op for op in target["ops"]}
        blocking = {b["index"] for b in target.get("blocking_ops", [])}
        status: dict[str, dict[str, Any]] = {}
        why: dict[str, dict[str, Any]] = {}
        for (subgraph, index), op in sorted(by_index.items()):
            g = graph_id(model, subgraph)
            if subgraph == 0 and index in blocking:
                shown = {"value": f"{op['status']} (blocking)", "bgColor": BLOCKING_COLOUR}
            else:
                shown = {"value": op["status"], "bgColor": STATUS_COLOURS[op["status"]]}
            status.setdefault(g, {})[str(index)] = shown
            if op["status"] != "supported":
                why.setdefault(g, {})[str(index)] = {"value": _why(op)}
        files[f"{FOLDER}/{target['name']}.status.json"] = _file(f"{target['name']} status", status,
                                                                showExpandedSummaryOnGroupNode=True)
        if why:  # nothing to explain: no file (an empty provider in the viewer says nothing either)
            files[f"{FOLDER}/{target['name']}.why.json"] = _file(f"{target['name']} rule and fix", why)
    if op_errors:
        producers = {op.outputs[0].name: (s.index, op.index) for s in model.subgraphs for op in s.ops if op.outputs}
        sqnr: dict[str, dict[str, Any]] = {}
        for entry in op_errors:
            where = producers.get(entry["tensor"])
            if where is None or entry.get("sqnr_db") is None:
                continue
            sqnr.setdefault(graph_id(model, where[0]), {})[str(where[1])] = {"value": round(entry["sqnr_db"], 2)}
        files[f"{FOLDER}/{SQNR_FILE}"] = _file(
            "quantization SQNR (dB)", sqnr, thresholds=[{"value": v, "bgColor": c} for v, c in SQNR_BANDS])
    return files


# -- the viewer ---------------------------------------------------------------------------------


@record
class Overlays:
    """What ``edgeconv view`` shows: a .tflite and its overlay files, in the order Model Explorer lists them."""

    model: Path
    files: tuple[Path, ...]
    kept: bool  # the files stay (a build's explorer/ folder), or are gone when the viewer stops
    verdict: str = ""  # "gate PASS" / "gate FAIL" (a build's), "targets PASS" / "targets FAIL" (a .tflite checked now)
    reasons: tuple[str, ...] = ()


def _order(paths: Sequence[Path], targets: Sequence[str], first: str | None = None) -> list[Path]:
    """Model Explorer shows the last overlay added on the graph: each target's rule and fix, then the
    targets' status, then the one a user should see on opening (``first``: a target's status, or
    ``SQNR_FILE``), last. By default that is the first target's status, with the SQNR below the rest."""
    def target(p: Path) -> str:
        return p.name.split(".")[0]

    def key(p: Path) -> tuple[int, int]:
        if p.name == first or (first is not None and p.name == f"{first}.status.json"):
            return (3, 0)
        rank = targets.index(target(p)) if target(p) in targets else len(targets)
        return (0, 0) if p.name == SQNR_FILE else (1, rank) if p.name.endswith(".why.json") else (2, -rank)

    return sorted((p for p in paths if p.name == SQNR_FILE or target(p) in targets), key=key)


def opening_overlay(report: Mapping[str, Any], targets: Sequence[str], has_sqnr: bool) -> str | None:
    """The overlay that shows why the build failed: the per-op SQNR when an agreement or accuracy gate
    failed (the ops that lose the signal), else the first failing target's status, else the first target's."""
    checks = report.get("gate", {}).get("checks", [])
    failed = [c for c in checks if c.get("outcome") in ("fail", "error")]
    if has_sqnr and any(c.get("kind") in ("agreement", "accuracy") for c in failed):
        return SQNR_FILE
    for c in failed:
        if c.get("kind") in ("target", "accelerator") and c.get("target") in targets:
            return str(c["target"])
    return None


def overlays_for(path: Path, targets: Sequence[str] | None, scratch: Path) -> Overlays:
    """The model and overlays to show for ``path``: a build's output folder (its report.json, its model
    and the overlay files the build wrote) or a .tflite (checked now against ``targets``; files in
    ``scratch``). A build written before the overlays existed gets them from its report."""
    if path.is_dir():
        report_path = path / "report.json"
        if not report_path.is_file():
            raise ConfigError([f"{rel(path)}: not an edgeconv output folder (no report.json); give a build's "
                               "output folder or a .tflite file"])
        try:
            body = json.loads(report_path.read_text())
            model_path = path / body["artifacts"]["tflite"]["path"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError([f"{rel(report_path)}: not an edgeconv report ({exc})"]) from None
        if not model_path.is_file():
            raise ModelFileError(f"{rel(model_path)}: the model the report names is missing")
        names = [t["name"] for t in body.get("targets", [])]
        _known(targets, names, rel(report_path))
        folder = path / FOLDER
        kept = folder.is_dir()
        if not kept:
            _write(scratch, node_data(read_tflite(model_path), body.get("targets", []), body.get("culprits")))
            folder = scratch / FOLDER
        files = sorted(folder.glob("*.json"))
        first = opening_overlay(body, targets or names, any(f.name == SQNR_FILE for f in files))
        gate = str(body.get("gate", {}).get("verdict", "")).upper()
        return Overlays(model_path, tuple(_order(files, targets or names, first)), kept, f"gate {gate}" if gate else "",
                        tuple(body.get("gate", {}).get("reasons", [])))
    if path.suffix.lower() != ".tflite":
        raise ConfigError([f"{rel(path)}: give a build's output folder or a .tflite file"])
    from .report_targets import targets_json
    from .targets import load_target
    from .targets.checker import check_model

    names = list(targets or ["generic-int8"])
    model = read_tflite(path)
    checked = targets_json(check_model(model, load_target(n)) for n in names)
    _write(scratch, node_data(model, checked))
    failing = [t["name"] for t in checked if t["verdict"] != "pass"]
    reasons = tuple(f"target {t['name']}: {t['verdict']}" for t in checked if t["verdict"] != "pass")
    return Overlays(path, tuple(_order(sorted((scratch / FOLDER).glob("*.json")), names,
                                       failing[0] if failing else None)),
                    kept=False, verdict=f"targets {'FAIL' if failing else 'PASS'}", reasons=reasons)


def _write(folder: Path, files: Mapping[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def _known(targets: Sequence[str] | None, names: Sequence[str], where: str) -> None:
    for t in targets or ():
        if t not in names:
            raise ConfigError([f"{where}: --target {t!r} was not checked by this build (it checked: "
                               f"{', '.join(names) or 'no target'}){did_you_mean(t, names)}"])


def _model_explorer() -> Any:
    try:
        import model_explorer
    except ImportError:
        raise EdgeconvError("edgeconv view needs Model Explorer, an optional extra: "
                            "pip install 'edgeconv[view]' (or pip install ai-edge-model-explorer)") from None
    return model_explorer


def titled(overlays: Overlays, scratch: Path) -> Path:
    """The model under a name that carries the verdict, the title Model Explorer shows above the graph:
    ``seg - gate FAIL (target edgetpu, output 'digit').tflite``, a link (or a copy) in ``scratch``. Without a
    verdict, the model itself."""
    if not overlays.verdict:
        return overlays.model
    kinds = list(dict.fromkeys(r.split(":", 1)[0] for r in overlays.reasons))
    why = f" ({', '.join(kinds)})" if kinds else ""
    name = f"{overlays.model.stem} - {overlays.verdict}{why}"
    name = "".join(c if c.isprintable() and c not in '/\\:*?"<>|' else " " for c in name)[:200] + ".tflite"
    shown = scratch / "model" / name
    shown.parent.mkdir(parents=True, exist_ok=True)
    try:
        shown.symlink_to(overlays.model.resolve())
    except OSError:  # no symbolic links here (some Windows accounts): a copy
        import shutil

        shutil.copyfile(overlays.model, shown)
    return shown


def _config(overlays: Overlays, model: Path | None = None) -> Any:
    config = _model_explorer().config().add_model_from_path(str((model or overlays.model).absolute()))
    for f in overlays.files:
        config.add_node_data_from_path(str(f.resolve()))
    return config


def url(overlays: Overlays, host: str, port: int, model: Path | None = None) -> str:
    """The address that opens the model with its overlays (Model Explorer encodes its config in the URL)."""
    return f"http://{host}:{port}/?data={_config(overlays, model).to_url_param_value()}"


SHORT_PATH = "/edgeconv"


class _FlaskWithShortAddress:
    """Model Explorer's ``flask`` module as its server sees it, but each app it makes also answers
    ``/edgeconv`` with a redirect to the long address (the config it encodes is 600-900 characters)."""

    def __init__(self, flask: Any, target: str) -> None:
        self._flask, self._target = flask, target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._flask, name)

    def Flask(self, *args: Any, **kwargs: Any) -> Any:  # flask's name
        app = self._flask.Flask(*args, **kwargs)
        app.add_url_rule(SHORT_PATH, "edgeconv_view", lambda: self._flask.redirect(self._target))
        return app


def no_version_check(print_msg: bool = True) -> dict[str, str]:
    """Model Explorer's version check as edgeconv runs it: no request to PyPI, nothing newer to show."""
    return {"version": "", "runningVersion": "", "releaseUrl": "", "desktopAppUrl": ""}


def serve(overlays: Overlays, host: str, port: int, on_ready: Callable[[str], None],
          model: Path | None = None) -> None:
    """Run Model Explorer's server for ``overlays`` until Ctrl-C, SIGTERM or :func:`edgeconv.cancel.request`.
    ``on_ready(address)`` is called once the page answers, with a short address (``/edgeconv``, redirected to
    Model Explorer's own) where the server takes one. ``model``: the path to show the model under (its
    title; default the model's). Model Explorer's own console lines (it prints them) go to the debug log."""
    import contextlib
    import sys
    import threading
    import time

    from . import cancel

    config = _config(overlays, model)
    from model_explorer import server

    long_address = url(overlays, host, port, model)
    short = hasattr(server, "flask") and hasattr(server.flask, "Flask")
    if short:
        flask = getattr(server.flask, "_flask", server.flask)  # a second view in this process: not wrapped twice
        server.flask = _FlaskWithShortAddress(flask, long_address.split(f"{port}", 1)[1])

    # Model Explorer asks PyPI for a newer release on every start (in a thread) and on every page load (its
    # /api/v1/check_new_version calls it with print_msg=False): not from edgeconv. The stand-in takes the same
    # argument and answers "nothing newer" (a zero-argument one made every page load an HTTP 500 and a
    # traceback on the console).
    if hasattr(server, "_check_new_version"):
        server._check_new_version = no_version_check
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    stdout = sys.stdout
    thread = threading.Thread(target=server.start, daemon=True, kwargs=dict(
        host=host, port=port, config=config, no_open_in_browser=True))
    with contextlib.redirect_stdout(_DebugLines()):
        thread.start()
        deadline = time.monotonic() + 60
        while not _answers(host, port):
            cancel.check()
            if not thread.is_alive():
                raise EdgeconvError(f"Model Explorer did not start on {host}:{port}; is the port in use? "
                                    "(--port picks another)")
            if time.monotonic() > deadline:
                raise EdgeconvError(f"Model Explorer did not answer on {host}:{port} within 60 s")
            time.sleep(0.2)
        with contextlib.redirect_stdout(stdout):
            on_ready(f"http://{host}:{port}{SHORT_PATH}" if short and _answers(host, port, SHORT_PATH)
                     else long_address)
        while thread.is_alive():
            cancel.check()
            time.sleep(0.2)


def _answers(host: str, port: int, path: str = "/") -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


class _DebugLines(io.TextIOBase):
    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                log.debug("model explorer: %s", line)
        return len(text)


def free_port(host: str) -> int:
    """A port nothing listens on now (the OS picks it)."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
