"""Shape propagation for the ONNX importer's fast path (no ``onnx.shape_inference``).

:func:`propagate_shapes` walks the graph once, in order, and computes every tensor's shape
for the operators real networks and NAS clients send (convolutions, pools, Gemm/MatMul,
element-wise ops with broadcasting, activations, Concat, Split, Slice, Pad, Resize,
Transpose, Reshape, Flatten, Squeeze/Unsqueeze, Softmax, LayerNormalization, reductions,
and the shape arithmetic torch exports: Constant, ConstantOfShape, Shape, Gather, Equal,
Where, Cast, ...). Small constant tensors are evaluated on the way (with numpy, the way
ONNX's reference implementation computes them), so shapes that depend on them (a Reshape
whose target is computed from a Shape, a Slice whose bounds are, torch's ``expand``) are
known, exactly as the importer's reference path (ONNX shape inference with constant
folding, ``_infer_shapes(fold=True)``) finds them. That reference path was half of a
stripped DeiT-Tiny's estimate (cProfile), so the zoo's attention graphs must not need it.

It answers ``None`` (and the importer runs the reference path) as soon as anything is
outside what it reproduces exactly: an operator or attribute it does not know, a node out
of topological order, a shape that would need a value it could not compute, a dimension
that is not positive (an impossible window: the reference path reports it), a declared
shape that disagrees. ``tests/test_fastpath.py`` checks it against the reference path on
the zoo networks (stripped and unsimplified) and on single-operator graphs.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["propagate_shapes", "FOLD_MAX_ELEMS", "GraphNode", "graph_nodes", "node_attrs", "is_dataless", "to_array",
           "initializer_info"]

Shape = tuple[int, ...]
#: Constant values are computed only while their inputs are this small (shape arithmetic);
#: the same bound as the reference path's constant folding.
FOLD_MAX_ELEMS = 1 << 16


class _Give(Exception):
    """Outside what the fast path reproduces: use the reference path."""


class GraphNode:
    """A plain-Python copy of a ``NodeProto``'s fields (protobuf field access is slow, and the
    importer reads every node many times). Duck-types what the importer reads of a node."""

    __slots__ = ("name", "op_type", "domain", "input", "output", "attribute", "attrs_cache", "attrs_simple")

    def __init__(self, n: onnx.NodeProto) -> None:
        self.name = n.name
        self.op_type = n.op_type
        self.domain = n.domain
        self.input = n.input[:]  # (slicing a repeated field is upb's quickest copy to a list)
        self.output = n.output[:]
        self.attribute = n.attribute[:]
        self.attrs_cache: dict[str, Any] | None = None
        #: every attribute is of a type in _SIMPLE_ATTRS (set with attrs_cache)
        self.attrs_simple = True


def graph_nodes(model: onnx.ModelProto) -> list[GraphNode]:
    return [GraphNode(n) for n in model.graph.node]


_AP = onnx.AttributeProto
_SIMPLE_ATTRS = {_AP.INT: lambda a: a.i, _AP.FLOAT: lambda a: a.f, _AP.INTS: lambda a: a.ints[:],
                 _AP.FLOATS: lambda a: a.floats[:], _AP.STRING: lambda a: a.s.decode("utf-8", "replace"),
                 _AP.TENSOR: lambda a: a.t, _AP.STRINGS: lambda a: a.strings[:]}


_A_INT, _A_INTS, _A_FLOAT, _A_TENSOR = _AP.INT, _AP.INTS, _AP.FLOAT, _AP.TENSOR


def _convert_attrs(attribute: Sequence[Any]) -> tuple[dict[str, Any], bool]:
    """``({name: value}, every attribute of a type in _SIMPLE_ATTRS)``; see :func:`node_attrs`."""
    out: dict[str, Any] = {}
    simple = True
    get = _SIMPLE_ATTRS.get
    for a in attribute:
        t = a.type
        try:
            # (the commonest types first, without a call; the others as _SIMPLE_ATTRS converts them)
            if t == _A_INT:
                v = a.i
            elif t == _A_INTS:
                v = a.ints[:]
            elif t == _A_TENSOR:
                v = a.t
            elif t == _A_FLOAT:
                v = a.f
            else:
                conv = get(t)
                if conv is not None:
                    v = conv(a)  # (never bytes: STRING is decoded)
                else:
                    simple = False
                    v = helper.get_attribute_value(a)
                    if isinstance(v, bytes):
                        v = v.decode("utf-8", "replace")
        except Exception:
            simple = False
            continue
        out[a.name] = v
    return out, simple and len(out) == len(attribute)


def node_attrs(node: Any) -> dict[str, Any]:
    """``{name: value}`` of a node's attributes, as ``onnx.helper.get_attribute_value`` gives
    them (single strings decoded); cached on a :class:`GraphNode`. Do not modify the result."""
    cached = getattr(node, "attrs_cache", None)
    if cached is not None:
        return cached
    out, simple = _convert_attrs(node.attribute)
    if isinstance(node, GraphNode):
        node.attrs_cache, node.attrs_simple = out, simple
    return out


def _attr_map(node: Any) -> dict[str, Any]:
    if isinstance(node, GraphNode):
        a = node_attrs(node)
        simple = node.attrs_simple
    else:
        a, simple = _convert_attrs(node.attribute)
    if not simple:
        raise _Give("attribute type")
    return a


_NP_DTYPES = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.INT64: np.int64,
              TensorProto.INT32: np.int32, TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8,
              TensorProto.INT16: np.int16, TensorProto.UINT16: np.uint16, TensorProto.BOOL: np.bool_,
              TensorProto.UINT32: np.uint32, TensorProto.UINT64: np.uint64}
_LITTLE = sys.byteorder == "little"


def _raw_array(t: TensorProto) -> np.ndarray | None:
    """The values of a tensor with little-endian ``raw_data`` of a plain dtype; None otherwise."""
    dt = _NP_DTYPES.get(t.data_type)
    if dt is not None and _LITTLE and t.data_location != TensorProto.EXTERNAL:
        raw = t.raw_data
        if raw:
            dims = tuple(t.dims)
            a = np.frombuffer(raw, dtype=dt)
            if a.size == math.prod(dims):
                return a.reshape(dims)
    return None


#: serialized small tensor -> its (read-only) values: Constant nodes repeat (Clip bounds,
#: reshape targets), within a network and across the networks of a NAS run
_SMALL_CONSTANTS: dict[bytes, np.ndarray | None] = {}
_SMALL_CONSTANTS_MAX = 4096
_SMALL_BYTES = 256


def _small_constant(t: TensorProto) -> np.ndarray | None:
    """:func:`_raw_array` of ``t``, remembered for tensors of at most ``_SMALL_BYTES``
    serialized bytes (the arrays are read-only views, safe to share)."""
    if t.ByteSize() > _SMALL_BYTES:  # (sized without serializing: a large Constant is not copied twice)
        return _raw_array(t)
    key = t.SerializeToString()
    try:
        return _SMALL_CONSTANTS[key]
    except KeyError:
        pass
    a = _raw_array(t)
    if a is not None and a.flags.writeable:
        a.setflags(write=False)
    if len(_SMALL_CONSTANTS) >= _SMALL_CONSTANTS_MAX:
        _SMALL_CONSTANTS.clear()
    _SMALL_CONSTANTS[key] = a
    return a


def to_array(t: TensorProto) -> np.ndarray:
    """``numpy_helper.to_array`` with a quick path for little-endian raw data."""
    a = _raw_array(t)
    return a if a is not None else numpy_helper.to_array(t)


def is_dataless(t: TensorProto) -> bool:
    """True for a tensor whose values are not in the model (external or stripped); the
    importer's ``_dataless`` without copying ``raw_data``."""
    if t.data_location == TensorProto.EXTERNAL:
        return True
    if math.prod(t.dims) == 0:
        return False
    if t.HasField("raw_data") and t.raw_data:
        return False
    return not (len(t.float_data) or len(t.int32_data) or len(t.int64_data) or len(t.double_data)
                or len(t.uint64_data) or len(t.string_data))


