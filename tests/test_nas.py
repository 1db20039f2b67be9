"""`nas search` / `nas show` end to end on a small REAL profile measured here.

The session fixture measures seven layer types on this machine with ``bench run --runner
onnxruntime`` (12 configurations each), exports them, turns them into a profile in a
temporary directory and trains its models once (model cache in the same directory).
Every search starts the real estimation service (in-process, or as a separate server on
a real port), builds real torch modules, exports them with torch.onnx + onnxsim and
queries the service over gRPC. Nothing is stubbed.
"""
from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from nas.cli import main as nas_main
from nas.spaces import Architecture, GlobalPool
from nas.units import format_ms

pytestmark = pytest.mark.slow

DEVICE = "nas-t"
PROFILE_TYPES = "conv2d,dwconv2d,add,mul,globalpool,fc,activation"
#: a small MobileNet sub-space: candidates export in well under a second
SMALL = ["--space-option", "resolutions=[64,96]", "--space-option", "widths=[0.35,0.5]",
         "--space-option", "max_depth=2"]


# ------------------------------------------------------------------ profile (session)


def build_env(base: Path) -> dict[str, Path]:
    """Measure, export and load a small real profile once per session (shared with the
    distributed tests, which call this with the same ``base``)."""
    root = base / "profiles"
    cache = base / "cache"
    done = base / "done"
    if not done.is_file():
        import bench.cli as bench_cli
        from estimator.profile import create_profile

        base.mkdir(parents=True, exist_ok=True)
        db = base / "bench.sqlite"
        rc = bench_cli.main(["run", "--device", DEVICE, "--runner", "onnxruntime", "--layers", PROFILE_TYPES,
                             "--samples", "12", "--warmup", "1", "--runs", "3", "--max-ops", "2e7", "--out", str(db),
                             "--no-progress"])
        assert rc == 0
        csv_path = base / "bench.csv"
        assert bench_cli.main(["export", str(db), "--csv", str(csv_path)]) == 0
        create_profile(root, DEVICE, csv_path, source=f"pytest (tests/test_nas.py): bench run --samples 12 "
                                                         f"--max-ops 2e7 ({PROFILE_TYPES})",
                       training={"n_estimators": 40, "grid_estimators": 30, "grid_max_features": [1.0, 0.5],
                                 "grid_min_samples_leaf": [1, 3], "min_rows": 5, "knn_k": 3})
        old = os.environ.get("CL_CACHE_DIR")
        os.environ["CL_CACHE_DIR"] = str(cache)
        try:
            from service.server import EmbeddedServer

            with EmbeddedServer(root) as srv:  # trains the models into the cache once
                assert srv.servicer is not None
        finally:
            if old is None:
                os.environ.pop("CL_CACHE_DIR", None)
            else:
                os.environ["CL_CACHE_DIR"] = old
        done.write_text("ok\n")
    return {"base": base, "root": root, "cache": cache}


@pytest.fixture(scope="session")
def nas_env(tmp_path_factory) -> dict[str, Path]:
    return build_env(tmp_path_factory.getbasetemp() / "nas-env")


@pytest.fixture(autouse=True)
def _cache_env(nas_env, monkeypatch):
    monkeypatch.setenv("CL_CACHE_DIR", str(nas_env["cache"]))


def search(env: dict[str, Path], out: Path, *extra: str, budget: str = "10s", trials: int = 4,
           seed: int = 0) -> int:
    """``nas search`` on the small profile; without polishing the winner unless ``extra`` asks
    (the tests count trials)."""
    polish = [] if "--polish" in extra else ["--polish", "0"]
    return nas_main(["search", "--device", DEVICE, "--budget", budget, "--trials", str(trials), "--seed", str(seed),
                     "--profiles", str(env["root"]), "--out", str(out), "--no-progress", *polish, *extra])


def load_study(out: Path, name: str) -> Any:
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{out / 'nas.db'}")


# ----------------------------------------------------------- spaces and objectives


