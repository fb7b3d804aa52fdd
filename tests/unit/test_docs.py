"""The README and docs/: the README stays a screen's worth of reading, every link resolves (files and
headings), every number the README states names the script, test or code that produces it, and the
generated pages are current."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

from edgeconv._version import SCHEMA_BASE_URL
from edgeconv.gates import DEFAULTS

from ..conftest import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
# A measured quantity: a number with a unit (not a version, a count of keys, or a list index).
MEASURED = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:%|s\b|ms\b|MiB\b|MB\b|GiB\b|dB\b|x\b|minutes\b|bytes\b)")
SOURCE = re.compile(r"`((?:scripts|tests|\.ci|edgeconv)/[\w./-]+)`")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (not '-' or '_'), spaces to '-'."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _without_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", _without_code(path.read_text()), re.M)
    return {_slug(h) for h in headings}


def _links(path: Path) -> list[str]:
    return LINK.findall(_without_code(path.read_text()))


def _blocks(text: str) -> list[str]:
    """Paragraphs, list items and table rows of prose (code blocks left out)."""
    blocks: list[str] = []
    for paragraph in re.split(r"\n\s*\n", _without_code(text)):
        if paragraph.lstrip().startswith("|"):
            blocks.extend(paragraph.splitlines())
        else:
            blocks.extend(re.split(r"\n(?=- )", paragraph))
    return blocks


def test_the_readme_fits_a_screens_worth_of_reading() -> None:
    assert len(README.read_text().splitlines()) <= 250


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_every_link_resolves(doc: Path) -> None:
    broken = []
    for target in _links(doc):
        if re.match(r"[a-z]+:", target):
            continue  # an address on the web: not fetched here (no network in the tests)
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading with that anchor in {path.name}")
    assert broken == []


def test_every_doc_is_reachable_from_the_readme() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _links(README) if not re.match(r"[a-z]+:", t)}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []


def test_every_number_the_readme_states_names_its_source() -> None:
    """A measured number (a time, a share, a size, a ratio) sits in a paragraph, list item or table row that
    names the script, test or code it comes from, and that file exists; the console block is checked against
    the example's real output by tests/integration/test_example.py."""
    unsourced, missing = [], []
    for block in _blocks(README.read_text()):
        if not MEASURED.search(block):
            continue
        sources = SOURCE.findall(block)
        if not sources:
            unsourced.append(block.strip()[:100])
        missing.extend(s for s in sources if not (REPO / s).exists())
    assert (unsourced, missing) == ([], [])


def test_the_readme_states_the_default_gates_the_code_applies() -> None:
    readme = README.read_text()
    paragraph = next(b for b in _blocks(readme) if b.startswith("With no `gates` section"))
    assert f"more than {DEFAULTS['max_accuracy_drop'] * 100:g} points of accuracy" in paragraph
    assert f"under {DEFAULTS['min_sqnr_db']:g} dB" in paragraph
    assert f"top-1 agreement under\n{DEFAULTS['min_top1_agreement'] * 100:g} %" in paragraph
    assert DEFAULTS["min_accelerator_mac_share"] == 0.5 and "under half of the model's MACs" in paragraph


def test_the_schema_address_editors_fetch_is_the_committed_files() -> None:
    """The "$id" of each schema is where editors fetch it: the committed file's path at the v1 tag, the
    address the README's and the docs' modelines use."""
    for name in ("pipeline", "report"):
        path = REPO / "edgeconv" / "schemas" / f"{name}.schema.json"
        schema_id = json.loads(path.read_text())["$id"]
        assert schema_id == SCHEMA_BASE_URL + path.name
        assert schema_id.startswith("https://raw.githubusercontent.com/edgeconv/edgeconv/v1/")
        assert schema_id.endswith("/" + path.relative_to(REPO).as_posix())
    modeline = f"# yaml-language-server: $schema={SCHEMA_BASE_URL}pipeline.schema.json"
    assert modeline in README.read_text() and modeline in (REPO / "docs" / "PIPELINE.md").read_text()


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pipeline_reference_is_current() -> None:
    module = _script("gen_pipeline_reference")
    committed = (REPO / "docs" / "PIPELINE_REFERENCE.md").read_text()
    assert committed == module.render(), "stale: run python scripts/gen_pipeline_reference.py"


def test_the_pipeline_reference_documents_every_key() -> None:
    text = (REPO / "docs" / "PIPELINE_REFERENCE.md").read_text()
    for key in ("model.path", "calibration.preprocess.mean", "calibration.features.<name>.decode",
                "passes[].layers", "gates.min_sqnr_db", "output.golden.intermediates", "repair.allow_interface_change"):
        assert f"| `{key}` |" in text
