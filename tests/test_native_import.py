"""The native importer core (estimator/native_import.pyx) against the Python importer.

The extension is the one ``pip install`` built (setup.py; ``python setup.py build_ext
--inplace`` in a checkout); without it these tests are skipped, or fail where
``CL_REQUIRE_NATIVE=1`` (scripts/test.sh sets it when a C compiler is present). It is
plugged into :func:`estimator.onnx_import.load_network`; every network it imports must be
identical to the Python path's (layers field by field, warnings, free nodes, inputs,
outputs, ``net.model``), it must actually handle the MobileNet-class graphs it is for, give
up on what it does not cover, and never crash on malformed bytes.
"""
from __future__ import annotations

import io
import os
import random
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from estimator import onnx_import
from estimator.fusion import DEFAULT_FUSION, NO_FUSION, FusionRules
from estimator.onnx_import import load_network
from tests.perf.service_common import mbv2_like_onnx


RULES = [DEFAULT_FUSION, NO_FUSION, FusionRules(activations={"conv2d": frozenset({"relu", "relu6"})},
                                                single_consumer=False)]


@pytest.fixture(scope="module")
def native():
    try:
        from estimator import native_import as mod
    except ImportError as e:
        why = (f"estimator.native_import is not built ({e}); pip builds it where a C compiler exists "
               "(or: python setup.py build_ext --inplace)")
        if os.environ.get("CL_REQUIRE_NATIVE") == "1":
            pytest.fail(why)
        pytest.skip(why)
    saved = onnx_import._native
    yield mod
    onnx_import._native = saved


def _load(native, data, use: bool, **kw):
    saved = onnx_import._native
    onnx_import._native = native if use else None  # what onnx_import.native_core() answers load_network
    try:
        return load_network(data, **kw)
    finally:
        onnx_import._native = saved


def _outcome(native, data, use: bool, **kw):
    try:
        return _load(native, data, use, **kw)
    except Exception as e:  # noqa: BLE001 - compared by type and message
        return (type(e), str(e))


def assert_same(ref, got) -> None:
    assert ref.to_dict() == got.to_dict()
    assert len(ref.layers) == len(got.layers)
    for a, b in zip(ref.layers, got.layers):
        for f in ("name", "type", "params", "counts", "op_type", "nodes", "input_shapes", "output_shapes",
                  "activation", "flags"):
            assert getattr(a, f) == getattr(b, f), (a.name, f, getattr(a, f), getattr(b, f))
        assert list(a.params) == list(b.params), a.name  # key order
        assert [type(v) for v in a.params.values()] == [type(v) for v in b.params.values()], a.name
    for f in ("warnings", "free_nodes", "name", "opset", "inputs", "outputs", "simplified"):
        assert getattr(ref, f) == getattr(got, f), f
    assert list(ref.free_nodes) == list(got.free_nodes)
    assert _model_bytes(ref) == _model_bytes(got)


def _model_bytes(net):
    """``net.model`` serialised, or the error reading it raises (the Python path's too: e.g.
    a graph name that is not UTF-8 fails in ONNX's shape inference)."""
    try:
        return net.model.SerializeToString()
    except Exception as e:  # noqa: BLE001
        return (type(e), str(e))


def _compare(native, data, *, handled: bool | None, rules=DEFAULT_FUSION) -> None:
    res = native.extract(data, rules)
    if handled is not None:
        assert (res is not None) == handled, native.why_not(data, rules)
    ref = _load(native, data, False, fusion=rules)
    got = _load(native, data, True, fusion=rules)
    assert_same(ref, got)
    assert isinstance(_model_bytes(got), bytes)


# ------------------------------------------------------------------------------ corpus


def _w(name: str, dims: list[int]) -> TensorProto:
    t = TensorProto()
    t.name, t.data_type = name, TensorProto.FLOAT
    t.dims.extend(dims)
    return t