def kernel_space(trial: Any, *, kernels: tuple[int, ...] = (3, 15)) -> Architecture:
    """A tiny network whose depthwise kernel is the only choice: 15 lies outside every
    profile `bench` can produce (its kernels stop at 11)."""
    k = trial.suggest_categorical("kernel", list(kernels))
    m = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                      nn.Conv2d(16, 16, k, 1, k // 2, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                      nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), GlobalPool(), nn.Linear(32, 10))
    return Architecture(m, (1, 3, 32, 32), {"kernel": k})


def constant_objective(model: nn.Module, trial: Any) -> float:
    """Every candidate scores the same: only the penalty can separate them."""
    assert isinstance(model, nn.Module) and trial.user_attrs["input_shape"] == [1, 3, 32, 32]
    return 1.0


def flaky_objective(model: nn.Module, trial: Any) -> float:
    if trial.number % 2 == 1:
        raise ValueError(f"boom in trial {trial.number}")
    return 1.0


def broken_objective(model: nn.Module, trial: Any) -> float:
    raise RuntimeError("training diverged")


# ------------------------------------------------------------------------ unit tests


def test_budget_units():
    from estimator.errors import UserError
    from nas.units import parse_budget

    assert parse_budget("50ms") == 50.0
    assert parse_budget("500us") == pytest.approx(0.5)
    assert parse_budget("0.05s") == pytest.approx(50.0)
    assert parse_budget(" 2.5 ms") == 2.5
    for bad, msg in (("50", "no unit"), ("50 parsecs", "unknown unit"), ("-3ms", "with a unit"),
                     ("0ms", "positive"), ("fast", "with a unit")):
        with pytest.raises(UserError, match=msg):
            parse_budget(bad)
    from nas.units import parse_duration, parse_option

    assert parse_duration("300") == 300 and parse_duration("5min") == 300 and parse_duration("2h") == 7200
    with pytest.raises(UserError, match="duration"):
        parse_duration("soon")
    assert parse_option("resolutions=[96,128]", "--space-option") == ("resolutions", (96, 128))
    assert parse_option("act=relu", "--space-option") == ("act", "relu")
    with pytest.raises(UserError, match="KEY=VALUE"):
        parse_option("resolutions", "--space-option")


def test_penalty_formula_grows_with_cm_o_width_and_ood_layers():
    from nas.scoring import Estimate, penalised, penalty

    def est(width: float, n_ood: int) -> Estimate:
        return Estimate(total_ms=2.0, confidence=0.9, intervals={"CM_TV": (1.0, 3.0), "CM_LV": (1.5, 2.5),
                                                                  "CM_O": (1.0, 1.0 + width)},
                        n_layers=10, n_out_of_design_space=n_ood, n_fallback=0)

    base = penalty(est(2.0, 0), 0.1)
    assert base.P == pytest.approx(math.log(2.0))
    assert penalised(100.0, base) == pytest.approx(100.0 * math.exp(-0.1 * math.log(2.0)))
    assert penalised(100.0, penalty(est(4.0, 0), 0.1)) < penalised(100.0, base)  # wider CM_O
    assert penalised(100.0, penalty(est(2.0, 3), 0.1)) < penalised(100.0, base)  # more OOD layers
    assert penalised(-5.0, penalty(est(2.0, 3), 0.1)) < -5.0  # negative scores get more negative
    assert penalised(100.0, penalty(est(1e9, 10), 0.1)) > 0  # never flips the sign
    assert penalised(100.0, penalty(est(4.0, 5), 0.0)) == 100.0  # W = 0: off


def test_spaces_build_and_export():
    import optuna

    from nas.export import to_onnx
    from nas.spaces import SPACES, SpaceError, mobilenet, rebuild, resnet

    assert {"mobilenet", "resnet"} <= set(SPACES)
    p = {"resolution": 64, "width": 0.5}
    for i in range(5):
        p.update({f"s{i}_depth": 2, f"s{i}_expansion": 4, f"s{i}_kernel": 7, f"s{i}_se": True,
                  f"s{i}_act": ["relu", "hardswish", "silu"][i % 3]})
    a = rebuild(mobilenet, p, {"resolutions": (64,)})
    assert a.input_shape == (1, 3, 64, 64) and a.description["stages"][0]["kernel"] == 7
    with torch.no_grad():
        y = a.module.eval()(torch.randn(a.input_shape))
    assert y.shape == (1, 1000)
    from nas.proxy import naswot, synflow

    class _T:
        user_attrs = {"input_shape": list(a.input_shape)}

    s1, s2 = naswot(a.module, _T()), naswot(a.module, _T())
    assert s1 == s2 and 0 < s1 < 16 * math.log(10 ** 7)  # deterministic; log det of a 16x16 kernel
    assert math.isfinite(synflow(a.module, _T()))
    # BN folded for the export only: the module comes back unchanged, the ONNX computes the same
    with torch.no_grad():
        for m in a.module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
    state = {k: v.clone() for k, v in a.module.state_dict().items()}
    a.module.train()
    model = to_onnx(a.module, a.input_shape)
    assert a.module.training and sum(isinstance(m, nn.BatchNorm2d) for m in a.module.modules()) > 20
    assert all(torch.equal(state[k], v) for k, v in a.module.state_dict().items())
    x = torch.randn(a.input_shape)
    with torch.no_grad():
        ref = a.module.eval()(x).numpy()
    import onnxruntime as ort

    got = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x.numpy()})[0]
    assert abs(got - ref).max() <= 1e-4 * max(abs(ref).max(), 1e-3)
    ops = {n.op_type for n in model.graph.node}
    assert {"Conv", "HardSwish", "Sigmoid", "HardSigmoid", "ReduceMean", "Gemm"} <= ops
    assert not ops & {"BatchNormalization", "Flatten", "Reshape"}  # BN folded, pooling without reshape
    r = rebuild(resnet, {"resolution": 64, "block": "bottleneck", "base_width": 32, "stem_kernel": 7,
                         **{f"s{i}_depth": 1 for i in range(4)}}, {"resolutions": (64,)})
    with torch.no_grad():
        assert r.module.eval()(torch.randn(r.input_shape)).shape == (1, 1000)
    with pytest.raises(SpaceError, match="kernels"):
        mobilenet(optuna.trial.FixedTrial(p), kernels=(4,))


