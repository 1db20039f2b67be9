"""TFLite rendering of the smart-padding IR (``bench.tflite_models``) and the LiteRT runner.

* every benchable type converts to a full-integer int8 model that loads and runs in
  LiteRT with int8 inputs/outputs and the IR's output shape (NHWC);
* float32 single-layer models compute what the ONNX rendering computes (ONNX Runtime),
  which checks the NCHW -> NHWC mapping and every weight transpose;
* float32 models of one input, converted without the converter's SavedModel round trip,
  are the model the round trip gives (operators, tensors, constants, inputs/outputs);
* without TensorFlow the module refuses to import with a UserError naming the extra.

Needs the ``tflite`` extra (TensorFlow, ai-edge-litert); skipped where it is missing.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

tm = pytest.importorskip("bench.tflite_models", reason="needs the tflite extra (TensorFlow)",
                         exc_type=ImportError)
pytest.importorskip("ai_edge_litert")

from bench.modelgen import BENCHABLE_TYPES, make_inputs, padded_model, padding_model, single_layer_model, to_onnx  # noqa: E402
from bench.runners.base import RunnerError, get_runner  # noqa: E402
from estimator.errors import UserError  # noqa: E402

INT8_CASES = [
    ("conv2d", dict(h=8, w=8, c_in=4, c_out=8, k_h=3, k_w=3)),
    ("conv2d", dict(h=9, w=8, c_in=4, c_out=8, k_h=3, k_w=3, s_h=2, s_w=2)),
    ("conv2d", dict(h=8, w=8, c_in=4, c_out=6, k_h=1, k_w=5)),
    ("conv2d", dict(h=8, w=8, c_in=8, c_out=8, k_h=3, k_w=3, groups=2)),
    ("dwconv2d", dict(h=8, w=8, c=8, k_h=3, k_w=3)),
    ("dwconv2d", dict(h=8, w=8, c=4, k_h=5, k_w=5, s_h=2, s_w=2, multiplier=2)),
    ("fc", dict(c_in=16, c_out=8)),
    ("maxpool", dict(h=8, w=8, c=4, k_h=3, k_w=3, s_h=2, s_w=2)),
    ("avgpool", dict(h=8, w=8, c=4, k_h=2, k_w=2, s_h=2, s_w=2, p_t=0, p_l=0, p_b=0, p_r=0)),
    ("globalpool", dict(h=6, w=6, c=8)),
    ("globalpool", dict(h=6, w=6, c=8, mode="max")),
    ("add", dict(h=6, w=6, c=4)),
    ("mul", dict(h=6, w=6, c=4, broadcast=1)),
    ("mul", dict(h=6, w=6, c=4, broadcast=1, elems_b=4, const_b=1)),
    ("mul", dict(h=6, w=6, c=4, broadcast=1, elems_b=4, const_b=1, batchnorm=1)),
    ("add", dict(h=6, w=6, c=4, const_b=1)),
    ("concat", dict(h=6, w=6, channels=[4, 8])),
    ("resize", dict(h=4, w=4, c=4, h_out=8, w_out=8)),
    ("resize", dict(h=4, w=5, c=4, h_out=7, w_out=10, mode="linear")),
    ("activation", dict(h=6, w=6, c=4, kind="hardswish")),
    ("activation", dict(h=6, w=6, c=4, kind="sigmoid")),
    # transformer layers, padded in TFLite's token-row layout (estimator.layers.registry.rows_of)
    ("activation", dict(h=1, w=32, c=12, kind="gelu")),
    ("layernorm", dict(rows=12, c=16)),
    ("softmax", dict(h=10, w=10, c=3, axis_len=10)),
    ("softmax", dict(h=1, w=1, c=10, axis_len=10)),
    ("matmul", dict(b=3, m=10, k=8, n_cols=10)),
    ("transpose", dict(h=10, w=8, c=3, rank=4, moves_last=0)),
    ("transpose", dict(h=10, w=8, c=3, rank=4, moves_last=1)),
    ("slice", dict(h=3, w=16, c=3, elems_out=48, n_outputs=1)),
    ("reshape", dict(h=4, w=6, c=8)),
    ("fc", dict(m=12, c_in=16, c_out=24)),
]


def test_cases_cover_every_benchable_type() -> None:
    from estimator.layers import SPECS

    assert {t for t in BENCHABLE_TYPES if "tflite" in SPECS[t].model_formats} <= {t for t, _ in INT8_CASES}


@pytest.fixture(scope="module")
def litert():
    r = get_runner("litert", threads=1)
    yield r
    r.close()


def _ids(case):
    t, p = case
    return t + "-" + "-".join(f"{k}{v}" for k, v in p.items() if k not in ("h", "w"))


@pytest.mark.parametrize("case", INT8_CASES, ids=[_ids(c) for c in INT8_CASES])
def test_int8_padded_model_runs_in_litert(case, litert) -> None:
    t, p = case
    ir = padded_model(t, p, "tflite")
    model = tm.to_tflite(ir, "int8")
    assert model[4:8] == b"TFL3"
    prep = litert.prepare(model)
    ins, outs = prep.info["inputs"], prep.info["outputs"]
    assert [i["dtype"] for i in ins] == ["int8"] * len(ir.inputs)
    assert [o["dtype"] for o in outs] == ["int8"]
    assert sorted(tuple(i["shape"]) for i in ins) == sorted(tm.nhwc(x.shape) for x in ir.inputs)
    assert tuple(outs[0]["shape"]) == tm.nhwc(ir.outputs[0].shape)
    assert prep.info["precision"] == "int8"
    timing = litert.time(prep, warmup=1, runs=3)
    assert timing.n == 3 and timing.min_ms > 0


def test_padding_and_single_models_convert(litert) -> None:
    pad = litert.prepare(tm.to_tflite(padding_model(8, 8, 16), "int8"))
    assert pad.info["outputs"][0]["shape"] == [1, 8, 8, 1]
    assert pad.info["ops"][:2] == ["CONV_2D", "CONV_2D"]
    single = litert.prepare(tm.to_tflite(single_layer_model("conv2d", dict(h=8, w=8, c_in=3, c_out=5, k_h=3, k_w=3)), "int8"))
    assert single.info["inputs"][0]["shape"] == [1, 8, 8, 3]
    assert single.info["outputs"][0]["shape"] == [1, 8, 8, 5]


def test_a_batchnorm_is_a_multiply_and_an_add_by_constants(litert) -> None:
    """As the TFLite converter lowers a standalone BatchNormalization (DenseNet's): the LUM
    reads one activation tensor; its scale and shift are constants, not graph inputs."""
    p = dict(h=6, w=6, c=4, broadcast=1, elems_b=4, const_b=1, batchnorm=1)
    prep = litert.prepare(tm.to_tflite(padded_model("mul", p, "tflite"), "int8"))
    assert [o for o in prep.info["ops"] if o != "DELEGATE"] == ["CONV_2D", "MUL", "ADD", "CONV_2D"]
    assert len(prep.info["inputs"]) == 1


def test_int8_conversion_is_deterministic() -> None:
    ir = padded_model("dwconv2d", dict(h=8, w=8, c=8, k_h=3, k_w=3))
    assert tm.to_tflite(ir, "int8", seed=3) == tm.to_tflite(ir, "int8", seed=3)


def _round_trip_float32(ir) -> bytes:
    """The float32 conversion through the converter's SavedModel round trip (its default)."""
    fn = tm.tf_function(ir)
    module = tm.tf.Module()
    module.f = fn
    return bytes(tm.tf.lite.TFLiteConverter.from_concrete_functions([fn], module).convert())


def _flatbuffer_structure(model: bytes) -> tuple[list, list]:
    """Per operator (in order): builtin op code, custom code, options, and per operand tensor
    shape, type and constant data; plus the graph inputs/outputs as (shape, type, the operator
    operands they are) -- everything but names, SignatureDefs and metadata."""
    fb = pytest.importorskip("tensorflow.lite.python.schema_py_generated")
    m = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(model, 0))
    assert len(m.subgraphs) == 1
    sg = m.subgraphs[0]

    def plain(o):
        if o is None or isinstance(o, (int, float, str, bytes)):
            return o
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, (list, tuple)):
            return [plain(x) for x in o]
        return (type(o).__name__, sorted((k, plain(v)) for k, v in vars(o).items()))

    def tensor(i):
        t = sg.tensors[i]
        data = m.buffers[t.buffer].data
        return (plain(t.shape), int(t.type), None if data is None else np.asarray(data, np.uint8).tobytes())

    ops, uses = [], {}
    for k, op in enumerate(sg.operators):
        code = m.operatorCodes[op.opcodeIndex]
        ops.append((max(code.builtinCode, code.deprecatedBuiltinCode), code.customCode, plain(op.builtinOptions),
                    [tensor(i) for i in op.inputs], [tensor(i) for i in op.outputs]))
        for j, i in enumerate(op.inputs):
            uses.setdefault(i, []).append(("in", k, j))
        for j, i in enumerate(op.outputs):
            uses.setdefault(i, []).append(("out", k, j))
    io = [[(tensor(i), uses.get(i, [])) for i in sg.inputs], [(tensor(i), uses.get(i, [])) for i in sg.outputs]]
    return ops, io