def _graph(nodes, x_shape, inits=(), outputs=("y",), opset=17, out_shapes=None) -> bytes:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          initializer=[_w("w_stripped", [8, 3, 3, 3]), *inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _scalar(name: str, v: float) -> TensorProto:
    return helper.make_tensor(name, TensorProto.FLOAT, [], [v])


def _i64(name: str, values: list[int]) -> TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def _variants() -> dict[str, bytes]:
    """Small graphs with the activations, fusions and free nodes the native core handles."""
    conv = helper.make_node("Conv", ["x", "w_stripped"], ["c"], name="conv", pads=[1, 1, 1, 1])
    out: dict[str, bytes] = {}
    acts = {
        "relu": [helper.make_node("Relu", ["c"], ["y"], name="act")],
        "relu6_init": [helper.make_node("Clip", ["c", "zero", "six"], ["y"], name="act")],
        "relu6_const": [helper.make_node("Constant", [], ["lo"], name="k0", value=_scalar("v", 0.0)),
                        helper.make_node("Constant", [], ["hi"], name="k1", value=_scalar("v", 6.0)),
                        helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="act")],
        "clip_other": [helper.make_node("Clip", ["c", "zero", "one"], ["y"], name="act")],
        "clip_relu": [helper.make_node("Clip", ["c", "zero"], ["y"], name="act")],
        "hardswish": [helper.make_node("HardSwish", ["c"], ["y"], name="act")],
        "hardswish_mul": [helper.make_node("HardSigmoid", ["c"], ["s"], name="act", alpha=1 / 6, beta=0.5),
                          helper.make_node("Mul", ["c", "s"], ["y"], name="mul")],
        "hardsigmoid_plain": [helper.make_node("HardSigmoid", ["c"], ["s"], name="act"),
                              helper.make_node("Mul", ["c", "s"], ["y"], name="mul")],
        "silu": [helper.make_node("Sigmoid", ["c"], ["s"], name="act"),
                 helper.make_node("Mul", ["s", "c"], ["y"], name="mul")],
        "tanh_leaky": [helper.make_node("Tanh", ["c"], ["t"], name="act"),
                       helper.make_node("LeakyRelu", ["t"], ["y"], name="act2", alpha=0.1)],
        "se": [helper.make_node("Relu", ["c"], ["r"], name="act"),
               helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
               helper.make_node("Conv", ["p", "w_se"], ["q"], name="se_conv"),
               helper.make_node("HardSigmoid", ["q"], ["g"], name="gate"),
               helper.make_node("Mul", ["r", "g"], ["y"], name="scale")],
        "two_consumers": [helper.make_node("Relu", ["c"], ["r"], name="act"),
                          helper.make_node("Add", ["c", "r"], ["y"], name="add")],
        "dead_and_identity": [helper.make_node("Relu", ["c"], ["r"], name="act"),
                              helper.make_node("Identity", ["r"], ["i"], name="ident"),
                              helper.make_node("Sigmoid", ["c"], ["dead"], name="dead_node"),
                              helper.make_node("MaxPool", ["i"], ["y"], name="pool", kernel_shape=[2, 2],
                                               strides=[2, 2])],
        "reduce_gemm": [helper.make_node("ReduceMean", ["c"], ["m"], name="mean", axes=[2, 3], keepdims=0),
                        helper.make_node("Gemm", ["m", "fc_w", "fc_b"], ["y"], name="fc", transB=1)],
        "flatten_reshape": [helper.make_node("GlobalAveragePool", ["c"], ["p"], name="gap"),
                            helper.make_node("Flatten", ["p"], ["f"], name="flat"),
                            helper.make_node("Reshape", ["f", "shape"], ["y"], name="resh")],
        "concat_avgpool": [helper.make_node("Relu", ["c"], ["r"], name="act"),
                           helper.make_node("Concat", ["c", "r"], ["k"], name="cat", axis=1),
                           helper.make_node("AveragePool", ["k"], ["y"], name="pool", kernel_shape=[3, 3],
                                            auto_pad="SAME_UPPER")],
        "eltwise_const": [helper.make_node("Mul", ["c", "one"], ["m"], name="scale"),
                          helper.make_node("Sub", ["m", "bias8"], ["y"], name="sub")],
    }
    inits = [_scalar("zero", 0.0), _scalar("six", 6.0), _scalar("one", 1.0), _w("w_se", [8, 8, 1, 1]),
             _w("fc_w", [10, 8]), _w("fc_b", [10]), _i64("shape", [1, -1]), _w("bias8", [1, 8, 1, 1])]
    for name, nodes in acts.items():
        used = {i for n in nodes for i in n.input} | {"w_stripped"}
        out[name] = _graph([conv, *nodes], [1, 3, 16, 16], [t for t in inits if t.name in used])
    # a conv output that is also a graph output (nothing fuses into it)
    out["conv_is_output"] = _graph([conv, helper.make_node("Relu", ["c"], ["y"], name="act")], [1, 3, 16, 16],
                                   outputs=("y", "c"))
    return out


