"""``bench refine`` end to end on onnxruntime with tiny budgets (the tiny real profile of
:mod:`tests.service_support`): rows are added and the profile says so, widths are printed,
``--exclude-onnx`` keeps held-out configurations out, a SIGKILL mid-round loses nothing,
bad input is one line; and :func:`bench.sampling.neighbours`."""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from estimator.cliutil import run

from .crash import count_rows, run_and_kill
from .service_support import DEVICE, conv_net_onnx, profile_set

QUICK = ["--runs", "3", "--warmup", "1", "--top", "3", "--neighbours", "1", "--no-progress"]


def _bench(argv: list[str]) -> int:
    return run("bench", "test", ["bench.cmd_refine"], argv)


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    """The tiny profile in a root of its own; a target network and a held-out one that shares
    every layer configuration but the stem (kernel 4 instead of 3: the same 19x19 maps)."""
    ps = profile_set(tmp_path_factory)
    base = tmp_path_factory.mktemp("refine")
    root = base / "profiles"
    shutil.copytree(ps.root / DEVICE, root / DEVICE)
    nets = base / "nets"
    nets.mkdir()
    (nets / "target.onnx").write_bytes(conv_net_onnx(40, width=16))
    held = base / "held"
    held.mkdir()
    (held / "held.onnx").write_bytes(conv_net_onnx(40, kernel=4, width=16))
    return {"root": root, "base": base, "nets": nets, "held": held, "cache": ps.cache}


@pytest.fixture(autouse=True)
def _cache_env(request, monkeypatch):
    if "ref" in request.fixturenames:
        monkeypatch.setenv("CL_CACHE_DIR", str(request.getfixturevalue("ref")["cache"]))


def _rows(db) -> dict[str, float]:
    con = sqlite3.connect(str(db))
    try:
        return {k: v for k, v in con.execute("SELECT config_key, t_lum_ms FROM measurements")}
    finally:
        con.close()


def test_two_rounds_add_rows_and_say_so(ref, capsys):
    from estimator.profile import load_profile

    db = ref["base"] / "two.sqlite"
    rc = _bench(["refine", "--device", DEVICE, "--name", "tiny-ref", "--root", str(ref["root"]), "--onnx",
                 str(ref["nets"]), "--rounds", "2", "--min-gain", "0", "--db", str(db), *QUICK])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = out.splitlines()
    r1 = next(l for l in lines if l.startswith("round 1:"))
    r2 = next(l for l in lines if l.startswith("round 2:"))
    assert next(l for l in lines if l.startswith("round 0"))
    for line in (r1, r2):
        assert "device min" in line and "configurations measured" in line
        assert "onnx:target" in line and "CM_LV" in line and "CM_O width" in line
    measured = _rows(db)
    assert 1 <= len(measured) <= 2 * 3 * 2  # top 3 + one neighbour each, two rounds
    prof = load_profile("tiny-ref", ref["root"])
    base = load_profile(DEVICE, ref["root"])
    n_base = sum(1 for _ in base.rows())
    assert sum(1 for _ in prof.rows()) == n_base + len(measured)
    assert prof.measurements_path.read_bytes().startswith(base.measurements_path.read_bytes())
    r = prof.refined
    assert r["base"] == DEVICE and r["configurations"] == len(measured) and r["runner"] == "onnxruntime"
    assert [t["name"] for t in r["targets"]] == ["onnx:target"] and len(r["targets"][0]["sha256"]) == 64
    assert [x["round"] for x in r["rounds"]] == [0, 1, 2]
    assert sum(x["measured"] for x in r["rounds"]) == len(measured)
    assert r["rounds"][2]["widths"]["onnx:target"]["CM_LV_width_ms"] > 0 and r["device_seconds"] > 0
    assert "Refined by `bench refine --device tiny`" in prof.description
    # the base's rows calibrate, the added ones train only (tests/test_conformal.py: the rule)
    assert prof.training["calibration_rows"] == n_base
    # a rerun resumes: nothing new is measured twice, the profile keeps every row
    rc = _bench(["refine", "--device", DEVICE, "--name", "tiny-ref", "--root", str(ref["root"]), "--onnx",
                 str(ref["nets"]), "--rounds", "1", "--db", str(db), *QUICK])
    assert rc == 0
    again = _rows(db)
    assert all(again[k] == v for k, v in measured.items())
    assert load_profile("tiny-ref", ref["root"]).refined["configurations"] == len(again)