@pytest.mark.parametrize("ir", [padded_model("conv2d", dict(h=9, w=8, c_in=4, c_out=8, k_h=3, k_w=3, s_h=2, s_w=2)),
                                padded_model("layernorm", dict(rows=12, c=16), "tflite"),
                                single_layer_model("dwconv2d", dict(h=8, w=8, c=4, k_h=3, k_w=3, multiplier=2)),
                                padding_model(8, 8, 16)], ids=lambda ir: ir.name)
def test_float32_without_the_saved_model_round_trip_is_the_same_model(ir, litert) -> None:
    """Float32 models of one input skip the converter's SavedModel round trip
    (``tm.convert_concrete_function``): the same operators, tensors, constants and graph
    inputs/outputs as through it; only names and the SignatureDef differ."""
    fast, slow = tm.to_tflite(ir, "float32"), _round_trip_float32(ir)
    assert fast != slow  # the round trip was skipped (it adds a SignatureDef, renames the inputs)
    assert _flatbuffer_structure(fast) == _flatbuffer_structure(slow)
    a, b = litert.prepare(fast).info, litert.prepare(slow).info
    assert a["ops"] == b["ops"]
    for side in ("inputs", "outputs"):
        assert [(d["shape"], d["dtype"]) for d in a[side]] == [(d["shape"], d["dtype"]) for d in b[side]]
    assert [d["name"] for d in a["inputs"]] == [x.name for x in ir.inputs]
    assert [d["name"] for d in b["inputs"]] == [f"serving_default_{x.name}:0" for x in ir.inputs]


