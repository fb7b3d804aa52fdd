"""Several pipelines as the library builds them (edgeconv.many.build_many), as the CLI's `build a b -j N`
does: every outcome, in the order given, each reported through the callback as it ends; a pipeline that
fails or cannot build never stops the others. .tflite pipelines: no TensorFlow (the pool is spawned)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from edgeconv.many import BuildOptions, build_many, expand

from ..conftest import REPO

MODEL = REPO / "tests" / "data" / "softmax-dense.int8.tflite"  # arm-neon: 1 op falls back to the CPU


@pytest.fixture
def pipelines(tmp_path: Path) -> list[Path]:
    shutil.copy(MODEL, tmp_path / "m.tflite")
    made = []
    for name, extra in (("passes", ""), ("fails", "gates: {max_cpu_fallback_ops: {arm-neon: 0}}\n"),
                        ("broken", "bogus: 1\n")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"version: 1\nname: {name}\nmodel: {{path: m.tflite}}\ntargets: [arm-neon]\n"
                        f"output: {{dir: out/{name}}}\n{extra}")
        made.append(path)
    return made


@pytest.mark.parametrize("jobs", [1, 2])
def test_build_many_reports_every_outcome_in_order(pipelines: list[Path], jobs: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGECONV_WORKER", "spawn")
    monkeypatch.setenv("EDGECONV_NO_CACHE", "1")
    seen: list[str] = []
    outcomes = build_many(pipelines, BuildOptions(), jobs=jobs, on_outcome=lambda o: seen.append(o.pipeline.stem))
    assert [(o.pipeline.stem, int(o.code)) for o in outcomes] == [("passes", 0), ("fails", 1), ("broken", 2)]
    assert sorted(seen) == ["broken", "fails", "passes"]
    assert outcomes[2].error is not None and "unknown key 'bogus'" in outcomes[2].error
    assert (pipelines[0].parent / "out" / "passes" / "passes.tflite").is_file()


def test_expand_keeps_order_and_refuses_an_empty_glob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeconv import EdgeconvError

    monkeypatch.chdir(tmp_path)
    for name in ("b.yaml", "a.yaml"):
        (tmp_path / name).write_text("")
    assert expand(["b.yaml", "*.yaml"]) == [Path("b.yaml"), Path("a.yaml")]
    with pytest.raises(EdgeconvError, match=r"^nothing\*\.yml: no pipeline file matches$"):
        expand(["nothing*.yml"])