def test_exclude_onnx_keeps_held_out_configurations_out(ref, capsys):
    from bench.network_plan import held_out_keys, network_layer_configs
    from estimator.profile import load_profile

    db = ref["base"] / "excl.sqlite"
    rc = _bench(["refine", "--device", DEVICE, "--name", "tiny-excl", "--root", str(ref["root"]), "--onnx",
                 str(ref["nets"]), "--exclude-onnx", str(ref["held"]), "--rounds", "2", "--min-gain", "0",
                 "--db", str(db), *QUICK])
    assert rc == 0, capsys.readouterr().err
    fusion = load_profile(DEVICE, ref["root"]).fusion_rules()
    held = held_out_keys([ref["held"]], fusion=fusion)
    target = {k for _, k, p in network_layer_configs(ref["nets"] / "target.onnx", fusion=fusion) if p is not None}
    assert target & held and target - held  # they share configurations, and the stem differs
    measured = set(_rows(db))
    assert measured and not measured & held
    r = load_profile("tiny-excl", ref["root"]).refined
    assert [x["name"] for x in r["excluded"]] == ["onnx:held"]


def test_sigkill_mid_round_loses_nothing(ref, tmp_path):
    db = tmp_path / "kill.sqlite"
    cmd = [sys.executable, "-m", "bench.cli", "refine", "--device", DEVICE, "--name", "tiny-kill", "--root",
           str(ref["root"]), "--onnx", str(ref["nets"]), "--rounds", "2", "--min-gain", "0", "--db", str(db),
           "--runs", "400", "--warmup", "1", "--top", "4", "--neighbours", "2", "--no-progress"]
    env = dict(os.environ, CL_CACHE_DIR=str(ref["cache"]))
    run_and_kill(cmd, lambda: count_rows(db, "measurements") >= 1, env=env, timeout=120)
    kept = _rows(db)
    assert kept
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = _rows(db)
    assert all(after[k] == v for k, v in kept.items())  # nothing lost, nothing re-measured
    from estimator.profile import load_profile

    prof = load_profile("tiny-kill", ref["root"])
    assert prof.refined["configurations"] == len(after)
    lines = prof.measurements_path.read_text().splitlines()
    assert len(lines) - 1 == sum(1 for _ in load_profile(DEVICE, ref["root"]).rows()) + len(after)


def test_minutes_budget_stops_within_the_round(ref, tmp_path, capsys):
    db = tmp_path / "budget.sqlite"
    rc = _bench(["refine", "--device", DEVICE, "--name", "tiny-budget", "--root", str(ref["root"]), "--onnx",
                 str(ref["nets"]), "--rounds", "3", "--minutes", "0.00001", "--db", str(db), *QUICK])
    out = capsys.readouterr().out
    assert rc == 0 and "stopped: the 1e-05-minute budget is spent" in out, out
    assert len(_rows(db)) <= 1  # the budget is checked before each measurement
    assert "round 2:" not in out


