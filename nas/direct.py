"""The ONNX graph of a built-in space's candidate, straight from its description.

A trial of a built-in space (``scaled``, ``mobilenet``, ``resnet``) is sent to the service
as the graph this module writes from the architecture description, weightless (what
:func:`estimator.onnx_strip.strip_initializers` leaves: initializers with name, type and dims,
no data). It is the graph the torch export followed by onnxsim gives (:mod:`nas.export`):
the same nodes, attributes and shapes, BatchNorm folded into a biased conv, dropout gone.
Why: the export and onnxsim were 70-75 % of a candidate's CPU time (TorchScript export
0.20 s, onnxsim 0.06 s per MobileNet of ~3 M parameters), writing the graph takes a few
milliseconds. ``tests/test_nas.py`` holds the two to the same layers and the same
estimate for every built-in family and activation.

What still goes through torch: the module itself (the objective scores it), ``best.onnx``
and the Pareto set (written with weights by :func:`nas.export.to_onnx`), and user spaces
(``module:function``), whose modules this module cannot know. :func:`direct_onnx` returns
``None`` for a description it does not know, and the caller exports instead.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import onnx
from onnx import TensorProto, helper

from .export import OPSET
from .spaces import SPACES, make_divisible

__all__ = ["direct_onnx", "is_direct_space", "FAMILIES", "DIRECT_SPACES"]

#: description ``family`` values this module writes
FAMILIES = ("mobilenet", "resnet")
#: the built-in spaces whose candidates it writes (their functions, as registered at import)
DIRECT_SPACES = {name: SPACES[name] for name in ("scaled", "mobilenet", "resnet")}


def is_direct_space(name: str, fn: Any) -> bool:
    """``name`` is a built-in space and ``fn`` its own function (not a user's ``module:function``)."""
    return DIRECT_SPACES.get(name) is fn and fn is not None


class _Graph:
    """A small builder: nodes, dataless initializers, unique names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, what: str) -> str:
        self.n += 1
        return f"{what}_{self.n}"

    def weight(self, dims: Sequence[int]) -> str:
        t = TensorProto()
        t.name = self.name("w")
        t.data_type = TensorProto.FLOAT
        t.dims.extend(int(d) for d in dims)
        self.inits.append(t)
        return t.name

    def scalar(self, value: float) -> str:
        t = helper.make_tensor(self.name("c"), TensorProto.FLOAT, [], [float(value)])
        self.inits.append(t)
        return t.name

    def node(self, op: str, inputs: Sequence[str], **attrs: Any) -> str:
        out = self.name(op)
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def conv(self, x: str, c_in: int, c_out: int, k: int = 1, s: int = 1, groups: int = 1) -> str:
        p = (k - 1) // 2
        return self.node("Conv", [x, self.weight((c_out, c_in // groups, k, k)), self.weight((c_out,))],
                         dilations=[1, 1], group=groups, kernel_shape=[k, k], pads=[p, p, p, p], strides=[s, s])

    def act(self, x: str, kind: str | None) -> str:
        """The nodes torch's exporter and onnxsim leave for each activation of the spaces."""
        if kind is None:
            return x
        if kind == "relu":
            return self.node("Relu", [x])
        if kind == "relu6":
            return self.node("Clip", [x, self.scalar(0.0), self.scalar(6.0)])
        if kind == "hardswish":
            return self.node("HardSwish", [x])
        if kind == "silu":
            return self.node("Mul", [x, self.node("Sigmoid", [x])])
        if kind == "hardsigmoid":
            return self.node("HardSigmoid", [x], alpha=1.0 / 6.0)
        raise ValueError(f"no direct ONNX for activation {kind!r}")

    def cba(self, x: str, c_in: int, c_out: int, k: int = 1, s: int = 1, groups: int = 1,
            act: str | None = "relu") -> str:
        return self.act(self.conv(x, c_in, c_out, k, s, groups), act)

    def gemm(self, x: str, c_in: int, c_out: int, out: str | None = None) -> str:
        ins = [x, self.weight((c_out, c_in)), self.weight((c_out,))]
        if out is None:
            return self.node("Gemm", ins, alpha=1.0, beta=1.0, transB=1)
        self.nodes.append(helper.make_node("Gemm", ins, [out], name=out, alpha=1.0, beta=1.0, transB=1))
        return out

    def model(self, input_shape: Sequence[int], classes: int, name: str) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, name,
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(input_shape))],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                                             [int(input_shape[0]), int(classes)])],
                              initializer=self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8,
                                 producer_name="nas.direct")


