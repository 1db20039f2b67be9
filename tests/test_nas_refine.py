"""``nas search --refine`` end to end on the small real profile of :mod:`tests.test_nas`
(measured here with onnxruntime): refine steps measure real layer rows with smart padding,
write ``DEVICE-refined`` under ``OUT/profiles`` with provenance saying so, the in-process
service reloads it, and every trial records the profile and model version that estimated
it; bad input is one line."""
from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from nas.cli import main as nas_main
from tests.test_nas import DEVICE, SMALL, build_env, load_study

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def nas_env(tmp_path_factory):
    return build_env(tmp_path_factory.getbasetemp() / "nas-env")


@pytest.fixture(autouse=True)
def _cache_env(nas_env, monkeypatch):
    monkeypatch.setenv("CL_CACHE_DIR", str(nas_env["cache"]))


def _search(env, out, *extra: str, trials: int = 11) -> int:
    return nas_main(["search", "--device", DEVICE, "--budget", "10s", "--trials", str(trials), "--seed", "0",
                     "--profiles", str(env["root"]), "--out", str(out), "--study", "r", "--no-progress", "--polish", "0", *SMALL,
                     *extra])


def test_refine_steps_add_rows_and_trials_record_the_model(nas_env, tmp_path, capsys):
    from estimator.profile import load_profile

    out = tmp_path / "out"
    # a step stops once its targets are measured; 0.1 device minutes measured nothing on a loaded core
    assert _search(nas_env, out, "--refine", "0.5", "--refine-every", "5") == 0
    cap = capsys.readouterr()
    # two steps (after trials 5 and 10; none after the last), each a line on stderr
    steps = [l for l in cap.err.splitlines() if l.startswith("nas: refine step") and "measured" in l]
    assert len(steps) == 2, cap.err
    assert all("device min" in l and "uncalibrated CM_O width / estimate" in l for l in steps)

    # real rows in the refine database, and in the refined profile with provenance saying so
    con = sqlite3.connect(str(out / "refine.sqlite"))
    try:
        n_db = con.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
    finally:
        con.close()
    assert n_db >= 1
    base = load_profile(DEVICE, nas_env["root"])
    ref = load_profile(f"{DEVICE}-refined", out / "profiles")
    assert ref.refined["base"] == DEVICE and ref.refined["configurations"] == n_db
    assert sum(1 for _ in ref.rows()) == sum(1 for _ in base.rows()) + n_db
    search = ref.refined["search"]
    assert search["study"] == "r" and [s["step"] for s in search["steps"]] == [1, 2]
    assert search["steps"][-1]["rows"] == n_db and search["device_seconds"] > 0
    assert "nas search --refine 0.5" in ref.description
    assert not (nas_env["root"] / f"{DEVICE}-refined").exists()  # the --profiles directory is not written

    # every trial says which model estimated it; the version changes at each step
    study = load_study(out, "r")
    trials = sorted((t for t in study.trials if t.state.name == "COMPLETE"), key=lambda t: t.number)
    assert len(trials) == 11
    for t in trials:
        m = t.user_attrs["model"]
        assert m["model_version"] == t.user_attrs["estimate"]["model_version"]
    first = {t.user_attrs["model"]["model_version"] for t in trials[:5]}
    second = {t.user_attrs["model"]["model_version"] for t in trials[5:10]}
    assert {t.user_attrs["model"]["profile"] for t in trials[:5]} == {DEVICE}
    assert {t.user_attrs["model"]["profile"] for t in trials[5:]} == {f"{DEVICE}-refined"}
    assert len(first) == 1 and len(second) == 1 and first != second
    assert trials[10].user_attrs["model"]["refine_step"] == 2
    assert trials[10].user_attrs["model"]["model_version"] not in first | second

    # the study and the report say what ran
    hist = study.user_attrs["refine"]
    assert [h["step"] for h in hist] == [1, 2] and hist[-1]["rows"] == n_db
    assert hist[0]["model_version_before"] in first and hist[0]["model_version"] in second
    doc = json.loads((out / "summary.json").read_text())
    assert doc["refine"]["steps"] == 2 and doc["refine"]["rows"] == n_db
    assert doc["refine"]["device_minutes"] > 0  # (the budget is checked before each measurement, so a
    # loaded machine overruns it by one measurement: no wall-clock bound here)
    assert "refine" not in doc["settings"]
    assert "refinement (--refine): 2 step(s)" in cap.out


def _tensorrt_profile(env, tmp_path):
    """The small profile under another name whose runner (TensorRT) is not installed here."""
    from estimator.profile import load_profile, write_profile_json

    root = tmp_path / "profiles"
    meta = load_profile(DEVICE, env["root"]).to_dict()
    meta["name"] = "trt"
    meta["runner"] = "tensorrt"
    write_profile_json(root / "trt", meta)
    shutil.copyfile(env["root"] / DEVICE / "measurements.csv", root / "trt" / "measurements.csv")
    return root


@pytest.mark.parametrize("extra,msg", [
    (["--refine", "0"], "--refine MINUTES must be > 0"),
    (["--refine", "-1"], "--refine MINUTES must be > 0"),
    (["--refine", "1", "--refine-every", "11"], "no refine step would run"),
    (["--refine", "1", "--refine-every", "0"], "--refine-every must be >= 1"),
    (["--refine", "1", "--service", "127.0.0.1:1"], "against --service, refine with `bench refine`"),
    (["--refine", "1", "--workers", "2"], "it runs with one worker"),
])
def test_bad_refine_is_one_line(nas_env, tmp_path, capsys, extra, msg):
    assert _search(nas_env, tmp_path / "out", *extra) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out" / "profiles").exists()


def test_refine_refuses_a_runner_that_cannot_run_here(nas_env, tmp_path, capsys):
    try:
        import tensorrt  # noqa: F401
        pytest.skip("TensorRT is installed here")
    except ImportError:
        pass
    root = _tensorrt_profile(nas_env, tmp_path)
    rc = nas_main(["search", "--device", "trt", "--budget", "10s", "--trials", "10", "--profiles", str(root),
                   "--out", str(tmp_path / "out"), "--refine", "1", "--refine-every", "5", "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "--refine measures trt here with its runner, which cannot run on this machine" in err, err
    assert "tensorrt" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out" / "profiles").exists()
