"""ONNX -> layers on real networks exported from torch, checked against independent torch counts."""
from __future__ import annotations

import collections
import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from estimator import zoo
from estimator.errors import NotFoundError, UserError
from estimator.fusion import DEFAULT_FUSION, NO_FUSION, FusionRules, FusionRulesError
from estimator.layers import describe
from estimator.onnx_import import (DynamicShapeError, InputShapeError, OnnxFileNotFoundError, OnnxImportError,
                                   load_model, load_network)
from tests.torch_counts import count

# name -> (build kwargs, resolution). Small resolutions keep the suite fast; every check
# here holds at any resolution.
NETS: dict[str, tuple[dict, int]] = {
    "resnet18": ({}, 64),
    "mobilenet_v1": ({}, 64),
    "mobilenet_v2": ({}, 64),
    "mobilenet_v3": ({}, 64),
    "efficientnet_b0": ({}, 64),
    "shufflenet_v2": ({}, 64),
    "squeezenet": ({}, 96),
    "googlenet": ({}, 96),
    "yolov5s": ({}, 96),
    "densenet121": ({"block_config": (2, 3, 4, 2)}, 64),
    "mnasnet": ({}, 64),
    "regnet_x_400mf": ({}, 64),
}


def _export(module: torch.nn.Module, shape: tuple[int, ...], opset: int = 17, fold: bool = True) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(shape),), buf, dynamo=False, opset_version=opset,
                          do_constant_folding=fold, input_names=["input"], output_names=["output"])
    return buf.getvalue()


def _strip(data: bytes, min_bytes: int = 64) -> bytes:
    """Remove the data of float initializers (dims stay), as weight-stripping tools do."""
    m = onnx.load_from_string(data)
    for t in m.graph.initializer:
        if t.data_type == TensorProto.FLOAT and len(t.raw_data) > min_bytes:
            t.ClearField("raw_data")
    return m.SerializeToString()


def _signature(net) -> list[tuple]:
    return [(la.type, la.macs, la.n_params, la.activation) for la in net.layers]


def _assert_covers_graph(net) -> None:
    covered = net.covered_nodes()
    assert len(covered) == len(set(covered)), "a node is counted twice"
    assert sorted(covered) == sorted(n.name for n in net.model.graph.node)


@pytest.fixture(scope="module")
def exported() -> dict[str, tuple[torch.nn.Module, bytes, int]]:
    out = {}
    for name, (kw, res) in NETS.items():
        module = zoo.build(name, res, **kw)
        out[name] = (module, _export(module, (1, 3, res, res)), res)
    return out


@pytest.fixture(scope="module")
def networks(exported):
    return {name: load_network(data) for name, (_, data, _) in exported.items()}


# ----------------------------------------------------------------- whole networks


@pytest.mark.parametrize("name", list(NETS))
def test_counts_match_torch_and_every_node_is_accounted_for(name, exported, networks):
    module, _, res = exported[name]
    net = networks[name]
    tc = count(module, (1, 3, res, res))
    assert net.simplified, net.warnings
    assert net.macs == tc.macs
    assert net.params == tc.params
    # The documented relation to torch's own parameter count: each BN folded into a conv
    # loses its scale (the shift becomes the conv's bias).
    assert tc.torch_params - net.params == tc.folded_bn_channels
    types = collections.Counter(la.type for la in net.layers)
    assert types["conv2d"] + types["dwconv2d"] == tc.convs
    assert types["fc"] == tc.linears
    _assert_covers_graph(net)
    for la in net.layers:
        assert la.counts == describe(la.type, la.params), la.name
        assert not {"unknown_shape", "shape_mismatch", "describe_failed"} & set(la.flags), (la.name, la.flags)
    others = {la.op_type for la in net.other_layers}
    assert others == ({"Pow"} if name == "yolov5s" else set())


def test_resnet18_at_224_matches_published_counts():
    module = zoo.build("resnet18", 224)
    net = load_network(_export(module, (1, 3, 224, 224)))
    assert net.macs == pytest.approx(1.814e9, rel=0.005)
    assert net.params == pytest.approx(11.69e6, rel=0.005)
    # 11,689,512 in torch; 20 BNs with 4,800 channels in all fold into the convs.
    assert zoo.param_count(module) == 11_689_512
    assert net.params == 11_689_512 - 4_800
    assert [la.type for la in net.layers].count("conv2d") == 20
    assert sum(la.activation == "relu" for la in net.layers) == 17
    assert not any(la.type == "activation" for la in net.layers)


