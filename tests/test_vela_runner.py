"""The Vela runner: Arm's Ethos-U compiler estimates int8 TFLite models (from
``bench.tflite_models``) for the NXP i.MX93 configuration. Estimates, not measurements:
provenance "estimated", n = 1, per-layer cycles that add up to the network estimate, and
operators Vela leaves on the CPU are listed.

Needs the ``tflite`` extra (TensorFlow to write the models, ethos-u-vela).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ethosu.vela")
tm = pytest.importorskip("bench.tflite_models", reason="needs the tflite extra (TensorFlow)", exc_type=ImportError)

from bench.modelgen import BENCHABLE_TYPES, padded_model  # noqa: E402
from bench.runners.base import RunnerError, get_runner  # noqa: E402
from bench.runners.vela_runner import IMX93, VelaRunner  # noqa: E402

# A tiny plan: one configuration per benchable type.
PLAN = [
    ("conv2d", dict(h=16, w=16, c_in=8, c_out=16, k_h=3, k_w=3, s_h=2, s_w=2)),
    ("dwconv2d", dict(h=16, w=16, c=16, k_h=3, k_w=3)),
    ("fc", dict(c_in=64, c_out=32)),
    ("maxpool", dict(h=16, w=16, c=8, k_h=3, k_w=3, s_h=2, s_w=2)),
    ("avgpool", dict(h=16, w=16, c=8, k_h=3, k_w=3)),
    ("globalpool", dict(h=8, w=8, c=16)),
    ("add", dict(h=8, w=8, c=16)),
    ("mul", dict(h=8, w=8, c=16, broadcast=1)),
    ("concat", dict(h=8, w=8, channels=[8, 16])),
    ("resize", dict(h=8, w=8, c=8, h_out=16, w_out=16)),
    ("activation", dict(h=8, w=8, c=8, kind="hardswish")),
    # transformer layers (TFLite token-row layout): Vela 5.2 maps every one to the NPU
    ("activation", dict(h=1, w=64, c=49, kind="gelu")),
    ("layernorm", dict(rows=49, c=64)),
    ("softmax", dict(h=49, w=49, c=3, axis_len=49)),
    ("matmul", dict(b=3, m=49, k=32, n_cols=49)),
    ("transpose", dict(h=49, w=32, c=3, rank=4, moves_last=1)),
    ("slice", dict(h=3, w=64, c=3, elems_out=192, n_outputs=1)),
    ("reshape", dict(h=14, w=14, c=32)),
    ("fc", dict(m=49, c_in=64, c_out=128)),
]
#: LUMs Vela turns into views (no operator of their own in its per-layer report).
FREE_ON_VELA = {"slice", "reshape"}


def test_plan_covers_every_benchable_type() -> None:
    from estimator.layers import SPECS

    assert {t for t in BENCHABLE_TYPES if "tflite" in SPECS[t].model_formats} <= {t for t, _ in PLAN}


@pytest.fixture(scope="module")
def vela() -> VelaRunner:
    r = get_runner("vela")
    assert isinstance(r, VelaRunner)
    return r


@pytest.mark.parametrize("layer_type,params", PLAN, ids=[f"{t}-{p.get('kind', '')}" for t, p in PLAN])
def test_vela_estimates_each_layer_type(vela: VelaRunner, layer_type, params) -> None:
    ir = padded_model(layer_type, params, "tflite")
    prep = vela.prepare(tm.to_tflite(ir, "int8"))
    t = vela.time(prep, warmup=5, runs=20)
    assert t.n == 1 and t.median_ms > 0
    assert t.p10_ms == t.p90_ms == t.min_ms == t.mean_ms == t.median_ms and t.mad_ms == t.std_ms == 0
    layers = vela.per_layer(prep)
    assert layers and all(v >= 0 for v in layers.values()) and sum(layers.values()) > 0
    # Vela's network estimate is its per-operator cycles, summed
    assert sum(layers.values()) == pytest.approx(t.median_ms, rel=1e-6)
    # the LUM is visible in the per-layer report by its IR name
    owners = {tm.ir_op_of_tensor(name, ir) for name in layers}
    assert any(o and (o == "lum" or o.startswith("lum/")) for o in owners) != (layer_type in FREE_ON_VELA), sorted(layers)
    assert prep.info["cpu_ops"] == [] and prep.info["estimate_excludes_cpu_ops"] is False
    assert prep.info["npu_ops"] >= 1


def test_a_concat_input_another_layer_reads_is_a_copy(vela: VelaRunner) -> None:
    """Vela writes an input's producer straight into the concatenation unless another layer
    reads that input too; then it copies it. The shared input's padded model shows the copy
    beyond its second reader (a pad-out conv, the cost of which Eq. 4's T_b1 covers)."""
    from bench.modelgen import padding_model

    def ms(ir):
        return vela.time(vela.prepare(tm.to_tflite(ir, "int8")), warmup=0, runs=1).median_ms

    p = dict(h=64, w=64, channels=[64, 64])
    plain, shared = ms(padded_model("concat", p)), ms(padded_model("concat", dict(p, shared=[0])))
    pair = ms(padding_model(64, 64, 64))  # the shared input's pad-in + pad-out: at most what the second reader adds
    assert shared - plain > pair  # more than the second reader: the copy


def test_environment_says_estimated_and_names_the_imx93_configuration(vela: VelaRunner) -> None:
    env = vela.environment()
    assert env["provenance"] == "estimated" == vela.provenance
    assert env["runner"] == "vela" and env["runtime_version"]
    note = env["provenance_note"]
    assert note.startswith(f"estimated by Vela {env['runtime_version']}") and "not measured on hardware" in note
    assert (env["accelerator_config"], env["system_config"], env["memory_mode"]) == (
        "ethos-u65-256", "Ethos_U65_High_End", "Dedicated_Sram_384KB")
    assert IMX93["accelerator_config"] in note and IMX93["system_config"] in note and IMX93["memory_mode"] in note


def test_summary_reflects_the_imx93_system(vela: VelaRunner) -> None:
    prep = vela.prepare(tm.to_tflite(padded_model("conv2d", dict(h=8, w=8, c_in=4, c_out=4, k_h=3, k_w=3)), "int8"))
    s = prep.info["vela_summary"]
    assert s["core_clock"] == 1e9  # 1 GHz NPU clock
    assert s["arena_cache_size"] == 384.0  # KiB of SRAM cache, Dedicated_Sram_384KB
    assert vela.environment()["core_clock_hz"] == 1e9


def _model_with_cpu_op() -> bytes:
    """int8 convs around a float SIN (no int8 kernel, no Ethos-U support)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    w1 = tf.constant(rng.standard_normal((3, 3, 1, 8)).astype(np.float32))
    w2 = tf.constant(rng.standard_normal((1, 1, 8, 1)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec((1, 8, 8, 1), tf.float32)])
    def f(x):
        y = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME"))
        y = tf.math.sin(tf.nn.conv2d(y, w2, 1, "SAME"))
        return y

    conv = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], tf.Module())
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([rng.standard_normal((1, 8, 8, 1)).astype(np.float32)] for _ in range(4))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8, tf.lite.OpsSet.TFLITE_BUILTINS]
    return conv.convert()


def test_cpu_placed_operators_are_reported(vela: VelaRunner) -> None:
    prep = vela.prepare(_model_with_cpu_op())
    cpu = prep.info["cpu_ops"]
    assert "Sin" in {c["op"] for c in cpu}
    sin = next(c for c in cpu if c["op"] == "Sin")
    assert "Unsupported" in sin["reason"] or "unsupported" in sin["reason"]
    assert prep.info["cpu_op_count"] == len(cpu) and prep.info["estimate_excludes_cpu_ops"] is True
    assert prep.info["npu_ops"] >= 1
    # CPU operators get no (zero) Vela time: they are not in the per-layer estimate
    assert not set(vela.per_layer(prep)) & {c["name"] for c in cpu}


def test_float_model_is_refused_not_reported_as_zero(vela: VelaRunner) -> None:
    model = tm.to_tflite(padded_model("conv2d", dict(h=8, w=8, c_in=4, c_out=4, k_h=3, k_w=3)), "float32")
    with pytest.raises(RunnerError, match="no operator on the NPU"):
        vela.prepare(model)


def test_malformed_models_and_bad_configs_are_runner_errors(vela: VelaRunner) -> None:
    with pytest.raises(RunnerError, match="not a TFLite model"):
        vela.prepare(b"garbage" * 20)
    with pytest.raises(RunnerError, match="Vela"):  # Vela's reader crashes on this: a RunnerError, not a crash here
        vela.prepare(b"\0\0\0\0TFL3" + b"\x11" * 200)
    with pytest.raises(RunnerError, match="system config 'Nope'"):
        get_runner("vela", system_config="Nope")
    with pytest.raises(RunnerError, match="memory mode"):
        get_runner("vela", memory_mode="Nope")
    with pytest.raises(RunnerError, match="accelerator"):
        get_runner("vela", accelerator_config="ethos-u99-1")
    with pytest.raises(RunnerError, match="not found"):
        get_runner("vela", config_file="/nonexistent/vela.ini")


def test_other_ethos_u_configurations(vela: VelaRunner) -> None:
    model = tm.to_tflite(padded_model("conv2d", dict(h=16, w=16, c_in=16, c_out=32, k_h=3, k_w=3)), "int8")
    u65 = vela.time(vela.prepare(model), warmup=0, runs=1).median_ms
    u55 = get_runner("vela", accelerator_config="ethos-u55-64", system_config="Ethos_U55_Deep_Embedded",
                     memory_mode="Shared_Sram")
    slow = u55.time(u55.prepare(model), warmup=0, runs=1).median_ms
    assert slow > u65  # 64 MACs at 200 MHz vs 256 MACs at 1 GHz


def test_gather_runs_on_the_cpu_as_the_imx93_profile_says(vela: VelaRunner) -> None:
    """A Gather of a computed tensor (DeiT's q/k/v split) is a GATHER, which Vela leaves on the
    CPU; the imx93 profile lists it in op_mapping.cpu_fallback_ops."""
    import tensorflow as tf

    from bench.tflite_models import convert_concrete_function
    from estimator.profile import load_profile

    shape = (3, 3, 49, 16)
    fn = tf.function(lambda x: tf.gather(tf.nn.relu(x) * 1.5, 1, axis=0) + 1.0,
                     input_signature=[tf.TensorSpec(shape, tf.float32, name="x")]).get_concrete_function()
    r = np.random.default_rng(0)
    prep = vela.prepare(convert_concrete_function(fn, "int8", [[r.standard_normal(shape, dtype=np.float32)]
                                                               for _ in range(4)]))
    assert [c["op"] for c in prep.info["cpu_ops"]] == ["GatherV2"]
    assert "Gather" in load_profile("imx93").cpu_fallback_ops
