"""Algorithm 1: Eq. 4 and the padding lookup table, with real ONNX Runtime timings."""
from __future__ import annotations

import json
from collections import Counter

import onnx
import pytest

from bench.modelgen import padding_keys
from bench.runners.base import RunnerError, Timing
from bench.runners.onnxruntime_runner import OnnxRuntimeRunner
from bench.sampling import Config
from bench.smartpad import SmartPad, lum_interval, lum_profile_ms, needed_padding, t_b_from_lut
from bench.storage import Store
from bench.modelgen import padded_model


def _t(ms: float) -> Timing:
    return Timing(ms, ms, ms, 0.0, ms, 0.0, ms, 1)


# ------------------------------------------------------------------------------ Eq. 4


def test_eq4_bounds():
    iv = lum_interval(10.0, 2.0, 3.0)
    assert (iv.lo, iv.hi) == (7.0, 8.0)
    assert iv.mid == 7.5 and iv.width == 1.0


def test_eq4_is_symmetric_in_the_padding_times():
    assert lum_interval(5.0, 1.5, 0.5) == lum_interval(5.0, 0.5, 1.5)


def test_eq4_equal_padding_gives_a_point():
    # case 1 of the paper: same (h, w, c) on both sides -> T_b1 == T_b2 -> zero width
    iv = lum_interval(4.0, 1.25, 1.25)
    assert iv.lo == iv.hi == iv.mid == 2.75


def test_eq4_width_is_the_padding_difference():
    for t_c, b1, b2 in [(3.0, 0.2, 0.9), (0.5, 0.7, 0.1), (100.0, 30.0, 31.0)]:
        iv = lum_interval(t_c, b1, b2)
        assert iv.width == pytest.approx(abs(b1 - b2))
        assert iv.lo <= iv.mid <= iv.hi
        assert iv.hi == pytest.approx(t_c - min(b1, b2))


def test_eq4_keeps_negative_values_when_the_layer_is_cheaper_than_noise():
    iv = lum_interval(1.0, 1.2, 0.9)
    assert iv.lo == pytest.approx(-0.2) and iv.hi == pytest.approx(0.1)


def test_t_b_from_lut_sums_the_input_side_of_multi_input_layers():
    lut = {(8, 8, 4): _t(1.0), (1, 1, 4): _t(0.25)}
    b1, b2, ins, out = t_b_from_lut(lut, "mul", dict(h=8, w=8, c=4, broadcast=1))
    assert (b1, b2) == (1.25, 1.0) and ins == ((8, 8, 4), (1, 1, 4)) and out == (8, 8, 4)
    b1, b2, _, _ = t_b_from_lut(lut, "add", dict(h=8, w=8, c=4))
    assert (b1, b2) == (2.0, 1.0)
    with pytest.raises(KeyError, match="not in the lookup table"):
        t_b_from_lut(lut, "conv2d", dict(h=8, w=8, c_in=4, c_out=8, k_h=1, k_w=1))


# --------------------------------------------------------------- LUT reuse, real timings


class CountingRunner(OnnxRuntimeRunner):
    """The real ONNX Runtime runner, counting which models it is asked to prepare."""

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.prepared: Counter[str] = Counter()

    def prepare(self, model: bytes):
        self.prepared[onnx.load_from_string(model).graph.name] += 1
        return super().prepare(model)


PLAN_A = [
    Config.make("conv2d", dict(h=8, w=8, c_in=4, c_out=4, k_h=3, k_w=3)),  # (8,8,4) both sides
    Config.make("dwconv2d", dict(h=8, w=8, c=4, k_h=3, k_w=3, s_h=2, s_w=2)),  # (8,8,4) -> (4,4,4)
    Config.make("add", dict(h=8, w=8, c=4)),  # (8,8,4) x2 -> (8,8,4)
    Config.make("mul", dict(h=4, w=4, c=4, broadcast=1)),  # (4,4,4) + (1,1,4) -> (4,4,4)
    Config.make("globalpool", dict(h=4, w=4, c=4)),  # (4,4,4) -> (1,1,4)
    Config.make("fc", dict(c_in=4, c_out=6)),  # (1,1,4) -> (1,1,6)
]
PLAN_B = [
    Config.make("conv2d", dict(h=8, w=8, c_in=4, c_out=6, k_h=1, k_w=1)),  # (8,8,4) -> new (8,8,6)
    Config.make("concat", dict(h=8, w=8, c_in1=4, c_in2=4)),  # (8,8,4) x2 -> new (8,8,8)
]