def test_fused_activation_is_a_layer_feature(networks):
    """The fused kind is written into the layer's raw params (``act``), so the models see
    it; a layer without one has the feature 'none' (-1)."""
    for la in networks["mobilenet_v3"].layers:
        if la.type in ("conv2d", "dwconv2d", "fc", "add", "mul"):
            assert la.params.get("act") == la.activation
            assert la.features["act"] == (-1.0 if la.activation is None else describe(
                la.type, dict(la.params)).features["act"])
    kinds = {la.features["act"] for la in networks["mobilenet_v3"].layers if la.type == "dwconv2d"}
    assert len(kinds) >= 2  # ReLU and hardswish/none blocks differ


def test_mobilenet_v3_hardswish_and_se(networks):
    net = networks["mobilenet_v3"]
    acts = collections.Counter(la.activation for la in net.layers)
    assert acts["hardswish"] == 1 + 2 * 9 + 1 + 1  # stem, 9 HS blocks (expand + dw), last conv, classifier fc
    assert acts["hardsigmoid"] == 8  # the SE gates fold into the SE's second 1x1 conv
    se = [la for la in net.layers if la.type == "mul"]
    assert len(se) == 8 and all(la.params["broadcast"] == 1 for la in se)
    fc = [la for la in net.layers if la.type == "fc"]
    assert [la.activation for la in fc] == ["hardswish", None]


def test_efficientnet_silu_pattern_and_se(networks):
    net = networks["efficientnet_b0"]
    acts = collections.Counter(la.activation for la in net.layers)
    # stem + (expand + dw + SE fc1) per block, minus the first block's expand, + head conv
    assert acts["silu"] == 1 + 16 * 3 - 1 + 1
    assert acts["sigmoid"] == 16
    silu = [la for la in net.layers if la.activation == "silu"]
    assert all([n.split("/")[-1].split("_")[0] for n in la.nodes][-2:] == ["Sigmoid", "Mul"] for la in silu)
    se = [la for la in net.layers if la.type == "mul"]
    assert len(se) == 16 and all(la.params["broadcast"] == 1 and la.params["elems_b"] == la.params["c"] for la in se)


def test_shufflenet_channel_shuffle(networks):
    net = networks["shufflenet_v2"]
    types = collections.Counter(la.type for la in net.layers)
    assert types["transpose"] == 16  # one channel shuffle per unit
    assert types["concat"] == 16
    assert types["slice"] >= 13  # chunk in every stride-1 unit
    assert types["globalpool"] == 1  # x.mean([2, 3]) is a ReduceMean over H, W
    assert any(la.type == "dwconv2d" and la.activation is None for la in net.layers)


def test_squeezenet_ceil_mode_pools(networks):
    net = networks["squeezenet"]
    pools = [la for la in net.layers if la.type == "maxpool"]
    assert len(pools) == 3 and all("ceil_mode" in la.flags for la in pools)
    for la in pools:
        assert la.counts.output_shape == la.output_shapes[0]
    assert collections.Counter(la.type for la in net.layers)["concat"] == 8


def test_inception_blocks(networks):
    net = networks["googlenet"]
    cats = [la for la in net.layers if la.type == "concat"]
    assert len(cats) == 9 and all(len(la.params["channels"]) == 4 for la in cats)
    assert cats[0].params["channels"] == [64, 128, 32, 32]
    assert any(la.type == "conv2d" and la.params["k_h"] == 5 for la in net.layers)


def test_yolo_resize_concat_silu(networks):
    net = networks["yolov5s"]
    resize = [la for la in net.layers if la.type == "resize"]
    assert len(resize) == 2
    for la in resize:
        assert la.params["mode"] == "nearest"
        assert (la.params["h_out"], la.params["w_out"]) == (2 * la.params["h"], 2 * la.params["w"])
    assert sum(la.activation == "silu" for la in net.layers) == 57
    assert collections.Counter(la.type for la in net.layers)["concat"] >= 13
    assert any("operators outside the layer vocabulary" in w and "Pow" in w for w in net.warnings)
    assert net.outputs["output"] == (1, 3 * (12 * 12 + 6 * 6 + 3 * 3), 85)