def test_float32_of_several_inputs_keeps_the_round_trip() -> None:
    """Without the round trip a two-input model's graph inputs come out in another order."""
    for ir in (single_layer_model("add", dict(h=6, w=6, c=4)),
               padded_model("matmul", dict(b=3, m=10, k=8, n_cols=10), "tflite")):
        assert len(ir.inputs) == 2
        assert tm.to_tflite(ir, "float32") == _round_trip_float32(ir)


# Float models must compute what the ONNX rendering computes.
FLOAT_CASES = [
    ("conv2d", dict(h=9, w=8, c_in=3, c_out=5, k_h=3, k_w=3)),
    ("conv2d", dict(h=8, w=8, c_in=4, c_out=6, k_h=1, k_w=5, bias=0)),
    ("conv2d", dict(h=8, w=8, c_in=8, c_out=4, k_h=3, k_w=3, groups=2)),
    ("conv2d", dict(h=8, w=9, c_in=3, c_out=4, k_h=3, k_w=3, p_t=2, p_l=0, p_b=1, p_r=2)),  # PAD + VALID
    ("conv2d", dict(h=12, w=12, c_in=3, c_out=4, k_h=3, k_w=3, d_h=2, d_w=2)),
    ("conv2d", dict(h=9, w=9, c_in=3, c_out=4, k_h=3, k_w=3, s_h=2, s_w=2, p_t=1, p_l=1, p_b=1, p_r=1)),
    ("dwconv2d", dict(h=8, w=8, c=4, k_h=3, k_w=3, multiplier=2)),
    ("fc", dict(c_in=12, c_out=5)),
    ("maxpool", dict(h=8, w=8, c=3, k_h=2, k_w=2, s_h=2, s_w=2, p_t=0, p_l=0, p_b=0, p_r=0)),
    ("avgpool", dict(h=7, w=7, c=3, k_h=3, k_w=3)),
    ("globalpool", dict(h=5, w=6, c=3)),
    ("globalpool", dict(h=5, w=6, c=3, mode="max")),
    ("add", dict(h=4, w=5, c=3, broadcast=1)),
    ("mul", dict(h=4, w=5, c=3)),
    ("mul", dict(h=4, w=5, c=3, broadcast=1, elems_b=3, const_b=1)),
    ("mul", dict(h=4, w=5, c=3, broadcast=1, elems_b=3, const_b=1, batchnorm=1, act="relu")),
    ("add", dict(h=4, w=5, c=3, const_b=1)),
    ("add", dict(h=4, w=5, c=3, broadcast=1, elems_b=1, const_b=1)),
    ("concat", dict(h=4, w=5, channels=[2, 3, 1])),
    ("resize", dict(h=4, w=5, c=2, h_out=8, w_out=10)),
    ("resize", dict(h=4, w=5, c=2, h_out=7, w_out=9, mode="linear")),
    *[("activation", dict(h=4, w=5, c=3, kind=k)) for k in
      ("relu6", "clip", "sigmoid", "hardsigmoid", "hardswish", "silu", "tanh", "leakyrelu", "prelu", "elu", "gelu",
       "softplus", "mish")],
]


