"""``bench adapt``: end to end on ONNX Runtime with the small real profile measured here and
tiny budgets, each route forced (``calibrate``: BASE's layer rows calibrated here; ``profile``:
an own layer profile, measured by a run killed with SIGKILL among the layers and resumed),
the route chosen from the evidence (``auto``) and :func:`bench.adapt.decide` on constructed
reports, and bad input: one line, nothing written."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.adapt import CARRY_ERROR, decide, setting_differences, state_path
from estimator.calibration import MIN_NETWORKS

from .crash import count_rows, run_and_kill
from .service_support import DEVICE, TRAINING, profile_set
from .source_metadata import with_entry_points
from .test_calibration import SPACE_ARGS, _estimator

NEW = "here"  # the profile written, the same name in each root (so that a copied database is resumed)
ROUNDS = 2
_AT = SPACE_ARGS.index("--rounds")
#: MIN_NETWORKS tiny mobilenet samples in two interleaved rounds (instead of SPACE_ARGS' one)
NETWORK_ARGS = [*SPACE_ARGS[:_AT], *SPACE_ARGS[_AT + 2:], "--networks", str(MIN_NETWORKS), "--rounds", str(ROUNDS),
                "--minutes", "10"]
LAYERS = "conv2d,dwconv2d,add,fc,globalpool,activation"
KILL_AT = 6  # layer rows in the database when the profile route is killed


def _adapt(argv: list[str]) -> tuple[int, str, str]:
    """``bench adapt ARGV`` in this process: (rc, stdout, stderr)."""
    from bench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["adapt", *argv])
    return rc, out.getvalue(), err.getvalue()


def _root_with_base(ps, where: Path) -> Path:
    root = where / "profiles"
    shutil.copytree(ps.root / DEVICE, root / DEVICE)
    return root


def _snapshot(db: Path) -> dict[str, dict]:
    """The layer rows and network rounds of ``db`` by key, read-only."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return {"layers": {(e, k): m for e, k, m in con.execute(
                    "SELECT env_id, config_key, padded_median_ms FROM measurements")},
                "rounds": {(e, n, r): m for e, n, r, m in con.execute(
                    "SELECT env_id, name, round, median_ms FROM network_rounds")}}
    finally:
        con.close()


def _rounds_per_network(db: Path) -> dict[str, int]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return dict(con.execute("SELECT name, COUNT(*) FROM network_rounds GROUP BY name").fetchall())
    finally:
        con.close()


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """``bench adapt --route calibrate`` in this process: the tiny profile's layer rows,
    calibrated on MIN_NETWORKS tiny networks timed here (one round before, one after)."""
    ps = profile_set(tmp_path_factory)
    base = tmp_path_factory.mktemp("adapt")
    training = base / "training.json"
    training.write_text(json.dumps(TRAINING))
    root = _root_with_base(ps, base / "calibrate")
    db = base / "calibrate" / "adapt.sqlite"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CL_CACHE_DIR", str(ps.cache))
        rc, out, err = _adapt(["--device", DEVICE, "--name", NEW, "--root", str(root), "--db", str(db),
                               "--route", "calibrate", *NETWORK_ARGS])
        assert rc == 0, err[-3000:]
        yield SimpleNamespace(ps=ps, base=base, training=training, root=root, db=db, out=out, err=err)


def _profile_cmd(root: Path, db: Path, training: Path) -> list[str]:
    return [sys.executable, "-m", "bench.cli", "adapt", "--device", DEVICE, "--name", NEW, "--root", str(root),
            "--db", str(db), "--route", "profile", *NETWORK_ARGS, "--layers", LAYERS, "--samples", "3",
            "--max-ops", "2e7", "--training", str(training)]