def _torch_models() -> dict[str, bytes]:
    torch = pytest.importorskip("torch")
    from estimator import zoo
    from service.client import strip_initializers

    out = {}
    for name, res in [("mobilenet_v2", 64), ("efficientnet_b0", 64), ("resnet18", 64), ("squeezenet", 64)]:
        buf = io.BytesIO()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(zoo.build(name, res).eval(), (torch.zeros(1, 3, res, res),), buf, dynamo=False,
                              opset_version=17, do_constant_folding=True, input_names=["input"],
                              output_names=["output"])
        out[name] = strip_initializers(buf.getvalue()).SerializeToString()
    return out


def _nas_models() -> dict[str, bytes]:
    pytest.importorskip("optuna")
    from nas.export import to_onnx
    from nas.spaces import mobilenet, rebuild
    from service.client import strip_initializers

    out = {}
    for i, act in enumerate(["relu", "hardswish", "silu"]):
        p = {"resolution": 64, "width": 0.5}
        for j in range(5):
            p.update({f"s{j}_depth": 1 + (i + j) % 2, f"s{j}_expansion": [3, 4, 6][j % 3],
                      f"s{j}_kernel": [3, 5][(i + j) % 2], f"s{j}_se": (i + j) % 2 == 0, f"s{j}_act": act})
        a = rebuild(mobilenet, p, {"resolutions": (64,)})
        out[f"nas_{act}"] = strip_initializers(to_onnx(a.module, a.input_shape)).SerializeToString()
    return out


@pytest.fixture(scope="module")
def torch_models():
    return _torch_models()


# -------------------------------------------------------------------------------- tests


def test_load_network_finds_the_built_extension(native):
    saved = onnx_import._native
    onnx_import._native = onnx_import._UNSET  # (as in a fresh process)
    try:
        assert onnx_import.native_core() is native
    finally:
        onnx_import._native = saved


def test_mbv2_like_networks_are_native_and_identical(native):
    rng = np.random.default_rng(7)
    for i in range(8):
        data = mbv2_like_onnx(rng)
        for rules in RULES:
            _compare(native, data, handled=True, rules=rules)


@pytest.mark.parametrize("name", sorted(_variants()))
def test_variants_are_native_and_identical(native, name):
    data = _variants()[name]
    for rules in RULES:
        _compare(native, data, handled=True, rules=rules)


def test_torch_zoo_exports(native, torch_models):
    for name, data in torch_models.items():
        handled = {"squeezenet": False}.get(name, True)  # (squeezenet: MaxPool ceil_mode)
        for rules in RULES:
            _compare(native, data, handled=handled, rules=rules)


def test_nas_candidates_are_native_and_identical(native):
    for name, data in _nas_models().items():
        for rules in RULES:
            _compare(native, data, handled=True, rules=rules)


def _mutate(data: bytes, fn) -> bytes:
    m = onnx.ModelProto()
    m.ParseFromString(data)
    fn(m)
    return m.SerializeToString()