_dataless = is_dataless

_TD = TensorProto.DESCRIPTOR.fields_by_name
_N_NAME, _N_DIMS, _N_TYPE, _N_RAW, _N_LOC = (_TD[k].number for k in ("name", "dims", "data_type", "raw_data",
                                                                       "data_location"))
_N_DATA = frozenset(_TD[k].number for k in ("float_data", "int32_data", "string_data", "int64_data", "double_data",
                                            "uint64_data"))

#: what :func:`initializer_info` gives per initializer: (tensor, name, dims, data_type, dataless)
InitInfo = tuple[TensorProto, str, tuple[int, ...], int, bool]


def initializer_info(model: onnx.ModelProto) -> list[InitInfo]:
    """``(tensor, name, dims, data_type, is_dataless(tensor))`` of every initializer, in order,
    read with one ``ListFields`` call per tensor (protobuf field access is what costs: the
    importer and the shape propagation share this one scan)."""
    out: list[InitInfo] = []
    prod = math.prod
    external = TensorProto.EXTERNAL
    n_name, n_dims, n_type, n_raw, n_loc, n_data = _N_NAME, _N_DIMS, _N_TYPE, _N_RAW, _N_LOC, _N_DATA
    for t in model.graph.initializer:
        name, dims, dtype, has, ext = "", (), 0, False, False
        for fd, v in t.ListFields():  # (only the fields that are set; repeated ones only when not empty)
            num = fd.number
            if num == n_dims:
                dims = tuple(v)
            elif num == n_name:
                name = v
            elif num == n_type:
                dtype = v
            elif num == n_raw:
                if v:
                    has = True
            elif num == n_loc:
                ext = v == external
            elif num in n_data:
                has = True
        out.append((t, name, dims, dtype, ext or (not has and prod(dims) != 0)))
    return out


