"""The layer-type registry: each type is one module that owns its counts, its smart-padding
LUM and its sampler, and the model generator and sampling plans loop over the registry."""
import numpy as np
import pytest

from bench.modelgen import padded_model, padding_keys, single_layer_model
from bench.sampling import in_space
from estimator.layers import BENCHABLE_TYPES, LAYER_TYPES, SAMPLED_TYPES, SPECS, LayerSpecError, describe, describe_strict


def test_each_type_is_its_own_module():
    for name, spec in SPECS.items():
        assert type(spec).__module__ == f"estimator.layers.{name}", (name, type(spec).__module__)
        assert spec.name == name and spec.features and spec.summary
    assert LAYER_TYPES[-1] == "other"  # never dropped: the catch-all comes last
    assert len({s.order for s in SPECS.values()}) == len(SPECS)


@pytest.mark.parametrize("layer_type", SAMPLED_TYPES)
def test_every_sampled_type_draws_configurations_its_lum_builds(layer_type):
    spec = SPECS[layer_type]
    assert layer_type in BENCHABLE_TYPES
    r = np.random.default_rng(0)
    built = 0
    for prior in (False, True):
        for _ in range(20):
            p = spec.draw(r, prior)
            try:
                counts = describe(layer_type, p)
            except LayerSpecError:
                continue  # an invalid draw is rejected by the plan, not built
            assert describe_strict(layer_type, p) == counts  # count reads every parameter the sampler sets
            if not in_space(layer_type, p):
                continue
            ir = padded_model(layer_type, p)
            assert ir.outputs[0].shape[1] == 1  # the pad-out conv closes every padded model
            assert [o.role for o in ir.ops].count("pad_out") == 1
            assert ir.lum_op_names(), layer_type
            keys = padding_keys(layer_type, p)
            assert all(min(k) >= 1 for k in keys.all()) and counts.ops > 0
            single_layer_model(layer_type, p)
            built += 1
    assert built >= 10, (layer_type, built)


def test_count_reads_every_parameter_the_importer_sets_and_refuses_the_others():
    """The contract behind layer specs' strictness (:func:`describe_strict`): a type's count
    reads every raw parameter its importer, sampler or LUM takes, so a parameter it does not
    read is a mistake (``stride`` for ``s_h``/``s_w``), refused with what it reads."""
    from estimator import zoo
    from estimator.onnx_import import load_network

    seen = set()
    for name, res in (("mobilenet_v3", 96), ("densenet121", 64), ("deit_tiny", None), ("mobilevit_xs", None)):
        for la in load_network(zoo.export_onnx(name, res) if res else zoo.export_onnx(name)).layers:
            if la.type != "other":
                describe_strict(la.type, la.params)
                seen.add(la.type)
    assert {"conv2d", "dwconv2d", "fc", "matmul", "softmax", "layernorm", "concat", "globalpool"} <= seen
    for layer_type, p in (("pad", dict(h=8, w=8, c=4, h_out=10, w_out=10, mode="reflect")),
                          ("activation", dict(h=8, w=8, c=4, kind="clip", min=0.0, max=6.0)),
                          ("dwconv2d", dict(h=8, w=8, c=4, k_h=3, k_w=3, groups=4))):
        describe_strict(layer_type, p)
    conv = dict(h=8, w=8, c_in=4, c_out=8, k_h=3, k_w=3)
    with pytest.raises(LayerSpecError, match=r"unknown parameters 'pad', 'stride' for conv2d; it reads .*s_h, s_w"):
        describe_strict("conv2d", dict(conv, stride=2, pad=1))
    assert describe("conv2d", dict(conv, stride=2)) == describe("conv2d", conv)  # (what describe alone does)


def test_a_type_without_a_lum_builder_is_refused_with_the_benchable_list():
    with pytest.raises(LayerSpecError, match="cannot be benchmarked with smart padding"):
        padded_model("pad", dict(h=4, w=8, c=8))


def test_a_type_module_alone_teaches_the_importer_a_new_operator(monkeypatch):
    """The importer dispatches ONNX nodes through the registry: a type that claims an
    operator (here Erf, otherwise kept as 'other') gets its nodes, with nothing else changed."""
    import onnx
    from onnx import TensorProto, helper

    from estimator.layers import registry
    from estimator.layers.shared import MemoryBound, generic_draft
    from estimator.onnx_import import load_network

    class ErfType(MemoryBound):
        name = "erf_test"
        order = 999
        features = ("h", "w", "c")
        summary = "test type"
        onnx_ops = ("Erf",)

        def from_onnx(self, n, g):
            return generic_draft(n, g, self.name)

    spec = ErfType()
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])
    graph = helper.make_graph([helper.make_node("Erf", ["x"], ["y"], name="erf")], "g", [x], [y])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    onnx.checker.check_model(onnx.load_from_string(data))

    before = load_network(data, fast=False).layers
    assert [(l.type, l.op_type) for l in before] == [("other", "Erf")]
    monkeypatch.setitem(registry.SPECS, spec.name, spec)
    monkeypatch.setitem(registry.ONNX_OPS, "Erf", (spec,))
    after = load_network(data, fast=False).layers
    assert [(l.type, l.features) for l in after] == [("erf_test", {"h": 4, "w": 4, "c": 8})]