def test_gives_up_outside_its_subset(native):
    base = _variants()["relu"]
    with_data = _mutate(base, lambda m: m.graph.initializer[0].raw_data.__len__() or
                        m.graph.initializer[0].float_data.extend([0.0] * (8 * 3 * 3 * 3)))
    softmax = _graph([helper.make_node("Conv", ["x", "w_stripped"], ["c"], name="conv"),
                      helper.make_node("Softmax", ["c"], ["y"], name="sm")], [1, 3, 8, 8])
    batch2 = _graph([helper.make_node("Conv", ["x", "w_stripped"], ["c"], name="conv"),
                     helper.make_node("Relu", ["c"], ["y"], name="act")], [2, 3, 8, 8])
    unnamed = _mutate(base, lambda m: setattr(m.graph.node[1], "name", ""))
    dup = _mutate(base, lambda m: setattr(m.graph.node[1], "name", "conv"))
    reordered = _mutate(base, lambda m: m.graph.node.insert(0, m.graph.node.pop(1)))
    domain = _mutate(base, lambda m: setattr(m.graph.node[1], "domain", "com.example"))
    bn = _graph([helper.make_node("Conv", ["x", "w_stripped"], ["c"], name="conv"),
                 helper.make_node("BatchNormalization", ["c", "s", "b", "mu", "var"], ["y"], name="bn")],
                [1, 3, 8, 8], [_w(n, [8]) for n in ("s", "b", "mu", "var")])
    dynamic = _graph([helper.make_node("Conv", ["x", "w_stripped"], ["c"], name="conv"),
                      helper.make_node("Relu", ["c"], ["y"], name="act")], ["N", 3, 8, 8])
    # attention layers are the Python importer's alone: the twin does not learn new types
    tokens = [helper.make_node("Conv", ["x", "w_stripped"], ["c"], name="conv"),
              helper.make_node("Reshape", ["c", "to_rows"], ["r"], name="rows"),
              helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1], name="tokens")]
    layernorm = _graph([*tokens, helper.make_node("LayerNormalization", ["t", "s", "b"], ["y"], axis=-1, name="ln")],
                       [1, 3, 8, 8], [_i64("to_rows", [1, 8, 36]), _w("s", [8]), _w("b", [8])])
    attention = _graph([*tokens, helper.make_node("MatMul", ["t", "r"], ["y"], name="scores")],
                       [1, 3, 8, 8], [_i64("to_rows", [1, 8, 36])])
    # a scalar multiply of a rank-5 view: the Python importer reads it as rows (BinaryEltwise.from_onnx)
    scale5 = _graph([helper.make_node("Conv", ["x", "w_stripped"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                     helper.make_node("Reshape", ["c", "to5"], ["r"], name="r5"),
                     helper.make_node("Mul", ["r", "two"], ["y"], name="scale")],
                    [1, 3, 8, 8], [_i64("to5", [1, 2, 4, 8, 8]), _scalar("two", 2.0)])
    for data in (with_data, softmax, batch2, unnamed, dup, reordered, domain, bn, dynamic, layernorm, attention,
                 scale5):
        assert native.extract(data, DEFAULT_FUSION) is None
        assert native.why_not(data, DEFAULT_FUSION)
        ref, got = _outcome(native, data, False), _outcome(native, data, True)
        if isinstance(ref, tuple):
            assert ref == got
        else:
            assert_same(ref, got)
    # input_shapes, fast=False and simplify=False never reach the native core
    calls = []

    class Spy:
        @staticmethod
        def extract(data, rules):
            calls.append(1)
            return native.extract(data, rules)

    for kw in ({"input_shapes": [1, 3, 16, 16]}, {"fast": False}, {"simplify": False}, {}):
        assert_same(_load(native, base, False, **kw), _load(Spy, base, True, **kw))
    assert len(calls) == 1


def test_malformed_bytes_never_crash_and_match_the_python_path(native):
    rnd = random.Random(5)
    data = mbv2_like_onnx(np.random.default_rng(3), blocks=6, resolution=96)
    cases = [data[:n] for n in sorted(rnd.sample(range(len(data)), 300))]
    for _ in range(2700):
        b = bytearray(data)
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        cases.append(bytes(b))
    native_ok = 0
    for case in cases:
        native_ok += native.extract(case, DEFAULT_FUSION) is not None
        ref, got = _outcome(native, case, False), _outcome(native, case, True)
        if isinstance(ref, tuple):
            assert ref == got
        else:
            assert not isinstance(got, tuple), got
            assert_same(ref, got)
    assert native_ok > 20  # (the native core did import corrupted models that protobuf accepts: names, dims)