def _declared(tp: onnx.TypeProto) -> tuple[int | None, ...] | None:
    """Declared dims (None for symbolic/unknown ones), or None without a shape."""
    if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    return tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None
                 for d in tp.tensor_type.shape.dim)


def _broadcast(*shapes: Shape) -> Shape:
    first = shapes[0]
    if len(shapes) == 2:
        b = shapes[1]
        if b == first:  # the usual case (residual adds): nothing to broadcast
            return first
        if len(b) < len(first) and first[len(first) - len(b):] == b:  # a bias over the last dims
            return first
        if len(first) < len(b) and b[len(b) - len(first):] == first:  # the same, the bias first
            return b
    elif all(s == first for s in shapes):
        return first
    r = max(len(s) for s in shapes)
    out = []
    for i in range(r):
        dims = {s[len(s) - r + i] for s in shapes if len(s) - r + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise _Give("incompatible broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _axis(a: int, rank: int) -> int:
    if not -rank <= a < max(rank, 1):
        raise _Give("axis out of range")
    return a % rank if rank else 0


class _Prop:
    def __init__(self, model: onnx.ModelProto, nodes: Sequence[Any] | None = None,
                 dataless: set[str] | None = None, inits: Sequence[InitInfo] | None = None) -> None:
        self.g = model.graph
        self.nodes = nodes if nodes is not None else self.g.node
        self.dataless = dataless
        self.inits = inits
        #: values read from initializers and Constant nodes' ``value`` tensors
        self.const_values: dict[str, np.ndarray] = {}
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if not self.opset:
            raise _Give("no default-domain opset")
        self.shapes: dict[str, Shape] = {}
        self.values: dict[str, np.ndarray] = {}
        self.dtypes: dict[str, int] = {}

    # -- values
    def val(self, name: str) -> np.ndarray | None:
        return self.values.get(name)

    def need(self, name: str) -> np.ndarray:
        v = self.values.get(name)
        if v is None:
            raise _Give(f"value of {name!r} unknown")
        return v

    def ints(self, name: str) -> list[int]:
        v = self.need(name)
        if v.dtype.kind in "iu":
            return v.ravel().tolist()  # (Python ints, as int() of each)
        return [int(x) for x in np.ravel(v)]

    def shp(self, name: str) -> Shape:
        s = self.shapes.get(name)
        if s is None:
            raise _Give(f"shape of {name!r} unknown")
        return s

    def run(self) -> dict[str, Shape | None]:
        g = self.g
        init_names = set()
        dataless = self.dataless
        inits = self.inits if self.inits is not None else [(t, t.name, tuple(t.dims), t.data_type, None)
                                                          for t in g.initializer]
        for t, name, shape, dtype, no_data in inits:
            init_names.add(name)
            self.shapes[name] = shape  # (Python ints)
            self.dtypes[name] = dtype
            if math.prod(shape) <= FOLD_MAX_ELEMS and (
                    name not in dataless if dataless is not None
                    else not (no_data if no_data is not None else _dataless(t))):
                try:
                    self.values[name] = self.const_values[name] = to_array(t)
                except Exception:
                    pass
        if len(g.sparse_initializer):
            raise _Give("sparse initializers")
        for vi in g.input:
            if vi.name in init_names:
                continue
            d = _declared(vi.type)
            if d is None or any(x is None for x in d):
                raise _Give("graph input without a fixed shape")
            self.shapes[vi.name] = tuple(int(x) for x in d)  # type: ignore[arg-type]
            self.dtypes[vi.name] = vi.type.tensor_type.elem_type
        shapes, values = self.shapes, self.values
        handlers, no_attrs, known = _HANDLERS, {}, shapes.__contains__
        for n in self.nodes:
            if n.domain:
                if n.domain != "ai.onnx":
                    raise _Give("non-default domain")
            if not all(map(known, n.input)):  # (an omitted optional input, or a tensor not yet computed)
                for x in n.input:
                    if x and x not in shapes:
                        raise _Give("not in topological order or unknown input")
            op = n.op_type
            handler = handlers.get(op)
            if handler is None:
                raise _Give(f"op {op}")
            outs = handler(self, n, _attr_map(n) if n.attribute else no_attrs)
            names = n.output
            if len(outs) < len(names):
                raise _Give("missing outputs")
            for name, (s, v) in zip(names, outs):
                if not name:
                    continue
                if s and min(s) < 1 and (min(s) < 0 or op not in _ZERO_OK):
                    raise _Give("non-positive dimension")
                if v is not None:
                    if v.shape != s:
                        raise _Give("value/shape mismatch")
                    values[name] = v
                shapes[name] = s
        # declared shapes (graph outputs, value_info) must agree where they are static
        for vi in list(g.output) + list(g.value_info):
            d = _declared(vi.type)
            s = self.shapes.get(vi.name)
            if s is None:
                raise _Give("declared tensor not computed")
            if d is not None and (len(d) != len(s) or any(x is not None and x != y for x, y in zip(d, s))):
                raise _Give("declared shape disagrees")
        return self.shapes  # (not copied: nothing reads it through this object afterwards)

    # -- helpers used by handlers
    def maybe_fold(self, n: onnx.NodeProto, fn: Callable[[], np.ndarray]) -> np.ndarray | None:
        ins = [x for x in n.input if x]
        if not ins or any(x not in self.values for x in ins):
            return None
        if sum(self.values[x].size for x in ins) > FOLD_MAX_ELEMS:
            return None
        return np.asarray(fn())


_ZERO_OK = {"Shape", "Constant", "Slice", "Gather", "Concat", "Squeeze", "Unsqueeze", "Reshape", "Cast", "Split",
            "Range", "ConstantOfShape", "Identity"}

# ------------------------------------------------------------------------------ handlers

_UNARY = {"Relu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu",
          "Mish", "Softplus", "Softsign", "ThresholdedRelu", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal",
          "Erf", "Sin", "Cos", "Softmax", "LogSoftmax", "Hardmax", "LRN", "Swish"}
_BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater",
           "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "Where", "BitShift"}


def _same(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    s = p.shp(n.input[0])
    return [(s, None)] * max(1, len(n.output))


def _identity(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    s = p.shp(n.input[0])
    v = p.val(n.input[0])
    return [(s, v)] + [(s, None)] * (len(n.output) - 1)


def _dropout(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    s = p.shp(n.input[0])
    if len([o for o in n.output if o]) > 1:
        raise _Give("dropout mask")
    return [(s, p.val(n.input[0]))]


def _layernorm(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    if p.opset < 17:
        raise _Give("LayerNormalization before opset 17")
    xs = p.shp(n.input[0])
    ax = _axis(int(a.get("axis", -1)), len(xs))
    stat = xs[:ax] + (1,) * (len(xs) - ax)  # (Mean and InvStdDev, when asked for)
    return [(xs, None), (stat, None), (stat, None)][:max(1, len(n.output))]


def _clip(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    return [(p.shp(n.input[0]), None)]


def _prelu(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    s = p.shp(n.input[0])
    if _broadcast(s, p.shp(n.input[1])) != s:
        raise _Give("prelu slope broadcast")
    return [(s, None)]


def _batchnorm(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    if len([o for o in n.output if o]) > 1 or a.get("training_mode", 0):
        raise _Give("training batchnorm")
    return [(p.shp(n.input[0]), None)]


def _binary_value(op: str, vals: list[np.ndarray]) -> np.ndarray:
    if op == "Add":
        return vals[0] + vals[1]
    if op == "Sub":
        return vals[0] - vals[1]
    if op == "Mul":
        return vals[0] * vals[1]
    if op == "Div":  # as ONNX's reference implementation: integers truncate toward zero
        a, b = vals
        if issubclass(a.dtype.type, np.integer) and issubclass(b.dtype.type, np.integer):
            if np.any(b == 0):
                raise _Give("division by zero")
            q = np.floor_divide(a, b)
            r = q + ((np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0))).astype(q.dtype)
        else:
            r = np.divide(a, b)
        return r.astype(a.dtype) if r.dtype != a.dtype else r
    if op == "Equal":
        return np.equal(*vals)
    if op == "Where":
        return np.where(*vals)
    if op in ("Max", "Min"):
        out = vals[0]
        for v in vals[1:]:
            out = np.maximum(out, v) if op == "Max" else np.minimum(out, v)
        return out
    raise _Give(f"fold {op}")


_FOLDED_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Equal", "Where", "Max", "Min"})


def _binary(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    ins = n.input
    shapes = p.shapes  # (the run loop has checked that every input has one)
    if len(ins) == 2 and ins[0] and ins[1]:  # (the usual case)
        sa, sb = shapes[ins[0]], shapes[ins[1]]
        s = sa if sa == sb else _broadcast(sa, sb)
    else:
        ins = [x for x in ins if x]
        if not ins:
            raise _Give("no inputs")
        s = _broadcast(*[shapes[x] for x in ins])
    values = p.values
    if ins[0] in values and n.op_type in _FOLDED_BINARY and all(x in values for x in ins):
        vals = [p.values[x] for x in ins]
        same = len({v.dtype for v in (vals[1:] if n.op_type == "Where" else vals)}) == 1
        if same and (all(v.dtype.kind in "iu" for v in vals) or n.op_type in ("Equal", "Where")):
            v = p.maybe_fold(n, lambda: _binary_value(n.op_type, vals))
            if v is not None:
                return [(s, np.asarray(v))]
    return [(s, None)]


def _cast(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    s = p.shp(n.input[0])
    v = p.val(n.input[0])
    if v is not None and n.op_type == "Cast":
        to = a.get("to")
        if to is None:
            raise _Give("cast without to")
        try:
            dt = helper.tensor_dtype_to_np_dtype(int(to))
        except Exception:
            raise _Give("cast dtype") from None
        if v.dtype.kind in "iub" and np.dtype(dt).kind in "iub":
            return [(s, v.astype(dt))]
        return [(s, None)]
    return [(s, None)]


def _window(p: _Prop, n: onnx.NodeProto, a: dict, kernel: Sequence[int], spatial: Sequence[int],
            ceil_mode: bool) -> list[int]:
    nd = len(kernel)
    strides = list(a.get("strides", [1] * nd))
    dil = list(a.get("dilations", [1] * nd))
    pads = list(a.get("pads", [0] * (2 * nd)))
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd or min(strides + dil) < 1 or min(pads + [0]) < 0:
        raise _Give("window attributes")
    auto = a.get("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise _Give("auto_pad")
    out = []
    for i in range(nd):
        k_eff = (kernel[i] - 1) * dil[i] + 1
        size = spatial[i]
        if auto == "NOTSET":
            eff = size + pads[i] + pads[i + nd]
        elif auto == "VALID":
            eff = size
        else:  # as ONNX's shape inference pads for SAME_*; the window formula below then applies
            residual = size % strides[i]
            total = k_eff - strides[i] if residual == 0 else k_eff - residual
            eff = size + max(total, 0)
        if eff < k_eff:
            raise _Give("window does not fit")
        if ceil_mode:
            q = float(np.ceil(np.float32(eff - k_eff) / np.float32(strides[i])))
            if q != -(-(eff - k_eff) // strides[i]):
                raise _Give("ceil precision")
            out.append(1 + int(q))
        else:
            out.append((eff - k_eff) // strides[i] + 1)
    return out


def _conv(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs, ws = p.shp(n.input[0]), p.shp(n.input[1])
    if len(xs) < 3 or len(ws) != len(xs):
        raise _Give("conv rank")
    kernel = list(a.get("kernel_shape", ws[2:]))
    if list(kernel) != list(ws[2:]):
        raise _Give("kernel_shape")
    g = int(a.get("group", 1))
    if g < 1 or xs[1] % g or ws[0] % g or ws[1] * g != xs[1]:
        raise _Give("groups")
    return [((xs[0], ws[0], *_window(p, n, a, kernel, xs[2:], False)), None)]


def _pool(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    kernel = a.get("kernel_shape")
    if kernel is None or len(xs) != len(kernel) + 2:
        raise _Give("pool kernel")
    if n.op_type == "AveragePool" and "dilations" in a and p.opset < 19:
        raise _Give("avgpool dilations")
    out = (xs[0], xs[1], *_window(p, n, a, kernel, xs[2:], bool(a.get("ceil_mode", 0))))
    if len([o for o in n.output if o]) > 1:
        raise _Give("pool indices")
    return [(out, None)]


def _global_pool(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    if len(xs) < 3:
        raise _Give("global pool rank")
    return [((xs[0], xs[1]) + (1,) * (len(xs) - 2), None)]


def _gemm(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    sa, sb = p.shp(n.input[0]), p.shp(n.input[1])
    if len(sa) != 2 or len(sb) != 2:
        raise _Give("gemm rank")
    m, k = (sa[1], sa[0]) if a.get("transA", 0) else sa
    k2, cols = (sb[1], sb[0]) if a.get("transB", 0) else sb
    if k != k2:
        raise _Give("gemm inner dims")
    if len(n.input) > 2 and n.input[2]:
        _broadcast((m, cols), p.shp(n.input[2]))
    return [((m, cols), None)]


def _matmul(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    sa, sb = p.shp(n.input[0]), p.shp(n.input[1])
    if len(sa) >= 2 and len(sb) >= 2:  # (the usual case)
        if sa[-1] != sb[-2]:
            raise _Give("matmul inner dims")
        if len(sa) == 2 and len(sb) == 2:
            return [((sa[0], sb[1]), None)]
        return [((*_broadcast(sa[:-2], sb[:-2]), sa[-2], sb[-1]), None)]
    sa, sb = list(sa), list(sb)
    if not sa or not sb:
        raise _Give("matmul scalar")
    a1, b1 = len(sa) == 1, len(sb) == 1
    if a1:
        sa = [1] + sa
    if b1:
        sb = sb + [1]
    if sa[-1] != sb[-2]:
        raise _Give("matmul inner dims")
    batch = _broadcast(tuple(sa[:-2]), tuple(sb[:-2])) if (len(sa) > 2 or len(sb) > 2) else ()
    out = list(batch) + [sa[-2], sb[-1]]
    if a1:
        out.pop(-2)
    if b1:
        out.pop(-1)
    return [(tuple(out), None)]


def _flatten(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    r = len(xs)
    ax = int(a.get("axis", 1))
    if not -r <= ax <= r:
        raise _Give("flatten axis")
    ax = ax + r if ax < 0 else ax
    s = (math.prod(xs[:ax]), math.prod(xs[ax:]))
    v = p.val(n.input[0])
    return [(s, v.reshape(s) if v is not None else None)]


def _reshape(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    if p.opset < 5:
        raise _Give("old reshape")
    target = p.ints(n.input[1])
    allowzero = int(a.get("allowzero", 0))
    out: list[int] = []
    neg = -1
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(xs):
                raise _Give("reshape copies a missing dim")
            out.append(xs[i])
        elif d == -1:
            if neg >= 0:
                raise _Give("two -1")
            neg = i
            out.append(1)
        elif d < 0:
            raise _Give("negative reshape dim")
        else:
            out.append(d)
    total = math.prod(xs)
    if neg >= 0:
        rest = math.prod(out)
        if rest == 0 or total % rest:
            raise _Give("reshape -1")
        out[neg] = total // rest
    if math.prod(out) != total:
        raise _Give("reshape size")
    s = tuple(out)
    v = p.val(n.input[0])
    return [(s, v.reshape(s) if v is not None else None)]


def _transpose(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    perm = a.get("perm")
    if perm is None:
        perm = list(range(len(xs) - 1, -1, -1))
    if sorted(perm) != list(range(len(xs))):
        raise _Give("perm")
    s = tuple(map(xs.__getitem__, perm))
    v = p.val(n.input[0])
    return [(s, np.transpose(v, perm) if v is not None else None)]


def _axes_input(p: _Prop, n: onnx.NodeProto, a: dict, since: int) -> list[int] | None:
    if p.opset >= since:
        if len(n.input) > 1 and n.input[1]:
            return p.ints(n.input[1])
        return None
    ax = a.get("axes")
    return None if ax is None else list(ax)


def _squeeze(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    axes = _axes_input(p, n, a, 13)
    if axes is None:
        keep = [d for d in xs if d != 1]
    else:
        ax = {_axis(x, len(xs)) for x in axes}
        if any(xs[i] != 1 for i in ax):
            raise _Give("squeeze of a dim != 1")
        keep = [d for i, d in enumerate(xs) if i not in ax]
    s = tuple(keep)
    v = p.val(n.input[0])
    return [(s, v.reshape(s) if v is not None else None)]


def _unsqueeze(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    axes = _axes_input(p, n, a, 13)
    if axes is None:
        raise _Give("unsqueeze axes")
    r = len(xs) + len(axes)
    ax = sorted(_axis(x, r) for x in axes)
    if len(set(ax)) != len(ax):
        raise _Give("repeated axes")
    out = list(xs)
    for i in ax:
        out.insert(i, 1)
    s = tuple(out)
    v = p.val(n.input[0])
    return [(s, v.reshape(s) if v is not None else None)]


def _concat(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    ins = [x for x in n.input if x]
    shapes = [p.shp(x) for x in ins]
    if "axis" not in a:
        raise _Give("concat axis")
    r = len(shapes[0])
    ax = _axis(int(a["axis"]), r)
    for s in shapes[1:]:
        if len(s) != r or any(s[i] != shapes[0][i] for i in range(r) if i != ax):
            raise _Give("concat dims")
    out = list(shapes[0])
    out[ax] = sum(s[ax] for s in shapes)
    s = tuple(out)
    v = p.maybe_fold(n, lambda: np.concatenate([p.values[x] for x in ins], axis=ax))
    return [(s, v)]


def _split(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    ax = _axis(int(a.get("axis", 0)), len(xs))
    outs = len(n.output)
    if p.opset >= 13:
        split = p.ints(n.input[1]) if len(n.input) > 1 and n.input[1] else None
    else:
        split = a.get("split")
    if split is None:
        if "num_outputs" in a:
            if p.opset < 18 or int(a["num_outputs"]) != outs:
                raise _Give("num_outputs")
            chunk = -(-xs[ax] // outs)
            split = [chunk] * (outs - 1) + [xs[ax] - chunk * (outs - 1)]
            if split[-1] < 1:
                raise _Give("split sizes")
        else:
            if xs[ax] % outs:
                raise _Give("uneven split")
            split = [xs[ax] // outs] * outs
    if len(split) != outs or sum(split) != xs[ax]:
        raise _Give("split sizes")
    res = []
    for s_ in split:
        o = list(xs)
        o[ax] = int(s_)
        res.append((tuple(o), None))
    return res


def _slice(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    r = len(xs)
    if p.opset >= 10:
        starts = p.ints(n.input[1])
        ends = p.ints(n.input[2])
        axes = p.ints(n.input[3]) if len(n.input) > 3 and n.input[3] else list(range(len(starts)))
        steps = p.ints(n.input[4]) if len(n.input) > 4 and n.input[4] else [1] * len(starts)
    else:
        starts, ends = list(a.get("starts", [])), list(a.get("ends", []))
        axes = list(a.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    if not (len(starts) == len(ends) == len(axes) == len(steps)):
        raise _Give("slice args")
    out = list(xs)
    index: list[Any] = [slice(None)] * r
    seen = set()
    for st, en, ax, step in zip(starts, ends, axes, steps):
        ax = _axis(ax, r)
        if ax in seen or step == 0:
            raise _Give("slice axes/steps")
        seen.add(ax)
        dim = xs[ax]
        if st < 0:
            st += dim
        if en < 0:
            en += dim
        if step > 0:
            st, en = min(max(st, 0), dim), min(max(en, 0), dim)
        else:
            st, en = min(max(st, 0), dim - 1), min(max(en, -1), dim - 1)
        length = max(0, -(-(en - st) // step))
        out[ax] = length
        index[ax] = st + step * np.arange(length)
    s = tuple(out)
    v = p.val(n.input[0])
    if v is not None and v.size <= FOLD_MAX_ELEMS:
        for ax, ix in enumerate(index):
            if not isinstance(ix, slice):
                v = np.take(v, ix, axis=ax)
        return [(s, v)]
    return [(s, None)]


def _pad(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    if p.opset >= 11:
        pads = p.ints(n.input[1])
        if len(n.input) > 3 and n.input[3]:
            raise _Give("pad axes")
    else:
        pads = list(a.get("pads", []))
    if len(pads) != 2 * len(xs):
        raise _Give("pads")
    return [(tuple(d + pads[i] + pads[i + len(xs)] for i, d in enumerate(xs)), None)]


def _resize(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    if p.opset < 11 or "axes" in a or a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise _Give("resize version/attributes")
    sizes = n.input[3] if len(n.input) > 3 and n.input[3] else ""
    scales = n.input[2] if len(n.input) > 2 and n.input[2] else ""
    if sizes:
        sz = p.ints(sizes)
        if len(sz) != len(xs):
            raise _Give("resize sizes")
        return [(tuple(sz), None)]
    if not scales:
        raise _Give("resize without scales or sizes")
    sc = np.ravel(p.need(scales))
    if sc.size != len(xs):
        raise _Give("resize scales")
    out = []
    for d, f in zip(xs, sc.tolist()):
        a32 = math.floor(float(np.float32(d) * np.float32(f)))
        a64 = math.floor(d * float(np.float32(f)))
        if a32 != a64:
            raise _Give("resize rounding")
        out.append(a32)
    return [(tuple(out), None)]


def _gather(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs, ids = p.shp(n.input[0]), p.shp(n.input[1])
    if not xs:
        raise _Give("gather scalar")
    ax = _axis(int(a.get("axis", 0)), len(xs))
    s = xs[:ax] + ids + xs[ax + 1:]
    if n.input[0] not in p.values or n.input[1] not in p.values:
        return [(s, None)]

    def fold() -> np.ndarray:
        data, idx = p.values[n.input[0]], p.values[n.input[1]].astype(np.int64)
        idx = np.where(idx < 0, idx + data.shape[ax], idx)
        if np.any(idx < 0) or np.any(idx >= data.shape[ax]):
            raise _Give("gather index")
        return np.take(data, idx, axis=ax)

    return [(s, p.maybe_fold(n, fold))]


def _shape(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    r = len(xs)
    start, end = int(a.get("start", 0)), a.get("end")
    start = min(max(start + r if start < 0 else start, 0), r)
    e = r if end is None else int(end)
    e = min(max(e + r if e < 0 else e, 0), r)
    v = np.array(xs[start:e], dtype=np.int64)
    return [(tuple(v.shape), v)]


def _size(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    return [((), np.array(math.prod(p.shp(n.input[0])), dtype=np.int64))]


def _constant(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    if len(a) != 1:
        raise _Give("constant attributes")
    k, v = next(iter(a.items()))
    if k == "value":
        arr = _small_constant(v)  # the usual case: raw data (so not dataless), shaped by its dims
        if arr is not None:
            s = arr.shape
        else:
            arr = to_array(v) if not _dataless(v) else None
            s = tuple(int(d) for d in v.dims)
        if arr is None:
            return [(s, None)]
        if n.output and n.output[0]:
            p.const_values[n.output[0]] = arr
        return [(s, arr)]
    if k == "value_float":
        return [((), np.array(v, dtype=np.float32))]
    if k == "value_floats":
        arr = np.array(v, dtype=np.float32)
        return [(arr.shape, arr)]
    if k == "value_int":
        return [((), np.array(v, dtype=np.int64))]
    if k == "value_ints":
        arr = np.array(v, dtype=np.int64)
        return [(arr.shape, arr)]
    raise _Give(f"constant {k}")


def _constant_of_shape(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    s = tuple(p.ints(n.input[0]))
    if "value" not in a:
        fill = np.zeros(1, dtype=np.float32)
    else:
        fill = _small_constant(a["value"]) if isinstance(a["value"], TensorProto) else None
        if fill is None or fill.size != 1:
            return [(s, None)]
    if math.prod(s) > FOLD_MAX_ELEMS:
        return [(s, None)]
    return [(s, np.full(s, fill.reshape(()), dtype=fill.dtype))]


def _expand(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    return [(_broadcast(xs, tuple(p.ints(n.input[1]))), None)]


def _tile(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    rep = p.ints(n.input[1])
    if len(rep) != len(xs):
        raise _Give("tile repeats")
    return [(tuple(d * r for d, r in zip(xs, rep)), None)]


def _reduce(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    since = 13 if n.op_type == "ReduceSum" else 18
    axes = _axes_input(p, n, a, since)
    keep = int(a.get("keepdims", 1))
    if axes is None or not axes:
        if a.get("noop_with_empty_axes", 0):
            return [(xs, None)]
        ax = set(range(len(xs)))
    else:
        ax = {_axis(x, len(xs)) for x in axes}
    if keep:
        return [(tuple(1 if i in ax else d for i, d in enumerate(xs)), None)]
    return [(tuple(d for i, d in enumerate(xs) if i not in ax), None)]


def _space_depth(p: _Prop, n: onnx.NodeProto, a: dict) -> list:
    xs = p.shp(n.input[0])
    b = int(a.get("blocksize", 0))
    if len(xs) != 4 or b < 1:
        raise _Give("blocksize")
    nn, c, h, w = xs
    if n.op_type == "DepthToSpace":
        if c % (b * b):
            raise _Give("depth to space")
        return [((nn, c // (b * b), h * b, w * b), None)]
    if h % b or w % b:
        raise _Give("space to depth")
    return [((nn, c * b * b, h // b, w // b), None)]


_HANDLERS: dict[str, Callable[[_Prop, onnx.NodeProto, dict], list]] = {
    **{op: _same for op in _UNARY},
    **{op: _binary for op in _BINARY},
    "Identity": _identity, "Dropout": _dropout, "Clip": _clip, "PRelu": _prelu,
    "BatchNormalization": _batchnorm, "InstanceNormalization": _same, "LayerNormalization": _layernorm,
    "Cast": _cast, "Conv": _conv, "MaxPool": _pool, "AveragePool": _pool, "LpPool": _pool,
    "GlobalAveragePool": _global_pool, "GlobalMaxPool": _global_pool, "GlobalLpPool": _global_pool,
    "Gemm": _gemm, "MatMul": _matmul, "Flatten": _flatten, "Reshape": _reshape, "Transpose": _transpose,
    "Squeeze": _squeeze, "Unsqueeze": _unsqueeze, "Concat": _concat, "Split": _split, "Slice": _slice,
    "Pad": _pad, "Resize": _resize, "Gather": _gather, "Shape": _shape, "Size": _size, "Constant": _constant,
    "ConstantOfShape": _constant_of_shape, "Expand": _expand, "Tile": _tile,
    "ReduceMean": _reduce, "ReduceMax": _reduce, "ReduceMin": _reduce, "ReduceSum": _reduce,
    "ReduceProd": _reduce, "ReduceL2": _reduce, "ReduceL1": _reduce,
    "DepthToSpace": _space_depth, "SpaceToDepth": _space_depth,
}


def propagate_shapes(model: onnx.ModelProto, nodes: Sequence[Any] | None = None, *,
                     dataless: set[str] | None = None, const_values: dict[str, np.ndarray] | None = None,
                     inits: Sequence[InitInfo] | None = None) -> dict[str, Shape | None] | None:
    """Every tensor's shape (graph inputs must be fixed), or ``None`` where the reference
    path (ONNX shape inference with constant folding) must decide. ``nodes``: the graph's
    nodes as :class:`GraphNode` (read from ``model`` when not given); ``dataless``: names of
    the initializers without data, if known; ``const_values`` receives the values read
    from initializers and Constant nodes; ``inits``: :func:`initializer_info` of the model,
    if already read (the dims and types of the initializers as they are now)."""
    try:
        prop = _Prop(model, nodes, dataless, inits)
        shapes = prop.run()
        if const_values is not None:
            const_values.update(prop.const_values)
        return shapes  # type: ignore[return-value]
    except _Give:
        return None
    except (ValueError, TypeError, IndexError, KeyError, OverflowError, ZeroDivisionError):
        return None