def test_densenet_standalone_batchnorm(networks, exported):
    net = networks["densenet121"]
    bn = [la for la in net.layers if "batchnorm" in la.flags]
    tc = count(exported["densenet121"][0], (1, 3, 64, 64))
    assert len(bn) == tc.standalone_bn
    assert all(la.type == "mul" and la.n_params == 2 * la.params["c"] for la in bn)
    assert sum(la.activation == "relu" for la in bn) == len(bn)


def test_regnet_grouped_convs(networks):
    net = networks["regnet_x_400mf"]
    grouped = [la for la in net.layers if la.type == "conv2d" and la.params["groups"] > 1]
    assert len(grouped) == 22
    assert all(la.params["c_in"] // la.params["groups"] == 16 for la in grouped)


# ------------------------------------------------------------- without onnxsim


@pytest.mark.parametrize("name", ["mobilenet_v3", "shufflenet_v2", "yolov5s", "densenet121"])
def test_stripped_weights_fall_back_to_the_same_layers(name, exported, networks):
    _, data, _ = exported[name]
    net = load_network(_strip(data))
    assert not net.simplified
    assert any("onnxsim skipped" in w for w in net.warnings)
    assert _signature(net) == _signature(networks[name])
    _assert_covers_graph(net)


def test_unfolded_batchnorm_folds_by_rule_when_onnxsim_cannot_run():
    module = zoo.build("resnet18", 64)
    data = _export(module, (1, 3, 64, 64), fold=False)  # BatchNormalization nodes stay in the file
    assert sum(n.op_type == "BatchNormalization" for n in onnx.load_from_string(data).graph.node) == 20
    simplified = load_network(data)
    assert simplified.simplified and not any("bn_folded" in la.flags for la in simplified.layers)
    fallback = load_network(_strip(data))
    assert not fallback.simplified
    assert sum("bn_folded" in la.flags for la in fallback.layers) == 20
    assert _signature(fallback) == _signature(simplified)
    _assert_covers_graph(fallback)
    no_bn_rule = load_network(_strip(data), fusion={"bn_into_conv": False})
    bn = [la for la in no_bn_rule.layers if "batchnorm" in la.flags]
    assert len(bn) == 20  # kept as broadcast muls; the relus fold into them
    assert no_bn_rule.macs == simplified.macs


def test_no_simplify_and_timeout_fall_back_cleanly(exported, networks):
    _, data, _ = exported["mobilenet_v2"]
    net = load_network(data, simplify=False)
    assert not net.simplified and _signature(net) == _signature(networks["mobilenet_v2"])
    assert set(net.free_nodes.values()) == {"constant"}
    timed_out = load_network(data, simplify_timeout_s=1e-6)
    assert not timed_out.simplified
    assert any("timed out" in w for w in timed_out.warnings)
    assert _signature(timed_out) == _signature(networks["mobilenet_v2"])
    again = load_network(data)  # the worker is restarted after the timeout
    assert again.simplified and _signature(again) == _signature(networks["mobilenet_v2"])
    in_process = load_network(data, simplify_timeout_s=None)
    assert in_process.simplified and _signature(in_process) == _signature(networks["mobilenet_v2"])


def test_external_data_is_not_needed(tmp_path: Path, exported, networks):
    _, data, _ = exported["resnet18"]
    path = tmp_path / "model.onnx"
    onnx.save(onnx.load_from_string(data), path, save_as_external_data=True, location="weights.bin",
              size_threshold=1024)
    (tmp_path / "weights.bin").unlink()
    net = load_network(path)
    assert _signature(net) == _signature(networks["resnet18"])
    assert any("external" in w for w in net.warnings)


def test_initializers_with_dims_but_no_data(exported, networks):
    _, data, _ = exported["squeezenet"]
    m = onnx.load_from_string(data)
    for t in m.graph.initializer:  # every initializer, however small
        t.ClearField("raw_data")
        t.ClearField("float_data")
    net = load_network(m)
    assert _signature(net) == _signature(networks["squeezenet"])


def test_fusion_rules_change_layers_not_counts(exported, networks):
    _, data, _ = exported["efficientnet_b0"]
    base = networks["efficientnet_b0"]
    unfused = load_network(data, fusion=NO_FUSION)
    acts = [la for la in unfused.layers if la.type == "activation"]
    assert len(acts) == sum(la.activation is not None for la in base.layers)
    assert {la.params["kind"] for la in acts} == {"silu", "sigmoid"}
    assert (unfused.macs, unfused.params) == (base.macs, base.params)
    _assert_covers_graph(unfused)
    only_dw = FusionRules.from_dict({"activations": {"dwconv2d": ["silu"]}})
    partial = load_network(data, fusion=only_dw)
    assert {la.type for la in partial.layers if la.activation} == {"dwconv2d"}


def test_fusion_rules_round_trip_and_validation():
    assert FusionRules.from_dict(DEFAULT_FUSION.to_dict()) == DEFAULT_FUSION
    assert FusionRules.from_dict(None) == DEFAULT_FUSION
    r = FusionRules.from_dict({"activations": {"conv2d": ["relu", "relu6"]}, "single_consumer": False})
    assert r.folds("conv2d", "relu6") and not r.folds("add", "relu") and not r.single_consumer
    with pytest.raises(FusionRulesError, match="'swish2'"):
        FusionRules.from_dict({"activations": {"conv2d": ["swish2"]}})
    with pytest.raises(FusionRulesError, match="'concat' cannot take a fused activation"):
        FusionRules.from_dict({"activations": {"concat": ["relu"]}})
    with pytest.raises(FusionRulesError, match="unknown key"):
        FusionRules.from_dict({"bn_fold": True})


def test_caller_model_is_not_modified(exported):
    _, data, _ = exported["mobilenet_v1"]
    m = onnx.load_from_string(data)
    before = m.SerializeToString()
    load_network(m)
    assert m.SerializeToString() == before


# ----------------------------------------------------------- shapes and errors


def _dyn_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])
    s = helper.make_tensor_value_info("scale", TensorProto.FLOAT, ["batch", 3, 1, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Mul", ["x", "scale"], ["m"], name="mul"), helper.make_node("Relu", ["m"], ["y"], name="relu")]
    return helper.make_model(helper.make_graph(nodes, "dyn", [x, s], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_dynamic_inputs_name_each_input_and_dim():
    with pytest.raises(DynamicShapeError) as e:
        load_network(_dyn_model())
    msg = str(e.value)
    assert "'x' [batch, 3, height, width]" in msg and "'scale' [batch, 3, 1, 1]" in msg
    assert "\n" not in msg
    net = load_network(_dyn_model(), input_shapes={"x": (2, 3, 8, 8), "scale": "2x3x1x1"})
    assert net.inputs == {"x": (2, 3, 8, 8), "scale": (2, 3, 1, 1)}
    (mul,) = net.layers
    assert mul.type == "mul" and mul.activation == "relu" and mul.params["broadcast"] == 1
    assert "batch_gt_1" in mul.flags and any("batch > 1" in w for w in net.warnings)


@pytest.mark.parametrize("shapes,match", [
    ({"nope": (1, 3, 8, 8)}, "unknown input 'nope'; the model's inputs are: x, scale"),
    ({"x": (1, 3, 8), "scale": (1, 3, 1, 1)}, "rank 4 .* rank 3"),
    ({"x": (1, 4, 8, 8), "scale": (1, 3, 1, 1)}, "fixed dimension 1 = 3"),
    ((1, 3, 8, 8), "single input shape was given but the model has 2 inputs"),
    ({"x": (1, 0, 8, 8)}, ">= 1"),
])
def test_bad_input_shapes(shapes, match):
    with pytest.raises(InputShapeError, match=match):
        load_network(_dyn_model(), input_shapes=shapes)


def test_load_model_errors(tmp_path: Path, exported):
    _, data, _ = exported["resnet18"]
    with pytest.raises(OnnxImportError, match="empty"):
        load_model(b"")
    with pytest.raises(OnnxImportError, match="truncated or not ONNX"):
        load_model(data[: len(data) // 2])
    with pytest.raises(OnnxImportError, match="not"):
        load_model(b"this is plain text, not a protobuf at all\n")
    with pytest.raises(OnnxFileNotFoundError, match="no such file") as e:
        load_model(tmp_path / "missing.onnx")
    assert isinstance(e.value, NotFoundError) and e.value.grpc_status == "NOT_FOUND"
    with pytest.raises(OnnxImportError, match="is a directory"):
        load_model(tmp_path)
    with pytest.raises(OnnxImportError, match="cannot load an ONNX model from a int"):
        load_model(3)  # type: ignore[arg-type]
    # A model cut right after its graph: parses, but the opset is gone.
    m = onnx.load_from_string(data)
    del m.opset_import[:]
    with pytest.raises(OnnxImportError, match="declares no opset"):
        load_model(m.SerializeToString())
    for err in (OnnxImportError, DynamicShapeError, InputShapeError):
        assert issubclass(err, UserError)


# ---------------------------------------------------------- the op vocabulary


def _vocab_model(opset: int = 20) -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def init(name: str, arr) -> TensorProto:
        return numpy_helper.from_array(np.asarray(arr), name)

    inits = [
        init("w", rng.random((8, 4, 3, 3), dtype=np.float32)),
        init("wd", rng.random((8, 1, 3, 3), dtype=np.float32)),
        init("slope", rng.random((8, 1, 1), dtype=np.float32)),
        init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
        init("starts", np.array([0], np.int64)), init("ends", np.array([4], np.int64)),
        init("axes1", np.array([1], np.int64)),
        init("scales", np.array([1, 1, 2, 2], np.float32)),
        init("shape2", np.array([1, 8, -1], np.int64)),
        init("fcw", rng.random((6, 10), dtype=np.float32)),
        init("fcb", rng.random(10, dtype=np.float32)),
        init("half", np.array(0.5, np.float32)),
        init("idx", np.array([0, 2], np.int64)),
    ]
    N = helper.make_node
    nodes = [
        N("Conv", ["x", "w"], ["c1"], pads=[2, 2, 2, 2], dilations=[2, 2], group=1, name="conv_dil"),
        N("PRelu", ["c1", "slope"], ["p1"], name="prelu"),
        N("Conv", ["p1", "wd"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], group=8, name="dw"),
        N("LeakyRelu", ["c2"], ["l2"], alpha=0.1, name="leaky"),
        N("Pad", ["l2", "pads"], ["pd"], mode="reflect", name="pad"),
        N("AveragePool", ["pd"], ["ap"], kernel_shape=[3, 3], strides=[1, 1], name="avgpool"),
        N("Slice", ["ap", "starts", "ends", "axes1"], ["sl"], name="slice"),
        N("Gather", ["ap", "idx"], ["ga"], axis=1, name="gather"),
        N("Concat", ["sl", "ga"], ["cc"], axis=1, name="concat"),
        N("Resize", ["cc", "", "scales"], ["rs"], mode="linear", name="resize"),
        N("Sub", ["rs", "half"], ["sb"], name="sub"),
        N("Elu", ["sb"], ["el"], name="elu"),
        N("LRN", ["el"], ["lrn"], size=3, name="lrn"),
        N("Transpose", ["lrn"], ["tr"], perm=[0, 1, 3, 2], name="transpose"),
        N("GlobalMaxPool", ["tr"], ["gp"], name="gmp"),
        N("Reshape", ["tr", "shape2"], ["r3"], name="reshape"),
        N("Transpose", ["r3"], ["r3t"], perm=[0, 2, 1], name="transpose2"),
        N("MatMul", ["r3", "r3t"], ["mm"], name="matmul_act"),
        N("Softmax", ["mm"], ["sm"], axis=-1, name="softmax"),
        N("Erf", ["sm"], ["erf"], name="erf"),
        N("Flatten", ["gp"], ["fl"], name="flatten"),
        N("Identity", ["fl"], ["fl_id"], name="identity"),
        N("Gemm", ["fl_id", "fcw"], ["g0"], name="gemm_nobias"),
        N("MatMul", ["fl", "fcw"], ["g1"], name="matmul_w"),
        N("Add", ["g1", "fcb"], ["g2"], name="bias_add"),
        N("Gelu", ["g2"], ["g3"], name="gelu"),
        N("Div", ["g3", "g0"], ["y1"], name="div"),
        N("MyOp", ["erf"], ["y2"], domain="com.example", name="custom"),
    ]
    g = helper.make_graph(nodes, "vocab", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 10]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 8, 8])], inits)
    g.value_info.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 8, 8]))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.example", 1)])


