"""Device profile loader, and the model cache (keyed by data hash; pickles only from the cache)."""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from estimator import cache
from estimator.errors import NotFoundError, UserError
from estimator.models import DeviceModels, ReferenceParts, get_models
from estimator.profile import ProfileError, default_root, list_profiles, load_profile, write_profile_json
from tests import synthetic


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    r = tmp_path / "profiles"
    synthetic.write_profile(r, "dev-a", synthetic.rows(40, seed=1))
    synthetic.write_profile(r, "dev-b", synthetic.rows(40, seed=2))
    return r


def _edit(root: Path, profile: str, changes: dict) -> None:
    p = root / profile / "profile.json"
    meta = json.loads(p.read_text())
    for k, v in changes.items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    p.write_text(json.dumps(meta))


def test_list_and_load(root):
    assert list_profiles(root) == ["dev-a", "dev-b"]
    p = load_profile("dev-a", root)
    assert p.name == "dev-a" and p.runner == "onnxruntime" and p.provenance.kind == "estimated"
    assert p.measurements_path.is_file()
    assert len(list(p.rows())) == 40
    # by path, to the directory or to profile.json
    assert load_profile(root / "dev-b").name == "dev-b"
    assert load_profile(str(root / "dev-b" / "profile.json")).name == "dev-b"
    assert p.summary()["provenance"]["source"].startswith("tests/synthetic.py")


def test_env_var_selects_the_root(root, monkeypatch):
    monkeypatch.setenv("CL_PROFILES", str(root))
    assert default_root() == root
    assert list_profiles() == ["dev-a", "dev-b"]
    assert load_profile("dev-b").path == root / "dev-b"


def test_source_checkout_root_is_the_repository_profiles_dir(monkeypatch):
    monkeypatch.delenv("CL_PROFILES", raising=False)
    repo_profiles = Path(__file__).resolve().parents[1] / "profiles"
    if repo_profiles.is_dir():
        assert default_root() == repo_profiles


def test_unknown_device_lists_known_ones(root):
    with pytest.raises(NotFoundError, match=r"unknown device 'nope'.*dev-a, dev-b"):
        load_profile("nope", root)
    with pytest.raises(NotFoundError, match="no device profile at"):
        load_profile(root / "nope")


@pytest.mark.parametrize(
    "changes,msg",
    [
        (dict(hardware=None), "missing required key 'hardware'"),
        (dict(runner=""), "'runner' must be a non-empty string"),
        (dict(name="other"), "does not match the directory name"),
        (dict(threads=0), "'threads' must be a positive integer"),
        (dict(schema=2), "unsupported schema 2"),
        (dict(provenance={"kind": "guessed", "source": "x", "date": "2025-01-01"}), "'kind' must be one of"),
        (dict(provenance={"kind": "measured", "date": "2025-01-01"}), "missing required key 'source'"),
        (dict(provenance={"kind": "measured", "source": "x", "date": "yesterday"}), "ISO date"),
        (dict(provenance={"kind": "measured", "source": "x", "date": "2025-01-01", "hots": "h"}),
         r"unknown keys \['hots'\]"),
        (dict(provenance={"kind": "measured", "source": "x", "date": "2025-01-01", "versions": {"ort": 1}}),
         "'versions' values must be strings"),
        (dict(training={"n_trees": 5}), r"training: unknown training options \['n_trees'\]"),
        (dict(training={"n_estimators": "many"}), "training option 'n_estimators'"),
        (dict(training={"padding_split_by_type": {"dwconv2d": 1.2}}),
         r"training: training option padding_split_by_type: 'dwconv2d': 1.2 must map a layer type to a split in \[0, 1\]"),
        (dict(training={"padding_split_by_type": 0.7}), "training option 'padding_split_by_type' must be like"),
        (dict(op_mapping={"cpu_fallback_ops": "Resize"}), "cpu_fallback_ops must be a list"),
        (dict(op_mapping={"free_ops": ["Reshape", 3]}), "free_ops must be a list of ONNX op names"),
        (dict(op_mapping={"free_ops": ["Reshape"], "cpu_fallback_ops": ["Reshape"]}),
         r"lists \['Reshape'\] both as cpu_fallback_ops and as free_ops"),
        (dict(fusion={"activations": {"maxpool": ["relu"]}}), "fusion: .*'maxpool' cannot take a fused activation"),
        (dict(fusion={"bn_into_conv": "yes"}), "fusion: .*'bn_into_conv' must be true or false"),
    ],
)
def test_malformed_metadata_has_precise_errors(root, changes, msg):
    _edit(root, "dev-a", changes)
    with pytest.raises(ProfileError, match=msg) as ei:
        load_profile("dev-a", root)
    assert "dev-a" in str(ei.value) and "profile.json" in str(ei.value)
    assert isinstance(ei.value, UserError)