def test_direct_onnx_matches_the_torch_export(nas_env):
    """Built-in spaces send the graph written from the description (nas.direct): the same
    layers and the same estimate as the torch export + onnxsim of the same architecture."""
    import optuna

    from estimator.predict import Estimator
    from nas.direct import direct_onnx, is_direct_space
    from nas.export import to_onnx
    from nas.spaces import SPACES, mobilenet, resnet, scaled
    from service.client import strip_initializers

    est = Estimator.from_profile(DEVICE, root=nas_env["root"])
    cases = [(scaled, {"resolutions": (64, 96), "widths": (0.5, 1.5), "max_depth": 2}),
             (mobilenet, {"resolutions": (64,), "max_depth": 2, "activations": ("relu6", "relu", "hardswish", "silu")}),
             (resnet, {"resolutions": (64,), "max_depth": 2})]
    for fn, opts in cases:
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
        for _ in range(4):
            t = study.ask()
            a = fn(t, **opts)
            study.tell(t, 0.0)
            direct = direct_onnx(a.description, a.input_shape)
            exported = strip_initializers(to_onnx(a.module, a.input_shape))
            nd, nx = est.load_network(direct), est.load_network(exported)
            assert [(l.type, l.params) for l in nd.layers] == [(l.type, l.params) for l in nx.layers], fn.__name__
            rd = est.estimate_network(direct, (0.9,))
            rx = est.estimate_network(exported, (0.9,))
            assert rd.total_ms == rx.total_ms and rd.intervals == rx.intervals
            assert [r.to_dict()["type"] for r in rd.layers] == [r.to_dict()["type"] for r in rx.layers]
    assert direct_onnx({"family": "mine"}, (1, 3, 8, 8)) is None
    assert all(is_direct_space(n, SPACES[n]) for n in ("scaled", "mobilenet", "resnet"))
    assert not is_direct_space("mobilenet", kernel_space) and not is_direct_space("tests.test_nas:x", mobilenet)


# ------------------------------------------------------------------ end to end


