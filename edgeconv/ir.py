"""The intermediate representation the passes work on: a frozen TF graph plus the
names, shapes and source layers around it.

This module does not import TensorFlow; ``graph_def`` is a ``tf.compat.v1.GraphDef``
created and consumed by the TF stages.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

from ._record import record


@record
class TensorSpec:
    """A model input or output: its user-facing name, graph tensor, static shape and dtype."""

    name: str
    tensor: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name, e.g. "float32"

    @property
    def node(self) -> str:
        return self.tensor.split(":")[0]


@record
class Layer:
    """A source layer of the model (a Keras layer), used to attribute graph nodes."""

    name: str
    class_name: str
    # "dropout" or "noise" for layers whose inference behaviour is the identity
    # (Dropout, SpatialDropout*, GaussianNoise, ...); empty for all others.
    training_only: str = ""
    detail: str = ""  # e.g. "rate=0.25"


@record
class FrozenGraph:
    """A frozen inference graph: no variables, static input shapes."""

    graph_def: Any
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    layers: tuple[Layer, ...] = ()

    def replace(self, **changes: Any) -> FrozenGraph:
        return dataclasses.replace(self, **changes)

    def layer_names(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers)

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.graph_def.node:
            counts[node.op] = counts.get(node.op, 0) + 1
        return dict(sorted(counts.items()))


_SUFFIX = re.compile(r"_\d+$")


def scopes_naming(name: str, layers: set[str] | frozenset[str]) -> set[str]:
    """Every layer of ``layers`` that a scope of ``name`` names, as ``source_layers`` matches a scope,
    not only the innermost."""
    scopes = [scope for part in name.split(";") for scope in (part.split("/")[:-1] or part.split("/"))]
    return {n for scope in scopes for n in (scope, _SUFFIX.sub("", scope)) if n in layers}


def source_layers(name: str, layers: Iterable[str]) -> list[str]:
    """Source layer names for a graph node or .tflite tensor name.

    Names are scope paths such as ``digits_1/conv2d_1/convolution``; a .tflite tensor
    of fused ops joins several with ``;``. TF uniquifies scopes with ``_N`` suffixes,
    so a scope matches a layer by its exact name or with one such suffix stripped.
    The innermost matching scope of each path wins.
    """
    known = layers if isinstance(layers, (set, frozenset)) else set(layers)  # callers in loops pass a set
    found: list[str] = []
    for part in name.split(";"):
        match = None
        for scope in part.split("/")[:-1] or part.split("/"):
            if scope in known:
                match = scope
            else:
                stripped = _SUFFIX.sub("", scope)
                if stripped != scope and stripped in known:
                    match = stripped
        if match is not None and match not in found:
            found.append(match)
    return found