def test_invalid_json_and_bad_table(root):
    (root / "dev-a" / "profile.json").write_text('{"name": "dev-a",\n  "hardware": }')
    with pytest.raises(ProfileError, match=r"profile.json:2:\d+: invalid JSON"):
        load_profile("dev-a", root)
    (root / "dev-b" / "measurements.csv").write_text("layer_type,params\nconv2d,{}\n")
    with pytest.raises(ProfileError, match="missing columns"):
        load_profile("dev-b", root)
    os.remove(root / "dev-b" / "measurements.csv")
    with pytest.raises(ProfileError, match="missing measurements.csv"):
        load_profile("dev-b", root)


def test_write_profile_json_validates(tmp_path):
    meta = json.loads((Path(synthetic.write_profile(tmp_path, "x", synthetic.rows(3))) / "profile.json").read_text())
    meta["name"] = "y"
    with pytest.raises(ProfileError, match="does not match"):
        write_profile_json(tmp_path / "x", meta)
    meta["name"] = "x"
    assert write_profile_json(tmp_path / "x", meta).name == "x"


REFINED = {"base": "dev-a", "targets": [{"name": "onnx:resnet18", "sha256": "ab" * 32}, {"name": "zoo:mnasnet"}],
           "excluded": [{"name": "zoo:ghostnet", "sha256": "cd" * 32}],
           "rounds": [{"round": 0, "measured": 0}, {"round": 1, "measured": 20}, {"round": 2, "measured": 22}],
           "configurations": 42, "device_seconds": 61.5, "runner": "onnxruntime", "runner_options": {"threads": 1},
           "database": "bench-data/x.sqlite", "date": "2026-11-24T10:00:00+00:00", "source": "`bench refine`"}


def test_devices_shows_the_refined_section(root, capsys):
    from estimator.cliutil import run  # noqa: PLC0415

    synthetic.write_profile(root, "dev-r", synthetic.rows(40, seed=3), refined=REFINED)
    r = load_profile("dev-r", root).summary()["refined"]
    assert r == {"configurations": 42, "base": "dev-a", "targets": ["onnx:resnet18", "zoo:mnasnet"],
                 "excluded": ["zoo:ghostnet"], "rounds": 2, "device_seconds": 61.5, "runner": "onnxruntime",
                 "runner_options": {"threads": 1}, "source": "`bench refine`", "date": "2026-11-24T10:00:00+00:00"}
    assert load_profile("dev-a", root).summary()["refined"] == {"configurations": 0}
    assert run("estimator", "test", ["estimator.cmd_model"], ["devices", "--profiles", str(root)]) == 0
    out = capsys.readouterr().out
    assert "refined" in out.splitlines()[1]
    line = next(l for l in out.splitlines() if l.startswith("dev-r"))
    assert "42 rows, 2 rounds, 62 s, 2026-11-24, toward onnx:resnet18 +1" in line
    assert " none " in next(l for l in out.splitlines() if l.startswith("dev-a"))
    assert run("estimator", "test", ["estimator.cmd_model"], ["devices", "--profiles", str(root), "--json"]) == 0
    devs = {d["name"]: d for d in json.loads(capsys.readouterr().out)["devices"]}
    assert devs["dev-r"]["refined"] == r and devs["dev-b"]["refined"] == {"configurations": 0}


# ------------------------------------------------------------------------- cache


