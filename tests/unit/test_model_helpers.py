"""Loader helpers that need no TensorFlow: shape pinning and layers from name scopes."""

from __future__ import annotations

import pytest

from edgeconv import ModelError
from edgeconv.converters.model import pin_shapes, scope_layers


def test_pin_shapes_fills_the_batch_and_takes_configured_shapes() -> None:
    declared = [("image", (None, 6, 5, 3)), ("meta", None)]
    assert pin_shapes(declared, batch_size=2, input_shapes={"meta": (2, 7)}) == {"image": (2, 6, 5, 3),
                                                                                "meta": (2, 7)}


@pytest.mark.parametrize(("declared", "input_shapes", "message"), [
    ([("image", None)], {}, "model inputs with open dimensions: 'image' (unknown rank); pin them with "
                            "model.input_shapes (full shape, batch included)"),
    ([("image", (None, None, 5))], {}, "model inputs with open dimensions: 'image' (None, None, 5); pin them with "
                                       "model.input_shapes (full shape, batch included)"),
    ([("image", (4, 6))], {}, "model input 'image' has a fixed batch of 4 but model.batch_size is 1; set "
                              "model.batch_size: 4"),
    ([("image", (None, 6))], {"imag": (1, 6)}, "model.input_shapes: 'imag' is not a model input (inputs: image); "
                                               "did you mean 'image'?"),
    ([("image", (None, 6))], {"image": (1, 7)}, "model.input_shapes.image: [1, 7] does not fit the model's input "
                                                "shape (None, 6)"),
])
def test_pin_shapes_errors(declared: list, input_shapes: dict, message: str) -> None:
    with pytest.raises(ModelError) as err:
        pin_shapes(declared, batch_size=1, input_shapes=input_shapes)
    assert str(err.value) == message


@pytest.mark.parametrize(("names", "layers"), [
    # A TF1 graph: top-level scopes; a scope that is itself a node (flatten/shape) is an op's constant.
    (["image", "conv1/kernel", "conv1/Conv2D", "bn1/cond/Switch", "bn1/cond/Merge", "relu1", "flatten",
      "flatten/shape", "logits/MatMul", "probs"], ["conv1", "bn1", "logits"]),
    # A Keras SavedModel: call wrappers and the model scope are not layers; its children are.
    (["serving_default_x", "StatefulPartitionedCall/sequential/dense/MatMul",
      "StatefulPartitionedCall/sequential/dense/BiasAdd", "StatefulPartitionedCall/sequential/dense/BiasAdd/Read",
      "StatefulPartitionedCall/sequential/out/MatMul", "Func/StatefulPartitionedCall/input/_0", "Identity"],
     ["dense", "out"]),
])
def test_scope_layers(names: list[str], layers: list[str]) -> None:
    assert [layer.name for layer in scope_layers(names, skip=["image", "serving_default_x"])] == layers


@pytest.mark.parametrize(("mapping", "inputs", "outputs", "graph_output"), [
    ({"b": "a"}, ["b", "b:1", "^b"], ["a", "b:1", "^b"], "c"),  # control edges and other ports stay
    ({"c": "b", "b": "a"}, ["c", "b"], ["a", "a"], "a"),  # a chain resolves as if rerouted one by one
    ({"b": "a", "c": "b"}, ["c:0"], ["a"], "a"),  # in any order, and ``c:0`` is ``c``
    ({"b": "c", "c": "b"}, ["b"], ["c"], "b"),  # a cycle (no pass makes one) ends before a name repeats
])
def test_reroute_many_is_reroute_one_by_one(mapping: dict[str, str], inputs: list[str], outputs: list[str],
                                            graph_output: str) -> None:
    from edgeconv.ir import FrozenGraph, TensorSpec
    from edgeconv.passes.graph import GraphEditor

    class _Node:
        def __init__(self, name: str, inputs: list[str]) -> None:
            self.name, self.op, self.input = name, "Identity", list(inputs)

    class _GraphDef:
        def __init__(self) -> None:
            self.node = [_Node("user", inputs)]

    graph = FrozenGraph(_GraphDef(), (), (TensorSpec("out", "c:0", (1,), "float32"),))
    ed = GraphEditor(graph)
    ed.reroute_many(mapping)
    assert ed.graph_def.node[0].input == outputs
    assert ed.outputs == [graph_output]