@pytest.mark.parametrize("case", FLOAT_CASES, ids=[_ids(c) for c in FLOAT_CASES])
def test_float32_single_layer_matches_onnx(case, litert) -> None:
    import onnxruntime as ort

    t, p = case
    ir = single_layer_model(t, p)
    feeds = make_inputs(ir, seed=1)
    ref = ort.InferenceSession(to_onnx(ir)).run(None, feeds)[0]

    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=tm.to_tflite(ir, "float32"))
    interp.allocate_tensors()
    by_name = {x.name: x for x in ir.inputs}
    for d in interp.get_input_details():
        name = next(n for n in by_name if d["name"] == n or d["name"].startswith(f"serving_default_{n}:")
                    or d["name"].endswith(n))
        x = feeds[name]
        interp.set_tensor(d["index"], np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if x.ndim == 4 else x)
    interp.invoke()
    out = interp.get_tensor(interp.get_output_details()[0]["index"])
    got = out.transpose(0, 3, 1, 2) if out.ndim == 4 else out
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_cubic_resize_and_bad_quantization_are_refused() -> None:
    with pytest.raises(tm.TFLiteModelError, match="cubic"):
        tm.to_tflite(single_layer_model("resize", dict(h=4, w=4, c=2, h_out=8, w_out=8, mode="cubic")))
    with pytest.raises(tm.TFLiteModelError, match="quantization"):
        tm.to_tflite(padding_model(4, 4, 2), "int4")
    assert issubclass(tm.TFLiteModelError, UserError)


def test_ir_op_of_tensor_maps_tflite_names_back() -> None:
    ir = padded_model("conv2d", dict(h=8, w=8, c_in=4, c_out=8, k_h=3, k_w=3))
    assert tm.ir_op_of_tensor("lum/Relu;lum/BiasAdd;lum/Conv2D;lum/Const_11", ir) == "lum"
    assert tm.ir_op_of_tensor("pad_in/Relu;pad_in/BiasAdd", ir) == "pad_in"
    assert tm.ir_op_of_tensor("PartitionedCall:0", ir) is None


def test_import_without_tensorflow_names_the_extra() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["tensorflow"] = None  # as if TensorFlow were not installed
        from estimator.errors import UserError
        try:
            import bench.tflite_models
        except UserError as e:
            assert isinstance(e, ImportError)
            print("REFUSED:", e)
        else:
            raise SystemExit("imported without TensorFlow")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "REFUSED:" in out.stdout and "confident-latency[tflite]" in out.stdout


# ---------------------------------------------------------------- LiteRT runner itself