def test_search_end_to_end(nas_env, tmp_path, capsys):
    """Probe (multi-objective, generous budget), then the same seeded candidates under the
    median CM_LV upper bound: feasibility, best, files, reproduction through the service,
    `nas show`, resume, and a refused change of settings."""
    out = tmp_path / "out"
    # 1. multi-objective probe: all feasible, Pareto set
    assert search(nas_env, out, "--study", "probe", "--multi-objective", *SMALL, trials=6, seed=3) == 0
    probe = load_study(out, "probe")
    assert [d.name for d in probe.directions] == ["MAXIMIZE", "MINIMIZE"]
    done = [t for t in probe.trials if t.state.name == "COMPLETE"]
    assert len(done) == 6
    front = json.loads((out / "pareto.json").read_text())
    assert front
    pts = {t.number: (t.values[0], t.values[1]) for t in done}
    for p in front:  # nobody dominates a Pareto member
        s, l = pts[p["trial"]]
        assert not any(s2 >= s and l2 <= l and (s2 > s or l2 < l) for s2, l2 in pts.values())
    uppers = sorted({t.user_attrs["CM_LV_upper_ms"] for t in done})
    assert len(uppers) >= 2
    mid = len(uppers) // 2
    budget = (uppers[mid - 1] + uppers[mid]) / 2  # strictly between two candidates' bounds
    capsys.readouterr()

    # 2. the same seeded candidates, single objective, budget between them
    out2 = tmp_path / "out2"
    assert search(nas_env, out2, "--study", "main", *SMALL, trials=6, seed=3, budget=f"{budget:.9f}ms") == 0
    text = capsys.readouterr().out
    study = load_study(out2, "main")
    trials = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(trials) == 6
    assert sorted(t.user_attrs["CM_LV_upper_ms"] for t in trials) == pytest.approx(
        sorted(t.user_attrs["CM_LV_upper_ms"] for t in done))  # same candidates as the probe
    for t in trials:
        est = t.user_attrs["estimate"]
        assert set(est["intervals"]) == {"CM_TV", "CM_LV", "CM_O"}
        for lo, hi in est["intervals"].values():
            assert 0 <= lo <= hi
        lo, hi = est["intervals"]["CM_LV"]
        assert lo <= est["latency_ms"] <= hi
        assert t.user_attrs["feasible"] == (hi <= budget)
        assert t.user_attrs["constraint_ms"] == pytest.approx(hi - budget)
        assert t.constraints and max(t.constraints.values()) == pytest.approx(hi - budget)
        assert est["n_out_of_design_space"] == len(est["ood_layers"])
        assert "n_fallback" in est and est["n_layers"] > 10
        assert all(l["reasons"] for l in est["ood_layers"])
    n_bad = sum(1 for t in trials if not t.user_attrs["feasible"])
    assert 1 <= n_bad <= 5
    summary = json.loads((out2 / "summary.json").read_text())
    assert summary["n_rejected_by_budget"] == n_bad and summary["n_feasible"] == 6 - n_bad
    best = summary["best"]
    feasible = [t for t in trials if t.user_attrs["feasible"]]
    assert best["trial"] == max(feasible, key=lambda t: t.value).number
    assert best["intervals"]["CM_LV"][1] <= budget
    assert "rejected by the budget (CM_LV upper > budget): " + str(n_bad) in text
    assert f"best feasible: trial {best['trial']}" in text
    # how much of the budget the winner uses: its estimate and its CM_LV upper bound
    use = best["budget_use"]
    assert (use["metric"], use["confidence"], use["budget_ms"]) == ("CM_LV", 0.9, pytest.approx(budget))
    assert use["estimate_fraction"] == pytest.approx(best["latency_ms"] / budget)
    assert use["upper_fraction"] == pytest.approx(best["intervals"]["CM_LV"][1] / budget) and use["upper_fraction"] <= 1
    budget_line = (f"  winner: {format_ms(best['latency_ms'])} = {100 * use['estimate_fraction']:.0f} % of the "
                   f"{format_ms(budget)} budget; CM_LV upper {format_ms(best['intervals']['CM_LV'][1])} = "
                   f"{100 * use['upper_fraction']:.0f} % (at 0.9)")
    assert budget_line in text.splitlines()

    # files
    for f in ("best.onnx", "best.json", "best_layers.csv", "best_layers.txt", "trials.csv", "pareto.png",
              "summary.json", "summary.txt"):
        assert (out2 / f).is_file(), f
    assert (out2 / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader((out2 / "best_layers.csv").open()))
    assert len(rows) == best["n_layers"]
    assert {"CM_TV_lower_ms", "CM_LV_upper_ms", "CM_O_upper_ms", "flags", "ood_reasons"} <= set(rows[0])
    assert sum("OOD" in r["flags"] for r in rows) == best["n_out_of_design_space"]
    assert sum(float(r["prediction_ms"]) for r in rows) == pytest.approx(best["latency_ms"])
    desc = json.loads((out2 / "best.json").read_text())
    assert desc["params"] == study.trials[best["trial"]].params and desc["description"]["family"] == "mobilenet"
    assert desc["reestimate_matches"] is True
    assert len(list(csv.DictReader((out2 / "trials.csv").open()))) == 6

    # the exported ONNX (with weights) estimated again through a fresh service: same numbers
    import onnx

    from service.client import EstimationClient
    from service.server import EmbeddedServer

    model = onnx.load(str(out2 / "best.onnx"))
    assert sum(t.ByteSize() for t in model.graph.initializer) > 10_000  # weights are there
    with EmbeddedServer(nas_env["root"]) as srv, EstimationClient(srv.address) as client:
        again = client.estimate_network(out2 / "best.onnx", DEVICE, confidence=(0.9,))
    rec = study.trials[best["trial"]].user_attrs["estimate"]
    assert again.total_ms == pytest.approx(rec["latency_ms"], rel=1e-9)
    for m in ("CM_TV", "CM_LV", "CM_O"):
        assert again.interval(m, 0.9) == pytest.approx(tuple(rec["intervals"][m]), rel=1e-9, abs=1e-12)
    assert again.n_out_of_design_space == rec["n_out_of_design_space"] and again.n_fallback == rec["n_fallback"]

    # nas show (reads the storage)
    assert nas_main(["show", "--out", str(out2), "--study", "main"]) == 0
    shown = capsys.readouterr().out
    assert f"best feasible: trial {best['trial']}" in shown and "CM_LV_hi" in shown
    assert budget_line in shown.splitlines()
    assert nas_main(["show", "--out", str(out2)]) == 0
    assert "main" in capsys.readouterr().out

    # resume: the study continues; other settings are refused
    assert search(nas_env, out2, "--study", "main", *SMALL, trials=2, seed=4, budget=f"{budget:.9f}ms") == 0
    assert len(load_study(out2, "main").trials) == 8
    capsys.readouterr()
    assert search(nas_env, out2, "--study", "main", *SMALL, trials=1, budget="123ms") == 2
    err = capsys.readouterr().err
    assert "was created with budget_ms=" in err and "new --study" in err


def test_in_process_and_service_searches_record_the_same_trials(nas_env, tmp_path, monkeypatch, capsys):
    """The search asks the estimation interface and does not care which implementation it
    gets: with --service the gRPC client of a server on a real port, by default the
    in-process estimator, which starts no server and opens no channel. Both record the same
    trials."""
    import grpc

    from service.server import EmbeddedServer, EstimationServer

    def trials(out: Path) -> list[tuple[Any, ...]]:
        rows = []
        for t in load_study(out, "same").trials:
            ua = {k: v for k, v in t.user_attrs.items() if k != "worker"}
            ua["result"] = {k: v for k, v in ua["result"].items() if k != "timing_s"}
            rows.append((t.number, t.state.name, t.params, t.values, ua))
        return rows

    with EmbeddedServer(nas_env["root"]) as srv:
        assert search(nas_env, tmp_path / "grpc", *SMALL, "--service", srv.address, "--study", "same", trials=4,
                      seed=5) == 0

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the in-process search went through gRPC")

    monkeypatch.setattr(EstimationServer, "start", refuse)
    monkeypatch.setattr(grpc, "insecure_channel", refuse)
    assert search(nas_env, tmp_path / "local", *SMALL, "--study", "same", trials=4, seed=5) == 0
    capsys.readouterr()
    local = trials(tmp_path / "local")
    assert len(local) == 4 and all(t[1] == "COMPLETE" for t in local)
    assert local == trials(tmp_path / "grpc")


