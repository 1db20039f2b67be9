"""Issue 5: context sampling plans and stems that read the graph input (``graph_input``)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import onnx
import torch
from torch import nn

from bench.context_sampling import context_plan
from bench.modelgen import padded_model, padding_keys, to_onnx
from bench.sampling import in_space, limits_for
from bench.smartpad import lum_interval
from estimator import zoo
from estimator.layers import describe, feature_names
from estimator.onnx_import import load_network

STEM = dict(h=224, w=224, c_in=3, c_out=32, k_h=3, k_w=3, s_h=2, s_w=2, p_t=0, p_l=0, p_b=1, p_r=1)


def test_plans_are_seeded_valid_and_stem_input_is_the_stem_draws():
    lim = limits_for("vela")
    a = context_plan({"stem": 30, "activation": 40}, seed=0, limits=lim)
    b = context_plan({"stem": 30, "activation": 40}, seed=0, limits=lim)
    assert [c.key for c in a] == [c.key for c in b] and len(a) == 70
    assert all(in_space(c.layer_type, c.params, lim) for c in a)
    assert context_plan({"stem": 5}, seed=1, limits=lim)[0].key != a[0].key
    stems = [c for c in a if c.layer_type == "conv2d"]
    inp = context_plan({"stem-input": 30}, seed=0, limits=lim)
    assert [dict(c.params, graph_input=1) for c in stems] == [c.params for c in inp]
    acts = [c.params for c in a if c.layer_type == "activation"]
    assert {p["kind"] for p in acts} <= {"silu", "sigmoid", "hardswish", "hardsigmoid", "relu6", "relu",
                                         "leakyrelu", "tanh"}
    assert all(p["c"] % 8 == 0 and p["h"] * p["w"] * p["c"] <= lim.max_elems for p in acts)
    big = [c.params for c in context_plan({"activation-large": 20}, seed=0, limits=lim)]
    assert len(big) == 20 and all(lim.max_elems < p["h"] * p["w"] * p["c"] <= 1 << 22 for p in big)


def test_fused_act_plan_covers_the_activations_vela_folds_into_convolutions():
    import json

    from estimator.profile import load_profile

    lim = limits_for("vela")
    plan = context_plan({"fused-act": 200}, seed=0, limits=lim)
    assert [c.key for c in plan] == [c.key for c in context_plan({"fused-act": 200}, seed=0, limits=lim)]
    assert len(plan) == 200 and all(in_space(c.layer_type, c.params, lim) for c in plan)
    kinds = {(c.layer_type, c.params["act"]) for c in plan}
    folded = set(load_profile("imx93").fusion_rules().to_dict()["activations"]["conv2d"]) - {"relu", "clip"}
    for t in ("conv2d", "dwconv2d"):  # every folded kind but the LUM's default ReLU, and none
        assert {k for tt, k in kinds if tt == t} == folded | {"none"}
    # the importer folds a conv's HardSwish into the conv: its act feature is the one the plan measures
    net = load_network(zoo.export_onnx(nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.Hardswish(),
                                                     nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.Hardswish()).eval(), 64),
                       fusion=load_profile("imx93").fusion_rules())
    conv, dw = [l for l in net.layers if l.type in ("conv2d", "dwconv2d")]
    hs = [c for c in plan if c.params["act"] == "hardswish"]
    for layer in (conv, dw):
        assert layer.params["act"] == "hardswish"
        one = next(c for c in hs if c.layer_type == layer.type)
        assert describe(layer.type, one.params).features["act"] == layer.features["act"]
    assert json.dumps([c.params for c in plan])  # plain data (stored as the rows' params)


def test_large_maps_plan_spans_the_sram_threshold_on_early_stage_maps():
    lim = limits_for("vela")
    plan = context_plan({"large-maps": 120}, seed=0, limits=lim)
    assert [c.key for c in plan] == [c.key for c in context_plan({"large-maps": 120}, seed=0, limits=lim)]
    assert len(plan) == 120 and all(in_space(c.layer_type, c.params, lim) for c in plan)
    assert {c.layer_type for c in plan} == {"dwconv2d", "add", "conv2d"}
    for c in plan:
        p = c.params
        assert p["h"] == p["w"] and 48 <= p["h"] <= 160
        c_in = p.get("c", p.get("c_in"))
        assert c_in % 8 == 0 and p["h"] * p["w"] * c_in <= lim.max_elems
        if c.layer_type == "conv2d":
            assert p["k_h"] == p["k_w"] == 1
    sizes = [c.params["h"] ** 2 * c.params.get("c", c.params.get("c_in")) for c in plan]
    assert min(sizes) < 196_608 < max(sizes)  # both sides of 384 KiB of SRAM for input + output (int8)


def test_graph_input_is_a_conv2d_feature_defaulting_to_zero():
    assert "graph_input" in feature_names("conv2d")
    assert describe("conv2d", STEM).features["graph_input"] == 0.0
    f = describe("conv2d", dict(STEM, graph_input=1)).features
    assert f["graph_input"] == 1.0 and f["flops"] == describe("conv2d", STEM).features["flops"]


def test_graph_input_stem_is_padded_on_the_output_side_only():
    p = dict(STEM, graph_input=1)
    keys = padding_keys("conv2d", p)
    assert keys.inputs == () and keys.output == (112, 112, 32)
    assert padding_keys("conv2d", STEM).inputs == ((224, 224, 3),)
    ir = padded_model("conv2d", p)
    assert [o.role for o in ir.ops] == ["lum", "pad_out"]
    assert [t.shape for t in ir.inputs] == [(1, 3, 224, 224)] and ir.ops[0].inputs == ("x",)
    onnx.checker.check_model(onnx.load_from_string(to_onnx(ir)))
    full = padded_model("conv2d", STEM)
    assert [o.role for o in full.ops] == ["pad_in", "lum", "pad_out"] and full.name != ir.name
    # Eq. 4 with T_b1 = 0: [T_c - T_b2, T_c]
    iv = lum_interval(1.0, 0.0, 0.2)
    assert (iv.lo, iv.hi) == (0.8, 1.0)


def test_importer_flags_convs_reading_a_network_input():
    net = load_network(zoo.export_onnx(zoo.build("mobilenet_v2", 64), 64))
    convs = [l for l in net.layers if l.type == "conv2d"]
    assert convs[0].params.get("graph_input") == 1 and convs[0].features["graph_input"] == 1.0
    assert all("graph_input" not in l.params for l in convs[1:])

    class Two(nn.Module):  # a conv on an intermediate tensor is not a stem, even with 3 channels
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 3, 3, padding=1), nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(torch.relu(self.a(x)))

    layers = load_network(zoo.export_onnx(Two().eval(), 32)).layers
    flags = [l.params.get("graph_input") for l in layers if l.type == "conv2d"]
    assert flags == [1, None]
    assert np.isfinite(layers[0].features["flops"])


def test_bench_run_context_measures_the_plan_and_rejects_bad_specs(tmp_path, capsys):
    """``bench run --context`` is the one way to measure a context plan (ONNX Runtime here,
    two stems reading the graph input: only the output side padded, real timings)."""
    import json
    import sqlite3

    from bench.cli import main

    argv = ["run", "--device", "ctx", "--runner", "onnxruntime", "--warmup", "0", "--runs", "2",
            "--out", str(tmp_path), "--no-progress"]
    assert main(argv + ["--context", "stem-input:2", "--seed", "0"]) == 0
    assert "measured 2 configurations" in capsys.readouterr().out
    with sqlite3.connect(tmp_path / "ctx.sqlite") as db:
        params = [r[0] for r in db.execute("select params from measurements")]
    assert len(params) == 2 and all(json.loads(p)["graph_input"] == 1 for p in params)
    assert main(argv + ["--context", "stem:0"]) == 2
    assert "NAME:N" in capsys.readouterr().err
    assert main(argv + ["--context", "stems:3"]) == 2
    assert main(argv + ["--context", "stem:1", "--layers", "conv2d"]) == 2
    assert "replaces the sampling plan" in capsys.readouterr().err


def test_bench_run_context_dry_run_prints_the_plan_and_opens_no_database(tmp_path, capsys):
    """``bench run --context ... --dry-run`` prints the plan that ``--context`` would measure, one
    configuration a line, builds no runner and writes no database; without ``--context`` it is
    a one-line usage error."""
    from bench.cli import main

    out = tmp_path / "data"
    argv = ["run", "--device", "ctx", "--runner", "vela", "--out", str(out), "--seed", "0"]
    assert main(argv + ["--context", "stem:3,activation:2", "--dry-run"]) == 0
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    plan = context_plan({"stem": 3, "activation": 2}, seed=0, limits=limits_for("vela"))
    assert len(lines) == len(plan) == 5
    assert [line.split()[:2] for line in lines] == [[c.layer_type, c.key] for c in plan]
    assert "5 configurations" in cap.err and "nothing measured" in cap.err
    assert not out.exists() and not list(tmp_path.iterdir())
    assert main(argv + ["--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "bench: error: --dry-run goes with --context (it prints that plan)"
    assert not list(tmp_path.iterdir())


def test_concat_inputs_read_elsewhere_are_a_feature_and_a_second_reader_in_the_padded_model():
    """A concat input another layer also reads (raw param ``shared``) is a copy on Vela, not
    a free write into the concatenation: feature ``c_shared``, and in the padded model that
    input gets a second reader, its padding pair's pad-out conv."""
    import onnxruntime as ort

    from bench.modelgen import make_inputs
    from estimator.layers import LayerSpecError

    p = dict(h=20, w=20, channels=[16, 8])
    assert describe("concat", p).features["c_shared"] == 0
    assert describe("concat", dict(p, shared=[0])).features["c_shared"] == 16
    assert describe("concat", dict(p, shared="0,1")).features["c_shared"] == 24
    for bad in ([2], [-1], "x"):
        with pytest.raises(LayerSpecError, match="shared"):
            describe("concat", dict(p, shared=bad))
    plain, shared = padded_model("concat", p), padded_model("concat", dict(p, shared=[0]))
    assert [t.name for t in plain.outputs] == ["y"]
    assert [t.name for t in shared.outputs] == ["y", "y_shared0"] and shared.name != plain.name
    second = shared.op("pad_out_shared0")
    assert second.role == "pad_out" and second.inputs == ("pad_in0_out",) and second.attrs["c_in"] == 16
    assert padding_keys("concat", dict(p, shared=[0])) == padding_keys("concat", p)
    sess = ort.InferenceSession(to_onnx(shared), providers=["CPUExecutionProvider"])
    outs = sess.run(None, make_inputs(shared))
    assert [o.shape for o in outs] == [(1, 1, 20, 20), (1, 1, 20, 20)]


