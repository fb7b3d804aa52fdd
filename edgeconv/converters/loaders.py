"""One loader per model format, chosen by ``model.format``.

Every loader returns a ``LoadedModel`` (the frozen inference graph, the names and
static shapes of its inputs and outputs, its source layers, and a reference runner
for the model in inference mode). The modules import TensorFlow only when called.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .._log import get_logger
from ..config import ModelConfig, ModelFormat
from ..errors import ConfigError, ModelError, did_you_mean, rel
from .model import LoadedModel

if TYPE_CHECKING:
    from ..calibration.samples import Progress
    from .tflite_export import Worker

log = get_logger(__name__)


def _keras(cfg: ModelConfig, base_dir: Path) -> LoadedModel:
    from .keras_loader import graph_from_keras

    return graph_from_keras(cfg.path, batch_size=cfg.batch_size, input_shapes=cfg.input_shapes,
                            custom_modules=cfg.custom_modules, custom_objects=cfg.custom_objects, base_dir=base_dir,
                            fmt=cfg.resolved_format().value, trust_code=cfg.trust_code)


def _savedmodel(cfg: ModelConfig, base_dir: Path) -> LoadedModel:
    from .savedmodel_loader import graph_from_savedmodel

    return graph_from_savedmodel(cfg.path, signature=cfg.signature, batch_size=cfg.batch_size,
                                 input_shapes=cfg.input_shapes, bind=cfg.bind, trust_code=cfg.trust_code)


def _graphdef(cfg: ModelConfig, base_dir: Path) -> LoadedModel:
    from .graphdef_loader import graph_from_graphdef

    return graph_from_graphdef(cfg.path, batch_size=cfg.batch_size, input_shapes=cfg.input_shapes,
                               inputs=cfg.inputs, outputs=cfg.outputs, bind=cfg.bind, trust_code=cfg.trust_code)


LOADERS: dict[ModelFormat, Callable[[ModelConfig, Path], LoadedModel]] = {
    ModelFormat.KERAS: _keras,
    ModelFormat.H5: _keras,
    ModelFormat.SAVEDMODEL: _savedmodel,
    ModelFormat.GRAPHDEF: _graphdef,
}


def load_model(cfg: ModelConfig, base_dir: Path) -> LoadedModel:
    """Load ``cfg.path`` with the loader for its format (``.tflite`` models are not loaded: they are checked)."""
    return LOADERS[cfg.resolved_format()](cfg, base_dir)


def load_stage(model: ModelConfig, named_outputs: Mapping[str, Collection[str]], pipeline: Path, worker: Worker,
               progress: Progress | None, boxes: Collection[str] = ()) -> LoadedModel:
    """The model in inference mode (the converter worker started first: see :func:`start_worker`; paths
    relative to the ``pipeline`` file's folder); the output names the pipeline gives (``named_outputs``: per
    key, such as verify.outputs or gates.min_sqnr_db), known to be outputs only now, checked before any data
    is read; so are the shapes of the outputs declared ``boxes``."""
    log.info("loading %s (%s) in inference mode", rel(model.path), model.resolved_format().value)
    start_worker(worker, progress)
    loaded = load_model(model, pipeline.parent)
    odd = [(which, spec.name) for which, specs in (("input", loaded.graph.inputs), ("output", loaded.graph.outputs))
           for spec in specs if not spec.name.isprintable()]
    if odd:  # they would reach the console, report.md, JUnit and the annotations as they are
        raise ModelError("; ".join(
            f"{rel(model.path)}: model {which} name {name!r} holds a character that is not printable (a newline, a "
            f"terminal escape). Fix: rename the {which}" for which, name in odd))
    outputs = [o.name for o in loaded.graph.outputs]
    unknown = [(key, name) for key, names in named_outputs.items() for name in sorted(set(names) - set(outputs))]
    if unknown:
        raise ConfigError([f"{rel(pipeline)}: {key}: {name!r} is not a model output (outputs: "
                           f"{', '.join(outputs)}){did_you_mean(name, outputs)}" for key, name in unknown])
    unboxed = [o for o in loaded.graph.outputs if o.name in boxes and (
        not o.shape or (o.shape[-1] is not None and o.shape[-1] % 4))]
    if unboxed:
        raise ConfigError([f"{rel(pipeline)}: verify.outputs.{o.name}: boxes, but the output's shape "
                           f"{list(o.shape)} does not end in corner boxes of 4 values (declare it regression)"
                           for o in unboxed])
    return loaded


def start_worker(worker: Worker, progress: Progress | None) -> None:
    """TensorFlow imported once per build: here, then the converter worker is this process forked, before
    the model is loaded (before TensorFlow's runtime starts). A live terminal display pauses its drawing
    thread over the fork (``progress.paused()``, when it has one). Where a fork is not safe the worker is a
    new interpreter, and its import overlaps this process's loading. A repaired rebuild finds it running."""
    from .._tf import import_tf

    import_tf()
    with getattr(progress, "paused", contextlib.nullcontext)():
        worker.start()


def forget_user_code(modules_before: set[str], folder: Path) -> None:
    """Forget the modules this build imported from the pipeline's folder (custom layers, a python data
    source) and the Keras classes they registered: the next pipeline built in this process, with a
    module of the same name in its own folder, must get its own (not this one's from sys.modules)."""
    import sysconfig

    root = folder.resolve()
    # Installed code and edgeconv itself are never the pipeline's, even when they live below its folder (a
    # virtual environment or a clone of edgeconv in the project).
    installed = {Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    installed |= {p.resolve() for p in installed} | {Path(__file__).resolve().parents[1]}
    # A build imports thousands of modules (TensorFlow's): their files are tested as strings against the
    # installed folders first, and each remaining folder is resolved once.
    prefixes = tuple(os.path.join(str(p), "") for p in installed)
    folders: dict[str, bool] = {}
    gone = []
    for name in set(sys.modules) - modules_before:
        file = getattr(sys.modules[name], "__file__", None)
        if not file or file.startswith(prefixes):
            continue
        where = os.path.dirname(file)
        if where not in folders:
            resolved = Path(where).resolve()
            folders[where] = (root == resolved or root in resolved.parents) and not any(
                p == resolved or p in resolved.parents for p in installed)
        if folders[where]:
            gone.append(sys.modules.pop(name))
    if gone and "keras" in sys.modules:
        import keras

        registry = keras.saving.get_custom_objects()
        for key in [k for k, v in registry.items() if getattr(v, "__module__", None) in {m.__name__ for m in gone}]:
            del registry[key]
