"""Attention networks on the ``imx93`` profile (Vela's Ethos-U65 with the Cortex-A55 beside it).

* the shipped profile holds Vela rows of the transformer types (layer norm, attention's
  products, softmax, transposes, linear layers over token rows) and says how CPU layers are
  priced (``op_mapping.cpu_estimate``);
* a layer Vela leaves on the CPU is flagged ``runs_on_cpu`` and ``cpu_unverified``, is
  estimated by that documented CPU roofline (never 0 ms, never NPU time), its intervals are
  that estimate's band, and a warning counts such layers and their share;
* ``estimator predict zoo:deit_tiny --device imx93`` says which layers run on the CPU (its
  q/k/v Gathers) in the table and in JSON.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from estimator.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
TOKEN_TYPES = ("layernorm", "matmul", "softmax", "transpose", "fc")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cl-cache")


def _cli(args: list[str], cache_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, CL_CACHE_DIR=str(cache_dir), CL_PROFILES=str(ROOT / "profiles"))
    return subprocess.run([sys.executable, "-m", "estimator.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)


def test_shipped_profile_has_transformer_rows_and_a_cpu_estimate() -> None:
    prof = load_profile("imx93", root=ROOT / "profiles")
    rows = list(prof.rows())
    types = {r["layer_type"] for r in rows}
    assert set(TOKEN_TYPES) <= types, sorted(types)
    token_fc = [r for r in rows if r["layer_type"] == "fc" and int(r["params"].get("m") or 1) > 1]
    assert token_fc, "no fc over token rows"
    est = prof.cpu_estimate
    assert est and all(est[k] > 0 for k in ("gops_per_s", "gbytes_per_s", "overhead_ms")) and est["factor"] > 1
    assert "unverified" in est["source"]
    assert "Gather" in prof.cpu_fallback_ops
    assert "token-row layout" in prof.provenance.source


def _sin_onnx(path: Path) -> Path:
    """conv 3x3 (8 -> 16) then a Sin (no NPU kernel on Vela) then a global pool."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 8, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Sin", ["c"], ["s"], name="sin"),
             helper.make_node("GlobalAveragePool", ["s"], ["y"], name="gap")]
    g = helper.make_graph(nodes, "sin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])], initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def test_cpu_layer_is_an_unverified_cpu_estimate(tmp_path: Path, cache_dir: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from estimator.predict import Estimator

    monkeypatch.setenv("CL_CACHE_DIR", str(cache_dir))
    est = Estimator.from_profile("imx93", root=ROOT / "profiles")
    cpu = est.profile.cpu_estimate
    net = est.estimate_network(_sin_onnx(tmp_path / "sin.onnx"), confidence=[0.9, 0.5])
    (sin,) = [l for l in net.layers if l.op_type == "Sin"]
    assert {"runs_on_cpu", "cpu_unverified", "cpu_fallback_op"} <= set(sin.flags)
    assert sin.out_of_design_space and "cpu_unverified" in sin.ood_reasons and sin.t_op_ms is None
    # the documented roofline at int8 (1 byte per element: 16x32x32 in, as many out), plus the
    # per-layer overhead
    b = 2 * 16 * 32 * 32
    want = cpu["overhead_ms"] + max(sin.ops / (cpu["gops_per_s"] * 1e6), b / (cpu["gbytes_per_s"] * 1e6))
    assert sin.prediction_ms == pytest.approx(want, rel=1e-9) and sin.prediction_ms > 0
    for m in ("CM_TV", "CM_LV", "CM_O"):
        lo, hi = sin.intervals[m][0.9]
        assert want / cpu["factor"] <= lo < want < hi <= want * cpu["factor"]
        lo5, hi5 = sin.intervals[m][0.5]
        assert lo <= lo5 < want < hi5 <= hi
    assert all("runs_on_cpu" not in l.flags for l in net.layers if l.op_type != "Sin")
    (w,) = [w for w in net.warnings if "layer(s) run on the CPU on imx93" in w]
    assert "1 Sin" in w and "unverified" in w and "cpu_unverified" in w
    assert net.total_ms == pytest.approx(sum(l.prediction_ms for l in net.layers), rel=1e-9)


def test_deit_on_imx93_says_which_layers_run_on_the_cpu(cache_dir: Path) -> None:
    proc = _cli(["predict", "zoo:deit_tiny", "--device", "imx93", "--json", "--no-progress"], cache_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    cpu = [l for l in doc["layers"] if "runs_on_cpu" in l["flags"]]
    # timm's attention splits q, k, v with a Gather each (12 blocks), plus the class-token Gather
    assert len(cpu) == 37 and {l["op_type"] for l in cpu} == {"Gather"}
    assert all(l["prediction_ms"] > 0 and "cpu_unverified" in l["flags"] for l in cpu)
    (w,) = [w for w in doc["warnings"] if "layer(s) run on the CPU on imx93" in w]
    assert w.startswith("37 layer(s) run on the CPU") and "unverified" in w
    # attention's own layers run on the NPU and have benchmark rows now
    npu = {l["type"] for l in doc["layers"] if "runs_on_cpu" not in l["flags"] and not l["fallback"]}
    assert {"layernorm", "matmul", "softmax", "fc"} <= npu, npu
    table = _cli(["predict", "zoo:deit_tiny", "--device", "imx93", "--no-progress"], cache_dir)
    assert table.returncode == 0, table.stderr[-3000:]
    gathers = [line for line in table.stdout.splitlines() if "/attn/Gath" in line]
    assert gathers and all("CPU(unverified)" in line for line in gathers)