def test_importer_marks_concat_inputs_another_layer_reads():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 16, 1), nn.Conv2d(3, 8, 1)
            self.o, self.x = nn.Conv2d(24, 8, 1), nn.Conv2d(16, 8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = self.a(x), self.b(x)
            return self.o(torch.cat([a, b], 1)) + self.x(a)  # a: read by the concat and by x

    cat = [l for l in load_network(zoo.export_onnx(Net().eval(), 32)).layers if l.type == "concat"]
    assert len(cat) == 1 and cat[0].params["shared"] == [0] and cat[0].features["c_shared"] == 16
    # a DenseNet block concatenates maps every later layer of the block reads too
    dense = [l for l in load_network(zoo.export_onnx(zoo.build("densenet121", 64), 64)).layers if l.type == "concat"]
    assert dense and sum(l.features["c_shared"] > 0 for l in dense) >= len(dense) // 2
    # a concat whose inputs nothing else reads (GoogLeNet's inception branches) has none
    goog = [l for l in load_network(zoo.export_onnx(zoo.build("googlenet", 64), 64)).layers if l.type == "concat"]
    assert goog and all("shared" not in l.params for l in goog)


def test_basic_block_plan_draws_dense_3x3_convolutions_at_residual_block_shapes():
    cfgs = context_plan({"basic-block": 60}, seed=0, limits=limits_for("vela"))
    assert len(cfgs) == 60 and {c.layer_type for c in cfgs} == {"conv2d"}
    ps = [c.params for c in cfgs]
    assert all(p["k_h"] == p["k_w"] == 3 and p.get("groups", 1) == 1 and p["h"] == p["w"] for p in ps)
    same = [p for p in ps if p["s_h"] == 1]
    assert same and all(p["c_in"] == p["c_out"] for p in same)
    assert all(p["c_out"] > p["c_in"] for p in ps if p["s_h"] == 2)
    assert {p.get("act", "relu") for p in ps} == {"relu", "none"}


def test_concat_shared_plan_draws_shared_and_unshared_inputs():
    cfgs = context_plan({"concat-shared": 40}, seed=0)
    assert len(cfgs) == 40 and {c.layer_type for c in cfgs} == {"concat"}
    c_shared = [describe("concat", c.params).features["c_shared"] for c in cfgs]
    assert 0 < sum(s > 0 for s in c_shared) < 40
    assert [c.key for c in context_plan({"concat-shared": 40}, seed=0)] == [c.key for c in cfgs]


def test_constant_operands_are_a_feature_and_an_initializer_in_the_padded_model():
    """An element-wise op whose second operand is a constant (raw param ``const_b``; a
    standalone batch norm: ``batchnorm``) reads one activation input; the operand is an
    initializer of the padded model, of the shape ``broadcast``/``elems_b`` give."""
    import onnxruntime as ort

    from bench.modelgen import make_inputs
    from estimator.layers import LayerSpecError

    se = dict(h=8, w=8, c=16, broadcast=1, elems_b=16)
    assert describe("mul", se).features["const_b"] == 0 and describe("mul", se).features["batchnorm"] == 0
    # the constant's kind: 1 a scalar, 2 per channel, 3 the full shape
    assert describe("mul", dict(se, elems_b=1, const_b=1)).features["const_b"] == 1
    assert describe("mul", dict(se, const_b=1)).features["const_b"] == 2
    assert describe("add", dict(h=8, w=8, c=16, const_b=1)).features["const_b"] == 3
    for bad in (dict(const_b=2), dict(batchnorm=2)):
        with pytest.raises(LayerSpecError, match=next(iter(bad))):
            describe("mul", dict(se, **bad))
    with pytest.raises(LayerSpecError, match="const_b=1"):
        padded_model("mul", dict(se, batchnorm=1))
    for t, p, op, const in (("mul", dict(se, const_b=1), "Mul", (1, 16, 1, 1)),
                            ("mul", dict(se, elems_b=1, const_b=1), "Mul", (1, 1, 1, 1)),
                            ("add", dict(h=8, w=8, c=16, const_b=1), "Add", (1, 16, 8, 8)),
                            ("mul", dict(se, const_b=1, batchnorm=1), "BatchNormalization", (16,))):
        ir = padded_model(t, p)
        assert [x.name for x in ir.inputs] == ["x"], p  # one pad-in conv: the operand is no graph input
        m = onnx.load_from_string(to_onnx(ir))
        lum = next(n for n in m.graph.node if n.name == "lum")
        assert lum.op_type == op and lum.input[0] == "pad_in_out"
        inits = {i.name: tuple(i.dims) for i in m.graph.initializer}
        assert inits[lum.input[1]] == const
        out = ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, make_inputs(ir))
        assert out[0].shape == (1, 1, 8, 8)
    assert padded_model("mul", dict(se, const_b=1)).name != padded_model("mul", se).name


