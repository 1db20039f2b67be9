"""A network's CM_O interval comes with the layers that drive it, and why
(:mod:`estimator.drivers`), where a user meets it: ``estimator predict`` (text and
``--json``) and the Python API.

Runs on the shipped, measured ``host-cpu`` profile (its data never changes, so its models
and numbers are deterministic; the models come from the local model cache) and ResNet-18
from the zoo at 2048x2048: its convolutions lie beyond the benchmarked FLOPs, and its
network CM_O upper bound is more than 10x its estimate. The service and the in-process
interface are compared in ``tests/test_interface.py``, the NAS report in
``tests/test_nas.py``.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from estimator.cli import main as estimator_main
from estimator.interface import WIDE_CM_O_FACTOR

pytestmark = pytest.mark.slow

DEVICE = "host-cpu"
PROFILES = Path(__file__).resolve().parents[1] / "profiles"


@pytest.fixture(scope="module")
def far(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from estimator import zoo

    path = tmp_path_factory.mktemp("drivers") / "resnet18_2048.onnx"
    path.write_bytes(zoo.export_onnx("resnet18", 2048))
    return path


@pytest.fixture(scope="module")
def est():
    from estimator.predict import Estimator

    return Estimator.from_profile(DEVICE, root=PROFILES)


def _predict(capsys: pytest.CaptureFixture, *argv: str) -> str:
    assert estimator_main(["predict", *argv, "--device", DEVICE, "--profiles", str(PROFILES), "--no-progress"]) == 0
    return capsys.readouterr().out


def test_cli_text_names_the_drivers_right_under_the_cm_o_line(far, capsys):
    out = _predict(capsys, str(far)).splitlines()
    i = next(k for k, line in enumerate(out) if line.startswith("  CM_O: 0.9: "))
    head = out[i + 1]
    assert head.startswith("    CM_O upper bound ") and "x the estimate; the layers that drive it" in head
    times = float(head.split(" is ", 1)[1].split("x the estimate")[0])
    assert times > WIDE_CM_O_FACTOR
    named = out[i + 2:i + 7]
    assert named[0].startswith("      #0 /conv1/Conv (conv2d) ")
    assert all(line.startswith("      #") and "flops=" in line and "> benchmarked max 1.994e+09" in line
               for line in named)
    assert out[i + 7].startswith("      the other layers: ")
    # the uncalibrated CM_O line (wide too) points back to them
    j = next(k for k, line in enumerate(out) if k > i and line.startswith("  CM_O: 0.9: "))
    assert out[j + 1] == "    (the layers that drive CM_O: listed above)"


def test_cli_json_carries_the_drivers_with_the_out_of_range_features(far, capsys):
    doc = json.loads(_predict(capsys, str(far), "--json", "--confidence", "0.8,0.95"))
    drivers = doc["cm_o_drivers"]
    assert 1 <= len(drivers) <= 5 and doc["intervals"]["CM_O"]["0.95"][1] > WIDE_CM_O_FACTOR * doc["total_ms"]
    shares = [d["share"] for d in drivers]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1 + 1e-12
    top = drivers[0]
    row = doc["layers"][top["index"]]
    assert (top["name"], top["type"], top["reasons"]) == (row["name"], row["type"], row["ood_reasons"])
    assert top["confidence"] == 0.95 and top["cm_o_upper_ms"] == row["intervals"]["CM_O"]["0.95"][1]
    flops = next(o for o in top["out_of_range"] if o["feature"] == "flops")
    assert flops["value"] == row["features"]["flops"] > flops["max"]
    assert "range:flops" in top["reasons"] and f"flops={flops['value']:.4g} > benchmarked max" in top["why"]
    assert top["knn_ratio"] is None  # given only when every feature is in range


def test_python_api_drivers_follow_the_per_layer_intervals(est, far):
    net = est.estimate_network(far, 0.9)
    assert net.interval("CM_O", 0.9)[1] > WIDE_CM_O_FACTOR * net.total_ms
    widths = [row.intervals["CM_O"][0.9][1] - row.prediction_ms for row in net.layers]
    assert len(net.cm_o_drivers) == 5
    for d in net.cm_o_drivers:  # share: the layer's CM_O upper - estimate over the sum of it over all layers
        assert d["share"] == pytest.approx(widths[d["index"]] / sum(widths), rel=1e-12)
        assert d["out_of_range"] and net.layers[d["index"]].out_of_design_space
    assert net.to_dict()["cm_o_drivers"] == net.cm_o_drivers
    # without the rows, and on the reference path: the same layers, the same reasons
    lean = est.estimate_network(far, 0.9, per_layer=False)
    assert lean.cm_o_drivers == net.cm_o_drivers
    ref = est.estimate_network(far, 0.9, fast=False)
    assert [(d["index"], d["why"]) for d in ref.cm_o_drivers] == [(d["index"], d["why"]) for d in net.cm_o_drivers]
    for a, b in zip(ref.cm_o_drivers, net.cm_o_drivers):
        assert a["share"] == pytest.approx(b["share"], rel=1e-9)


def test_a_network_inside_the_design_space_names_none(est):
    from estimator import zoo

    net = est.estimate_network(zoo.export_onnx("resnet18", 224), 0.9)
    assert net.n_out_of_design_space == 0 and net.interval("CM_O", 0.9)[1] <= WIDE_CM_O_FACTOR * net.total_ms
    assert net.cm_o_drivers == [] and net.to_dict()["cm_o_drivers"] == []


def test_why_reads_the_knn_distance_and_the_missing_data(est):
    from estimator.inprocess import layers_from_parts
    from estimator.interface import spec_parts

    # every feature inside the benchmarked ranges, but far from every benchmarked row
    layers = layers_from_parts([spec_parts(("globalpool", {"h": 1000, "w": 1000, "c": 2000}), 0)], "layers")
    net = est.estimate_network(SimpleNamespace(layers=layers, warnings=[], free_nodes={}, name=""), 0.9)
    (d,) = net.cm_o_drivers
    assert d["reasons"] == ["knn"] and d["out_of_range"] == [] and d["knn_ratio"] > 1 and d["share"] == 1.0
    assert d["why"].startswith("every feature in the benchmarked range, but k-NN distance ")
    assert f"{d['knn_ratio']:.3g}x the globalpool threshold" in d["why"]

    import torch
    from torch import nn

    from estimator import zoo

    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 16, 3, padding=1)
            self.wide = nn.Conv2d(16, 16, 31, padding=15)  # no 31x31 kernel was benchmarked

        def forward(self, x):  # type: ignore[no-untyped-def]
            return torch.cumsum(self.wide(torch.relu(self.conv(x))), dim=1)  # CumSum: no data anywhere

    odd = est.estimate_network(zoo.export_onnx(Odd(), input_shape=(1, 3, 32, 32)), 0.9)
    cumsum = next(d for d in odd.cm_o_drivers if d["op_type"] == "CumSum")
    assert cumsum["why"] == "no benchmark data for other(CumSum) on this device: roofline fallback"
    wide = next(d for d in odd.cm_o_drivers if "range:k_h" in d["reasons"])
    assert "k_h=31 > benchmarked max 11 (2.82x)" in wide["why"] and "k_w=31 > benchmarked max 11" in wide["why"]
