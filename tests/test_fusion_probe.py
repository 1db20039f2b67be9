"""bench fusion: the A / B / P / A->B models, the decision on synthetic timings, the rules it
writes, and the CLI (a short run: one size, two rounds, pinned to CPU 0). No test asserts a
timing: the verdicts of a real run depend on the machine."""
from __future__ import annotations

import json
import re

import pytest

from bench.cli import main as bench_main
from bench.fusion_probe import (Pair, PairResult, candidate_pairs, decide, pair_models, pair_verdict, rules_from,
                                select_pairs)
from bench.modelgen import chained_model, to_onnx
from estimator.layers import LayerSpecError
from estimator.profile import load_profile, write_fusion

from .synthetic import rows, write_profile


@pytest.fixture(scope="module")
def ort_runner():
    from bench.runners.base import get_runner

    with get_runner("onnxruntime", threads=1) as r:
        yield r


@pytest.mark.parametrize("name,size", [("conv2d+gelu", "small"), ("dwconv2d+prelu", "small"), ("fc+prelu", "small"),
                                       ("fc+gelu", "medium"), ("add+relu", "large"), ("matmul+softmax", "small"),
                                       ("add+layernorm", "small"), ("conv2d+silu", "small")])
def test_pair_models_are_valid_and_run(ort_runner, name, size):
    (pair,) = select_pairs(candidate_pairs(), name)
    ms = pair_models(pair, size)
    assert set(ms) == {"A", "B", "P", "AB"}
    for ir in ms.values():
        ort_runner.time(ort_runner.prepare(to_onnx(ir)), warmup=0, runs=1)
    a, ab, b, p = ms["A"], ms["AB"], ms["B"], ms["P"]
    # A->B holds A's input padding and B's output padding, and one more LUM than A
    assert [o for o in ab.ops if o.role == "pad_in"] == [o for o in a.ops if o.role == "pad_in"]
    assert ab.outputs == b.outputs
    assert p.pad_key == (b.inputs[0].shape[2], b.inputs[0].shape[3], b.op("pad_in").shape[1])
    assert all(o.act in (None, "none") for o in a.ops if o.role == "lum")


def test_every_candidate_pair_builds():
    pairs = candidate_pairs()
    assert len({p.name for p in pairs}) == len(pairs)
    for p in pairs:
        for size in p.configs:
            pair_models(p, size)
    names = {p.name for p in pairs}
    assert {"conv2d+gelu", "conv2d+silu", "conv2d+hardswish", "fc+gelu", "add+relu", "matmul+softmax",
            "add+layernorm"} <= names


def test_chain_needs_matching_shapes():
    with pytest.raises(LayerSpecError, match="cannot follow"):
        chained_model(("matmul", dict(b=3, m=49, k=32, n_cols=49)), ("softmax", dict(c=3, h=49, w=50, axis_len=50)))
    ir = chained_model(("add", dict(h=1, w=96, c=49, act="none")), ("layernorm", dict(rows=49, c=96)))
    assert [o.name for o in ir.ops if o.role == "lum"] == ["lum", "next"]


def test_select_pairs():
    pairs = candidate_pairs()
    assert [p.name for p in select_pairs(pairs, "fc+gelu,matmul+softmax")] == ["fc+gelu", "matmul+softmax"]
    assert all(p.a == "conv2d" for p in select_pairs(pairs, "conv2d+*"))
    with pytest.raises(ValueError, match="no candidate pair"):
        select_pairs(pairs, "conv2d+nosuch")


def _rounds(a, b, p, ab):
    return {"A": a, "B": b, "P": p, "AB": ab}


def test_decide_fused_not_fused_undecided():
    n = 9
    # B's own time 3 ms; A->B costs A + 0.2: 2.8 ms saved (0.93 of B) -> fused
    fused = decide("x", "small", _rounds([10.0 + 0.01 * i for i in range(n)], [4.0] * n, [1.0] * n,
                                         [10.2 + 0.01 * i for i in range(n)]))
    assert fused.verdict == "fused" and fused.saving == pytest.approx(2.8 / 3, abs=0.01) and fused.spread < 0.1
    # A->B costs the sum -> not fused
    apart = decide("x", "small", _rounds([10.0] * n, [4.0 + 0.01 * i for i in range(n)], [1.0] * n,
                                         [13.0 + 0.01 * i for i in range(n)]))
    assert apart.verdict == "not fused" and abs(apart.saving) < 0.05
    # a saving of half of B, but rounds that swing by more than B -> undecided
    swings = [0.0, 4.0, -4.0, 3.0, -3.0, 2.0, -2.0, 4.5, -4.5]
    noisy = decide("x", "small", _rounds([10.0] * n, [4.0] * n, [1.0] * n, [11.5 + s for s in swings]))
    assert noisy.verdict == "undecided" and noisy.spread > 0.5
    # B no slower than its padding: undecided, said why
    lost = decide("x", "small", _rounds([10.0] * n, [1.0] * n, [1.0] * n, [10.0] * n))
    assert lost.verdict == "undecided" and "padding" in lost.error