def _valid_config(spec):
    configs = list(spec.examples) + [dict(h=4, w=8, c=8)]
    if spec.sampled:
        r = np.random.default_rng(1)
        configs += [spec.draw(r, False) for _ in range(10)]
    for p in configs:
        try:
            describe(spec.name, p)
            return dict(p)
        except LayerSpecError:
            continue
    return None


@pytest.mark.parametrize("layer_type", LAYER_TYPES)
def test_a_channel_count_of_0_is_the_one_zero_channel_rule(layer_type):
    """A layer with a 0 channel count (a pruned one) is told by its type's
    ``zero_channels``; a negative count stays the count's error."""
    spec = SPECS[layer_type]
    p = _valid_config(spec)
    assert p is not None, layer_type
    assert not spec.zero_channels(p)
    if layer_type == "concat":  # every input empty; one empty input beside others is still an error
        hw = {"h": 8, "w": 8}
        assert spec.zero_channels(dict(hw, channels=[0, 0])) and spec.zero_channels(dict(hw, channels="0,0,0"))
        assert spec.zero_channels(dict(hw, c_in1=0, c_in2=0)) and not spec.zero_channels(dict(hw, channels=[0, 8]))
        with pytest.raises(LayerSpecError, match=">= 1 channel"):
            describe(layer_type, dict(hw, channels=[0, 8]))
        return
    keys = [k for k in spec.channel_params if k in p]
    assert keys or layer_type == "matmul", layer_type
    for k in keys:
        zero, neg = dict(p, **{k: 0}), dict(p, **{k: -1})
        assert spec.zero_channels(zero), (layer_type, k)
        assert not spec.zero_channels(neg) and not any(spec.zero_channels(dict(neg, **{o: 0})) for o in keys if o != k)
        with pytest.raises(LayerSpecError, match=">= 1"):
            describe(layer_type, neg)
        for req in spec.required:  # a missing parameter stays the count's error
            if req not in keys:
                assert not spec.zero_channels({a: v for a, v in zero.items() if a != req}), (layer_type, req)


@pytest.mark.parametrize("layer_type", LAYER_TYPES)
def test_each_type_summarises_its_own_parameters(layer_type):
    """``estimator layers`` shows a type's summary of its raw parameters (``brief``, in the
    type's module) or, for a type without one, the input shape: no list of types elsewhere."""
    import inspect

    from estimator import cmd_layers
    from estimator.predict import make_layer

    spec = SPECS[layer_type]
    p = _valid_config(spec)
    text = spec.brief(p)
    assert text is None or (isinstance(text, str) and text), layer_type
    if layer_type != "other":
        shown = cmd_layers.key_features(make_layer(layer_type, p))
        assert shown == text if text else shown.startswith("in "), (layer_type, shown)
    assert "LayerType.CONV2D" not in inspect.getsource(cmd_layers)


def test_runtime_fusion_rules_come_from_the_type_modules(monkeypatch):
    """A runtime's default fusion rules are each producer type's ``fused_activations`` for it,
    assembled over the registry: a type module alone changes them."""
    from bench.profile_db import litert_fusion, onnxruntime_fusion, runtime_fusion, vela_fusion
    from estimator.fusion import FusionRules

    for runtime, rules in (("onnxruntime", onnxruntime_fusion()), ("litert", litert_fusion()), ("vela", vela_fusion())):
        assert rules == runtime_fusion(runtime)
        assert set(rules["activations"]) == {t for t, s in SPECS.items() if runtime in s.fused_activations}
        FusionRules.from_dict(rules)  # a valid rule set
    ort = onnxruntime_fusion()["activations"]
    assert ort["add"] == ["relu"] and ort["mul"] == [] and "silu" not in ort["conv2d"] and "hardswish" in ort["conv2d"]
    assert litert_fusion()["activations"]["conv2d"] == ["clip", "hardsigmoid", "relu", "relu6"]
    monkeypatch.setattr(type(SPECS["matmul"]), "fused_activations", {"litert": ("relu",)})
    assert runtime_fusion("litert")["activations"]["matmul"] == ["relu"]
    assert "matmul" not in runtime_fusion("onnxruntime")["activations"]
