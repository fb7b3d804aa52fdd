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

import dataclasses
import io
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import report_model as rm
from .converters.tflite_reader import TFLiteModel, read_tflite
from .errors import ConfigError, EdgeconvError, ModelFileError, did_you_mean, rel

log = logging.getLogger(__name__)

FOLDER = "explorer"
#: Background colour of each status (light, so the node's label stays readable).
STATUS_COLOURS = {"supported": "#c8e6c9", "uncertain": "#fff59d", "cpu_fallback": "#ffcc80",
                  "unsupported": "#ef9a9a"}
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
        status: dict[str, dict[str, Any]] = {}
        why: dict[str, dict[str, Any]] = {}
        for (subgraph, index), op in sorted(by_index.items()):
            g = graph_id(model, subgraph)
            status.setdefault(g, {})[str(index)] = {"value": op["status"], "bgColor": STATUS_COLOURS[op["status"]]}
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


@dataclasses.dataclass(frozen=True)
class Overlays:
    """What ``edgeconv view`` shows: a .tflite and its overlay files, in the order Model Explorer lists them."""

    model: Path
    files: tuple[Path, ...]
    kept: bool  # the files stay (a build's explorer/ folder), or are gone when the viewer stops


def _order(paths: Sequence[Path], targets: Sequence[str]) -> list[Path]:
    """Model Explorer shows the last overlay added on the graph: the SQNR first, then each target's rule and
    fix, then the targets' status, the first target's last (the one a user sees on opening)."""
    def target(p: Path) -> str:
        return p.name.split(".")[0]

    def key(p: Path) -> tuple[int, int]:
        rank = targets.index(target(p)) if target(p) in targets else len(targets)
        return (0, 0) if p.name == SQNR_FILE else (1, rank) if p.name.endswith(".why.json") else (2, -rank)

    return sorted((p for p in paths if p.name == SQNR_FILE or target(p) in targets), key=key)


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
        return Overlays(model_path, tuple(_order(sorted(folder.glob("*.json")), targets or names)), kept)
    if path.suffix.lower() != ".tflite":
        raise ConfigError([f"{rel(path)}: give a build's output folder or a .tflite file"])
    from .report import targets_json
    from .targets import load_target
    from .targets.checker import check_model

    names = list(targets or ["generic-int8"])
    model = read_tflite(path)
    _write(scratch, node_data(model, targets_json(check_model(model, load_target(n)) for n in names)))
    return Overlays(path, tuple(_order(sorted((scratch / FOLDER).glob("*.json")), names)), kept=False)


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


def _config(overlays: Overlays) -> Any:
    config = _model_explorer().config().add_model_from_path(str(overlays.model.resolve()))
    for f in overlays.files:
        config.add_node_data_from_path(str(f.resolve()))
    return config


def url(overlays: Overlays, host: str, port: int) -> str:
    """The address that opens the model with its overlays (Model Explorer encodes its config in the URL)."""
    return f"http://{host}:{port}/?data={_config(overlays).to_url_param_value()}"


def no_version_check(print_msg: bool = True) -> dict[str, str]:
    """Model Explorer's version check as edgeconv runs it: no request to PyPI, nothing newer to show."""
    return {"version": "", "runningVersion": "", "releaseUrl": "", "desktopAppUrl": ""}


def serve(overlays: Overlays, host: str, port: int, on_ready: Callable[[str], None]) -> None:
    """Run Model Explorer's server for ``overlays`` until Ctrl-C, SIGTERM or :func:`edgeconv.cancel.request`.
    ``on_ready(url)`` is called once the page answers. Model Explorer's own console lines (it prints them)
    go to the debug log."""
    import contextlib
    import sys
    import threading
    import time

    from . import cancel

    config = _config(overlays)
    from model_explorer import server

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
            on_ready(url(overlays, host, port))
        while thread.is_alive():
            cancel.check()
            time.sleep(0.2)


def _answers(host: str, port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{host}:{port}/", timeout=2) as answer:
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