def test_importer_marks_constant_operands_and_standalone_batch_norms():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 16, 1), nn.Conv2d(3, 8, 1)
            self.se = nn.Conv2d(16, 16, 1)
            self.gamma = nn.Parameter(torch.rand(1, 16, 1, 1) + 0.5)
            self.bn = nn.BatchNorm2d(24)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = self.a(x)
            a = a * torch.sigmoid(self.se(a.mean((2, 3), keepdim=True)))  # SE: a computed operand
            a = a * self.gamma + 0.5  # a layer scale and a constant shift
            return self.bn(torch.cat([a, self.b(x)], 1))  # a BN after a concat: nothing absorbs it

    layers = load_network(zoo.export_onnx(Net().eval(), 16)).layers
    muls = [(l.params.get("const_b", 0), l.params.get("batchnorm", 0)) for l in layers if l.type == "mul"]
    assert sorted(muls) == [(0, 0), (1, 0), (1, 1)]
    adds = [l for l in layers if l.type == "add"]
    assert len(adds) == 1 and adds[0].params["const_b"] == 1 and adds[0].features["const_b"] == 1  # + 0.5
    dense = [l for l in load_network(zoo.export_onnx(zoo.build("densenet121", 64), 64)).layers
             if l.type == "mul"]
    assert dense and all(l.params["batchnorm"] == 1 == l.features["batchnorm"] for l in dense)


