"""lower-conv-to-gemm: rewrite Conv2D as im2col patch extraction plus one matrix multiply.

For targets without a convolution kernel (a GEMM-only accelerator, a micro
without CONV_2D in its op resolver), every ``Conv2D`` becomes

    pad -> KH*KW strided slices (one per kernel tap) -> concat on channels
        -> reshape to (N*OH*OW, KH*KW*C) -> MatMul with the kernel as (KH*KW*C, OC)
        [-> BiasAdd] -> reshape to (N, OH, OW, OC)

which the converter emits as PAD / STRIDED_SLICE / CONCATENATION / RESHAPE /
FULLY_CONNECTED. A 1x1 convolution needs no patches: (strided slice,) reshape and
MatMul. The concat order (tap row, tap column, channel) is the row-major order of
the kernel's first three axes, so the kernel only needs a reshape. A BiasAdd that
directly follows the convolution moves before the final reshape, so the converter
fuses it into the FULLY_CONNECTED bias.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

from .._lazy import lazy_import
from .._record import record
from .._schema import setting
from ..errors import ModelError, did_you_mean
from ..ir import FrozenGraph
from .base import PassResult, Removal, Rewrite
from .graph import GraphEditor

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

REASON = "Conv2D lowered to im2col patches + MatMul (GEMM)"


@record
class LowerConvToGemmPass:
    """Rewrite every Conv2D as im2col patch extraction plus MatMul; 1x1 convolutions
    become a plain MatMul."""

    layers: tuple[str, ...] = setting("Lower only the convolutions of these source layers (default: all).",
                                      factory=tuple)

    name: ClassVar[str] = "lower-conv-to-gemm"
    summary: ClassVar[str] = (
        "Rewrite Conv2D as im2col patches + MatMul (FULLY_CONNECTED in the .tflite) for targets without a "
        "convolution kernel; 1x1 convolutions become a plain MatMul. The report gives each GEMM's M x K x N.")

    def apply(self, graph: FrozenGraph) -> tuple[FrozenGraph, PassResult]:
        ed = GraphEditor(graph)
        # Input names as they are now: rewriting one convolution renames the input of the next.
        convs = [(n, n.input[0], n.input[1]) for n in ed.graph_def.node if n.op == "Conv2D"]
        shapes = _static_shapes(graph, [t for _, x, w in convs for t in (x, w)])
        rewrites: list[Rewrite] = []
        notes: list[str] = []
        reasons: dict[str, str] = {}
        with_convs = sorted({layer for conv, _, _ in convs for layer in ed.layers_of(conv.name)})
        for wanted in self.layers:
            if wanted not in with_convs:
                raise ModelError(f"pass {self.name}: layers: {wanted!r} has no Conv2D (layers with convolutions: "
                                 f"{', '.join(with_convs) or 'none'}){did_you_mean(wanted, with_convs)}")
        for conv, x, w in convs:
            layers = ed.layers_of(conv.name)
            if self.layers and not set(layers) & set(self.layers):
                continue
            x_shape, w_shape = shapes.get(x), shapes.get(w)
            why_not = _unsupported(conv, x_shape, w_shape)
            if why_not:
                notes.append(f"Conv2D {conv.name!r} ({', '.join(layers) or 'no layer'}) left as it is: {why_not}")
                continue
            assert x_shape is not None and w_shape is not None
            rewrites.append(Rewrite(layers, conv.name, _lower(ed, conv, x_shape, w_shape)))
            reasons[conv.name] = REASON
        removed = tuple(Removal(n.op, n.name, ed.layers_of(n.name), reasons.get(n.name, "no longer used"))
                        for n in ed.prune())
        result = ed.finish()
        return result, PassResult(self.name, graph.op_counts(), result.op_counts(), removed, tuple(rewrites),
                                  tuple(notes))


def _static_shapes(graph: FrozenGraph, tensors: list[str]) -> dict[str, tuple[int, ...] | None]:
    """Static shapes of the given tensors, by TF's shape inference on the (pinned) graph."""
    from .._tf import import_tf

    tf = import_tf()
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(graph.graph_def, name="")
    out: dict[str, tuple[int, ...] | None] = {}
    unknown = []
    for t in tensors:
        shape = g.get_tensor_by_name(t if ":" in t else f"{t}:0").shape
        out[t] = tuple(int(d) for d in shape) if shape.is_fully_defined() else None
        if out[t] is None:
            unknown.append(t)
    if unknown:
        # Shape inference cannot see through some ops (e.g. the crops of a dilated convolution's
        # BatchToSpaceND); the input shapes are pinned, so one run on zeros gives the real shapes.
        feeds = {g.get_tensor_by_name(i.tensor): np.zeros(i.shape, i.dtype) for i in graph.inputs}
        fetches = [g.get_tensor_by_name(t if ":" in t else f"{t}:0") for t in unknown]
        with tf.compat.v1.Session(graph=g) as session:
            values = session.run(fetches, feeds)
        out.update({t: tuple(int(d) for d in v.shape) for t, v in zip(unknown, values)})
    return out


