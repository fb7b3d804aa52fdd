"""A model zoo as a CI job matrix: each job builds its shard of the pipelines (``build --shard K/N``), and
one final job merges the jobs' results into one verdict (``edgeconv summary RESULTS.json...``).

A pipeline's shard is a function of its path and N alone (sha256 of the path, modulo N): adding or
removing a pipeline moves no other pipeline to another shard; changing N does. The path is taken as given
on the command line, relative to the working directory (the repository root of every matrix job), in
POSIX form; an absolute path inside the working directory is made relative first.

Each job's ``--results-json`` records its shard, every pipeline it was given (the whole zoo, before
sharding) and each of its builds with the report. The merge refuses what would hide a failure: a shard
whose results are missing or given twice, jobs given different zoos, a pipeline built by the wrong shard
or by two, a pipeline of the zoo no job built, a result whose exit code is not its report's verdict. Then
the exit code is the worst of the builds, as one ``build`` of every pipeline would return.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import verdict
from ._record import record
from .ci import EXIT_WORDS, Outcome
from .errors import EdgeconvError, rel
from .exit_codes import Exit, of_gate

if TYPE_CHECKING:
    from . import report_model as rm

FORMAT = 2  # the results file: {"format", "edgeconv", "shard", "pipelines", "results"}
MAX_SHARDS = 10_000
MAX_RESULTS_BYTES = 512 << 20  # a results file embeds each build's report (a few MB at most each)
_SHARD = re.compile(r"(\d{1,5})/(\d{1,5})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f`]")  # a path with these would break the summary's Markdown


@record
class Shard:
    index: int  # 1-based, as CI matrices count
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``K/N`` with 1 <= K <= N <= 10,000."""
    found = _SHARD.fullmatch(text.strip())
    if found is None:
        raise EdgeconvError(f"--shard: expected K/N (this job's shard and the number of shards, e.g. 2/4), got "
                            f"{text!r}")
    index, count = int(found[1]), int(found[2])
    if not 1 <= count <= MAX_SHARDS:
        raise EdgeconvError(f"--shard {text}: the number of shards must be 1 to {MAX_SHARDS}, got {count}")
    if not 1 <= index <= count:
        raise EdgeconvError(f"--shard {text}: the shard must be 1 to {count}, got {index}")
    return Shard(index, count)


def identity(path: Path) -> str:
    """What a pipeline's shard is computed from: its path relative to the working directory, POSIX form."""
    text = os.path.normpath(path)
    if os.path.isabs(text):
        inside = os.path.relpath(text, os.getcwd())
        text = text if inside == ".." or inside.startswith("../") else inside
    return Path(text).as_posix()


def shard_of(path: Path, count: int) -> int:
    """The shard (1-based) of ``path`` among ``count``."""
    return int(hashlib.sha256(identity(path).encode()).hexdigest(), 16) % count + 1


def select(paths: Sequence[Path], shard: Shard) -> list[Path]:
    """The pipelines of ``shard``, in the order given."""
    return [p for p in paths if shard_of(p, shard.count) == shard.index]


def results_document(outcomes: Sequence[Outcome], given: Sequence[Path], shard: Shard | None) -> dict[str, Any]:
    """What ``--results-json`` writes: this job's shard, the pipelines it was given, each build with its
    report."""
    from ._version import __version__

    return {
        "format": FORMAT, "edgeconv": __version__,
        "shard": {"index": shard.index, "count": shard.count} if shard else None,
        "pipelines": [identity(p) for p in given],
        "results": [{
            "pipeline": str(o.pipeline), "exit_code": int(o.code), "verdict": EXIT_WORDS.get(o.code, "crash"),
            "reasons": o.report["gate"]["reasons"] if o.report else [], "name": o.name,
            "output_dir": str(o.report_dir) if o.report_dir else None,
            "report": str(o.report_dir / "report.json") if o.report_dir else None, "cached": o.cached,
            "seconds": round(o.seconds, 3), "error": o.error, "crash_log": str(o.crash_log) if o.crash_log else None,
            "report_data": o.report} for o in outcomes],
    }


# -- merging the jobs' results -------------------------------------------------------------------------

@record
class Merged:
    outcomes: list[Outcome]  # in the zoo's order
    files: int
    shards: int | None  # N, when the jobs were shards


