"""Impossible layer rows and damaged profile files, as a user meets them.

A row that cannot be a measurement (a NaN or infinite time, a model time at or below 0, a
layer time far below zero) is left out with one line naming the file, the line and why; the
estimate of its configuration stays where the profile without it puts it. A damaged file (a
cell that is no number, a truncated row, a missing column, bytes that are not UTF-8, a
garbled profile.json) is one error line naming the file, never a traceback.
"""
from __future__ import annotations

import csv
import logging
import math
import re
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from estimator.cliutil import run
from estimator.dataset import NEGATIVE_LUM_LIMIT
from estimator.models import TrainingOptions, train_models
from estimator.predict import Estimator, make_layer
from estimator.profile import ProfileWarning, list_profiles, load_profile
from tests import synthetic

ROWS = synthetic.rows(60, seed=7, layer_type="add")
BAD = 5  # the corrupted row: line BAD + 2 of measurements.csv (line 1 is the header)
LINE = BAD + 2
PARAMS = ROWS[BAD]["params"]


def _estimator(argv: list[str]) -> int:
    return run("estimator", "test", ["estimator.cmd_model"], argv)


def _add_onnx(path: Path, p: dict) -> Path:
    shape = [1, p["c"], p["h"], p["w"]]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "y", "z")]
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", io[:2], io[2:])
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    return path


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict:
    """The uncorrupted profile and its estimate of the corrupted row's configuration; one
    model cache for the module (every corrupted profile trains on the same rows)."""
    tmp = tmp_path_factory.mktemp("rows")
    root = tmp / "profiles"
    synthetic.write_profile(root, "good", ROWS)
    est = Estimator.from_profile("good", root=root, cache_root=tmp / "cache")
    good = est.estimate_layers([make_layer("add", PARAMS)])[0].prediction_ms
    return {"tmp": tmp, "cache": tmp / "cache", "good": good, "onnx": _add_onnx(tmp / "add.onnx", PARAMS)}


@pytest.fixture()
def root(shared, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("CL_CACHE_DIR", str(shared["cache"]))
    return tmp_path / "profiles"


def _write(root: Path, name: str, change: dict) -> Path:
    rows = [dict(r) for r in ROWS]
    rows[BAD].update(change)
    return synthetic.write_profile(root, name, rows)


MINUS_5 = dict(t_lum_lo_ms=-5.0, t_lum_hi_ms=-5.0, t_lum_ms=-5.0)  # a sign slip: -48 x its padded time 0.104 ms


@pytest.mark.parametrize("change,why", [
    (MINUS_5, r"t_lum_hi_ms -5 is below -3 x t_padded_ms 0\.104"),
    (dict(t_lum_ms=math.nan), "t_lum_ms is empty or NaN"),
    (dict(t_lum_hi_ms=math.inf), "t_lum_hi_ms is inf"),
    (dict(t_padded_ms=0.0), "t_padded_ms 0 is not above 0"),
    (dict(t_b1_ms=-0.1), "t_b1_ms -0.1 is negative"),
    (dict(t_lum_hi_ms=3.0), r"t_lum_hi_ms 3 exceeds t_padded_ms 0\.104"),
], ids=["minus-5ms", "nan", "inf", "padded-0", "pad-negative", "above-padded"])
def test_an_impossible_row_is_left_out_in_one_line_and_the_estimate_holds(shared, root, change, why, capsys):
    _write(root, "bad", change)
    assert _estimator(["predict", str(shared["onnx"]), "--device", str(root / "bad"), "--no-progress"]) == 0
    cap = capsys.readouterr()
    lines = [l for l in (cap.out + cap.err).splitlines() if "measurements.csv" in l]
    assert len(lines) == 1, cap
    assert lines[0].startswith("warning: ") and str(root / "bad" / "measurements.csv") in lines[0]
    assert f"1 impossible layer row left out of training (line {LINE}: " in lines[0]
    assert re.search(why, lines[0]), lines[0]
    assert "Traceback" not in cap.err
    # the Python API: the same line on every estimate, and the configuration's estimate holds
    est = Estimator.from_profile(root / "bad")
    [[line, _]] = est.models.report["excluded_rows"]
    assert line == LINE
    rows, warns = est.estimate_layers_with_warnings([make_layer("add", PARAMS)])
    assert warns.count(lines[0][len("warning: "):]) == 1
    assert 0.8 < rows[0].prediction_ms / shared["good"] < 1.25


def test_the_minus_5ms_row_would_drag_its_configuration_down(shared):
    """What the rule prevents: trained on (at the 0 ms floor), the -5 ms row drags its
    configuration's estimate down by half."""
    rows = [dict(r) for r in ROWS]
    rows[BAD].update(MINUS_5)
    opts = TrainingOptions.from_dict(load_profile(shared["tmp"] / "profiles" / "good").training)
    pred = train_models(rows, profile_name="raw", options=opts).predict_layers([make_layer("add", PARAMS)]).pred_ms[0]
    assert pred / shared["good"] < 0.7


def test_many_impossible_rows_are_named_first_few_then_counted(root):
    rows = [dict(r) for r in ROWS]
    for i in (3, 8, 13, 21, 34):
        rows[i]["t_padded_ms"] = -1.0
    synthetic.write_profile(root, "many", rows)
    excluded: list = []
    assert sum(1 for _ in load_profile(root / "many").rows(excluded)) == len(ROWS) - 5
    assert [line for line, _ in excluded] == [5, 10, 15, 23, 36]
    with pytest.warns(ProfileWarning) as rec:
        assert sum(1 for _ in load_profile(root / "many").rows()) == len(ROWS) - 5
    msg = str(rec[0].message)
    assert len(rec) == 1 and "\n" not in msg
    assert msg.startswith(f"{root / 'many' / 'measurements.csv'}: 5 impossible layer rows left out of training (")
    assert "line 5: t_padded_ms -1 is not above 0; line 10: " in msg and msg.endswith("; and 2 more)")


def test_genuine_negative_layer_times_within_the_bound_are_kept(root):
    """Measured: t_lum_hi_ms down to -2.2 x its padded time (host-cpu), and the other two
    columns far lower for a layer that shrinks its input (a globalpool: t_lum_lo_ms -54 x).
    Such rows stay (they train at the floor); t_lum_hi_ms beyond -NEGATIVE_LUM_LIMIT x goes."""
    t_c = ROWS[BAD]["t_padded_ms"]
    _write(root, "neg", dict(t_lum_lo_ms=-54 * t_c, t_lum_ms=-27 * t_c, t_lum_hi_ms=-2.2 * t_c))
    excluded: list = []
    assert sum(1 for _ in load_profile(root / "neg").rows(excluded)) == len(ROWS) and excluded == []
    hi = -1.01 * NEGATIVE_LUM_LIMIT * t_c
    _write(root, "beyond", dict(t_lum_lo_ms=2 * hi, t_lum_ms=1.5 * hi, t_lum_hi_ms=hi))
    assert sum(1 for _ in load_profile(root / "beyond").rows(excluded)) == len(ROWS) - 1
    assert excluded == [(LINE, f"t_lum_hi_ms {hi:g} is below -{NEGATIVE_LUM_LIMIT:g} x t_padded_ms {t_c:g}")]
    excluded.clear()  # a slip of -0.4 ms on a layer whose padded model takes 0.085 ms: -4.7 x
    _write(root, "slip", dict(t_lum_lo_ms=-4.7 * t_c, t_lum_ms=-4.7 * t_c, t_lum_hi_ms=-4.7 * t_c))
    assert sum(1 for _ in load_profile(root / "slip").rows(excluded)) == len(ROWS) - 1 and len(excluded) == 1


def test_every_shipped_profile_keeps_all_its_rows():
    for name in list_profiles():
        excluded: list = []
        assert sum(1 for _ in load_profile(name).rows(excluded)) > 0 and excluded == [], (name, excluded[:3])


def test_bench_show_names_the_left_out_rows(root, capsys):
    bench_cli = pytest.importorskip("bench.cli")
    rows = [dict(r, env_id=1) for r in ROWS]
    rows[BAD].update(MINUS_5)
    d = synthetic.write_profile(root, "shown", rows)
    assert bench_cli.main(["show", str(d / "measurements.csv")]) == 0
    out = capsys.readouterr().out
    assert f"{len(ROWS) - 1} measurements" in out
    assert [l for l in out.splitlines() if "impossible" in l] == [
        f"warning: {d / 'measurements.csv'}: 1 impossible layer row left out of training (line {LINE}: "
        f"t_lum_hi_ms -5 is below -{NEGATIVE_LUM_LIMIT:g} x t_padded_ms {ROWS[BAD]['t_padded_ms']:g})"]


def test_the_service_logs_the_left_out_rows_at_load(root, caplog):
    server = pytest.importorskip("service.server")
    _write(root, "served", MINUS_5)
    with caplog.at_level(logging.WARNING, logger="service"):
        reg = server.load_registry(root)
    assert list(reg.devices) == ["served"] and not reg.errors
    [rec] = [r for r in caplog.records if r.getMessage() == "device rows left out"]
    assert rec.fields["device"] == "served" and f"(line {LINE}: t_lum_hi_ms -5 is below" in rec.fields["warning"]


# ---------------------------------------------------------------- damaged files


def _cell(path: Path, line: int, column: str, value: str) -> None:
    rows = list(csv.reader(path.open(newline="")))
    rows[line - 1][rows[0].index(column)] = value
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 40])  # the last row cut inside its params