@pytest.fixture()
def cache_root(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("CL_CACHE_DIR", str(d))
    return d


def test_cache_hit_and_miss_keyed_by_data(root, cache_root):
    prof = load_profile("dev-a", root)
    m1 = get_models(prof)
    assert not m1.loaded_from_cache
    files = sorted((cache_root / "models").iterdir())
    assert [f.name for f in files] == [m1.cache_key + ".npz"]  # the set: arrays only
    # each modelled type: its arrays and its scikit-learn/crepes pickle; its grid search
    assert sorted(f.name for f in (cache_root / "types").iterdir()) == sorted(
        k + s for k in m1.type_keys.values() for s in (".npz", ".pkl"))
    assert len(list((cache_root / "grids").iterdir())) == len(m1.modelled_types)
    m2 = get_models(prof)
    assert m2.loaded_from_cache and m2.cache_key == m1.cache_key
    # changed data misses
    rows = synthetic.rows(41, seed=1)
    synthetic.write_profile(root, "dev-a", rows)
    m3 = get_models(load_profile("dev-a", root))
    assert not m3.loaded_from_cache and m3.cache_key != m1.cache_key
    assert len(list((cache_root / "models").glob("*.npz"))) == 2
    # the training target is part of the key
    m4 = get_models(load_profile("dev-a", root), target="single")
    assert m4.cache_key != m3.cache_key and m4.target == "single"


def test_key_covers_code_and_library_versions():
    v = cache.library_versions()
    assert {"numpy", "scikit-learn", "crepes", "python"} <= set(v)
    k = cache.cache_key("d" * 64, {"a": 1}, "code-1", v)
    assert cache.cache_key("d" * 64, {"a": 1}, "code-2", v) != k
    assert cache.cache_key("d" * 64, {"a": 1}, "code-1", dict(v, crepes="0.0")) != k
    assert cache.cache_key("e" * 64, {"a": 1}, "code-1", v) != k
    assert cache.cache_key("d" * 64, {"a": 2}, "code-1", v) != k


_LOADED: list[str] = []


class _Tripwire:
    """Unpickling this records that it happened (stands in for a malicious pickle)."""

    def __reduce__(self):
        return (_LOADED.append, ("tripwire",))


def test_pickles_are_only_loaded_from_the_cache_dir(root, cache_root, monkeypatch):
    # a pickle planted in the profile directory (and in the repository's profile root) is never read
    for d in (root / "dev-a", root):
        for name in ("models.pkl", "model.pkl", f"{'0' * 64}.pkl"):
            (d / name).write_bytes(pickle.dumps(_Tripwire()))
    opened: list[Path] = []
    real_load = pickle.load

    def spy(f, *a, **k):
        opened.append(Path(f.name).resolve())
        return real_load(f, *a, **k)

    monkeypatch.setattr(pickle, "load", spy)
    prof = load_profile("dev-a", root)
    get_models(prof)
    m = get_models(prof)
    assert m.loaded_from_cache
    assert opened == []  # a warm start reads the arrays only
    t = m.modelled_types[0]
    assert m.types[t].forest is not None  # the reference path reads the cache's pickle
    assert _LOADED == []
    assert opened == [cache.path_for(m.type_keys[t], suffix=".pkl", kind="types").resolve()]
    with pytest.raises(ValueError):
        cache.path_for("../../etc/passwd")


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_untrusted_cache_files_are_refused(root, cache_root):
    prof = load_profile("dev-a", root)
    m = get_models(prof)
    t = m.modelled_types[0]
    p, pkl = cache.path_for(m.cache_key), cache.path_for(m.type_keys[t], suffix=".pkl", kind="types")
    assert (p.stat().st_mode & 0o777) == 0o600 and (pkl.stat().st_mode & 0o777) == 0o600
    os.chmod(p, 0o666)
    with pytest.warns(cache.CacheWarning, match="writable by group/others"):
        assert cache.load_arrays(m.cache_key) is None
    with pytest.warns(cache.CacheWarning):
        again = get_models(prof)  # retrains and rewrites the entry safely
    assert not again.loaded_from_cache
    assert (p.stat().st_mode & 0o777) == 0o600
    os.chmod(pkl, 0o666)
    warm = get_models(prof)
    assert warm.loaded_from_cache
    with pytest.warns(cache.CacheWarning, match="writable by group/others"):
        warm.types[t].forest  # the reference path retrains rather than read it
    assert (pkl.stat().st_mode & 0o777) == 0o600


def test_corrupt_cache_entry_is_a_miss(root, cache_root):
    prof = load_profile("dev-a", root)
    m = get_models(prof)
    cache.path_for(m.cache_key).write_bytes(b"not an npz")
    with pytest.warns(cache.CacheWarning, match="unreadable"):
        m2 = get_models(prof)
    assert isinstance(m2, DeviceModels) and not m2.loaded_from_cache
    assert m2.report["cached_types"] == m.modelled_types  # the type entries were fine
    t = m.modelled_types[0]
    cache.path_for(m.type_keys[t], suffix=".pkl", kind="types").write_bytes(b"not a pickle")
    m3 = get_models(prof)
    assert m3.loaded_from_cache
    with pytest.warns(cache.CacheWarning, match="unreadable"):
        forest = m3.types[t].forest  # retrained (deterministic) and stored again
    assert forest is not None and isinstance(cache.load(m.type_keys[t]), ReferenceParts)
    # a damaged type entry is a miss too: that type is retrained, with its cached grid search
    cache.path_for(m.type_keys[t], kind="types").write_bytes(b"not an npz")
    cache.path_for(m.cache_key).unlink()
    with pytest.warns(cache.CacheWarning, match="unreadable"):
        m4 = get_models(prof)
    assert m4.report["cached_types"] == [u for u in m.modelled_types if u != t]
    assert m4.report["cached_grid_types"] == [t]
    assert m4.arrays()["forest.nodes"].tobytes() == m.arrays()["forest.nodes"].tobytes()


def _same_models(a: DeviceModels, b: DeviceModels) -> None:
    """Every array bit for bit, and every number but the report's timing and cache notes."""
    xa, xb = a.arrays(), b.arrays()
    assert sorted(xa) == sorted(xb)
    for k in xa:
        if k != "meta":
            assert xa[k].dtype == xb[k].dtype and xa[k].tobytes() == xb[k].tobytes(), k
    ma, mb = (json.loads(x["meta"].tobytes()) for x in (xa, xb))
    for m in (ma, mb):
        for k in ("train_seconds", "cached_types", "cached_grid_types"):
            m["report"].pop(k, None)
    assert ma == mb


def test_incremental_retraining_reuses_unchanged_types_and_matches_a_cold_train(tmp_path, monkeypatch):
    """A profile whose rows grew for one type (as `bench refine` appends them) retrains that
    type only, with its cached grid search, and gives the model set a cold cache trains."""
    import numpy as np  # noqa: PLC0415

    from estimator.fastpath import FlatForests  # noqa: PLC0415
    from estimator.predict import Estimator, make_layer  # noqa: PLC0415

    root = tmp_path / "profiles"
    conv, add = synthetic.rows(60, seed=1), synthetic.rows(60, seed=2, layer_type="add")
    synthetic.write_profile(root, "dev", conv + add)
    warm, cold = tmp_path / "warm", tmp_path / "cold"
    monkeypatch.setenv("CL_CACHE_DIR", str(warm))
    m0 = get_models(load_profile("dev", root))
    assert m0.report["cached_types"] == [] and set(m0.type_keys) == {"add", "conv2d"}
    # the flattened forests assembled per type are those of all forests flattened at once
    whole = FlatForests.from_forests({t: m0.types[t].forest for t in sorted(m0.types)})
    assert whole.nodes.tobytes() == m0.forests.nodes.tobytes() and whole.value.tobytes() == m0.forests.value.tobytes()

    synthetic.write_profile(root, "dev", conv + add + synthetic.rows(8, seed=3, layer_type="add"))  # 60 -> 68 adds
    prof = load_profile("dev", root)
    m1 = get_models(prof)
    assert not m1.loaded_from_cache and m1.cache_key != m0.cache_key
    assert m1.report["cached_types"] == ["conv2d"] and m1.report["cached_grid_types"] == ["add"]
    assert m1.type_keys["conv2d"] == m0.type_keys["conv2d"] and m1.type_keys["add"] != m0.type_keys["add"]
    assert m1.types["add"].report["grid_rows"] == 58 and m1.types["add"].n_rows == 68

    monkeypatch.setenv("CL_CACHE_DIR", str(cold))
    scratch = get_models(prof)
    assert scratch.cache_key == m1.cache_key and scratch.report["cached_types"] == []
    assert scratch.report["cached_grid_types"] == []
    _same_models(m1, scratch)
    forced = get_models(prof, retrain=True)  # reads no entry, trains the same
    assert forced.report["cached_types"] == [] and forced.report["cached_grid_types"] == []
    _same_models(forced, scratch)
    # the same estimates, on the fast path and on the reference path (whose objects come from
    # the type entries' pickles: conv2d's written by the first training, in the other cache)
    monkeypatch.setenv("CL_CACHE_DIR", str(warm))
    hit = get_models(prof)
    assert hit.loaded_from_cache
    layers = [make_layer("conv2d", r["params"]) for r in synthetic.rows(5, seed=9)]
    layers += [make_layer("add", r["params"]) for r in synthetic.rows(5, seed=9, layer_type="add")]

    for fast in (True, False):
        a = Estimator(prof, hit, fast=fast).estimate_layers(layers)
        b = Estimator(prof, scratch, fast=fast).estimate_layers(layers)
        assert [x.prediction_ms for x in a] == [x.prediction_ms for x in b]
        assert [x.intervals for x in a] == [x.intervals for x in b]
    assert np.array_equal(hit.types["conv2d"].forest.predict(np.ones((1, len(hit.types["conv2d"].feature_names)))),
                          scratch.types["conv2d"].forest.predict(np.ones((1, len(scratch.types["conv2d"].feature_names)))))


def test_grid_search_reruns_when_a_type_grew_past_a_checkpoint(tmp_path, monkeypatch):
    from estimator.models import TrainingOptions, grid_rows  # noqa: PLC0415

    opts = TrainingOptions()
    assert [grid_rows(n, opts) for n in (5, 20, 24, 25, 60, 68, 71, 72, 2000, 2049)] == [
        5, 20, 20, 25, 58, 58, 58, 72, 1616, 2020]
    assert grid_rows(2049, TrainingOptions(grid_growth=1.0)) == 2049  # the search sees every row
    monkeypatch.setenv("CL_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "profiles"
    adds = synthetic.rows(75, seed=2, layer_type="add")
    synthetic.write_profile(root, "dev", adds[:60])
    get_models(load_profile("dev", root))
    synthetic.write_profile(root, "dev", adds)  # 60 -> 75 rows: past the checkpoint 72
    m = get_models(load_profile("dev", root))
    assert m.report["cached_grid_types"] == [] and m.types["add"].report["grid_rows"] == 72


# ------------------------------------------------------------------ estimator API


def test_estimator_layers_and_network(root, cache_root):
    from types import SimpleNamespace

    from estimator.predict import Estimator, make_layer

    est = Estimator.from_profile("dev-a", root=root)
    layers = [make_layer("conv2d", dict(h=16, w=16, c_in=32, c_out=64, k_h=3, k_w=3), name="c1"),
              make_layer("softmax", dict(h=1, w=1, c=10, axis_len=10), name="sm")]
    rows = est.estimate_layers(layers, confidence=[0.9, 0.8])
    assert [r.name for r in rows] == ["c1", "sm"]
    assert not rows[0].fallback and rows[1].fallback and rows[1].out_of_design_space
    for r in rows:
        assert set(r.intervals) == {"CM_TV", "CM_LV", "CM_O"}
        lo8, hi8 = r.intervals["CM_LV"][0.8]
        lo9, hi9 = r.intervals["CM_LV"][0.9]
        assert lo9 <= lo8 <= r.prediction_ms <= hi8 <= hi9
    net = est.estimate_network(SimpleNamespace(layers=layers, warnings=["from importer"], free_nodes={"id": "identity"}),
                               confidence=0.99)
    assert net.total_ms == pytest.approx(sum(r.prediction_ms for r in rows))
    assert net.confidence == [0.99] and net.n_fallback == 1
    d = json.loads(json.dumps(net.to_dict()))
    assert d["intervals"]["CM_LV"]["0.99"][0] <= d["total_ms"] <= d["intervals"]["CM_LV"]["0.99"][1]
    assert d["free_nodes"] == {"id": "identity"} and d["warnings"][0] == "from importer"
    # 40 calibration rows cannot certify 0.99: said so, not hidden
    assert any("needs more calibration points" in w for w in net.warnings)
    assert any("roofline fallback" in w for w in net.warnings)
    with pytest.raises(UserError, match="confidence"):
        est.estimate_layers(layers, confidence=[0.0])


def test_meta_from_bench_provenance():
    from estimator.profile import meta_from_bench_provenance

    env = {"env_id": 1, "device": "d", "runner": "onnxruntime", "precision": "fp32", "threads": 2,
           "provenance": "measured", "created_at": "2025-03-01T10:00:00+00:00", "device_name": "Some CPU (CPU)",
           "host": {"hostname": "h1", "cpu_model": "Some CPU"}, "versions": {"onnxruntime": "1.20.0"}}
    meta = meta_from_bench_provenance("d", {"environments": [env]}, source="bench run on h1")
    assert meta["runner"] == "onnxruntime" and meta["threads"] == 2 and meta["hardware"] == "Some CPU (CPU)"
    assert meta["provenance"] == {"kind": "measured", "source": "bench run on h1", "host": "cpu_model=Some CPU, "
                                  "hostname=h1", "versions": {"onnxruntime": "1.20.0"},
                                  "date": "2025-03-01T10:00:00+00:00"}
    with pytest.raises(ProfileError, match="lists 2 environments"):
        meta_from_bench_provenance("d", {"environments": [env, env]}, source="x")


_WARM_ESTIMATE = r"""
import json, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
from estimator.predict import Estimator, make_layer

root = sys.argv[1]
w = numpy_helper.from_array(np.zeros((64, 32, 3, 3), dtype=np.float32), "w")
g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                       helper.make_node("Relu", ["c"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 16, 16])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 16, 16])], [w])
model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
est = Estimator.from_profile("dev-a", root=root)
net = est.estimate_network(model.SerializeToString(), confidence=0.9)
rows = est.estimate_layers([make_layer("conv2d", dict(h=16, w=16, c_in=32, c_out=64, k_h=3, k_w=3))])
heavy = sorted(m for m in ("sklearn", "crepes", "pandas") if m in sys.modules)
print(json.dumps({"cached": est.models.loaded_from_cache, "total": net.total_ms, "row": rows[0].prediction_ms,
                  "heavy": heavy}))
"""


def test_warm_estimate_imports_no_sklearn_crepes_pandas(root, cache_root):
    """With a warm model cache an estimate reads the cached arrays only: scikit-learn, crepes and
    pandas stay unimported (the reference path would load them)."""
    import subprocess
    import sys

    get_models(load_profile("dev-a", root))  # warm the cache
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "CL_CACHE_DIR": str(cache_root),
           "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _WARM_ESTIMATE, str(root)], capture_output=True, text=True,
                         env=env, timeout=300, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["cached"] and got["total"] > 0 and got["row"] > 0
    assert got["heavy"] == []


def test_shipped_host_cpu_lists_onnxruntimes_views_as_free():
    """The shipped ONNX Runtime profile carries the op_mapping ``bench profile`` writes for
    that runner: Reshape/Flatten/Squeeze/Unsqueeze alias their input (no kernel time)."""
    from bench.profile_db import onnxruntime_op_mapping
    from estimator.profile import load_profile

    prof = load_profile("host-cpu", Path(__file__).resolve().parents[1] / "profiles")
    assert prof.free_ops == onnxruntime_op_mapping()["free_ops"]