def _unsupported(conv: Any, x: tuple[int, ...] | None, w: tuple[int, ...] | None) -> str:
    if conv.attr["data_format"].s not in (b"", b"NHWC"):
        return f"data format {conv.attr['data_format'].s.decode()} (only NHWC is lowered)"
    if x is None or w is None:
        return "its input or kernel shape is not static"
    if len(x) != 4 or len(w) != 4:
        return f"unexpected ranks: input {list(x)}, kernel {list(w)}"
    if w[2] != x[3]:
        return f"grouped convolution (kernel takes {w[2]} channels, input has {x[3]})"
    return ""


def _pads(size: int, kernel: int, stride: int, dilation: int, padding: bytes) -> tuple[int, int, int]:
    """(pad before, pad after, output size) along one spatial axis, as TF computes them."""
    effective = (kernel - 1) * dilation + 1
    if padding == b"SAME":
        out = math.ceil(size / stride)
        total = max((out - 1) * stride + effective - size, 0)
        return total // 2, total - total // 2, out
    return 0, 0, (size - effective) // stride + 1  # VALID


def _lower(ed: GraphEditor, conv: Any, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> str:
    n, h, w, c = x_shape
    kh, kw, _, oc = w_shape
    sh, sw = int(conv.attr["strides"].list.i[1]), int(conv.attr["strides"].list.i[2])
    dilations = list(conv.attr["dilations"].list.i) or [1, 1, 1, 1]
    dh, dw = int(dilations[1]), int(dilations[2])
    padding = conv.attr["padding"].s
    if padding == b"EXPLICIT":
        p = list(conv.attr["explicit_paddings"].list.i)
        top, bottom, left, right = p[2], p[3], p[4], p[5]
        oh = (h + top + bottom - ((kh - 1) * dh + 1)) // sh + 1
        ow = (w + left + right - ((kw - 1) * dw + 1)) // sw + 1
    else:
        top, bottom, oh = _pads(h, kh, sh, dh, padding)
        left, right, ow = _pads(w, kw, sw, dw, padding)
    dtype = conv.attr["T"].type
    base = f"{conv.name}/gemm"
    x, kernel = conv.input[0], conv.input[1]
    if top or bottom or left or right:
        paddings = ed.add_const(f"{base}/paddings", np.array([[0, 0], [top, bottom], [left, right], [0, 0]],
                                                             np.int32))
        x = ed.add_node(f"{base}/pad", "Pad", [x, paddings], T=dtype, Tpaddings=3).name
    taps = []
    for i in range(kh):
        for j in range(kw):
            begin = np.array([0, i * dh, j * dw, 0], np.int32)
            end = np.array([n, i * dh + (oh - 1) * sh + 1, j * dw + (ow - 1) * sw + 1, c], np.int32)
            if kh == kw == 1 and sh == sw == 1 and (end[1:3] == (h + top + bottom, w + left + right)).all():
                taps.append(x)  # a 1x1 stride-1 convolution reads the input as it is
                continue
            tap = f"{base}/tap_{i}_{j}"
            ed.add_node(tap, "StridedSlice", [x, ed.add_const(f"{tap}/begin", begin),
                                              ed.add_const(f"{tap}/end", end),
                                              ed.add_const(f"{tap}/strides", np.array([1, sh, sw, 1], np.int32))],
                        T=dtype, Index=3)
            taps.append(tap)
    k = kh * kw * c
    if len(taps) > 1:
        patches = ed.add_node(f"{base}/patches", "ConcatV2", [*taps, ed.add_const(f"{base}/axis", np.array(
            3, np.int32))], T=dtype, Tidx=3, N=len(taps)).name
    else:
        patches = taps[0]
    rows = ed.add_node(f"{base}/rows", "Reshape", [patches, ed.add_const(f"{base}/rows_shape", np.array(
        [n * oh * ow, k], np.int32))], T=dtype, Tshape=3).name
    matrix = ed.add_node(f"{base}/kernel", "Reshape", [kernel, ed.add_const(f"{base}/kernel_shape", np.array(
        [k, oc], np.int32))], T=dtype, Tshape=3).name
    product = ed.add_node(f"{base}/matmul", "MatMul", [rows, matrix], T=dtype).name
    consumers = ed.consumers().get(conv.name, [])
    bias = consumers[0] if len(consumers) == 1 and consumers[0].op == "BiasAdd" else None
    if bias is not None:
        product = ed.add_node(f"{base}/bias", "BiasAdd", [product, bias.input[1]], T=dtype).name
    result = ed.add_node(f"{base}/output", "Reshape", [product, ed.add_const(f"{base}/output_shape", np.array(
        [n, oh, ow, oc], np.int32))], T=dtype, Tshape=3).name
    ed.reroute(bias.name if bias is not None else conv.name, result)
    what = "1x1 convolution" if kh == kw == 1 else "im2col"
    return (f"Conv2D {kh}x{kw} stride {sh}x{sw}{f' dilation {dh}x{dw}' if (dh, dw) != (1, 1) else ''} "
            f"{padding.decode()} on {list(x_shape)} -> {what} + MatMul: GEMM M={n * oh * ow} x K={k} x N={oc}"
            f"{' (+ bias)' if bias is not None else ''}, output {[n, oh, ow, oc]}")