def test_litert_flushes_the_cache_when_asked(litert) -> None:
    r = get_runner("litert", flush_cache_mb=1)
    head = r.prepare(tm.to_tflite(padded_model("fc", dict(c_in=64, c_out=32)), "float32"))
    before = r.flush.buffer.copy()
    r.time(head, warmup=1, runs=2)
    assert (r.flush.buffer == before + 3).all()
    assert r.environment()["flush_cache_mb"] == 1.0 and "flush_cache_mb" not in litert.environment()
    with pytest.raises(RunnerError, match=r"flush_cache_mb must be in \[0, 4096\]"):
        get_runner("litert", flush_cache_mb=-1)


def test_litert_runner_environment_and_errors(litert) -> None:
    float_model = tm.to_tflite(padding_model(4, 4, 2), "float32")
    before = litert.environment()
    prep = litert.prepare(float_model)
    assert prep.info["precision"] == "fp32" and prep.info["inputs"][0]["dtype"] == "float32"
    env = litert.environment()
    assert env == before  # the environment record does not drift with the models timed
    assert env["runner"] == "litert" and env["runtime"] in ("ai_edge_litert", "tflite_runtime")
    assert env["runtime_version"] and env["threads"] == 1 and env["provenance"] == "measured"
    assert env["precision"] is None and env["delegate"] is None and env["host"]["hostname"]
    assert env["versions"][env["runtime"]] == env["runtime_version"] and env["device_name"]
    declared = get_runner("litert", precision="int8")
    assert declared.environment()["precision"] == "int8"
    with pytest.raises(RunnerError, match="input is fp32"):
        declared.prepare(float_model)
    assert declared.prepare(tm.to_tflite(padding_model(4, 4, 2), "int8")).info["precision"] == "int8"
    with pytest.raises(RunnerError, match="precision"):
        get_runner("litert", precision="int3")
    with pytest.raises(RunnerError, match="not a TFLite model"):
        litert.prepare(b"\x00" * 64)
    with pytest.raises(RunnerError, match="rejected"):
        litert.prepare(b"\x00\x00\x00\x00TFL3" + b"\x07" * 64)
    with pytest.raises(RunnerError, match="runs"):
        litert.time(prep, warmup=0, runs=0)
    with pytest.raises(RunnerError, match="threads"):
        get_runner("litert", threads=0)
    with pytest.raises(RunnerError, match="does not exist"):
        get_runner("litert", delegate="/nonexistent/libdelegate.so")
    with pytest.raises(RunnerError, match="per-layer"):
        litert.per_layer(prep)


# The transformer types' single-layer models (the LUM alone) in TFLite compute what their
# ONNX models compute; TFLite's take rank-3 tensors where ONNX's take rank 4, fed the same data.
# (A reshape is left out: in TFLite it reinterprets NHWC data, a different element order for
# the same work, and the IR says so.)
TOKEN_CASES = [
    ("layernorm", dict(rows=7, c=12)),
    ("softmax", dict(h=5, w=6, c=3, axis_len=6)),
    ("softmax", dict(h=1, w=1, c=10, axis_len=10)),
    ("matmul", dict(b=3, m=5, k=8, n_cols=6)),
    ("transpose", dict(h=5, w=8, c=3, rank=4, moves_last=0)),
    ("transpose", dict(h=5, w=8, c=3, rank=4, moves_last=1)),
    ("slice", dict(h=3, w=4, c=5, elems_out=24, n_outputs=1)),
    ("fc", dict(m=7, c_in=12, c_out=5)),
    ("fc", dict(m=7, c_in=12, c_out=5, bias=0)),
]


def _run_litert(model: bytes, feeds: list[np.ndarray]) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=model)
    interp.allocate_tensors()
    details = interp.get_input_details()
    by_name = sorted(details, key=lambda d: d["name"])  # x0, x1: the IR's order
    for d, x in zip(by_name, feeds):
        interp.set_tensor(d["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"])


def _to_tflite_layout(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """An ONNX feed as the TFLite model's input of IR shape ``shape`` (NHWC for rank 4)."""
    y = x.reshape(shape)
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1)) if y.ndim == 4 else y