@pytest.fixture(scope="module")
def profiled(calibrated):
    """``bench adapt --route profile`` as a subprocess, SIGKILLed while it measures layers
    (KILL_AT rows in the database and the layer phase in the state file), then run again."""
    c = calibrated
    where = c.base / "profile"
    root = _root_with_base(c.ps, where)
    db = where / "adapt.sqlite"
    cmd = _profile_cmd(root, db, c.training)
    env = with_entry_points(dict(os.environ, CL_CACHE_DIR=str(c.ps.cache)), where)
    state = state_path(db)

    def measuring_layers() -> bool:
        if count_rows(db, "measurements") < KILL_AT:
            return False
        try:
            return "layers" in json.loads(state.read_text())["phases"]
        except (OSError, ValueError, KeyError):
            return False

    run_and_kill(cmd, measuring_layers, env=env, timeout=240)
    killed = {"snapshot": _snapshot(db), "state": json.loads(state.read_text()),
              "profile_exists": (root / NEW).exists(), "root": sorted(p.name for p in root.iterdir())}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return SimpleNamespace(root=root, db=db, killed=killed, out=done.stdout, err=done.stderr,
                           state=json.loads(state.read_text()), cache=c.ps.cache)


# ------------------------------------------------------------------------ route calibrate


def test_route_calibrate_writes_base_layer_rows_calibrated_here(calibrated):
    from estimator.profile import load_profile

    c = calibrated
    prof, base = load_profile(NEW, c.root), load_profile(DEVICE, c.root)
    assert prof.measurements_path.read_bytes() == base.measurements_path.read_bytes()  # BASE's layer rows
    cal = prof.calibration
    assert cal["kind"] == "measured" and cal["runner"] == "onnxruntime" and cal["base"] == DEVICE
    assert "bench adapt" in cal["source"]
    rows = prof.network_rows()
    assert len(rows) == MIN_NETWORKS and all(r["rounds"] == ROUNDS and r["runs"] == 3 for r in rows)
    # the first round before the decision, the second after: one set of rounds in the database
    assert _rounds_per_network(c.db) == {r["name"]: ROUNDS for r in rows}
    assert count_rows(c.db, "measurements") == 0  # no layer measured on this route
    state = json.loads(state_path(c.db).read_text())
    assert state["route"] == "calibrate" and state["phases"]["done"]["route"] == "calibrate"
    # the output: the route and why, BASE's figures here, NEW's
    assert "route: calibrate: --route calibrate" in c.out
    assert f"before: {DEVICE} here: measured / predicted" in c.out and "calibrated on them" in c.out
    assert f"after: {NEW} calibrated on {MIN_NETWORKS} networks ({ROUNDS} rounds)" in c.out
    assert f"wrote profile {NEW}" in c.out and "own layer profile" not in c.out
    assert "[2/4] route calibrate: --route calibrate" in c.err and "[3/4]" not in c.err
    assert "rounds 2-2" in c.err
    assert "resuming" not in c.err  # the second round after the first is the plan, not a resume


# -------------------------------------------------------------------------- route profile


def test_route_profile_writes_the_rows_measured_here(profiled):
    from estimator.profile import load_profile

    p = profiled
    prof, base = load_profile(NEW, p.root), load_profile(DEVICE, p.root)
    assert prof.measurements_path.read_bytes() != base.measurements_path.read_bytes()
    layers = p.state["phases"]["layers"]
    assert len(_csv_rows(prof.measurements_path)) == layers["rows"] == count_rows(p.db, "measurements") > KILL_AT
    meta = json.loads((prof.path / "profile.json").read_text())
    assert "bench adapt" in meta["provenance"]["source"] and f"--name {NEW}" in meta["provenance"]["source"]
    assert prof.runner == "onnxruntime" and prof.calibration["kind"] == "measured"
    rows = prof.network_rows()
    assert len(rows) == MIN_NETWORKS and all(r["rounds"] == ROUNDS for r in rows)
    assert "route: profile: --route profile" in p.out
    assert f"before: {DEVICE} here: measured / predicted" in p.out
    assert f"own layer profile: {layers['rows']} rows" in p.out
    assert f"after: {NEW} calibrated on {MIN_NETWORKS} networks ({ROUNDS} rounds)" in p.out