def _inverted_residual(g: _Graph, x: str, c_in: int, c_out: int, *, stride: int, expansion: float, kernel: int,
                       se: bool, act: str) -> str:
    mid = make_divisible(c_in * expansion)
    y = x
    if mid != c_in:
        y = g.cba(y, c_in, mid, 1, act=act)
    y = g.cba(y, mid, mid, kernel, stride, groups=mid, act=act)
    if se:
        r = make_divisible(mid / 4)
        s = g.node("ReduceMean", [y], axes=[2, 3], keepdims=1)
        s = g.act(g.conv(s, mid, r), "relu")
        s = g.act(g.conv(s, r, mid), "hardsigmoid")
        y = g.node("Mul", [y, s])
    y = g.cba(y, mid, c_out, 1, act=None)
    return g.node("Add", [x, y]) if stride == 1 and c_in == c_out else y


def _mobilenet(desc: Mapping[str, Any], input_shape: Sequence[int]) -> onnx.ModelProto:
    g = _Graph()
    stages = desc["stages"]
    first_act = stages[0]["activation"] if stages else "relu"
    stem_c = desc["stem_channels"]
    x = g.cba("input", int(input_shape[1]), stem_c, 3, 2, act=first_act)
    c = desc["first_channels"]
    x = _inverted_residual(g, x, stem_c, c, stride=1, expansion=1, kernel=3, se=False, act=first_act)
    for st in stages:
        for i in range(st["depth"]):
            x = _inverted_residual(g, x, c, st["channels"], stride=st["stride"] if i == 0 else 1,
                                   expansion=st["expansion"], kernel=st["kernel"], se=st["se"],
                                   act=st["activation"])
            c = st["channels"]
    last_act = stages[-1]["activation"] if stages else first_act
    x = g.cba(x, c, desc["head_channels"], 1, act=last_act)
    x = g.node("ReduceMean", [x], axes=[2, 3], keepdims=0)
    x = g.act(g.gemm(x, desc["head_channels"], desc["hidden"]), last_act)
    g.gemm(x, desc["hidden"], desc["classes"], out="output")
    return g.model(input_shape, desc["classes"], "mobilenet")


def _resnet(desc: Mapping[str, Any], input_shape: Sequence[int]) -> onnx.ModelProto:
    g = _Graph()
    bottleneck = desc["block"] == "bottleneck"
    expansion = 4 if bottleneck else 1
    base = desc["base_width"]
    x = g.cba("input", int(input_shape[1]), base, desc["stem_kernel"], 2)
    x = g.node("MaxPool", [x], ceil_mode=0, dilations=[1, 1], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
               strides=[2, 2])
    c = base
    for st in desc["stages"]:
        for j in range(st["depth"]):
            planes, stride = st["planes"], st["stride"] if j == 0 else 1
            out = planes * expansion
            if bottleneck:
                y = g.cba(x, c, planes, 1)
                y = g.cba(y, planes, planes, 3, stride)
                y = g.cba(y, planes, out, 1, act=None)
            else:
                y = g.cba(x, c, planes, 3, stride)
                y = g.cba(y, planes, planes, 3, act=None)
            short = x if stride == 1 and c == out else g.cba(x, c, out, 1, stride, act=None)
            x = g.node("Relu", [g.node("Add", [y, short])])
            c = out
    x = g.node("ReduceMean", [x], axes=[2, 3], keepdims=0)
    g.gemm(x, c, desc["classes"], out="output")
    return g.model(input_shape, desc["classes"], "resnet")


def direct_onnx(description: Mapping[str, Any], input_shape: Sequence[int]) -> onnx.ModelProto | None:
    """The weightless ONNX graph of a built-in space's architecture description, or ``None``
    when the description is not one of :data:`FAMILIES` (then export the module instead)."""
    family = description.get("family") if isinstance(description, Mapping) else None
    if family == "mobilenet":
        return _mobilenet(description, input_shape)
    if family == "resnet":
        return _resnet(description, input_shape)
    return None