def test_each_padding_pair_is_measured_once_and_reused(tmp_path):
    runner = CountingRunner()
    with Store(tmp_path / "b.sqlite") as store:
        env = store.environment_id("host", runner.environment(), {"warmup": 1, "runs": 3})
        sp = SmartPad(runner, store, env, warmup=1, runs=3)
        keys_a = needed_padding(PLAN_A)
        assert set(keys_a) == {(8, 8, 4), (4, 4, 4), (1, 1, 4), (1, 1, 6)}
        st = sp.run(PLAN_A)
        assert st.measured == len(PLAN_A) and st.failed == 0
        pads = {k: v for k, v in runner.prepared.items() if k.startswith("padding_")}
        assert pads == {f"padding_{h}x{w}x{c}": 1 for h, w, c in keys_a}
        # every config: one single-layer and one padded model
        assert sum(1 for k in runner.prepared if k.startswith("single_")) == len(PLAN_A)
        assert sum(1 for k in runner.prepared if k.startswith("padded_")) == len(PLAN_A)
        lut = store.padding_lut(env)
        assert set(lut) == set(keys_a)

        # the rows hold Eq. 4 applied to the stored LUT
        for row in store.measurements(env):
            keys = padding_keys(row["layer_type"], json.loads(row["params"]))
            b1 = sum(lut[k].median_ms for k in keys.inputs)
            b2 = lut[keys.output].median_ms
            assert row["t_b1_ms"] == pytest.approx(b1) and row["t_b2_ms"] == pytest.approx(b2)
            iv = lum_interval(row["padded_median_ms"], b1, b2)
            assert (row["t_lum_lo_ms"], row["t_lum_hi_ms"]) == pytest.approx((iv.lo, iv.hi))
            assert row["t_lum_ms"] == pytest.approx(iv.mid)
            assert row["single_median_ms"] > 0 and row["padded_median_ms"] > 0 and row["padded_n"] == 3
            assert json.loads(row["b2_key"]) == list(keys.output)

        # a second plan re-uses the LUT: only its new pairs are measured
        runner.prepared.clear()
        st = sp.run(PLAN_A + PLAN_B)
        assert st.already == len(PLAN_A) and st.measured == len(PLAN_B)
        assert st.padding_measured == 2 and st.padding_reused == 1
        pads = {k: v for k, v in runner.prepared.items() if k.startswith("padding_")}
        assert pads == {"padding_8x8x6": 1, "padding_8x8x8": 1}
        assert store.count(env) == len(PLAN_A) + len(PLAN_B)

        # nothing left: a third run measures nothing at all
        runner.prepared.clear()
        st = sp.run(PLAN_A + PLAN_B)
        assert st.measured == 0 and st.padding_measured == 0 and not runner.prepared


class FailingRunner(OnnxRuntimeRunner):
    """Real runner that refuses models with a resize (a target lacking the operator)."""

    def prepare(self, model: bytes):
        if any(n.op_type == "Resize" for n in onnx.load_from_string(model).graph.node):
            raise RunnerError("Resize is not supported on this target")
        return super().prepare(model)


def test_failures_are_recorded_and_not_retried_unless_asked(tmp_path):
    plan = [Config.make("resize", dict(h=4, w=4, c=2, h_out=8, w_out=8)),
            Config.make("add", dict(h=4, w=4, c=2))]
    runner = FailingRunner()
    with Store(tmp_path / "f.sqlite") as store:
        env = store.environment_id("host", runner.environment(), {})
        sp = SmartPad(runner, store, env, warmup=0, runs=2)
        st = sp.run(plan)
        assert (st.measured, st.failed) == (1, 1) and "Resize is not supported" in st.errors[0]
        assert [f["layer_type"] for f in store.failures()] == ["resize"]
        st = sp.run(plan)
        assert (st.measured, st.failed, st.skipped_failed, st.already) == (0, 0, 1, 1)
        st = sp.run(plan, retry_failed=True)
        assert st.failed == 1 and st.skipped_failed == 0