def test_sigkill_among_the_layers_then_resume_loses_and_repeats_nothing(profiled):
    p, k = profiled, profiled.killed
    # the killed run: layer rows and the first round committed, its time in the state, no profile
    assert len(k["snapshot"]["layers"]) >= KILL_AT and not k["profile_exists"]
    assert not [n for n in k["root"] if n != DEVICE]  # no staging folder either
    assert k["state"]["route"] == "profile" and k["state"]["spent_s"] > 0
    first = k["state"]["spent_s"]
    assert first >= k["state"]["phases"]["networks_first"]["seconds"]
    # the resumed run says so, continues the budget and measures only what is missing
    assert "resuming:" in p.err and "spent by earlier runs; route profile" in p.err
    assert f"({len(k['snapshot']['layers'])} from earlier runs, 0 failed)" in p.err
    assert p.state["spent_s"] > first and p.state["phases"]["done"]["route"] == "profile"
    after = _snapshot(p.db)
    assert all(after["layers"][key] == v for key, v in k["snapshot"]["layers"].items())  # not lost, not re-measured
    assert all(after["rounds"][key] == v for key, v in k["snapshot"]["rounds"].items())
    con = sqlite3.connect(f"file:{p.db}?mode=ro", uri=True)
    try:
        n, distinct = con.execute("SELECT COUNT(*), COUNT(DISTINCT config_key) FROM measurements").fetchone()
        assert n == distinct == len(after["layers"])  # every configuration once
        assert con.execute("SELECT COUNT(DISTINCT env_id) FROM measurements").fetchone()[0] == 1
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()
    per = _rounds_per_network(p.db)
    assert len(per) == MIN_NETWORKS and set(per.values()) == {ROUNDS}
    # the profile, whole: every row of the database, every network, nothing left beside it
    from estimator.profile import load_profile

    prof = load_profile(NEW, p.root)
    assert len(_csv_rows(prof.measurements_path)) == len(after["layers"])
    assert len(prof.network_rows()) == MIN_NETWORKS
    assert sorted(x.name for x in p.root.iterdir()) == sorted([DEVICE, NEW])


def test_sigkill_among_the_first_network_rounds_keeps_their_time_in_the_budget(calibrated):
    """A run killed while it times the networks, before any layer: the time it spent counts
    in the budget of the run that resumes it, and no round is measured twice."""
    c = calibrated
    where = c.base / "killed-networks"
    root = _root_with_base(c.ps, where)
    db = where / "adapt.sqlite"
    cmd = [sys.executable, "-m", "bench.cli", "adapt", "--device", DEVICE, "--name", NEW, "--root", str(root),
           "--db", str(db), "--route", "calibrate", *NETWORK_ARGS]
    env = with_entry_points(dict(os.environ, CL_CACHE_DIR=str(c.ps.cache)), where)
    state = state_path(db)
    run_and_kill(cmd, lambda: count_rows(db, "network_rounds") >= MIN_NETWORKS // 2 and state.exists(), env=env,
                 timeout=240)
    killed = json.loads(state.read_text())
    rounds = _snapshot(db)["rounds"]
    assert killed["spent_s"] > 0 and "networks_first" not in killed["phases"] and len(rounds) < MIN_NETWORKS * ROUNDS
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming: {killed['spent_s']:.0f} s of the 10-minute budget spent by earlier runs" in done.stderr
    assert json.loads(state.read_text())["spent_s"] > killed["spent_s"]
    after = _snapshot(db)["rounds"]
    assert all(after[key] == v for key, v in rounds.items())  # kept, not measured again
    assert set(_rounds_per_network(db).values()) == {ROUNDS}


