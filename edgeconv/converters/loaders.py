"""One loader per model format, chosen by ``model.format``.

Every loader returns a ``LoadedModel`` (the frozen inference graph, the names and
static shapes of its inputs and outputs, its source layers, and a reference runner
for the model in inference mode). The modules import TensorFlow only when called.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..config import ModelConfig, ModelFormat
from .model import LoadedModel


def _keras(cfg: ModelConfig, base_dir: Path) -> LoadedModel:
    from .keras_loader import graph_from_keras

    return graph_from_keras(cfg.path, batch_size=cfg.batch_size, input_shapes=cfg.input_shapes,
                            custom_modules=cfg.custom_modules, custom_objects=cfg.custom_objects, base_dir=base_dir,
                            fmt=cfg.resolved_format().value)


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