@pytest.mark.parametrize("simplify", [True, False])
def test_op_vocabulary_mapping(simplify):
    net = load_network(_vocab_model(), simplify=simplify)
    assert net.simplified == simplify
    by = {la.name: la for la in net.layers}
    assert by["conv_dil"].type == "conv2d" and by["conv_dil"].params["d_h"] == 2
    assert by["conv_dil"].activation == "prelu" and by["conv_dil"].n_params == 8 * 4 * 9 + 8
    assert by["dw"].type == "dwconv2d" and by["dw"].activation == "leakyrelu"
    assert by["pad"].type == "pad" and by["pad"].params["mode"] == "reflect"
    assert by["pad"].params["h_out"] == 6
    assert by["avgpool"].type == "avgpool"
    assert by["slice"].type == "slice" and by["gather"].type == "slice"
    assert by["concat"].params["channels"] == [4, 2]
    assert by["resize"].params["mode"] == "linear" and by["resize"].params["h_out"] == 8
    assert by["sub"].type == "add" and by["sub"].activation == "elu" and "const_operand" in by["sub"].flags
    assert by["lrn"].type == "other" and by["lrn"].op_type == "LRN" and "unknown_op" in by["lrn"].flags
    assert by["transpose"].type == "transpose" and by["gmp"].type == "globalpool"
    assert by["gmp"].params["mode"] == "max"
    assert by["matmul_act"].type == "matmul"
    assert (by["matmul_act"].params["m"], by["matmul_act"].params["k"], by["matmul_act"].params["n_cols"]) == (8, 48, 8)
    assert by["softmax"].type == "softmax" and by["softmax"].params["axis_len"] == 8
    assert by["erf"].type == "other"
    assert by["custom"].type == "other" and by["custom"].op_type == "com.example:MyOp"
    assert "domain=com.example" in by["custom"].flags
    assert by["gemm_nobias"].type == "fc" and by["gemm_nobias"].params["bias"] == 0
    (fc,) = [la for la in net.layers if la.activation == "gelu"]  # onnxsim turns MatMul + Add into a Gemm
    assert fc.type == "fc" and fc.params["bias"] == 1 and fc.n_params == 6 * 10 + 10
    if not simplify:
        assert fc.nodes == ["matmul_w", "bias_add", "gelu"]
    assert by["div"].type == "mul"
    assert net.free_nodes == ({} if simplify else {"identity": "identity (no-op)"})
    assert not any("unknown_shape" in la.flags for la in net.layers)
    assert {la.op_type for la in net.other_layers} == {"LRN", "Erf", "com.example:MyOp"}
    _assert_covers_graph(net)


