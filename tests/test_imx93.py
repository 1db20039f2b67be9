"""The ``imx93`` device profile (Vela estimates), whole-network int8 conversion and the
Vela-specific parts of benchmarking.

* the shipped profile says "estimated", names Vela and its i.MX93 configuration, and
  carries Vela's fusion and CPU-fallback rules;
* ``estimator predict MODEL.onnx --device imx93`` works and never imports TensorFlow,
  LiteRT or Vela (the estimation path stays light);
* operators the profile lists as CPU-placed are flagged in estimates, and those it lists as
  free (views on Vela: Reshape, Flatten, ...) are free nodes with their reason;
* (tflite extra) a small smart-padding plan on the Vela runner refuses a layer Vela puts
  on the CPU instead of recording a time without it, and ``bench profile`` turns the
  database into a profile with Vela's rules;
* (tflite extra) whole networks convert to int8 TFLite (float32 matches ONNX Runtime) and
  compile with Vela; Vela-compiled models for the Ethos-U delegate.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from estimator.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("tensorflow", "ai_edge_litert", "tflite_runtime", "ethosu", "torch", "keras")


def _has(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


needs_tflite = pytest.mark.skipif(not (_has("tensorflow") and _has("ethosu") and _has("ai_edge_litert")),
                                  reason="needs the tflite extra (TensorFlow, ai-edge-litert, ethos-u-vela)")


# ------------------------------------------------------------------ the shipped profile


def test_imx93_profile_is_estimated_by_vela() -> None:
    prof = load_profile("imx93", ROOT / "profiles")
    assert prof.provenance.kind == "estimated"
    src = prof.provenance.source
    assert src.startswith("estimated by Vela ") and "not measured on hardware" in src
    for part in ("ethos-u65-256", "Ethos_U65_High_End", "Dedicated_Sram_384KB", "i.MX93"):
        assert part in src
    assert prof.runner == "vela" and prof.precision == "int8"
    assert "ethos-u-vela" in prof.provenance.versions
    assert prof.provenance.versions["ethos-u-vela"] in src
    # what every estimate's warning quotes: the first sentence, which says who estimated it
    summary = prof.provenance.summary()
    assert summary.startswith("estimated by Vela ") and summary.endswith("not measured on hardware.")
    assert len(summary) <= 240 < len(src)
    rows = list(prof.rows())
    assert len(rows) >= 300 and {r["runner"] for r in rows} == {"vela"}
    types = {r["layer_type"] for r in rows}
    assert {"conv2d", "dwconv2d", "add", "mul", "activation", "fc", "globalpool", "concat"} <= types
    # every row has its smart-padding interval and the single-layer time (the paper's comparison)
    assert all(r["t_lum_lo_ms"] <= r["t_lum_hi_ms"] and r["t_single_ms"] > 0 for r in rows)


def test_imx93_mapping_rules() -> None:
    prof = load_profile("imx93", ROOT / "profiles")
    rules = prof.fusion_rules()
    assert rules.folds("conv2d", "relu6") and rules.folds("conv2d", "hardswish") and rules.folds("add", "relu")
    assert not rules.folds("conv2d", "silu")  # LOGISTIC + MUL stay layers on Vela
    om = prof.op_mapping
    assert prof.cpu_fallback_ops and all(isinstance(o, str) for o in prof.cpu_fallback_ops)
    assert "Conv" not in prof.cpu_fallback_ops and "Sin" in prof.cpu_fallback_ops
    assert "Transpose" in om["conditional_cpu_ops"] and "vela" in om["source"].lower()
    # the benchmark's own evidence: configurations Vela left on the CPU
    assert om.get("benchmark_cpu_placements"), "the run should have met CPU-placed layers (elu, odd resizes)"


# --------------------------------------------------------------- estimation, no TF


def _small_onnx(path: Path, with_cpu_op: bool = False) -> Path:
    """conv 3x3 (8->16) + ReLU6, a depthwise conv, global pool (+ a Sin: no NPU kernel)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(r.standard_normal((16, 8, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(r.standard_normal((16, 1, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"], name="relu6"),
             helper.make_node("Conv", ["a1", "w2"], ["c2"], name="dw", pads=[1, 1, 1, 1], group=16)]
    last = "c2"
    if with_cpu_op:
        nodes.append(helper.make_node("Sin", ["c2"], ["s"], name="sin"))
        last = "s"
    nodes.append(helper.make_node("GlobalAveragePool", [last], ["y"], name="gap"))
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cl-cache")


def test_predict_cli_on_imx93_never_imports_tensorflow(tmp_path: Path, cache_dir: Path) -> None:
    model = _small_onnx(tmp_path / "small.onnx")
    env = dict(os.environ, CL_CACHE_DIR=str(cache_dir), CL_PROFILES=str(ROOT / "profiles"))
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "estimator.cli", "predict", str(model),
                           "--device", "imx93", "--json", "--no-progress"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["device"] == "imx93" and doc["unit"] == "ms" and doc["total_ms"] > 0
    assert doc["n_layers"] >= 3
    assert any("estimated numbers (cost model)" in w for w in doc["warnings"])
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_cpu_fallback_ops_are_flagged(tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from estimator.predict import Estimator

    monkeypatch.setenv("CL_CACHE_DIR", str(cache_dir))
    est = Estimator.from_profile("imx93", root=ROOT / "profiles")
    net = est.estimate_network(_small_onnx(tmp_path / "sin.onnx", with_cpu_op=True))
    sin = [l for l in net.layers if l.op_type == "Sin"]
    assert sin and "cpu_fallback_op" in sin[0].flags
    assert sin[0].fallback and sin[0].out_of_design_space and sin[0].prediction_ms > 0
    assert all("cpu_fallback_op" not in l.flags for l in net.layers if l.op_type != "Sin")
    assert any("run on the CPU on imx93" in w and "Sin" in w for w in net.warnings), net.warnings


def test_conditional_cpu_ops_are_flagged_as_possible(tmp_path: Path, cache_dir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A Transpose runs on Vela's NPU for some permutations only: flagged
    cpu_fallback_possible, with the rule in a warning; the CLI table shows the flag."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from estimator.predict import Estimator

    r = np.random.default_rng(0)
    w = numpy_helper.from_array(r.standard_normal((16, 8, 3, 3)).astype(np.float32), "w1")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["c1"], ["t1"], name="permute", perm=[0, 2, 1, 3]),
             helper.make_node("GlobalAveragePool", ["t1"], ["y"], name="gap")]
    g = helper.make_graph(nodes, "perm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])], initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "perm.onnx"
    onnx.save(m, str(path))
    monkeypatch.setenv("CL_CACHE_DIR", str(cache_dir))
    est = Estimator.from_profile("imx93", root=ROOT / "profiles")
    net = est.estimate_network(path)
    tr = [l for l in net.layers if l.op_type == "Transpose"]
    assert tr and tr[0].flags.count("cpu_fallback_possible") == 1 and "cpu_fallback_op" not in tr[0].flags
    assert all("cpu_fallback_possible" not in l.flags for l in net.layers if l.op_type != "Transpose")
    assert any("may run on the CPU" in w and "Transpose: TRANSPOSE runs on the NPU only" in w for w in net.warnings)
    from estimator.cmd_model import print_estimate

    buf = io.StringIO()
    print_estimate(net, buf)
    assert "cpu_fallback_possible" in buf.getvalue()


def _reshape_onnx(path: Path) -> Path:
    """conv 3x3 (8->16), a Reshape to (1, 16, 8, 128) (a view on Vela), global pool,
    Flatten, Gemm 16->10."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(r.standard_normal((16, 8, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(np.array([1, 16, 8, 128], np.int64), "shape"),
             numpy_helper.from_array(r.standard_normal((10, 16)).astype(np.float32), "wf"),
             numpy_helper.from_array(r.standard_normal(10).astype(np.float32), "bf")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["a1"], name="relu"),
             helper.make_node("Reshape", ["a1", "shape"], ["r1"], name="reshape"),
             helper.make_node("GlobalAveragePool", ["r1"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "views", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def test_free_ops_are_free_nodes_with_their_reason(tmp_path: Path, cache_dir: Path) -> None:
    """Ops the profile lists in op_mapping.free_ops (Vela makes Reshape/Flatten views) are not
    estimated: ``estimator predict`` lists their nodes in free_nodes with the reason and warns;
    without the list the same layers get the roofline fallback."""
    assert {"Reshape", "Flatten"} <= set(load_profile("imx93", ROOT / "profiles").free_ops)
    model = _reshape_onnx(tmp_path / "views.onnx")
    # the same profile without free_ops (same measurements: same cached models)
    alt = tmp_path / "profiles" / "imx93"
    alt.mkdir(parents=True)
    meta = json.loads((ROOT / "profiles" / "imx93" / "profile.json").read_text())
    del meta["op_mapping"]["free_ops"]
    (alt / "profile.json").write_text(json.dumps(meta))
    (alt / "measurements.csv").symlink_to(ROOT / "profiles" / "imx93" / "measurements.csv")
    docs = {}
    for root in (ROOT / "profiles", alt.parent):
        env = dict(os.environ, CL_CACHE_DIR=str(cache_dir), CL_PROFILES=str(root))
        proc = subprocess.run([sys.executable, "-m", "estimator.cli", "predict", str(model), "--device", "imx93",
                               "--json", "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        docs[root] = json.loads(proc.stdout)
    free, full = docs[ROOT / "profiles"], docs[alt.parent]
    types = [l["op_type"] for l in free["layers"]]
    assert "Reshape" not in types and "Flatten" not in types and "Conv" in types and "Gemm" in types
    for node in ("reshape", "flatten"):
        assert "op_mapping.free_ops" in free["free_nodes"][node] and "imx93" in free["free_nodes"][node]
    assert any("2 layer(s) (1 Flatten, 1 Reshape) cost nothing on imx93" in w for w in free["warnings"])
    # without free_ops they are estimated from the profile's reshape rows (Vela makes the benchmarked
    # RESHAPE a view too, so near 0) and nothing else changes
    views = [l for l in full["layers"] if l["op_type"] in ("Reshape", "Flatten")]
    assert len(views) == 2 and all(l["type"] == "reshape" and not l["fallback"] for l in views)
    assert all(l["intervals"]["CM_LV"]["0.9"][1] > 0 for l in views)
    assert "reshape" not in full["free_nodes"]
    assert free["total_ms"] == pytest.approx(full["total_ms"] - sum(l["prediction_ms"] for l in views), rel=1e-9)
    assert free["n_fallback"] == full["n_fallback"]


# ----------------------------------------------------- Vela benchmark + bench profile


@needs_tflite
def test_small_vela_plan_refuses_cpu_layers_and_becomes_a_profile(tmp_path: Path) -> None:
    from bench.cmd_profile import register
    from bench.profile_db import profile_from_db
    from bench.runners.vela_runner import VelaRunner
    from bench.sampling import Config
    from bench.smartpad import SmartPad
    from bench.storage import Store

    runner = VelaRunner()
    db = tmp_path / "imx93.sqlite"
    plan = [Config.make("conv2d", dict(h=16, w=16, c_in=8, c_out=16, k_h=3, k_w=3)),
            Config.make("activation", dict(h=8, w=8, c=8, kind="silu")),
            Config.make("activation", dict(h=8, w=8, c=8, kind="elu"))]  # ELU has no int8 kernel: CPU
    with Store(db) as store:
        env_id = store.environment_id("imx93", runner.environment(), {"protocol": "smartpad-v1", "warmup": 0,
                                                                       "runs": 1, "precision": "int8"})
        st = SmartPad(runner, store, env_id, warmup=0, runs=1).run(plan)
        assert (st.measured, st.failed) == (2, 1)
        fail = store.failures()[0]
        assert "CPU" in fail["error"] and "Elu" in fail["error"]
        rows = store.export_rows(env_id)
        assert all(r["t_single_ms"] > r["t_lum_ms"] for r in rows)  # Vela's single-layer overhead

    prof = profile_from_db(db, "imx93", root=tmp_path / "profiles", hardware="test",
                           source="estimated by Vela (test)")
    assert prof.provenance.kind == "estimated" and prof.runner == "vela"
    assert "activation (elu)" in prof.op_mapping["benchmark_cpu_placements"]
    assert not prof.fusion_rules().folds("conv2d", "silu")
    # and through the command line (bench profile), refusing to overwrite without --force
    p = argparse.ArgumentParser()
    register(p.add_subparsers())
    a = p.parse_args(["profile", str(db), "--name", "imx93", "--root", str(tmp_path / "profiles"),
                      "--source", "x"])
    from estimator.errors import UserError

    with pytest.raises(UserError, match="already exists"):
        a.func(a)
    a = p.parse_args(["profile", str(db), "--name", "imx93", "--root", str(tmp_path / "profiles"),
                      "--source", "x", "--force"])
    assert a.func(a) == 0
    assert load_profile(tmp_path / "profiles" / "imx93").provenance.source == "x"


# --------------------------------------------------------- whole-network conversion


@needs_tflite
@pytest.mark.slow
@pytest.mark.parametrize("name", ["shufflenet_v2", "yolov5s", "mobilevit_xs"])
def test_whole_network_float32_matches_onnxruntime(name: str) -> None:
    """Channel shuffles (reshape/transpose), YOLO's 5-D head, splits, resizes, attention
    (LayerNormalization, q/k/v Gather, MatMul, Softmax): exact in float32."""
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    from bench import tflite_convert as tc
    from estimator import zoo

    res = 64
    kw = {"width": 0.25, "depth": 0.33} if name == "yolov5s" else {}
    onnx_b = zoo.export_onnx(zoo.build(name, res, **kw), res)
    tfl = tc.convert_onnx(onnx_b, "float32", exact_padding=True)
    x = np.random.default_rng(1).standard_normal((1, 3, res, res)).astype(np.float32)
    ref = ort.InferenceSession(onnx_b, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    it = Interpreter(model_content=tfl)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    it.invoke()
    y = it.get_tensor(it.get_output_details()[0]["index"])
    assert y.shape == ref.shape
    assert np.abs(y - ref).max() <= 1e-4 * max(1.0, float(np.abs(ref).max()))


@needs_tflite
@pytest.mark.slow
def test_zoo_network_to_int8_tflite_and_vela(tmp_path: Path) -> None:
    from bench import tflite_convert as tc
    from bench.runners.base import RunnerError, get_runner
    from bench.runners.vela_runner import VelaRunner, vela_compile

    out = tmp_path / "mnv2.tflite"
    assert tc.main(["--zoo", "mobilenet_v2", "--resolution", "64", "-o", str(out)]) == 0
    tfl = out.read_bytes()
    io = tc.tflite_io(tfl)
    assert io["inputs"][0]["dtype"] == "int8" and io["inputs"][0]["shape"] == [1, 64, 64, 3]
    assert io["outputs"][0]["dtype"] == "int8" and io["outputs"][0]["shape"] == [1, 1000]
    ops = tc.tflite_ops(tfl)
    assert ops["CONV_2D"] == 35 and ops["DEPTHWISE_CONV_2D"] == 17 and "TRANSPOSE" not in ops
    assert "DEQUANTIZE" not in ops and "QUANTIZE" not in ops  # full-integer, no float islands
    prep = VelaRunner().prepare(tfl)
    assert prep.info["estimate_ms"] > 0 and prep.info["npu_ops"] > 50 and prep.info["cpu_ops"] == []
    # the same bytes, compiled for the Ethos-U delegate: NPU parts become one 'ethos-u' custom op
    compiled, how = vela_compile(tfl)
    assert b"ethos-u" in compiled and how.startswith("ethos-u-vela")
    with pytest.raises(RunnerError, match="delegate"):
        get_runner("litert", vela="true")  # nothing on a host can run the ethos-u operator


@needs_tflite
def test_grouped_convolution_is_one_conv_in_float32_and_split_in_int8() -> None:
    """Float32: one CONV_2D with grouped filters, the kernel the benchmark rows measure (and
    exact against ONNX Runtime); int8: one CONV_2D per group and a concatenation (Vela refuses
    grouped filters)."""
    import onnx
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter
    from onnx import TensorProto, helper, numpy_helper

    from bench import tflite_convert as tc

    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(r.standard_normal((16, 4, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(r.standard_normal(16).astype(np.float32), "b")]
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="gconv", pads=[1, 1, 1, 1], group=4)],
                          "grouped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    data = m.SerializeToString()
    f32 = tc.convert_onnx(data, "float32", exact_padding=True)
    assert tc.tflite_ops(f32) == {"CONV_2D": 1}
    x = r.standard_normal((1, 16, 12, 12)).astype(np.float32)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    it = Interpreter(model_content=f32)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    it.invoke()
    y = it.get_tensor(it.get_output_details()[0]["index"]).transpose(0, 3, 1, 2)
    assert np.abs(y - ref).max() <= 1e-4 * max(1.0, float(np.abs(ref).max()))
    ops = tc.tflite_ops(tc.convert_onnx(data, "int8"))
    assert ops["CONV_2D"] == 4 and ops["CONCATENATION"] == 1


@needs_tflite
def test_conversion_names_unsupported_operators(tmp_path: Path) -> None:
    from bench import tflite_convert as tc

    with pytest.raises(tc.ConversionError, match="'Sin'"):
        tc.convert_onnx(_small_onnx(tmp_path / "sin.onnx", with_cpu_op=True), "float32")
    with pytest.raises(tc.ConversionError, match="calibration array"):
        tc.convert_onnx(_small_onnx(tmp_path / "ok.onnx"), calibration=[[np.zeros((1, 3, 8, 8), np.float32)]])


@needs_tflite
def test_lum_split_measures_benchmark_rows_with_vela(tmp_path: Path) -> None:
    """tests/perf/padding_split.py --lum-types on shipped benchmark rows: Vela recompiles each
    padded model to the stored T_c and reports the LUM's own time inside it."""
    import csv
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("padding_split_perf", ROOT / "tests" / "perf" / "padding_split.py")
    ps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ps)
    src = ROOT / "profiles" / "imx93" / "measurements.csv"
    with open(src, newline="") as f:
        reader = csv.DictReader(f)
        rows = [r for r in reader if r["layer_type"] == "maxpool" and 0 < float(r["t_padded_ms"]) < 0.05
                and abs(float(r["t_b1_ms"]) - float(r["t_b2_ms"])) > 0.1 * float(r["t_b1_ms"])][:6]
        fields = reader.fieldnames
    small = tmp_path / "rows.csv"
    with open(small, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "split.json"
    assert ps.main(["--runner", "vela", "--rows", str(small), "--lum-types", "maxpool,concat", "--sample", "6",
                    "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    got = doc["types"]["maxpool"]["rows"]
    assert len(got) == len(rows) >= 4 and "concat" not in doc["types"]
    for r in got:
        assert r["t_c_recompiled"] == pytest.approx(r["t_c"], rel=1e-3)  # Vela is deterministic
        assert 0 < r["t_lum"] < r["t_c"] and all(n.startswith("lum/") for n in r["lum_ops"])
    assert 0.0 <= doc["types"]["maxpool"]["a_all"] <= 1.0


def _ceiling_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("imx93_layer_ceiling", ROOT / "tests" / "perf" / "imx93_layer_ceiling.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_layer_ceiling_sums() -> None:
    """tests/perf/imx93_layer_ceiling.py's per-network sums: the training point at the type's
    split, the midpoint, the LUM's own time (a concat keeps its training point) and the
    model's prediction where a layer has no measurement."""
    from types import SimpleNamespace as NS

    ce = _ceiling_module()
    conv = NS(name="c", type="conv2d", params={"h": 8})
    cat = NS(name="k", type="concat", params={"h": 4})
    odd = NS(name="o", type="other", params={"h": 2})
    # a conv2d without a fused activation is benchmarked with act "none" (not the LUM's default ReLU)
    assert ce.layer_key(conv) == ce.config_key("conv2d", {"h": 8, "act": "none"})
    recs = {ce.config_key("conv2d", {"h": 8, "act": "none"}): {"t_c": 1.0, "t_b1": 0.4, "t_b2": 0.2, "t_lum": 0.5, "lum_ops": ["lum/x"]},
            ce.config_key("concat", {"h": 4}): {"t_c": 0.3, "t_b1": 0.1, "t_b2": 0.3, "t_lum": 0.9, "lum_ops": ["lum/y"]}}
    s = ce.network_sums([conv, cat, odd], {"c": 0.7, "k": 0.05, "o": 0.25}, recs, {"conv2d": 0.75})
    # conv: interval [0.6, 0.8], point 1 - 0.75 * 0.4 - 0.25 * 0.2 = 0.65; concat: [0, 0.2], midpoint 0.1
    assert s["exact_split"] == pytest.approx(0.65 + 0.1 + 0.25)
    assert s["exact_mid"] == pytest.approx(0.7 + 0.1 + 0.25)
    assert s["exact_lum"] == pytest.approx(0.5 + 0.1 + 0.25)
    assert (s["lo"], s["hi"]) == (pytest.approx(0.6 + 0.0 + 0.25), pytest.approx(0.8 + 0.2 + 0.25))
    assert s["model"] == pytest.approx(1.0) and s["unmeasured"] == pytest.approx(0.25)
    recs[ce.layer_key(conv)] = {"error": "RunnerError: x"}
    assert ce.network_sums([conv], {"c": 0.7}, recs, {})["unmeasured"] == pytest.approx(0.7)


@needs_tflite
def test_layer_ceiling_measures_exact_configurations_with_vela(tmp_path: Path, cache_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact-configuration benchmark of a small network's layers under Vela: every layer
    measured once, the LUM's own time inside its padded model, training points inside Eq. 4."""
    from estimator.predict import Estimator

    ce = _ceiling_module()
    monkeypatch.setenv("CL_CACHE_DIR", str(cache_dir))
    est = Estimator.from_profile("imx93", root=ROOT / "profiles")
    layers = ce.layer_configs(est, _small_onnx(tmp_path / "s.onnx").read_bytes())
    assert [l.type for l in layers] == ["conv2d", "dwconv2d", "globalpool"]
    db = tmp_path / "ceiling.jsonl"
    recs = ce.measure_missing({"small": layers}, db, lambda s: None)
    assert len(recs) == 3 and len(db.read_text().splitlines()) == 3
    for r in recs.values():
        assert "error" not in r, r
        assert r["t_c"] > r["t_lum"] > 0 and r["lum_ops"] and all("lum/" in n for n in r["lum_ops"])
        lo, hi, tp = ce.points(r, 0.8)
        assert 0 <= lo <= tp <= hi
    assert ce.measure_missing({"small": layers}, db, lambda s: None) == recs  # nothing measured twice
    s = ce.network_sums(layers, {}, recs, {"conv2d": 0.81})
    assert s["lo"] <= s["exact_split"] <= s["hi"] and s["unmeasured"] == 0
