"""An attention graph in a form the layer registry does not know (its scores as an ``Einsum``)
through ``estimator predict`` on the shipped, calibrated ``host-cpu``: the unknown node is kept
as type ``other``, flagged and estimated by the roofline fallback, never dropped; the network
is out of the calibration's scope, so its band keeps at least its uncalibrated width and says
why."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from estimator.cli import main as estimator_main

PROFILES = Path(__file__).resolve().parents[1] / "profiles"


@pytest.fixture(scope="module")
def einsum_attention(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 197, 192])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 197, 192])
    weights = [numpy_helper.from_array((r.random((192, 192)) * 0.01).astype(np.float32), n) for n in ("wq", "wk")]
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"], name="q"),
             helper.make_node("MatMul", ["x", "wk"], ["k"], name="k"),
             helper.make_node("Einsum", ["q", "k"], ["s"], name="scores", equation="bid,bjd->bij"),
             helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "x"], ["y"], name="pv")]
    model = helper.make_model(helper.make_graph(nodes, "einsum_attention", [x], [y], weights),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = tmp_path_factory.mktemp("attention") / "einsum_attention.onnx"
    onnx.save(model, path)
    return path


def test_an_unknown_attention_operator_is_kept_flagged_and_out_of_scope(einsum_attention, capsys):
    assert estimator_main(["predict", str(einsum_attention), "--device", "host-cpu", "--profiles", str(PROFILES),
                           "--json", "--no-progress"]) == 0
    doc = json.loads(capsys.readouterr().out)
    layers = {la["name"]: la for la in doc["layers"]}
    assert [layers[n]["type"] for n in ("q", "k", "scores", "softmax", "pv")] == [
        "fc", "fc", "other", "softmax", "matmul"]
    scores = layers["scores"]
    assert scores["op_type"] == "Einsum" and "unknown_op" in scores["flags"]
    assert scores["fallback"] and scores["out_of_design_space"] and "no_data" in scores["ood_reasons"]
    assert scores["prediction_ms"] > 0
    assert doc["n_fallback"] == 1 and doc["n_layers"] == 5
    assert doc["uncalibrated"]["total_ms"] == pytest.approx(sum(la["prediction_ms"] for la in doc["layers"]))
    assert any("outside the layer vocabulary" in w and "Einsum" in w for w in doc["warnings"])
    # out of the calibration's scope: said so, and the band no narrower than the uncalibrated one
    assert doc["calibration"]["applied"] and doc["calibration"]["in_scope"] is False
    assert any("out of the scope" in w and "coverage is not guaranteed" in w for w in doc["warnings"])
    lo, hi = doc["intervals"]["CM_LV"]["0.9"]
    u_lo, u_hi = doc["uncalibrated"]["intervals"]["CM_LV"]["0.9"]
    assert lo <= u_lo and hi >= u_hi