def _field(row: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = row.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise EdgeconvError(f"{where}: {name} is {value!r}")
    return value


def _outcome(row: Any, where: str) -> Outcome:
    from .diff import report_from_data

    if not isinstance(row, dict):
        raise EdgeconvError(f"{where}: a result is not an object")
    pipeline = _field(row, "pipeline", str, where)
    if _CONTROL.search(pipeline) or not pipeline:
        raise EdgeconvError(f"{where}: pipeline is {pipeline!r}")
    where = f"{where}: {pipeline}"
    code = _field(row, "exit_code", int, where)
    if code not in (*EXIT_WORDS, Exit.INTERRUPTED, Exit.TERMINATED):
        raise EdgeconvError(f"{where}: exit_code {code} is not an exit code of edgeconv build")
    seconds = row.get("seconds", 0.0)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < 1e7:
        raise EdgeconvError(f"{where}: seconds is {seconds!r}")
    data, error = row.get("report_data"), row.get("error")
    report: rm.Report | None = None
    if data is not None:
        report = report_from_data(data, where)
        failing = any(verdict.fails(c["outcome"]) for c in report["gate"].get("checks", []))
        if (report["gate"].get("verdict") == "pass") == failing:
            raise EdgeconvError(f"{where}: its report's verdict ({report['gate'].get('verdict')}) is not its checks' "
                                "(a check fails only in a failing build); the results were changed after the build")
        if code != of_gate(report["gate"]):
            raise EdgeconvError(f"{where}: exit_code {code} is not its report's verdict "
                                f"({report['gate'].get('verdict')}); the results were changed after the build")
    elif code in (Exit.OK, Exit.GATE):
        raise EdgeconvError(f"{where}: exit_code {code} without its report")
    if error is not None and not isinstance(error, str):
        raise EdgeconvError(f"{where}: error is {error!r}")
    output_dir = row.get("output_dir")
    crash_log = row.get("crash_log")
    for name, value in (("output_dir", output_dir), ("crash_log", crash_log)):
        if value is not None and (not isinstance(value, str) or _CONTROL.search(value)):
            raise EdgeconvError(f"{where}: {name} is {value!r}")
    return Outcome(Path(pipeline), code, float(seconds), report,
                   Path(output_dir) if isinstance(output_dir, str) and report is not None else None, error,
                   bool(row.get("cached") is True), Path(crash_log) if isinstance(crash_log, str) else None)


def _read(path: Path) -> dict[str, Any]:
    from .inputs import read_bytes

    raw = read_bytes(path, MAX_RESULTS_BYTES, what="results file (edgeconv build --results-json)")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise EdgeconvError(f"{rel(path)}: not an edgeconv results file ({exc})") from None
    if isinstance(data, list) or not isinstance(data, dict) or data.get("format") != FORMAT:
        raise EdgeconvError(f"{rel(path)}: not an edgeconv results file of format {FORMAT} (written by edgeconv "
                            "build --results-json of this release)")
    if "shard" not in data:
        raise EdgeconvError(f"{rel(path)}: shard is missing (null for a build of every pipeline)")
    shard = data["shard"]
    if shard is not None:
        index, count = (shard.get("index"), shard.get("count")) if isinstance(shard, dict) else (None, None)
        if not (type(index) is int and type(count) is int and 1 <= index <= count <= MAX_SHARDS):
            raise EdgeconvError(f"{rel(path)}: shard is {shard!r}")
    given = data.get("pipelines")
    if not isinstance(given, list) or not all(isinstance(p, str) for p in given):
        raise EdgeconvError(f"{rel(path)}: pipelines is not a list of paths")
    if not isinstance(data.get("results"), list):
        raise EdgeconvError(f"{rel(path)}: results is not a list")
    return data


def _span(indexes: Sequence[int], count: int) -> str:
    return ", ".join(f"{i}/{count}" for i in indexes)


def merge(paths: Sequence[Path]) -> Merged:
    """The results of every job as one list of outcomes, in the zoo's order; an EdgeconvError (exit 2) for
    anything that would make the merged verdict not the zoo's."""
    if not paths:
        raise EdgeconvError("edgeconv summary: give the results files of the jobs (edgeconv build --results-json)")
    docs = [(path, _read(path)) for path in paths]
    zoos = {tuple(doc["pipelines"]) for _, doc in docs}
    if len(zoos) > 1:
        raise EdgeconvError("the jobs were given different pipelines: "
                            + "; ".join(f"{rel(p)}: {len(d['pipelines'])}" for p, d in docs)
                            + " (every job of the matrix gets the whole list; --shard picks its part)")
    (zoo,) = zoos
    counts = {doc["shard"]["count"] if doc["shard"] else None for _, doc in docs}
    if len(counts) > 1:
        raise EdgeconvError("the results mix shard counts: "
                            + ", ".join(sorted(str(c) if c else "unsharded" for c in counts)))
    (count,) = counts
    if count is None and len(docs) > 1:
        raise EdgeconvError(f"{len(docs)} results files of unsharded builds: merge the shards of one matrix")
    if count is not None:
        seen: dict[int, Path] = {}
        for path, doc in docs:
            index = doc["shard"]["index"]
            if index in seen:
                raise EdgeconvError(f"shard {index}/{count} is given twice: {rel(seen[index])} and {rel(path)}")
            seen[index] = path
        missing = [i for i in range(1, count + 1) if i not in seen]
        if missing:
            raise EdgeconvError(f"shard{'s' if len(missing) > 1 else ''} {_span(missing, count)} "
                                f"ha{'ve' if len(missing) > 1 else 's'} no results: "
                                "the job did not finish or its results file was not given; no verdict without every "
                                "shard")
    built: dict[str, tuple[Outcome, Path]] = {}
    for path, doc in docs:
        for row in doc["results"]:
            outcome = _outcome(row, rel(path))
            name = identity(outcome.pipeline)
            if name in built:
                raise EdgeconvError(f"{name} is built twice: in {rel(built[name][1])} and {rel(path)}")
            if name not in zoo:
                raise EdgeconvError(f"{rel(path)}: {name} is not one of the pipelines the jobs were given")
            if count is not None and shard_of(outcome.pipeline, count) != doc["shard"]["index"]:
                raise EdgeconvError(f"{rel(path)}: {name} belongs to shard {shard_of(outcome.pipeline, count)}/"
                                    f"{count}, not {doc['shard']['index']}/{count}")
            built[name] = (outcome, path)
    unbuilt = [name for name in zoo if name not in built]
    if unbuilt:
        raise EdgeconvError(f"{len(unbuilt)} pipeline(s) of the zoo have no result: {', '.join(unbuilt[:5])}"
                            + (" ..." if len(unbuilt) > 5 else ""))
    return Merged([built[name][0] for name in zoo], len(docs), count)