def test_cm_o_penalty_prefers_the_design_space(tmp_path, capsys):
    """Equal scores: the candidate with a kernel no profile benchmarked (15) loses to the one
    inside the design space, and the report says why.

    Runs on the shipped, measured host-cpu profile (kernels up to 11): its data never
    changes, so models, Monte Carlo draws and the comparison are deterministic (a profile
    measured afresh with a handful of samples per type gives erratic CM_O widths)."""
    import shutil

    from service.client import EstimationClient
    from service.server import EmbeddedServer

    root = tmp_path / "profiles"
    shutil.copytree(Path(__file__).resolve().parents[1] / "profiles" / "host-cpu", root / "host-cpu")
    with EmbeddedServer(root) as srv, EstimationClient(srv.address) as c:
        cov = next(d for d in c.list_devices() if d["name"] == "host-cpu")["coverage"]["dwconv2d"]["ranges"]
    assert cov["k_h"][1] < 15

    out = tmp_path / "out"
    rc = nas_main(["search", "--device", "host-cpu", "--budget", "10s", "--trials", "8", "--seed", "0",
                   "--profiles", str(root), "--out", str(out), "--no-progress",
                   "--space", "tests.test_nas:kernel_space", "--objective", "tests.test_nas:constant_objective",
                   "--penalty-weight", "0.5"])
    captured = capsys.readouterr()
    text = captured.out
    assert rc == 0
    # host-cpu is calibrated on samples of two other spaces: the search says so, once
    assert captured.err.count("none a sample of the tests.test_nas:kernel_space space searched here") == 1
    study = load_study(out, "host-cpu-kernel_space")
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert {t.params["kernel"] for t in done} == {3, 15}
    for t in done:
        assert t.user_attrs["result"]["score"] == 1.0
        reasons = [r for l in t.user_attrs["estimate"]["ood_layers"] for r in l["reasons"]]
        assert ("range:k_h" in reasons) == (t.params["kernel"] == 15)
    k3 = next(t for t in done if t.params["kernel"] == 3)
    k15 = next(t for t in done if t.params["kernel"] == 15)
    assert k15.user_attrs["result"]["penalty"]["P"] > k3.user_attrs["result"]["penalty"]["P"]
    assert k15.value < k3.value < 1.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"]["params"] == {"kernel": 3}
    assert summary["n_penalised_ood"] >= sum(1 for t in done if t.params["kernel"] == 15)
    why = summary["penalty_decided"]
    assert why and all(study.trials[w["trial"]].params["kernel"] == 15 for w in why)
    assert "range:k_h" in why[0]["why"] and "lost to the CM_O penalty" in text and "range:k_h" in text
    # the layer that drives the loser's CM_O, named with its out-of-range kernel
    drivers = k15.user_attrs["estimate"]["cm_o_drivers"]
    assert drivers[0]["type"] == "dwconv2d" and drivers[0]["share"] > 0.5
    assert "k_h=15 > benchmarked max " in drivers[0]["why"] and why[0]["cm_o_drivers"] == drivers
    assert "CM_O driven by #1 " in why[0]["why"] and "k_h=15 > benchmarked max" in text
    assert json.loads((out / "best.json").read_text())["description"] == {"kernel": 3}


def test_report_names_what_drives_a_winner_s_wide_cm_o(tmp_path, capsys):
    """A winner whose CM_O upper bound is more than 10x its estimate (a 63x63 depthwise
    kernel, beyond host-cpu's 11: 17x there) is reported with the layers that drive it, by `nas search`
    and `nas show`, and in summary.json."""
    import shutil

    root = tmp_path / "profiles"
    shutil.copytree(Path(__file__).resolve().parents[1] / "profiles" / "host-cpu", root / "host-cpu")
    out = tmp_path / "out"
    rc = nas_main(["search", "--device", "host-cpu", "--budget", "10s", "--trials", "1", "--profiles", str(root),
                   "--out", str(out), "--no-progress", "--space", "tests.test_nas:kernel_space",
                   "--space-option", "kernels=[63]", "--objective", "tests.test_nas:constant_objective"])
    assert rc == 0
    searched = capsys.readouterr().out
    best = json.loads((out / "summary.json").read_text())["best"]
    lo, hi = best["intervals"]["CM_O"]
    assert hi > 10 * best["latency_ms"]
    top = best["cm_o_drivers"][0]
    assert top["type"] == "dwconv2d" and top["reasons"][:2] == ["range:k_h", "range:k_w"]
    assert [o["feature"] for o in top["out_of_range"]][:2] == ["k_h", "k_w"] and top["out_of_range"][0]["value"] == 63
    assert nas_main(["show", "--out", str(out), "--study", "host-cpu-kernel_space"]) == 0
    shown = capsys.readouterr().out
    for text in (searched, shown):
        lines = text.splitlines()
        i = next(k for k, line in enumerate(lines) if line.startswith("  latency "))
        assert "CM_O [" in lines[i] and lines[i + 1].startswith("    CM_O upper bound ")
        assert lines[i + 2].startswith(f"      #{top['index']} {top['name']} (dwconv2d) ")
        assert "k_h=63 > benchmarked max 11" in lines[i + 2]