@pytest.mark.parametrize("argv, msg", [
    (["--device", "nosuch", "--onnx", "NETS"], "nosuch"),
    (["--device", DEVICE, "--onnx", "EMPTY_DIR"], "holds no .onnx file"),
    (["--device", DEVICE], "give the target networks"),
    (["--device", DEVICE, "--zoo", "nosuchnet"], "--zoo: unknown network 'nosuchnet'"),
    (["--device", DEVICE, "--onnx", "NETS", "--networks", "3"], "--networks counts space samples"),
    (["--device", DEVICE, "--onnx", "NETS", "--name", DEVICE], "cannot replace its base"),
])
def test_bad_input_is_one_line(ref, tmp_path, capsys, argv, msg):
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = [str(empty) if a == "EMPTY_DIR" else str(ref["nets"]) if a == "NETS" else a for a in argv]
    before = sorted(p.name for p in ref["root"].iterdir())
    rc = _bench(["refine", "--root", str(ref["root"]), "--db", str(tmp_path / "bad.sqlite"), "--no-progress", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
    assert sorted(p.name for p in ref["root"].iterdir()) == before
    assert not (tmp_path / "bad.sqlite").exists()


def test_neighbours_step_the_ladders_within_limits():
    from bench.sampling import Limits, in_space, neighbours

    p = dict(h=56, w=56, c_in=64, c_out=64, k_h=3, k_w=3, s_h=1, s_w=1, p_t=1, p_l=1, p_b=1, p_r=1, act="relu")
    got = [c.params for c in neighbours("conv2d", p)]
    assert {(q["h"], q["c_in"], q["c_out"]) for q in got} == {(52, 64, 64), (64, 64, 64), (56, 56, 64),
                                                              (56, 72, 64), (56, 64, 56), (56, 64, 72)}
    assert all(q["p_t"] == 1 for q in got)  # fixed (PyTorch) pads stay
    same = dict(h=56, w=56, c=32, k_h=3, k_w=3, s_h=2, s_w=2, p_t=0, p_l=0, p_b=1, p_r=1)  # TF SAME at 56
    up = next(c.params for c in neighbours("dwconv2d", same) if c.params["h"] == 64)
    assert (up["p_t"], up["p_b"]) == (0, 1)
    tight = Limits(max_ops=2 * 56 * 56 * 64 * 64 * 9)  # the configuration itself just fits
    assert all(in_space("conv2d", c.params, tight) for c in neighbours("conv2d", p, tight))
    assert not any(c.params["h"] == 64 or c.params["c_out"] == 72 for c in neighbours("conv2d", p, tight))
    resize = next(c.params for c in neighbours("resize", dict(h=20, w=20, c=64, h_out=40, w_out=40, mode="nearest"))
                  if c.params["h"] == 26)
    assert resize["h_out"] == 52


def test_round_plan_reaches_further_neighbours_when_the_near_ones_are_measured():
    from bench.refine import round_plan
    from bench.sampling import Config, Limits, neighbours

    p = dict(h=56, w=56, c_in=64, c_out=64, k_h=3, k_w=3, s_h=1, s_w=1, p_t=1, p_l=1, p_b=1, p_r=1, act="relu")
    cfg = Config.make("conv2d", p)
    ring1 = {c.key for c in neighbours("conv2d", p)}
    first = round_plan([(cfg, 1.0)], top=1, neighbours=2, skip=set(), limits=Limits())
    assert first[0].key == cfg.key and {c.key for c in first[1:]} <= ring1 and len(first) == 3
    # the configuration and its whole first ring measured: two steps away, never a measured one
    later = round_plan([(cfg, 1.0)], top=1, neighbours=2, skip={cfg.key} | ring1, limits=Limits())
    assert len(later) == 2 and not {c.key for c in later} & (ring1 | {cfg.key})
    two_steps = {n.key for c in neighbours("conv2d", p) for n in neighbours("conv2d", c.params)}
    assert {c.key for c in later} <= two_steps
    assert round_plan([(cfg, 1.0)], top=1, neighbours=0, skip={cfg.key}, limits=Limits()) == []


def test_rank_leaves_out_configurations_the_runners_models_cannot_render(monkeypatch):
    """Refinement on a TFLite runner (Vela, LiteRT) never plans a configuration whose benchmark
    model exists in ONNX only (here: fc over token rows, made ONNX-only for the test; it renders
    to both); on ONNX Runtime it does."""
    from types import SimpleNamespace

    from bench.refine import rank
    from bench.sampling import Limits
    from estimator.layers import SPECS
    from estimator.predict import make_layer

    monkeypatch.setattr(type(SPECS["fc"]), "renders",
                        lambda self, p, fmt: fmt == "onnx" or int(p.get("m") or 1) == 1)

    layers = [make_layer("fc", dict(m=197, c_in=192, c_out=576), name="tokens"),
              make_layer("fc", dict(c_in=192, c_out=1000), name="head")]
    row = lambda name: SimpleNamespace(name=name, interval=lambda m: (0.5, 1.5))  # noqa: E731
    est = SimpleNamespace(total_ms=2.0, layers=[row("tokens"), row("head")])
    target = SimpleNamespace(net=SimpleNamespace(layers=layers))
    onnx = rank([(target, est)], exclude=set(), limits=Limits(), model_format="onnx")
    tflite = rank([(target, est)], exclude=set(), limits=Limits(), model_format="tflite")
    assert sorted(c.params.get("m", 1) for c, _ in onnx) == [1, 197]
    assert [c.params.get("m", 1) for c, _ in tflite] == [1]