def _garble(path: Path) -> None:
    data = path.read_bytes()
    k = len(data) * 3 // 4  # past the first read buffer: what loading checks, training reads
    path.write_bytes(data[:k] + b"\xff\xfe" + data[k:])


def _drop_column(path: Path) -> None:
    rows = list(csv.reader(path.open(newline="")))
    k = rows[0].index("t_padded_ms")
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([r[:k] + r[k + 1:] for r in rows])


@pytest.mark.parametrize("damage,where", [
    (lambda d: _cell(d / "measurements.csv", LINE, "t_lum_ms", "0.0x3"),
     rf"measurements\.csv:{LINE}: t_lum_ms: not a number: '0\.0x3'"),
    (lambda d: _cell(d / "measurements.csv", LINE, "params", '{"c": 61, "h"'),
     rf"measurements\.csv:{LINE}: params: not JSON"),
    (lambda d: _truncate(d / "measurements.csv"), rf"measurements\.csv:{len(ROWS) + 1}: 2 cells where the header "
                                                  r"has 16 \(truncated\?\)"),
    (lambda d: _drop_column(d / "measurements.csv"), r"measurements\.csv: missing columns \['t_padded_ms'\]"),
    (lambda d: _garble(d / "measurements.csv"), r"measurements\.csv: not a UTF-8 CSV file after line [3-6]\d"),
    (lambda d: (d / "profile.json").write_text((d / "profile.json").read_text()[:-30]),
     r"profile\.json:\d+:\d+: invalid JSON"),
], ids=["non-numeric", "bad-params", "truncated", "missing-column", "not-utf8", "garbled-json"])
def test_a_damaged_file_is_one_error_line_naming_it(shared, root, damage, where, capsys):
    d = _write(root, "broken", {})
    damage(d)
    assert _estimator(["predict", str(shared["onnx"]), "--device", str(d), "--no-progress"]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("estimator: error: "), cap
    assert str(d) in err[0] and re.search(where, err[0]), err[0]
