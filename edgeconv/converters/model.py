"""What every loader returns, and the helpers they share (shape pinning, layer scopes).

No TensorFlow here: loaders import it themselves, lazily.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from .._record import record
from ..errors import ModelError, did_you_mean
from ..ir import FrozenGraph, Layer

Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


@record
class LoadedModel:
    """The frozen inference graph and a runner for the source model in inference mode.

    ``reference`` runs the model as its own framework does in inference mode (Keras
    with ``training=False``, a SavedModel signature, a GraphDef with its bindings).
    ``reference_without(layers)`` runs it with the named training-only layers
    (dropout/noise) at their inference behaviour, the identity, even when their
    ``call()`` forces ``training=True``; it is the reference for a graph whose
    passes replaced those layers. ``notes`` say what the loader decided for the
    user (bindings, defaults, fallbacks), for the report. With ``any_batch``, the
    reference runs any number of samples per call (parity feeds it large chunks);
    otherwise it takes exactly model.batch_size samples.
    """

    graph: FrozenGraph
    reference: Runner
    format: str
    framework: str
    reference_without: Callable[[Sequence[str]], Runner] | None = None
    notes: tuple[str, ...] = ()
    any_batch: bool = False

    def reference_for(self, layers: Sequence[str]) -> Runner:
        return self.reference_without(layers) if self.reference_without is not None else self.reference


def show_shape(shape: Sequence[int | None] | None) -> str:
    if shape is None:
        return "(unknown rank)"
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ")"


def pin_shapes(declared: Sequence[tuple[str, tuple[int | None, ...] | None]], *, batch_size: int,
               input_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Static shape per input: config pins first, then the batch size; anything still open is an error.

    A declared shape of ``None`` is an input of unknown rank: only ``input_shapes`` can pin it.
    """
    names = [n for n, _ in declared]
    problems = [f"model.input_shapes: {name!r} is not a model input (inputs: {', '.join(names)})"
                f"{did_you_mean(name, names)}" for name in input_shapes if name not in names]
    pinned: dict[str, tuple[int, ...]] = {}
    still_open = []
    for name, shape in declared:
        if name in input_shapes:
            want = input_shapes[name]
            if shape is not None and (len(want) != len(shape)
                                      or any(d is not None and d != w for d, w in zip(shape, want))):
                problems.append(f"model.input_shapes.{name}: {list(want)} does not fit the model's input shape "
                                f"{show_shape(shape)}")
            pinned[name] = tuple(want)
            continue
        if shape is None:
            still_open.append(f"{name!r} {show_shape(shape)}")
            continue
        dims = list(shape)
        if dims and dims[0] is None:
            dims[0] = batch_size
        elif dims and dims[0] != batch_size:
            problems.append(f"model input {name!r} has a fixed batch of {dims[0]} but model.batch_size is "
                            f"{batch_size}; set model.batch_size: {dims[0]}")
        if any(d is None for d in dims):
            still_open.append(f"{name!r} {show_shape(shape)}")
        pinned[name] = tuple(int(d) for d in dims if d is not None)
    if still_open:
        problems.append("model inputs with open dimensions: " + ", ".join(still_open) +
                        "; pin them with model.input_shapes (full shape, batch included)")
    if problems:
        raise ModelError("\n".join(problems))
    return pinned


# Scopes TF adds around function calls; they say nothing about the model's own layers.
_WRAPPERS = ("StatefulPartitionedCall", "PartitionedCall", "Func")


def _unwrapped(name: str) -> list[str]:
    parts = name.split("/")
    while parts and (parts[0].split("_")[0] in _WRAPPERS or parts[0].startswith("StatefulPartitionedCall")):
        parts = parts[1:]
    return parts


def scope_layers(node_names: Iterable[str], *, skip: Iterable[str] = ()) -> tuple[Layer, ...]:
    """Layers of a graph without Keras metadata: its name scopes.

    The top-level scopes (below TF's function-call wrappers) are the layers, unless
    one scope holds every scoped node (a model-name scope such as ``sequential``);
    then its children are. A scope that is itself a node (``dense/BiasAdd``) is an
    op, not a layer. ``skip`` names nodes that are not part of the model (inputs).
    """
    skipped = set(skip)
    names = [n for n in node_names if n not in skipped and not n.startswith("Func/")]  # Func/: call plumbing
    nodes = {"/".join(_unwrapped(n)) for n in names}
    paths = [p for p in (_unwrapped(n) for n in names) if len(p) > 1]
    prefix: list[str] = []
    for _ in range(2):
        firsts = Counter(p[len(prefix)] for p in paths if len(p) > len(prefix) + 1 and p[:len(prefix)] == prefix)
        if not firsts:
            break
        top, count = firsts.most_common(1)[0]
        if len(firsts) > 1 or count < len(paths) or "/".join([*prefix, top]) in nodes:
            break
        prefix.append(top)
    depth = len(prefix)
    seen: dict[str, None] = {}
    for p in paths:
        if p[:depth] == prefix and len(p) > depth + 1:
            scope = p[depth]
            if "/".join(p[:depth + 1]) not in nodes:
                seen.setdefault(scope)
    return tuple(Layer(name, "scope") for name in seen)
