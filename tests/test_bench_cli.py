"""``bench run`` / ``bench show`` / ``bench export`` end to end, with real ONNX Runtime
timings on a small plan."""
from __future__ import annotations

import csv
import json
import math
import sqlite3

import numpy as np
import onnxruntime as ort
import pytest

from bench.cli import main
from bench.sampling import limits_for, make_plan
from estimator.dataset import COLUMNS, read_measurements

LAYERS = "conv2d,dwconv2d,add,concat,fc,mul"
N = 3


@pytest.fixture(scope="module")
def bench_db(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    rc = main(["run", "--device", "ci-host", "--runner", "onnxruntime", "--layers", LAYERS, "--samples", str(N),
               "--prior-samples", "1", "--warmup", "1", "--runs", "3", "--threads", "1", "--max-ops", "2e6",
               "--out", str(out),
               "--no-progress"])
    assert rc == 0
    return out / "ci-host.sqlite"


def test_run_measures_the_whole_plan_and_says_where_data_went(bench_db, capsys):
    plan = make_plan(LAYERS.split(","), N, prior_samples=1, seed=0, limits=limits_for("onnxruntime", max_ops=2e6))
    con = sqlite3.connect(bench_db)
    keys = [r[0] for r in con.execute("SELECT config_key FROM measurements")]
    assert sorted(keys) == sorted(c.key for c in plan) and len(keys) == 6 * (N + 1)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # a re-run with the same arguments measures nothing
    rc = main(["run", "--device", "ci-host", "--layers", LAYERS, "--samples", str(N), "--prior-samples", "1",
               "--warmup", "1", "--runs", "3", "--threads", "1", "--max-ops", "2e6", "--out", str(bench_db.parent),
               "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0
    assert f"measured 0 configurations ({6 * (N + 1)} already present" in out and str(bench_db) in out
    assert con.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 6 * (N + 1)


def test_show_summarises_types_intervals_and_provenance(bench_db, capsys):
    assert main(["show", str(bench_db)]) == 0
    out = capsys.readouterr().out
    assert f"{6 * (N + 1)} measurements" in out
    for t in LAYERS.split(","):
        assert any(line.startswith(t + " ") for line in out.splitlines()), t
    assert "T_single/T_LUM" in out and "rel width" in out
    assert "runner onnxruntime (measured)" in out and f"onnxruntime {ort.__version__}" in out
    assert "device ci-host" in out


def test_export_csv_has_the_dataset_columns_and_traceable_provenance(bench_db, tmp_path, capsys):
    path = tmp_path / "ci.csv"
    assert main(["export", str(bench_db), "--csv", str(path)]) == 0
    with path.open() as f:
        assert tuple(next(csv.reader(f))) == COLUMNS
    rows = list(read_measurements(path))
    assert len(rows) == 6 * (N + 1)
    side = json.loads((tmp_path / "ci.csv.provenance.json").read_text())
    envs = {e["env_id"]: e for e in side["environments"]}
    for r in rows:
        assert r["runner"] == "onnxruntime" and r["n_runs"] == 3
        env = envs[int(r["env_id"])]  # every row traceable to its runner and versions
        assert env["runner"] == "onnxruntime" and env["provenance"] == "measured"
        assert env["versions"]["onnxruntime"] == ort.__version__ and env["precision"] == "fp32"
        assert env["threads"] == 1 and env["device"] == "ci-host" and env["created_at"]
        assert env["host"]["cpu_model"] and env["environment"]["execution_mode"] == "sequential"
        assert r["t_lum_lo_ms"] <= r["t_lum_ms"] <= r["t_lum_hi_ms"]
        assert r["t_lum_hi_ms"] - r["t_lum_lo_ms"] == pytest.approx(abs(r["t_b1_ms"] - r["t_b2_ms"]))
        assert r["t_lum_hi_ms"] == pytest.approx(r["t_padded_ms"] - min(r["t_b1_ms"], r["t_b2_ms"]))
        assert r["t_single_ms"] > 0 and r["padded_p10_ms"] <= r["t_padded_ms"] <= r["padded_p90_ms"]
        assert math.isfinite(r["ops"]) and r["ops"] > 0
    # bench show reads the exported CSV and its sidecar too
    capsys.readouterr()
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{6 * (N + 1)} measurements" in out and "runner onnxruntime (measured)" in out


def test_export_parquet(bench_db, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "ci.parquet"
    assert main(["export", str(bench_db), "--parquet", str(path)]) == 0
    t = pq.read_table(path)
    assert tuple(t.column_names) == COLUMNS and t.num_rows == 6 * (N + 1)
    assert set(t.column("runner").to_pylist()) == {"onnxruntime"}
    assert np.all(np.array(t.column("t_lum_lo_ms").to_pylist()) <= np.array(t.column("t_lum_hi_ms").to_pylist()))


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["run", "--device", "x", "--layers", "conv2d,pad"], "cannot benchmark pad"),
        (["run", "--device", "x", "--precision", "int8"], "fp32 only"),
        (["run", "--device", "bad/name"], "--device"),
        (["export", "nowhere.sqlite", "--csv", "x.csv"], "no such benchmark database"),
        (["show", "nowhere.csv"], "no such file"),
        (["run", "--device", "x", "--layers", ","], "--layers ',' names no layer type"),
        (["run", "--device", "x", "--layers", ""], "--layers '' names no layer type"),
        (["run", "--device", "x", "--runner", "agent", "--agent", "127.0.0.1:99999"], "a port in 1-65535"),
    ],
)
def test_bad_input_gives_one_line_errors(argv, msg, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert msg in err[-1] and err[-1].startswith("bench: error:")


def test_export_needs_a_target_and_show_rejects_non_datasets(bench_db, tmp_path, capsys):
    assert main(["export", str(bench_db)]) == 2
    junk = tmp_path / "junk.csv"
    junk.write_text("a,b\n1,2\n")
    assert main(["show", str(junk)]) == 2
    assert "missing columns" in capsys.readouterr().err


def test_another_tools_database_is_refused_untouched_and_paths_that_are_not_files_are_one_line(bench_db, tmp_path,
                                                                                              capsys):
    users = tmp_path / "users.db"
    con = sqlite3.connect(users)
    con.execute("CREATE TABLE users (name TEXT)")
    con.commit()
    con.close()
    before = users.read_bytes()
    assert main(["run", "--device", "x", "--layers", "add", "--samples", "1", "--out", str(users), "--no-progress"]) == 2
    assert "not a benchmark database (it holds tables users and no bench meta table)" in capsys.readouterr().err
    assert users.read_bytes() == before and not users.with_name("users.db-wal").exists()
    folder = tmp_path / "folder"
    folder.mkdir()
    for argv, msg in ((["show", str(folder)], "is a directory, not a benchmark database"),
                      (["export", str(bench_db), "--csv", str(folder)], "is a directory; give the file to write"),
                      (["run", "--device", "x", "--layers", "add", "--samples", "1", "--no-progress", "--out",
                        str(users) + "/x.sqlite"], "cannot create its directory")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("bench: error:") and msg in err[0], err


def test_a_failed_profile_replacement_keeps_the_old_profile(bench_db, tmp_path, capsys):
    from estimator.profile import load_profile

    root = tmp_path / "profiles"
    assert main(["profile", str(bench_db), "--name", "p", "--root", str(root), "--source", "pytest run"]) == 0
    bad = tmp_path / "training.json"
    bad.write_text('{"bogus_key": 1}')
    for extra in (["--source", ""], ["--source", "again", "--training", str(bad)]):
        capsys.readouterr()
        assert main(["profile", str(bench_db), "--name", "p", "--root", str(root), "--force", *extra]) == 2
        err = capsys.readouterr().err
        assert ".profile-" not in err  # (it names the profile, not its staging folder)
    assert load_profile("p", root=root).provenance.source == "pytest run"
    assert sorted(p.name for p in root.iterdir()) == ["p"]


def test_a_run_through_a_symlink_takes_the_same_lock(bench_db, tmp_path, capsys):
    import fcntl

    link = tmp_path / "link.sqlite"
    link.symlink_to(bench_db)
    with open(bench_db.with_name(bench_db.name + ".lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        rc = main(["run", "--device", "ci-host", "--layers", "add", "--samples", "1", "--out", str(link), "--no-progress"])
    assert rc == 2 and "in use by another bench run" in capsys.readouterr().err


def test_a_second_concurrent_run_on_the_same_database_is_refused(bench_db, capsys):
    import fcntl

    with open(bench_db.with_name(bench_db.name + ".lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running bench run holds it
        rc = main(["run", "--device", "ci-host", "--layers", "add", "--samples", "1", "--out", str(bench_db.parent),
                   "--no-progress"])
    assert rc == 2 and "in use by another bench run" in capsys.readouterr().err


def test_profile_registers_a_measured_onnxruntime_profile_with_ort_fusion_rules(bench_db, tmp_path, capsys):
    from estimator.profile import load_profile

    root = tmp_path / "profiles"
    rc = main(["profile", str(bench_db), "--name", "ci-host", "--root", str(root), "--source", "pytest run"])
    assert rc == 0, capsys.readouterr().err
    prof = load_profile("ci-host", root=root)
    assert prof.provenance.kind == "measured" and prof.runner == "onnxruntime"
    rules = prof.fusion_rules()
    assert rules.folds("conv2d", "relu6") and rules.folds("add", "relu")
    assert not rules.folds("conv2d", "silu") and not rules.folds("add", "relu6")
    # ONNX Runtime runs reshapes as views of their input: free nodes, not roofline guesses
    assert set(prof.free_ops) == {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}
    assert "onnxruntime" in prof.op_mapping["source"]
    assert sum(1 for _ in prof.rows()) == 6 * (N + 1)
    how = prof.provenance.measurement  # how the rows were timed, as bench run recorded it
    assert (how["runs"], how["warmup"], how["threads"], how["graph_optimization"]) == (3, 1, 1, "all")
    assert how["protocol"] == "smartpad-v1" and "perf_counter" in how["timer"]


def test_flush_cache_is_a_recorded_runner_setting(tmp_path, capsys):
    out = tmp_path / "cold"
    rc = main(["run", "--device", "cold-host", "--layers", "fc", "--samples", "2", "--prior-samples", "0",
               "--warmup", "1", "--runs", "2", "--flush-cache", "4", "--out", str(out), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    con = sqlite3.connect(out / "cold-host.sqlite")
    envs = [json.loads(r[0]) for r in con.execute("SELECT environment FROM environments")]
    assert [e.get("flush_cache_mb") for e in envs] == [4.0]  # cold and warm runs never share an environment
    rc = main(["run", "--device", "cold-host", "--layers", "fc", "--samples", "2", "--flush-cache", "-1",
               "--out", str(out), "--no-progress"])
    assert rc == 2 and "flush_cache_mb must be in [0, 4096]" in capsys.readouterr().err


def test_profile_adds_weight_bound_rows_measured_cold(tmp_path, capsys):
    """fc measured with a cache flush joins the warm rows as cold rows (feature cold=1); an
    environment that differs in more than the flush is refused, naming the difference."""
    db = tmp_path / "host.sqlite"
    common = ["--device", "host", "--samples", "2", "--prior-samples", "0", "--warmup", "1", "--runs", "2",
              "--out", str(db), "--no-progress"]
    assert main(["run", "--layers", "fc,add", *common]) == 0
    assert "--layers fc,conv2d --flush-cache 64, then bench profile" in capsys.readouterr().out  # the hint
    assert main(["run", "--layers", "fc", "--flush-cache", "4", *common]) == 0
    assert "--cold-from" not in capsys.readouterr().out
    assert main(["run", "--layers", "fc", "--threads", "2", *common]) == 0
    capsys.readouterr()
    con = sqlite3.connect(db)
    warm, cold, two = [r[0] for r in con.execute("SELECT env_id FROM environments ORDER BY env_id")]
    from estimator.layers import describe, weight_bound

    cold_fc = sorted(t for t, p in con.execute("SELECT t_lum_ms, params FROM measurements WHERE env_id=?", (cold,))
                     if weight_bound(describe("fc", json.loads(p))))
    assert cold_fc  # the broad space's fc rows are matrix-vector products: weights outweigh activations
    root = tmp_path / "profiles"
    rc = main(["profile", str(db), "--name", "mixed", "--root", str(root), "--source", "pytest", "--env-id", str(warm),
               "--cold-from", f"{cold}:fc"])
    out = capsys.readouterr().out
    n = len(cold_fc)
    assert rc == 0 and f"fc: {n} weight-bound rows measured cold (flush_cache_mb 4.0, environment {cold})" in out
    rows = list(read_measurements(root / "mixed" / "measurements.csv"))
    assert sorted(r["layer_type"] for r in rows) == ["add", "add", "fc", "fc"] + ["fc"] * n
    marked = [r for r in rows if r["params"].get("cold") == 1]
    assert sorted(float(r["t_lum_ms"]) for r in marked) == pytest.approx(cold_fc)
    assert {int(r["env_id"]) for r in marked} == {cold}
    meta = json.loads((root / "mixed" / "profile.json").read_text())
    assert meta["cold_rows"] == {"fc": {"env_id": cold, "rows": n, "flush_cache_mb": 4.0}}
    for argv, msg in [
        (["--cold-from", f"{two}:fc"], f"environment {two} differs from environment {warm} in "),  # threads, ...
        (["--cold-from", f"{cold}:add"], "add has no cold feature"),
        (["--cold-from", f"{cold}:conv2d"], f"environment {cold} holds no weight-bound conv2d rows"),
        (["--cold-from", "fc"], "use ENV:TYPE[,TYPE]"),
        (["--cold-from", "9:fc"], "has no environment 9"),
    ]:
        rc = main(["profile", str(db), "--name", "bad", "--root", str(root), "--source", "s", "--env-id", str(warm),
                   *argv])
        err = capsys.readouterr().err
        assert rc == 2 and msg in err, err
    rc = main(["profile", str(db), "--name", "bad", "--root", str(root), "--source", "s", "--env-id", str(cold),
               "--cold-from", f"{warm}:fc"])
    assert rc == 2 and "must be measured with a cache flush" in capsys.readouterr().err
    assert not (root / "bad").exists()


def _net(path, *, unbenched: bool, size: int = 12) -> None:
    """conv 3x3 (4 -> 8) + ReLU, depthwise 3x3, global pool on a size x size input; optionally an
    Erf (an operator outside the vocabulary: type other, no benchmark) after the ReLU."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu")]
    last = "r"
    if unbenched:
        nodes.append(helper.make_node("Erf", ["r"], ["t"], name="erf"))
        last = "t"
    nodes += [helper.make_node("Conv", [last, "w2"], ["d"], name="dw", group=8, pads=[1, 1, 1, 1]),
              helper.make_node("GlobalAveragePool", ["d"], ["y"], name="gap")]
    w2 = numpy_helper.from_array(np.ones((8, 1, 3, 3), np.float32), "w2")
    g = helper.make_graph(nodes, "n", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])], initializer=[w, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


def test_run_from_onnx_measures_exactly_the_networks_layers(tmp_path, capsys):
    """bench run --from-onnx: one row per distinct benchable layer of the networks, as the
    estimator imports them (the conv with its fused ReLU, the depthwise conv with act
    'none'), the Erf reported as not planned; a re-run measures nothing."""
    nets = tmp_path / "nets"
    nets.mkdir()
    _net(nets / "a.onnx", unbenched=False)
    _net(nets / "b.onnx", unbenched=True)  # the same three configurations, plus an Erf
    argv = ["run", "--device", "nets-host", "--runner", "onnxruntime", "--from-onnx", str(nets), "--warmup", "0",
            "--runs", "2", "--threads", "1", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert "2 network(s), 7 layers imported with the default fusion rules" in cap.err
    assert "3 distinct benchable configurations" in cap.err
    assert "not planned, no benchmark for the type: other 1" in cap.err
    con = sqlite3.connect(tmp_path / "nets-host.sqlite")
    rows = {r[0]: json.loads(r[1]) for r in con.execute("SELECT layer_type, params FROM measurements")}
    assert sorted(rows) == ["conv2d", "dwconv2d", "globalpool"]
    assert rows["conv2d"]["act"] == "relu" and rows["conv2d"]["c_out"] == 8 and rows["conv2d"]["h"] == 12
    assert rows["dwconv2d"]["act"] == "none"
    assert main(argv) == 0
    assert "measured 0 configurations (3 already present" in capsys.readouterr().out
    assert main(argv[:5] + ["--from-onnx", str(tmp_path / "missing.onnx")] + argv[7:]) == 2
    assert "--from-onnx" in capsys.readouterr().err
    assert main(argv + ["--layers", "conv2d"]) == 2
    assert "--from-onnx replaces the sampling plan" in capsys.readouterr().err


def test_run_from_onnx_leaves_out_what_excluded_networks_use(tmp_path, capsys):
    """--exclude-onnx: configurations a held-out network uses are not measured, and counted."""
    train, held = tmp_path / "train", tmp_path / "held"
    train.mkdir()
    held.mkdir()
    _net(train / "a.onnx", unbenched=False)
    _net(train / "c.onnx", unbenched=False, size=16)
    _net(held / "v.onnx", unbenched=True)  # a's three configurations
    argv = ["run", "--device", "held-host", "--runner", "onnxruntime", "--from-onnx", str(train), "--exclude-onnx",
            str(held), "--warmup", "0", "--runs", "2", "--threads", "1", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "3 distinct benchable configurations" in err
    assert "not planned, distinct configurations an excluded network uses: conv2d 1, dwconv2d 1, globalpool 1" in err
    con = sqlite3.connect(tmp_path / "held-host.sqlite")
    assert sorted(json.loads(r[0])["h"] for r in con.execute("SELECT params FROM measurements")) == [16, 16, 16]
    assert main(["run", "--device", "held-host", "--exclude-onnx", str(held)]) == 2
    assert "--exclude-onnx goes with --from-onnx" in capsys.readouterr().err


def test_show_summarises_each_environment_apart(bench_db, tmp_path, capsys):
    import shutil

    db = tmp_path / "two.sqlite"
    shutil.copyfile(bench_db, db)
    assert main(["run", "--device", "ci-host", "--runner", "onnxruntime", "--layers", "add", "--samples", "1",
                 "--warmup", "1", "--runs", "4", "--max-ops", "2e6", "--out", str(db), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["show", str(db)]) == 0
    out = capsys.readouterr().out
    import re

    headers = re.findall(r"^environment (\d+) \(onnxruntime, measured\): (\d+) rows$", out, re.M)
    assert len(headers) >= 2 and sum(int(n) for _, n in headers) == int(out.split(" measurements")[0].split()[-1])