@pytest.mark.parametrize("case", TOKEN_CASES, ids=[_ids(c) for c in TOKEN_CASES])
def test_float32_token_layers_match_onnx(case) -> None:
    import onnxruntime as ort

    t, p = case
    ir_onnx, ir_tfl = single_layer_model(t, p), single_layer_model(t, p, "tflite")
    feeds = make_inputs(ir_onnx, seed=1)
    ref = ort.InferenceSession(to_onnx(ir_onnx)).run(None, feeds)[0]
    xs = [_to_tflite_layout(feeds[a.name], b.shape) for a, b in zip(ir_onnx.inputs, ir_tfl.inputs)]
    out = _run_litert(tm.to_tflite(ir_tfl, "float32"), xs)
    got = out.transpose(0, 3, 1, 2) if out.ndim == 4 else out
    assert got.size == ref.size
    np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)


EXPECTED_OPS = {"layernorm": {"MEAN", "SQUARED_DIFFERENCE", "RSQRT"}, "softmax": {"SOFTMAX"},
                "matmul": {"BATCH_MATMUL"}, "transpose": {"TRANSPOSE"}, "slice": {"SLICE"}, "reshape": {"RESHAPE"},
                "fc": {"FULLY_CONNECTED"}, "activation": {"GELU"}}


TOKEN_INT8 = [c for c in INT8_CASES if c[0] in EXPECTED_OPS and c[1].get("kind", "gelu") == "gelu"]


@pytest.mark.parametrize("case", TOKEN_INT8, ids=[_ids(c) for c in TOKEN_INT8])
def test_token_layers_render_as_tflite_builtins(case, litert) -> None:
    """Each transformer LUM becomes the TFLite builtin a converted transformer has, between the
    padding CONV_2Ds, and the padded models run in float32 too."""
    t, p = case
    ir = padded_model(t, p, "tflite")
    for q in ("int8", "float32"):
        prep = litert.prepare(tm.to_tflite(ir, q))
        ops = prep.info["ops"]
        assert ops[0] == "CONV_2D" and EXPECTED_OPS[t] <= set(ops), ops
        assert "TRANSPOSE" not in ops or t == "transpose", ops  # no layout change charged to the LUM
        assert tuple(prep.info["outputs"][0]["shape"]) == tm.nhwc(ir.outputs[0].shape)
        litert.time(prep, warmup=0, runs=1)


LITERT_PRODUCERS = {"conv2d": dict(h=8, w=8, c_in=8, c_out=16, k_h=3, k_w=3),
                    "dwconv2d": dict(h=8, w=8, c=16, k_h=3, k_w=3), "fc": dict(c_in=32, c_out=16),
                    "add": dict(h=8, w=8, c=16), "mul": dict(h=8, w=8, c=16)}
LITERT_KINDS = ("relu", "relu6", "clip", "sigmoid", "hardsigmoid", "hardswish", "silu", "tanh", "leakyrelu")


def test_litert_fusion_rules_are_what_the_network_converter_fuses() -> None:
    """``bench.profile_db.litert_fusion`` folds an activation into a producer exactly when
    ``bench.tflite_convert`` (the path networks take to LiteRT) leaves no operator of its own
    for it: producer -> activation -> padding convolution has the operators of the producer
    alone."""
    from bench import tflite_convert as tc
    from bench.profile_db import litert_fusion
    from estimator.fusion import FusionRules

    rules = FusionRules.from_dict(litert_fusion())

    def ops(t: str, p: dict) -> dict:
        return tc.tflite_ops(tc.convert_onnx(to_onnx(padded_model(t, p)), "float32", exact_padding=True))

    wrong = []
    for t, p in LITERT_PRODUCERS.items():
        alone = ops(t, dict(p, act="none") if t in ("conv2d", "dwconv2d", "add") else p)
        for kind in LITERT_KINDS:
            fused = ops(t, dict(p, act=kind)) == alone
            if fused != rules.folds(t, kind):
                wrong.append(f"{t}+{kind}: converter {'fuses' if fused else 'keeps an operator'}")
    assert not wrong, wrong
    assert not rules.folds("conv2d", "silu") and rules.folds("dwconv2d", "relu6")


