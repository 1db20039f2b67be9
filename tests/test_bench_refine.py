"""``bench refine`` end to end on onnxruntime with tiny budgets (the tiny real profile of
:mod:`tests.service_support`): rows are added and the profile says so, widths are printed,
``--exclude-onnx`` keeps held-out configurations out, SIGKILLs mid-round lose nothing and
keep the budget and the record, bad input is one line; and :func:`bench.sampling.neighbours`."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from estimator.cliutil import run

from .crash import run_and_kill
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


def _in_round(db, round_: int) -> int:
    """Layer rows committed since round ``round_`` was planned, while it is not finished (0
    before the tables exist)."""
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            return con.execute("SELECT COUNT(*) FROM measurements m JOIN refine_rounds r ON m.env_id = r.env_id "
                               "AND r.round = ? AND r.finished_at IS NULL AND m.measured_at >= r.started_at",
                               (round_,)).fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError:  # schema not created yet
        return 0


def _stamps(db) -> dict[tuple[str, str], str]:
    """(table, key) -> measured_at of every layer row and padding pair."""
    con = sqlite3.connect(str(db))
    try:
        out = {("m", k): t for k, t in con.execute("SELECT config_key, measured_at FROM measurements")}
        out.update({("p", f"{h},{w},{c}"): t for h, w, c, t in con.execute("SELECT h, w, c, measured_at FROM padding")})
        return out
    finally:
        con.close()


@pytest.mark.slow
def test_sigkill_twice_then_resume_keeps_the_budget_and_the_record(ref, tmp_path):
    """Killed in round 1, run again and killed in round 2, run again to the end: every row
    kept as it was, each configuration measured once, two rounds in all (the second run goes
    on with round 1's own plan), and the profile records both rounds, every row and the device
    time of all three runs."""
    from datetime import datetime, timezone

    from bench.sampling import config_key
    from estimator.profile import load_profile

    db = tmp_path / "kill.sqlite"
    top, neighbours = 4, 2
    cmd = [sys.executable, "-m", "bench.cli", "refine", "--device", DEVICE, "--name", "tiny-kill", "--root",
           str(ref["root"]), "--onnx", str(ref["nets"]), "--rounds", "2", "--min-gain", "0", "--db", str(db),
           "--runs", "400", "--warmup", "1", "--top", str(top), "--neighbours", str(neighbours), "--no-progress"]
    env = dict(os.environ, CL_CACHE_DIR=str(ref["cache"]))
    run_and_kill(cmd, lambda: _in_round(db, 1) >= 1, env=env, timeout=120)
    first = _stamps(db)
    run_and_kill(cmd, lambda: _in_round(db, 2) >= 1, env=env, timeout=180)
    second = _stamps(db)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "round 2 was cut and goes on" in done.stderr
    final = _stamps(db)
    assert first.items() <= second.items() <= final.items()  # nothing lost, nothing measured again

    con = sqlite3.connect(str(db))
    try:
        rounds = con.execute("SELECT round, plan, started_at, finished_at, device_seconds FROM refine_rounds "
                             "ORDER BY round").fetchall()
        assert con.execute("SELECT COUNT(*) = COUNT(DISTINCT config_key) FROM measurements").fetchone()[0]
    finally:
        con.close()
    assert [r[0] for r in rounds] == [0, 1, 2] and all(r[3] for r in rounds)  # the budget: two rounds in all
    plans = [{config_key(t, p) for t, p in json.loads(r[1])} for r in rounds]
    measured = set(_rows(db))
    assert measured and measured <= set().union(*plans)  # every row was planned by one of the two rounds
    assert all(len(p) <= top * (1 + neighbours) for p in plans)

    r = load_profile("tiny-kill", ref["root"]).refined
    assert [x["round"] for x in r["rounds"]] == [0, 1, 2]
    assert r["configurations"] == len(measured) == sum(x["measured"] for x in r["rounds"])
    assert r["rounds"][1]["measured"] and r["rounds"][2]["measured"]
    assert r["rounds"][2]["device_seconds"] == r["device_seconds"] == pytest.approx(sum(x[4] for x in rounds),
                                                                                   abs=1e-3)
    # device time: at least each run's committed rows' span within each round (a killed run's
    # time is counted up to its last committed row)
    starts = [datetime.fromisoformat(x[2]) for x in rounds[1:]] + [datetime.max.replace(tzinfo=timezone.utc)]
    span = 0.0
    for before, after in ((None, first), (first, second), (second, final)):
        new = [datetime.fromisoformat(t) for k, t in after.items() if before is None or k not in before]
        for lo, hi in zip(starts, starts[1:]):
            part = [t for t in new if lo <= t < hi]
            if part:
                span += (max(part) - min(part)).total_seconds()
    assert span > 0 and r["device_seconds"] >= span - 1e-3


def test_minutes_budget_stops_within_the_round(ref, tmp_path, capsys):
    db = tmp_path / "budget.sqlite"
    argv = ["refine", "--device", DEVICE, "--name", "tiny-budget", "--root", str(ref["root"]), "--onnx",
            str(ref["nets"]), "--rounds", "3", "--minutes", "0.00001", "--db", str(db), *QUICK]
    rc = _bench(argv)
    out = capsys.readouterr().out
    assert rc == 0 and "stopped: the 1e-05-minute budget is spent" in out, out
    rows = _rows(db)
    assert len(rows) <= 1  # the budget is checked before each measurement
    assert "round 2:" not in out
    # the same command again continues the same budget: spent, nothing more is measured
    rc = _bench(argv)
    out = capsys.readouterr().out
    assert rc == 0 and "stopped: the 1e-05-minute budget is spent" in out and "round 2:" not in out, out
    assert _rows(db) == rows


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