def test_lum_profile_finds_the_lum_nodes_in_ort_profiles():
    runner = OnnxRuntimeRunner()
    for t, p in [("conv2d", dict(h=16, w=16, c_in=16, c_out=32, k_h=3, k_w=3)),
                 ("conv2d", dict(h=17, w=17, c_in=32, c_out=48, k_h=1, k_w=7, groups=4)),
                 ("dwconv2d", dict(h=16, w=16, c=32, k_h=3, k_w=3, s_h=2, s_w=2))]:
        ir = padded_model(t, p)
        from bench.modelgen import to_onnx

        prof = runner.per_layer(runner.prepare(to_onnx(ir)), warmup=1, runs=3)
        assert lum_profile_ms(prof, ir) > 0
        # the padding convs are never counted as the LUM
        assert lum_profile_ms(prof, ir) < sum(prof.values())


# ------------------------------------------------------------------ the ORT runner itself


def test_onnxruntime_runner_times_and_describes_itself():
    import os

    import onnxruntime as ort

    from bench.modelgen import padding_model, to_onnx
    from bench.runners.base import get_runner

    r = get_runner("onnxruntime", threads=2, graph_optimization="basic")
    assert isinstance(r, OnnxRuntimeRunner) and r.threads == 2
    env = r.environment()
    assert env["runner"] == "onnxruntime" and env["provenance"] == "measured" and env["precision"] == "fp32"
    assert env["versions"]["onnxruntime"] == ort.__version__ and env["versions"]["python"]
    assert env["threads"] == 2 and env["inter_op_threads"] == 1 and env["graph_optimization"] == "basic"
    assert env["host"]["cpu_model"] and env["host"]["cpu_count"] == os.cpu_count()
    assert env["execution_mode"] == "sequential"
    # several threads: workers stop spinning when a run returns, and the environment says so;
    # one thread keeps the environment it always had (cached measurements stay valid)
    assert env["spinning"] == "stopped when a run returns"
    assert r._options().get_session_config_entry("session.force_spinning_stop") == "1"
    assert "spinning" not in get_runner("onnxruntime", threads=1).environment()
    p = r.prepare(to_onnx(padding_model(16, 16, 8)))
    t = r.time(p, warmup=1, runs=7)
    assert t.n == 7 and 0 < t.min_ms <= t.p10_ms <= t.median_ms <= t.p90_ms
    prof = r.per_layer(p, warmup=1, runs=3)
    assert prof and all(v > 0 for v in prof.values())


def test_cache_flush_writes_its_buffer_before_every_run():
    from bench.modelgen import padding_model, to_onnx

    r = OnnxRuntimeRunner(flush_cache_mb=1)
    before = r.flush.buffer.copy()
    r.time(r.prepare(to_onnx(padding_model(4, 4, 2))), warmup=1, runs=2)
    assert (r.flush.buffer == before + 3).all()  # warm-up and timed runs alike
    assert r.environment()["flush_cache_mb"] == 1.0
    assert "flush_cache_mb" not in OnnxRuntimeRunner().environment()  # warm environments keep their identity


def test_onnxruntime_runner_options_are_checked():
    import warnings

    from bench.runners.onnxruntime_runner import parse_affinity

    with pytest.raises(RunnerError, match="fp32 only"):
        OnnxRuntimeRunner(precision="int8")
    with pytest.raises(RunnerError, match="no option"):
        OnnxRuntimeRunner(thread=2)
    with pytest.raises(RunnerError, match="graph_optimization"):
        OnnxRuntimeRunner(graph_optimization="max")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = OnnxRuntimeRunner(delegate="/x.so", token="secret")
    assert "ignores option(s) delegate, token" in str(w[0].message)
    assert r.environment()["ignored_options"] == ["delegate", "token"]  # names only, never values
    assert parse_affinity("0-2,5") == (0, 1, 2, 5) and parse_affinity(None) is None
    with pytest.raises(RunnerError, match="bad CPU affinity"):
        parse_affinity("a-b")
    with pytest.raises(RunnerError, match="could not load"):
        OnnxRuntimeRunner().prepare(b"not an onnx model")


def test_onnxruntime_runner_pins_and_records_affinity():
    import os

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no sched_setaffinity here")
    before = os.sched_getaffinity(0)
    cpu = min(before)
    try:
        r = OnnxRuntimeRunner(affinity=str(cpu))
        assert os.sched_getaffinity(0) == {cpu}
        env = r.environment()
        assert env["affinity"] == [cpu] and env["affinity_requested"] == [cpu]
    finally:
        os.sched_setaffinity(0, before)