@pytest.mark.parametrize("case", [("conv2d", dict(h=8, w=8, c_in=8, c_out=16, k_h=3, k_w=3, act="gelu")),
                                  ("fc", dict(c_in=32, c_out=16, act="gelu")),
                                  ("activation", dict(h=8, w=8, c=16, kind="gelu"))], ids=_ids)
def test_exact_gelu_converts_to_one_gelu_operator(case) -> None:
    """The Erf form of GELU (what torch exports) reaches LiteRT as one GELU operator, with or
    without the 0.5 onnxsim moves into the next layer's weights, and computes what ONNX Runtime
    computes."""
    import onnxruntime as ort

    from bench import tflite_convert as tc

    data = to_onnx(padded_model(*case))
    f32 = tc.convert_onnx(data, "float32", exact_padding=True)
    ops = tc.tflite_ops(f32)
    assert ops.get("GELU") == 1 and not {"MUL", "ADD"} & set(ops), ops
    sess = ort.InferenceSession(data)
    feed = sess.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal(feed.shape).astype(np.float32)
    ref = sess.run(None, {feed.name: x})[0]
    got = _run_litert(f32, [x.transpose(0, 2, 3, 1) if x.ndim == 4 else x])
    got = got.transpose(0, 3, 1, 2) if got.ndim == 4 and ref.ndim == 4 else got
    np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)


def test_a_litert_profile_gets_litert_fusion_rules_and_free_reshapes(tmp_path, litert) -> None:
    """``bench profile`` / ``bench adapt`` write a profile measured with LiteRT with what LiteRT
    fuses (not ONNX Runtime's rules, nor the library default that folds every activation) and
    with reshapes as free nodes."""
    from bench.profile_db import profile_from_db
    from bench.sampling import Config
    from bench.smartpad import SmartPad
    from bench.storage import Store

    db = tmp_path / "lt.sqlite"
    with Store(db) as store:
        env_id = store.environment_id("lt", litert.environment(), {"protocol": "smartpad-v1", "warmup": 0,
                                                                    "runs": 1, "precision": "fp32"})
        st = SmartPad(litert, store, env_id, warmup=0, runs=1).run(
            [Config.make("conv2d", dict(h=8, w=8, c_in=4, c_out=8, k_h=3, k_w=3))])
        assert st.measured == 1
    prof = profile_from_db(db, "lt", root=tmp_path / "profiles", hardware="test", source="pytest")
    assert prof.runner == "litert"
    rules = prof.fusion_rules()
    assert rules.folds("conv2d", "relu6") and rules.folds("dwconv2d", "hardsigmoid")
    assert not rules.folds("conv2d", "silu") and not rules.folds("dwconv2d", "hardswish")
    assert not rules.folds("fc", "sigmoid")
    assert set(prof.free_ops) == {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}
    assert "ai_edge_litert" in prof.op_mapping["source"]


def test_tensorflows_native_lines_are_held_not_printed(capfd):
    """What TensorFlow's C++ code writes to stderr while a model converts is held for an error
    message, not printed between a bench command's lines: the held block's fd-2 writes come back
    in the list, and conversions in a fresh process (import, float32 and int8, resizes, which
    TensorFlow's compat API logs as deprecated) print nothing."""
    import os

    with tm.native_stderr() as held:
        os.write(2, b"fully_quantize: 0, inference_type: 6\n")
    assert held == ["fully_quantize: 0, inference_type: 6"]
    assert capfd.readouterr().err == ""
    code = textwrap.dedent("""
        from bench.modelgen import padded_model
        from bench.tflite_models import to_tflite
        irs = [padded_model("conv2d", dict(h=8, w=8, c_in=8, c_out=8, k_h=3, k_w=3, s_h=1, s_w=1)),
               padded_model("resize", dict(h=4, w=4, c=4, h_out=8, w_out=8)),
               padded_model("resize", dict(h=4, w=5, c=4, h_out=7, w_out=10, mode="linear"))]
        for ir in irs:
            for q in ("float32", "int8"):
                assert len(to_tflite(ir, q)) > 0
        print("converted")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "converted", done.stderr[-2000:]
    assert done.stderr == ""