def test_pair_verdict_and_rules():
    from bench.fusion_probe import ConfigResult

    def res(name, a, kind, *verdicts):
        p = Pair(name, a, "activation", {}, kind)
        return PairResult(p, [ConfigResult(name, s, verdict=v) for s, v in zip(("small", "medium", "large"), verdicts)])

    assert pair_verdict(res("x", "conv2d", "relu", "fused", "undecided", "fused").configs) == "fused"
    assert pair_verdict(res("x", "conv2d", "relu", "fused", "not fused").configs) == "partly fused"
    assert pair_verdict(res("x", "conv2d", "relu", "undecided").configs) == "undecided"
    current = {"activations": {"conv2d": ["relu", "tanh"], "fc": ["relu"]}, "bn_into_conv": True,
               "single_consumer": True}
    results = [res("conv2d+gelu", "conv2d", "gelu", "fused"), res("conv2d+tanh", "conv2d", "tanh", "not fused"),
               res("fc+relu", "fc", "relu", "undecided"), res("dwconv2d+relu", "dwconv2d", "relu", "fused", "not fused"),
               PairResult(Pair("matmul+softmax", "matmul", "softmax", {}), [ConfigResult("m", "small", verdict="fused")])]
    rules, changes = rules_from(results, current)
    assert rules["activations"] == {"conv2d": ["gelu", "relu"], "dwconv2d": ["relu"], "fc": ["relu"]}
    assert rules["bn_into_conv"] is True and len(changes) == 3


@pytest.fixture()
def profiles_root(tmp_path, monkeypatch):
    root = tmp_path / "profiles"
    write_profile(root, "dev", rows(20))
    monkeypatch.setenv("CL_PROFILES", str(root))
    return root


def test_write_fusion_round_trips(profiles_root):
    prof = load_profile("dev")
    rules = {"activations": {"conv2d": ["relu"]}, "bn_into_conv": False, "single_consumer": True,
             "detected": {"runner": "onnxruntime", "pairs": {"conv2d+relu": {"verdict": "fused"}}}}
    out = write_fusion("dev", rules)
    assert out.fusion["detected"]["pairs"]["conv2d+relu"]["verdict"] == "fused"
    fr = load_profile("dev").fusion_rules()
    assert fr.folds("conv2d", "relu") and not fr.folds("conv2d", "tanh") and fr.bn_into_conv is False
    assert load_profile("dev").training == prof.training  # the rest of profile.json is kept
    with pytest.raises(Exception, match="unknown activation"):
        write_fusion("dev", {"activations": {"conv2d": ["nosuch"]}})
    assert load_profile("dev").fusion_rules().folds("conv2d", "relu")  # a refused write leaves the file


def test_cli_prints_a_table_and_writes_the_profile(profiles_root, capsys):
    rc = bench_main(["fusion", "--device", "dev", "--pairs", "conv2d+relu,conv2d+gelu", "--sizes", "small",
                     "--rounds", "2", "--runs", "3", "--warmup", "1", "--affinity", "0", "--no-progress", "--write"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "T(A) ms" in out and "T(A->B) ms" in out and "saving" in out
    lines = [ln for ln in out.splitlines() if ln.strip().startswith(("conv2d+relu ", "conv2d+gelu "))]
    assert len(lines) == 2
    # each row ends in its verdict, then why a configuration could not be decided, if it could not
    # (on a loaded core an activation's own time can drown in its padding's: undecided, not a fault)
    verdicts = [re.sub(r" \((not timed|B's own time is not above its padding's)\)$", "", ln.rstrip()) for ln in lines]
    assert all(v.endswith(("fused", "undecided")) for v in verdicts), lines
    assert "wrote the fusion rules of profile dev" in out
    meta = json.loads((profiles_root / "dev" / "profile.json").read_text())
    det = meta["fusion"]["detected"]
    assert det["runner"] == "onnxruntime" and det["rounds"] == 2 and det["date"]
    assert set(det["pairs"]) == {"conv2d+relu", "conv2d+gelu"}
    load_profile("dev").fusion_rules()  # the loader reads what was written


@pytest.mark.parametrize("argv,needle", [
    (["--pairs", "conv2d+nosuch"], "--pairs"),
    (["--sizes", "huge"], "--sizes"),
    (["--rounds", "1"], "--rounds"),
])
def test_cli_bad_arguments_one_line(profiles_root, capsys, argv, needle):
    rc = bench_main(["fusion", "--device", "dev", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("bench: error: ") and needle in err[0]


def test_cli_write_needs_an_installed_profile(profiles_root, capsys):
    rc = bench_main(["fusion", "--device", "nosuch", "--pairs", "conv2d+relu", "--write"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "nosuch" in err[0]