def test_conv_shapes_agree_with_onnx_for_odd_windows():
    """Asymmetric pads, SAME auto-padding, 1-D convs and strides that do not divide."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.random((6, 3, 3, 2), dtype=np.float32), "w")
    w1 = numpy_helper.from_array(rng.random((4, 6, 5), dtype=np.float32), "w1")
    shape3 = numpy_helper.from_array(np.array([1, 6, -1], np.int64), "s3")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], pads=[0, 1, 2, 0], strides=[2, 3], name="asym"),
        helper.make_node("Conv", ["a", "w_same"], ["b"], auto_pad="SAME_UPPER", strides=[2, 2], name="same"),
        helper.make_node("Reshape", ["b", "s3"], ["r"], name="to1d"),
        helper.make_node("Conv", ["r", "w1"], ["y"], strides=[2], name="conv1d"),
    ]
    w_same = numpy_helper.from_array(rng.random((6, 6, 3, 3), dtype=np.float32), "w_same")
    g = helper.make_graph(nodes, "odd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 17, 13])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, w_same, w1, shape3])
    net = load_network(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    for la in net.layers:
        if la.type == "conv2d":
            assert "shape_mismatch" not in la.flags
            assert np.prod(la.counts.output_shape) == np.prod(la.output_shapes[0]), la.name
    assert "conv1d" in net.layers[-1].flags and "auto_pad" in net.layers[1].flags


def test_unsorted_and_unnamed_nodes():
    nodes = [helper.make_node("Relu", ["m"], ["y"]), helper.make_node("Add", ["x", "x"], ["m"])]
    g = helper.make_graph(nodes, "unsorted", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    net = load_network(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), simplify=False)
    (layer,) = net.layers
    assert layer.type == "add" and layer.activation == "relu" and layer.nodes == ["Add_1", "Relu_0"]
    _assert_covers_graph(net)


def test_a_dying_onnxsim_worker_falls_back_and_is_replaced(monkeypatch, exported, networks):
    import estimator.onnx_import as oi

    _, data, _ = exported["mnasnet"]
    worker = oi._SimplifyWorker()
    monkeypatch.setattr(oi, "_WORKER", worker)
    # A worker that greets, reads the request header, then dies as a crashing onnxsim would.
    monkeypatch.setattr(oi, "_WORKER_SOURCE", "import os, sys; os.write(1, b'R'); os.read(0, 16); os._exit(11)")
    net = load_network(data)
    assert not net.simplified
    assert any("onnxsim worker died" in w for w in net.warnings), net.warnings
    assert _signature(net) == _signature(networks["mnasnet"])
    monkeypatch.undo()
    monkeypatch.setattr(oi, "_WORKER", worker)
    again = load_network(data)
    assert again.simplified and _signature(again) == _signature(networks["mnasnet"])
    worker.close()


def test_an_activation_of_kind_other_folds_and_keeps_its_producer():
    """Selu has no kind of its own ('other'); folded into a conv by the default rules, the
    conv stays a conv2d whose act feature says 'other'."""
    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Selu", ["c"], ["y"], name="selu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], [w])
    net = load_network(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(),
                       fusion=DEFAULT_FUSION)
    [layer] = net.layers
    assert layer.type == "conv2d" and layer.activation == "other" and layer.params["act"] == "other"
    assert layer.features["act"] == float(describe("conv2d", dict(layer.params)).features["act"]) > 0


def _outer_read_model(kind: str) -> onnx.ModelProto:
    """A Conv whose output only a subgraph reads: an If branch, or a Loop body whose explicit
    inputs are all constants (the Loop is then not computed from constants alone)."""
    r = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 15, 15])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 15, 15])
    v = helper.make_tensor_value_info
    inits = [numpy_helper.from_array(r.random((16, 8, 3, 3)).astype(np.float32), "w")]
    conv = helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])
    if kind == "if":
        branch = lambda name, op: helper.make_graph(  # noqa: E731
            [helper.make_node(op, ["c"], [f"{name}_y"], name=f"{name}_op")], name, [],
            [v(f"{name}_y", TensorProto.FLOAT, [1, 16, 15, 15])])
        nodes = [conv, helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
                 helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
                 helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch("then", "Relu"),
                                  else_branch=branch("else", "Sigmoid"))]
        inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
    else:
        body = helper.make_graph(
            [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id"),
             helper.make_node("Add", ["v_in", "c"], ["v_out"], name="body_add")], "body",
            [v("i", TensorProto.INT64, []), v("cond_in", TensorProto.BOOL, []), v("v_in", TensorProto.FLOAT, [1, 16, 15, 15])],
            [v("cond_out", TensorProto.BOOL, []), v("v_out", TensorProto.FLOAT, [1, 16, 15, 15])])
        nodes = [conv, helper.make_node("Loop", ["trip", "go", "z"], ["y"], name="loop", body=body)]
        inits += [numpy_helper.from_array(np.zeros((1, 16, 15, 15), np.float32), "z"),
                  numpy_helper.from_array(np.array(3, np.int64), "trip"), numpy_helper.from_array(np.array(True), "go")]
    model = helper.make_model(helper.make_graph(nodes, kind, [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("kind", ["if", "loop"])
def test_a_tensor_only_a_subgraph_reads_keeps_its_producer(kind):
    """Liveness, order and constant folding count what If branches and Loop bodies read from the
    enclosing graph: the Conv is a layer, not dead code, and the If/Loop an `other` layer."""
    net = load_network(_outer_read_model(kind).SerializeToString())
    layers = {la.name: la for la in net.layers}
    assert layers["conv"].type == "conv2d" and layers["conv"].macs == 16 * 8 * 9 * 15 * 15
    assert layers[kind].type == "other" and "subgraph" in layers[kind].flags
    assert "conv" not in net.free_nodes and kind not in net.free_nodes


def test_token_linears_give_the_same_layers_with_and_without_their_weights():
    """nn.Linear over tokens exports as MatMul + Add: with the weights in the file onnxsim runs,
    and its MatMul + Add -> Gemm fusion wrapped each 3-D one in two Reshapes (three layers
    where the stripped model, which onnxsim skips, has one fc with its bias folded)."""
    block = torch.nn.Sequential(torch.nn.Linear(64, 192), torch.nn.GELU(), torch.nn.Linear(192, 64)).eval()
    data = _export(block, (1, 16, 64))
    full, stripped = load_network(data), load_network(_strip(data))
    assert full.simplified and not stripped.simplified
    assert _signature(full) == _signature(stripped)
    assert [la.type for la in full.layers].count("fc") == 2 and "reshape" not in [la.type for la in full.layers]