# --------------------------------------------------------------------- bad input


def test_unknown_device(nas_env, tmp_path, capsys):
    rc = nas_main(["search", "--device", "nope", "--budget", "5ms", "--profiles", str(nas_env["root"]),
                   "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "unknown device 'nope'" in err and DEVICE in err and "Traceback" not in err


def test_unreachable_service(nas_env, tmp_path, capsys):
    from tests.pg import free_port

    addr = f"127.0.0.1:{free_port()}"
    rc = nas_main(["search", "--device", DEVICE, "--budget", "5ms", "--service", addr, "--connect-timeout", "2",
                   "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    line = next(l for l in err.splitlines() if l.startswith("nas: error:"))
    assert f"cannot reach the estimation service at {addr}" in line and "leave out --service" in line
    assert "Traceback" not in err


def test_budget_without_unit(nas_env, tmp_path, capsys):
    rc = nas_main(["search", "--device", DEVICE, "--budget", "50", "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "--budget '50' has no unit: write 50ms" in err


def test_out_that_is_a_file_and_space_option_values_are_refused_before_a_study(nas_env, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    assert search(nas_env, afile, *SMALL) == 2
    assert f"nas: error: --out {afile} is a file, not a directory" in capsys.readouterr().err
    out = tmp_path / "out"
    for option, why in (("max_depth=0", "space option 'max_depth' must be an integer"),
                        ("resolutions=[]", "space option 'resolutions' needs at least one value")):
        assert search(nas_env, out, "--space-option", option) == 2
        lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("nas: error:")]
        assert len(lines) == 1 and "cannot build an architecture" in lines[0] and why in lines[0], lines
        assert not (out / "nas.db").exists()  # refused before a study was created with it
    for option, why in (("batch=-3", "objective option batch must be an integer >= 2, got -3"),
                        ("scale=x", "objective option scale must be a number in (0, 1], got 'x'"),
                        ("seed=x", "objective option seed must be an integer >= 0, got 'x'"),
                        ("batchx=2", "objective naswot does not take option(s) batchx; it takes: batch, scale, seed")):
        assert search(nas_env, out, "--objective-option", option) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"nas: error: {why}"]
        assert not (out / "nas.db").exists()


def test_a_study_continues_with_its_budget_in_another_unit_and_warns_on_other_models(nas_env, tmp_path, capsys):
    """2300us is the 2.3ms the study was created with; a study continued with other profiles
    (another model version) says so, on stderr and in its summary."""
    import shutil

    out = tmp_path / "out"
    assert search(nas_env, out, *SMALL, "--study", "u", budget="100.1ms", trials=2) == 0  # 100100 x 1e-3 != 100.1
    assert search(nas_env, out, *SMALL, "--study", "u", budget="100100us", trials=1) == 0
    assert "warning" not in capsys.readouterr().err
    other = tmp_path / "profiles"
    shutil.copytree(nas_env["root"], other)
    meta = other / DEVICE / "profile.json"
    doc = json.loads(meta.read_text())
    doc["description"] = f"{doc.get('description') or ''} (another copy)"
    meta.write_text(json.dumps(doc))
    assert nas_main(["search", "--device", DEVICE, "--budget", "100.1ms", "--trials", "1", "--seed", "0", "--profiles",
                     str(other), "--out", str(out), "--no-progress", "--polish", "0", "--study", "u", *SMALL]) == 0
    err = capsys.readouterr().err
    assert "nas: warning: study 'u' has trials estimated with other models (" in err and ": 3 trials)" in err
    assert "estimated with 2 models (" in (out / "summary.txt").read_text()
    assert len(json.loads((out / "summary.json").read_text())["trials_by_model_version"]) == 2


def test_a_study_without_a_feasible_trial_leaves_no_best_files_of_another(nas_env, tmp_path, capsys):
    out = tmp_path / "out"
    assert search(nas_env, out, *SMALL, "--study", "fits") == 0
    assert (out / "best.json").exists()
    assert search(nas_env, out, *SMALL, "--study", "nothing-fits", "--patience", "0", budget="1us", trials=2) == 2
    assert not [p.name for p in out.glob("best*")] and json.loads((out / "summary.json").read_text())["best"] is None


@pytest.mark.parametrize("extra, msg", [
    (["--service", "127.0.0.1:1"], "--adapt writes a profile for the in-process estimator"),
    (["--calibrate", "30"], "give --adapt or --calibrate, not both"),
    (["--calibrate-option", "runner_only=1"], "--adapt measures"),
])
def test_adapt_bad_input_is_one_line_before_anything_is_measured(nas_env, tmp_path, capsys, extra, msg):
    rc = nas_main(["search", "--device", DEVICE, "--budget", "5ms", "--profiles", str(nas_env["root"]),
                   "--adapt", "5", *extra, "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.startswith("nas: error:")]
    assert rc == 2 and len(lines) == 1 and msg in lines[0], err
    assert "Traceback" not in err and not (tmp_path / "adapt.sqlite").exists() and not (tmp_path / "profiles").exists()


def test_step_ups_move_one_ordered_parameter_to_its_next_value():
    from optuna.distributions import CategoricalDistribution, IntDistribution

    from nas.polish import step_ups

    dists = {"resolution": CategoricalDistribution([224, 288, 352]), "width": CategoricalDistribution([0.5, 1.0, 0.75]),
             "depth": IntDistribution(1, 4), "even": IntDistribution(2, 8, step=2), "se": CategoricalDistribution([False, True]),
             "act": CategoricalDistribution(["relu", "silu"])}
    params = {"resolution": 288, "width": 0.75, "depth": 4, "even": 4, "se": False, "act": "relu"}
    ups = step_ups(params, dists)
    changed = [{k: v for k, v in u.items() if params[k] != v} for u in ups]
    assert changed == [{"resolution": 352}, {"width": 1.0}, {"even": 6}]  # depth is at its top; se, act unordered
    assert step_ups({**params, "resolution": 352, "width": 1.0, "even": 8}, dists) == []


def test_polish_steps_the_winner_up_within_the_budget(nas_env, tmp_path, capsys):
    """--polish N: at most N trials after --trials, each the winner one step up; the winner is
    still the best feasible trial, and every trial is in the reports."""
    out = tmp_path / "out"
    assert search(nas_env, out, *SMALL, "--polish", "6", "--study", "polish", trials=6, seed=3, budget="10s") == 0
    err = capsys.readouterr().err
    trials = load_study(out, "polish").trials
    polished = len(trials) - 6
    assert 1 <= polished <= 6 and f"polished the winner (trial " in err and f"with {polished} step-up trial" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_trials"] == len(trials)
    feasible = [t for t in trials if t.state.name == "COMPLETE" and t.user_attrs.get("feasible")]
    assert summary["best"]["trial"] == max(feasible, key=lambda t: (t.values[0], -t.user_attrs["latency_ms"],
                                                                    -t.number)).number
    first_best = max((t for t in feasible if t.number < 6), key=lambda t: t.values[0])
    for t in trials[6:7]:  # the first step: the first winner with one parameter one step up
        diff = {k for k in t.params if t.params[k] != first_best.params.get(k)}
        assert len(diff) == 1, diff


def _network_rounds_and_rows(db: Path) -> tuple[int, int]:
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return (con.execute("SELECT COUNT(*) FROM network_rounds").fetchone()[0],
                con.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])
    finally:
        con.close()


def test_adapt_then_search_with_the_adapted_profile_and_resume(nas_env, tmp_path, capsys, monkeypatch):
    """--adapt MINUTES end to end: a budget too small for the layers is one line naming --adapt
    (what was measured is kept); with enough, the profile is written to OUT/profiles and the
    search's estimates come from it; the same command again resumes and measures nothing twice.
    The calibration networks are MIN_NETWORKS tiny samples of the searched space (the defaults'
    45 full-size ones take minutes)."""
    import bench.adapt
    import bench.calibrate
    from estimator.calibration import MIN_NETWORKS
    from estimator.inprocess import load_device

    monkeypatch.setattr(bench.calibrate, "DEFAULT_SPACES", "mobilenet")
    monkeypatch.setattr(bench.adapt, "DEFAULT_NETWORKS", MIN_NETWORKS)
    monkeypatch.setattr(bench.adapt, "DEFAULT_RUNS", 3)
    monkeypatch.setattr(bench.adapt, "DEFAULT_WARMUP", 1)
    monkeypatch.setattr(bench.adapt, "DEFAULT_SAMPLES", 2)

    def adapt_search(out: Path, minutes: str) -> tuple[int, str]:
        rc = search(nas_env, out, "--space", "mobilenet", "--space-option", "resolutions=[64]", "--space-option",
                    "max_depth=1", "--space-option", "widths=[0.5]", "--adapt", minutes, budget="1e9s", trials=2)
        return rc, capsys.readouterr().err

    small = tmp_path / "small"
    rc, err = adapt_search(small, "0.05")
    if "route profile" in err:  # the evidence decides the route; only an own layer profile needs the minutes
        lines = [l for l in err.splitlines() if l.startswith("nas: error:")]
        assert rc == 2 and len(lines) == 1 and "--adapt 0.05 leaves" in lines[0] and "run the same command with --adapt" \
            in lines[0] and "--minutes" not in lines[0] and "--networks" not in lines[0], err
        assert not (small / "profiles").exists()
    out = tmp_path / "out"
    rc, err = adapt_search(out, "5")
    assert rc == 0, err[-3000:]
    assert f"nas: wrote profile {DEVICE} ({out / 'profiles' / DEVICE})" in err
    with (out / "profiles" / DEVICE / "networks.csv").open(newline="") as f:
        assert len(list(csv.DictReader(f))) == MIN_NETWORKS
    adapted = load_device(DEVICE, out / "profiles", cache_root=nas_env["cache"]).model_version
    assert adapted != load_device(DEVICE, nas_env["root"], cache_root=nas_env["cache"]).model_version
    trials = load_study(out, f"{DEVICE}-mobilenet").trials
    assert trials and all(t.user_attrs["estimate"]["model_version"] == adapted for t in trials)
    before = _network_rounds_and_rows(out / "adapt.sqlite")
    rc, err = adapt_search(out, "5")
    assert rc == 0, err[-3000:]
    assert "nas: resuming:" in err and _network_rounds_and_rows(out / "adapt.sqlite") == before


def test_objective_that_raises_fails_only_its_trial(nas_env, tmp_path, capsys):
    out = tmp_path / "out"
    rc = search(nas_env, out, "--space", "tests.test_nas:kernel_space", "--objective",
                "tests.test_nas:flaky_objective", "--study", "flaky", trials=4)
    captured = capsys.readouterr()
    assert rc == 0
    states = {t.number: t.state.name for t in load_study(out, "flaky").trials}
    assert states == {0: "COMPLETE", 1: "FAIL", 2: "COMPLETE", 3: "FAIL"}
    failed = [t for t in load_study(out, "flaky").trials if t.state.name == "FAIL"]
    for t in failed:
        assert t.user_attrs["fail_reason"] == (f"objective tests.test_nas:flaky_objective raised ValueError: "
                                               f"boom in trial {t.number}")
        assert "estimate" in t.user_attrs  # the latency was estimated before the objective ran
    assert "trial 1 failed: objective tests.test_nas:flaky_objective raised ValueError" in captured.err
    assert "Traceback" not in captured.err
    assert json.loads((out / "summary.json").read_text())["n_failed"] == 2


def test_local_workers_share_one_study(nas_env, tmp_path, capsys):
    """--workers 2: two processes on the study in OUT/nas.db, the trials split between them,
    one set of reports on the whole study (the mechanism of several machines on one storage)."""
    out = tmp_path / "out"
    assert search(nas_env, out, *SMALL, "--workers", "2", "--study", "w2", trials=5, seed=1) == 0
    captured = capsys.readouterr()
    trials = load_study(out, "w2").trials
    assert len(trials) == 5 and all(t.state.name == "COMPLETE" for t in trials)
    workers = {t.user_attrs["worker"] for t in trials}
    assert len(workers) == 2
    assert sorted(sum(t.user_attrs["worker"] == w for t in trials) for w in workers) == [2, 3]
    assert json.loads((out / "summary.json").read_text())["n_trials"] == 5
    assert "2 local workers ran 5 trials" in captured.out
    assert "2 local workers on study 'w2'" in captured.err
    assert search(nas_env, out, "--workers", "3", trials=2) == 2
    assert "--workers 3 is more than --trials 2" in capsys.readouterr().err


def test_objective_that_always_raises_stops_with_patience(nas_env, tmp_path, capsys):
    rc = search(nas_env, tmp_path / "out", "--space", "tests.test_nas:kernel_space", "--objective",
                "tests.test_nas:broken_objective", "--patience", "3", trials=10)
    err = capsys.readouterr().err
    assert rc == 2
    assert "the last 3 trials all failed; last error: objective tests.test_nas:broken_objective raised " \
           "RuntimeError: training diverged" in err
    assert len(load_study(tmp_path / "out", f"{DEVICE}-kernel_space").trials) == 3


def test_infeasible_budget_stops_with_advice(nas_env, tmp_path, capsys):
    rc = search(nas_env, tmp_path / "out", "--space", "tests.test_nas:kernel_space", "--patience", "3",
                trials=10, budget="1us")
    err = capsys.readouterr().err
    assert rc == 2
    assert "the last 3 candidates were all infeasible" in err
    assert "Raise the budget" in err and "resolution" in err
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["n_rejected_by_budget"] == 3 and s["best"] is None


def test_bad_space_and_objective_names(nas_env, tmp_path, capsys):
    assert nas_main(["search", "--device", DEVICE, "--budget", "5ms", "--space", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown search space 'nope'; built-in: hybrid, mobilenet, resnet, scaled" in capsys.readouterr().err
    assert nas_main(["search", "--device", DEVICE, "--budget", "5ms", "--objective", "no.such.module:f",
                     "--out", str(tmp_path)]) == 2
    assert "cannot import module 'no.such.module'" in capsys.readouterr().err
    assert nas_main(["search", "--device", DEVICE, "--budget", "5ms", "--space-option", "colour=3",
                     "--out", str(tmp_path)]) == 2
    assert "does not take option(s) colour" in capsys.readouterr().err


def test_remote_service_with_token(nas_env, tmp_path, capsys):
    from service.server import EmbeddedServer

    with EmbeddedServer(nas_env["root"], token="s3cret") as srv:
        common = ["--device", DEVICE, "--budget", "10s", "--service", srv.address, "--space",
                  "tests.test_nas:kernel_space", "--no-progress", "--trials", "2", "--seed", "0"]
        assert nas_main(["search", *common, "--token", "s3cret", "--out", str(tmp_path / "a")]) == 0
        assert "best feasible: trial" in capsys.readouterr().out
        assert nas_main(["search", *common, "--token", "wrong", "--out", str(tmp_path / "b")]) == 2
        err = capsys.readouterr().err
        assert "refused ListDevices: UNAUTHENTICATED" in err