@pytest.mark.parametrize("route", ["calibrate", "profile"])
def test_estimator_predict_with_the_new_profile_is_calibrated(calibrated, profiled, route, capsys, monkeypatch):
    monkeypatch.setenv("CL_CACHE_DIR", str(calibrated.ps.cache))
    root = calibrated.root if route == "calibrate" else profiled.root
    assert _estimator(["predict", "zoo:mobilenet_v2@64", "--device", NEW, "--profiles", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["calibration"]["applied"] and doc["calibration"]["n_networks"] == MIN_NETWORKS
    assert doc["total_ms"] > 0 and doc["uncalibrated"]["total_ms"] > 0


# ----------------------------------------------------------------------------- route auto


def test_route_auto_takes_the_route_decide_gives(calibrated, profiled, tmp_path, monkeypatch):
    """On a copy of the profile route's database (its networks and layers are resumed, not
    measured again), the evidence decides; the route and reason printed are decide's."""
    import bench.adapt

    monkeypatch.setenv("CL_CACHE_DIR", str(calibrated.ps.cache))
    root = _root_with_base(calibrated.ps, tmp_path)
    db = tmp_path / "adapt.sqlite"
    shutil.copyfile(profiled.db, db)  # the database, not its state file
    decided = []

    def spy(*args):
        decided.append(decide(*args))
        return decided[-1]

    monkeypatch.setattr(bench.adapt, "decide", spy)
    rc, out, err = _adapt(["--device", DEVICE, "--name", NEW, "--root", str(root), "--db", str(db), *NETWORK_ARGS,
                           "--layers", LAYERS, "--samples", "3", "--max-ops", "2e7", "--training",
                           str(calibrated.training)])
    assert rc == 0, err[-3000:]
    assert len(decided) == 1
    route, why = decided[0]
    assert route in ("calibrate", "profile") and why
    assert f"route: {route}: {why}" in out and f"[2/4] route {route}: {why}" in err
    assert json.loads(state_path(db).read_text())["route"] == route
    assert _rounds_per_network(db) == _rounds_per_network(profiled.db)  # nothing timed twice


def _report(err: float, *, warning: str | None = None, families: dict | None = None) -> dict:
    r = {"method": "scale", "cv_mean_abs_error_pct": {"scale": err, "none": 30.0}, "validation": "leave-family-out",
         "uncalibrated_mean_abs_error_pct": 30.0, "families": families or {}}
    if warning:
        r["warning"] = warning
    return r


def test_decide_on_constructed_reports():
    base = SimpleNamespace(name="b", runner="onnxruntime", precision="fp32", threads=1)
    good = _report(100 * CARRY_ERROR / 2)
    # another runner setting: the layer rows describe another runtime, whatever the report
    for setting in (setting_differences(base, "onnxruntime", {"threads": 2}, "fp32"), setting_differences(base, "litert", {}, "fp32"),
                    setting_differences(base, "onnxruntime", {"threads": 1}, "fp16")):
        assert len(setting) == 1
        route, why = decide(base, good, setting)
        assert route == "profile" and "another setting" in why and setting[0] in why
    assert "2 thread(s) here, 1 in b" in setting_differences(base, "onnxruntime", {"threads": 2}, "fp32")[0]
    assert setting_differences(base, "onnxruntime", {"threads": 1}, "fp32") == []
    assert decide(base, None, [])[0] == "profile"
    # a small leave-family-out error, families that agree: calibrate
    route, why = decide(base, good, [])
    assert route == "calibrate" and "3.0 %" in why and "uncalibrated 30.0 %" in why
    assert decide(base, _report(100 * CARRY_ERROR), [])[0] == "calibrate"  # the bound itself carries
    # a large one: profile
    route, why = decide(base, _report(100 * CARRY_ERROR + 0.5), [])
    assert route == "profile" and f"{100 * CARRY_ERROR + 0.5:.1f} %" in why and "more than 6 %" in why
    # families that disagree: profile, even with a small error
    fams = {"space:mobilenet": {"shift": 0.2}, "space:resnet": {"shift": -0.25}}
    route, why = decide(base, _report(2.0, warning="the families disagree", families=fams), [])
    assert route == "profile" and "space:mobilenet +22 %" in why and "space:resnet -22 %" in why
    # another processor: profile, even with a small error and families that agree
    route, why = decide(base, good, [], ["CPU Intel(R) Xeon(R) Processor there, AMD EPYC here"])
    assert route == "profile" and "another processor" in why and "AMD EPYC here" in why


def test_bench_calibrate_warns_where_the_evidence_says_a_base_does_not_carry():
    """``bench calibrate``'s warning (:func:`bench.adapt.does_not_carry`): a base measured on
    another processor does not carry, however good its calibration looks; one measured here,
    an uncalibrated report and a cost model's networks give no such warning."""
    import copy

    from bench.adapt import does_not_carry
    from estimator import fingerprint as fp

    here = fp.fingerprint("onnxruntime", 1)
    there = copy.deepcopy(here)
    there["host"]["cpu_model"] = "Another CPU"

    def base(fingerprint):
        return SimpleNamespace(name="b", runner="onnxruntime", precision="fp32", threads=1,
                               recorded_fingerprint=lambda: fingerprint)

    m = SimpleNamespace(kind="measured", runner="onnxruntime", options={"threads": 1}, precision="fp32")
    why = does_not_carry(base(there), _report(100 * CARRY_ERROR / 2), m)
    assert "another processor" in why and "Another CPU there" in why
    assert does_not_carry(base(here), _report(100 * CARRY_ERROR + 5), m) == ""  # its own machine: the layer model's error
    assert does_not_carry(base(there), None, m) == ""
    assert does_not_carry(base(there), _report(1.0), SimpleNamespace(**{**m.__dict__, "kind": "estimated"})) == ""
    two = SimpleNamespace(**{**m.__dict__, "options": {"threads": 2}})  # another setting on this processor
    assert "another setting" in does_not_carry(base(here), _report(1.0), two)


def test_cpu_differences_are_the_processor_not_the_kernel_cores_or_runtime():
    """Another CPU model, flag set or cache size is another processor; another kernel, core
    count, runtime version or VM of the same kind is not; a board or a cost model compares none."""
    from estimator.fingerprint import cpu_differences

    host = {"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_count": 2, "machine": "x86_64", "os": "Linux 6.18 a",
            "cpu_flags": ["avx2", "avx512f", "amx_tile"], "caches": {"L2": "2048K", "L3": "307200K"},
            "machine_id": "aaa"}
    rec = {"host": host, "runtime": {"runner": "onnxruntime", "versions": {"onnxruntime": "1.31.0"}}}

    def here(**kw):
        return {"host": {**host, **kw}, "runtime": {"runner": "onnxruntime", "versions": {"onnxruntime": "1.32.0"}}}

    assert cpu_differences(rec, here(os="Linux 6.18 b", cpu_count=4, machine_id="bbb"), "onnxruntime") == []
    assert cpu_differences(rec, here(cpu_model="AMD EPYC"), "onnxruntime") == [
        "CPU Intel(R) Xeon(R) Processor there, AMD EPYC here"]
    assert "CPU flags differ" in cpu_differences(rec, here(cpu_flags=["avx2", "avx512f"]), "litert")[0]
    assert cpu_differences(rec, here(caches={"L2": "1024K", "L3": "307200K"}), "onnxruntime") == [
        "L2 cache 2048K there, 1024K here"]
    assert cpu_differences(rec, here(cpu_model="AMD EPYC"), "vela") == []
    assert cpu_differences(rec, here(cpu_model="AMD EPYC"), "agent") == []


def test_a_budget_that_leaves_no_layer_time_says_how_to_give_more(calibrated, tmp_path, monkeypatch):
    """Route profile with nothing of the budget left for layers (the reserve for fitting made
    larger than it): one error saying how many minutes would do (a resume may raise --minutes);
    no layer measured, no profile."""
    import bench.adapt

    monkeypatch.setenv("CL_CACHE_DIR", str(calibrated.ps.cache))
    monkeypatch.setattr(bench.adapt, "FIT_RESERVE_S", 3600.0)
    root = _root_with_base(calibrated.ps, tmp_path)
    db = tmp_path / "adapt.sqlite"
    shutil.copyfile(calibrated.db, db)  # its networks are resumed, not timed again; three are enough to fail
    rc, out, err = _adapt(["--device", DEVICE, "--name", NEW, "--root", str(root), "--db", str(db), "--route",
                           "profile", *NETWORK_ARGS, "--networks", "3", "--layers", LAYERS, "--samples", "3",
                           "--max-ops", "2e7"])
    last = err.strip().splitlines()[-1]
    assert rc == 2 and "--minutes 10 leaves 0 s for the layer profile" in last, err
    assert "run the same command with --minutes" in last and "Traceback" not in err and not out
    assert count_rows(db, "measurements") == 0 and sorted(p.name for p in root.iterdir()) == [DEVICE]


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("case", ["unknown base", "tensorrt", "agent", "name in use", "other rounds"])
def test_bad_input_is_one_line_and_writes_nothing(calibrated, tmp_path, case, monkeypatch):
    c = calibrated
    monkeypatch.setenv("CL_CACHE_DIR", str(c.ps.cache))
    name, db, extra, msg = "other", tmp_path / "adapt.sqlite", [], ""
    device = DEVICE
    if case == "unknown base":
        device, msg = "nope", "nope"
    elif case == "tensorrt":
        extra, msg = ["--runner", "tensorrt"], "runner 'tensorrt'"
    elif case == "agent":
        extra, msg = ["--runner", "agent"], "runner 'agent'"
    elif case == "name in use":
        name, msg = NEW, "give --replace"
    else:  # the calibrate route's database and state, resumed with other rounds (a budget may change)
        name, db, extra, msg = NEW, c.db, ["--replace", "--rounds", "6"], str(state_path(c.db))
    files = {p: p.read_bytes() for p in (c.root / NEW).iterdir() if p.is_file()}
    before_root = sorted(p.name for p in c.root.iterdir())
    before_db = _snapshot(c.db)
    before_state = state_path(c.db).read_bytes()
    rc, out, err = _adapt(["--device", device, "--name", name, "--root", str(c.root), "--db", str(db),
                           "--route", "calibrate", *NETWORK_ARGS, *extra])
    assert rc == 2 and msg in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench: error: ") and not out, err
    if case == "other rounds":
        assert "rounds" in err
    else:
        assert not db.exists() and not state_path(db).exists()  # stopped before anything was measured
    assert sorted(p.name for p in c.root.iterdir()) == before_root  # no profile, no staging folder
    assert {p: p.read_bytes() for p in (c.root / NEW).iterdir() if p.is_file()} == files
    assert _snapshot(c.db) == before_db and state_path(c.db).read_bytes() == before_state


def test_the_own_profiles_plan_gives_each_type_rows_by_its_time_share():
    """Any prefix of the reordered plan (where a budget cuts it) holds every type, each in
    proportion to half its time share plus half an even part; each type keeps its own order."""
    from bench.adapt import TIME_WEIGHT, by_time_share

    plan = [SimpleNamespace(layer_type=t, key=f"{t}{i}") for i in range(100) for t in ("conv2d", "add", "fc")]
    out = by_time_share(plan, {"conv2d": 0.8, "add": 0.2, "softmax": 0.5})  # softmax: not in the plan
    assert sorted(c.key for c in out) == sorted(c.key for c in plan)
    for t in ("conv2d", "add", "fc"):
        assert [c.key for c in out if c.layer_type == t] == [c.key for c in plan if c.layer_type == t]
    head = out[:60]
    want = {t: (1 - TIME_WEIGHT) / 3 + TIME_WEIGHT * s for t, s in (("conv2d", 0.8), ("add", 0.2), ("fc", 0.0))}
    for t, w in want.items():
        assert abs(sum(c.layer_type == t for c in head) - 60 * w) <= 1, (t, w)