def test_const_operand_plan_draws_constant_operands_and_batch_norms():
    lim = limits_for("vela")
    cfgs = context_plan({"const-operand": 80}, seed=0, limits=lim)
    assert len(cfgs) == 80 and {c.layer_type for c in cfgs} == {"mul", "add"}
    assert all(c.params["const_b"] == 1 for c in cfgs)
    bn = [c.params for c in cfgs if c.params.get("batchnorm")]
    assert bn and all(p["elems_b"] == p["c"] and p["const_params"] == 2 * p["c"] for p in bn)
    assert {describe(c.layer_type, c.params).features["broadcast"] for c in cfgs} == {0.0, 1.0}


def test_huge_maps_plan_draws_first_stage_layers_above_the_runners_element_limit():
    lim = limits_for("vela")
    cfgs = context_plan({"huge-maps": 60}, seed=0, limits=lim)
    assert len(cfgs) == 60 and {c.layer_type for c in cfgs} == {"conv2d", "dwconv2d"}
    out = [math.prod(describe(c.layer_type, c.params).output_shape) for c in cfgs]
    assert all(out_ <= 1 << 23 for out_ in out) and sum(o > lim.max_elems for o in out) > 30
    convs = [c.params for c in cfgs if c.layer_type == "conv2d"]
    assert all(p["k_h"] == p["k_w"] == 1 and p["h"] >= 112 for p in convs)
    assert "hardswish" in {p["act"] for p in convs}
