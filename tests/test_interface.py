"""The estimation interface's two implementations answer alike: the in-process estimator
(:class:`estimator.inprocess.InProcessEstimation`) and the gRPC client
(:class:`service.client.EstimationClient`) of a real server on a free loopback port, both
on a copy of the shipped ``host-cpu`` profile (calibrated on whole networks, with free ops:
every part of a result is exercised)."""
from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from estimator.inprocess import InProcessEstimation
from estimator.interface import Estimation, EstimationError, EstimationWarning, LayerResult, NetworkResult
from service.client import EstimationClient
from service.server import EmbeddedServer
from tests.service_support import free_port

pytestmark = pytest.mark.slow

DEVICE = "host-cpu"
#: what only the wire sets: the server's clock, the request id, its response cache
WIRE_ONLY = {"server_time_ms", "request_id", "cached"}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("interface") / "profiles"
    shutil.copytree(Path(__file__).resolve().parents[1] / "profiles" / DEVICE, root / DEVICE)
    return root


@pytest.fixture(scope="module")
def both(root: Path):
    with EmbeddedServer(root, free_port()) as srv, EstimationClient(srv.address, timeout_s=120) as client, \
            InProcessEstimation(root) as local:
        yield local, client


def _fields(r: NetworkResult) -> dict:
    return {k: v for k, v in vars(r).items() if k not in WIRE_ONLY}


def _error(call) -> EstimationError:  # noqa: ANN001
    with pytest.raises(EstimationError) as e:
        call()
    return e.value


def test_both_are_the_one_interface(both) -> None:
    local, client = both
    assert isinstance(local, Estimation) and isinstance(client, Estimation)
    assert local.where == "in-process" and client.where == client.address


def test_networks_get_equal_answers(both) -> None:
    from estimator import zoo

    local, client = both
    resnet = zoo.export_onnx("resnet18", 96)  # its Flatten is free on host-cpu: rows and layers do not line up
    mobile = zoo.export_onnx("mobilenet_v2", 96)
    for model, kw in ((resnet, {"confidence": (0.9, 0.95)}), (mobile, {"per_layer": False}),
                      (mobile, {"confidence": 0.8, "name": "renamed"})):
        a, b = local.estimate_network(model, DEVICE, **kw), client.estimate_network(model, DEVICE, **kw)
        assert _fields(a) == _fields(b)
    assert a.name == "renamed" and a.calibration["applied"] and a.uncalibrated is not None
    r = local.estimate_network(resnet, DEVICE)
    fc = next(l for l in r.layers if l["type"] == "fc")
    assert fc["nodes"] == [fc["name"]]  # its own node, not the free Flatten's before it


def test_cm_o_drivers_are_the_same_from_both(both) -> None:
    """ResNet-18 at 2048x2048 leaves the benchmarked FLOPs: both name the same layers that
    drive its CM_O interval, with the same reasons, with and without per-layer rows."""
    from estimator import zoo
    from estimator.interface import WIDE_CM_O_FACTOR

    local, client = both
    far = zoo.export_onnx("resnet18", 2048)
    for kw in ({}, {"per_layer": False, "confidence": (0.8, 0.95)}):
        a, b = local.estimate_network(far, DEVICE, **kw), client.estimate_network(far, DEVICE, **kw)
        assert _fields(a) == _fields(b)
        assert a.n_out_of_design_space > 0 and a.interval("CM_O", max(a.confidence))[1] > WIDE_CM_O_FACTOR * a.total_ms
        assert 1 <= len(b.cm_o_drivers) <= 5 and b.cm_o_drivers[0]["name"] == "/conv1/Conv"
        top = b.cm_o_drivers[0]
        assert top["confidence"] == max(kw.get("confidence", (0.9,)))
        assert {o["feature"] for o in top["out_of_range"]} >= {"flops", "h", "w"}
        assert "> benchmarked max" in top["why"] and top["knn_ratio"] is None


def test_a_server_without_cm_o_drivers_reads_as_none() -> None:
    """The field is new on the wire (an added field number: older clients skip it): a reply
    without it, from an older server, gives no drivers."""
    from proto import estimation_pb2 as pb2
    from service.client import network_result

    assert network_result(pb2.EstimateNetworkResponse(device=DEVICE, total_ms=1.0)).cm_o_drivers == []


def test_layer_batches_and_layer_lists_get_equal_answers(both) -> None:
    local, client = both
    specs = [{"type": "conv2d", "name": f"c{c}", "params": {"h": 28, "w": 28, "c_in": 16, "c_out": c, "k_h": 3,
                                                            "k_w": 3, "act": "relu"}} for c in (16, 48)]
    specs.append(("concat", {"h": 8, "w": 8, "channels": [16, 32]}))
    a, b = local.estimate_layers(specs, DEVICE, 0.9), client.estimate_layers(specs, DEVICE, 0.9)
    assert a == b and all(isinstance(x, LayerResult) and x.ok for x in a)
    assert _fields(local.estimate_network(specs, DEVICE)) == _fields(client.estimate_network(specs, DEVICE))


def test_a_batch_with_0_channel_and_bad_layers_gets_equal_answers(both) -> None:
    """A layer pruned to 0 channels costs 0 ms; a bad configuration gets its own error; the
    others are answered as without them, by both implementations alike."""
    local, client = both
    conv = {"h": 28, "w": 28, "c_in": 16, "c_out": 32, "k_h": 3, "k_w": 3}
    specs = [("conv2d", conv, "kept"), ("conv2d", dict(conv, c_out=0), "pruned"), ("nope", {"h": 8}, "x"),
             ("conv2d", dict(conv, groups=3), "g3"), ("concat", {"h": 8, "w": 8, "channels": [0, 0]}),
             ("fc", {"c_in": 1e300, "c_out": 1e300}), ("add", {"h": 14, "w": 14, "c": 32})]
    a, b = local.estimate_layers(specs, DEVICE, (0.8, 0.9)), client.estimate_layers(specs, DEVICE, (0.8, 0.9))
    assert a == b and [r.ok for r in a] == [True, True, False, False, True, False, True]
    assert [r.name for r in a] == ["kept", "pruned", "x", "g3", "concat", "fc", "add"]
    assert [a[0], a[6]] == local.estimate_layers([specs[0], specs[6]], DEVICE, (0.8, 0.9))  # as without the others
    assert a[0].prediction_ms > 0
    for r in (a[1], a[4]):
        assert r.prediction_ms == 0 and r.flags == ["zero_channels"] and r.error is None
        assert r.intervals == {m: {0.8: (0.0, 0.0), 0.9: (0.0, 0.0)} for m in ("CM_TV", "CM_LV", "CM_O")}
    assert a[2].error.code == "INVALID_ARGUMENT" and a[2].error.message.startswith("layers[2] (nope 'x'): unknown "
                                                                                    "layer type 'nope'")
    assert a[3].error.message == "layers[3] (conv2d 'g3'): groups=3 must divide c_in=16 and c_out=32"
    assert a[5].error.message.startswith("layers[5] (fc): ")
    for r in (a[2], a[3], a[5]):
        assert r.type == specs[a.index(r)][0] and r.prediction_ms == 0 and r.intervals == {}
        with pytest.raises(EstimationError) as ei:
            r.raise_for_error()
        assert ei.value is r.error and r.to_dict()["error"] == {"code": r.error.code, "message": r.error.message}
        with pytest.raises(EstimationError):
            r.interval("CM_LV", 0.9)
    assert a[0].raise_for_error() is a[0] and "error" not in a[0].to_dict()


def test_a_parameter_no_type_reads_or_a_value_of_the_wrong_kind_is_the_layers_own_error(both) -> None:
    """Never silently dropped: a misspelt parameter (``stride`` for ``s_h``/``s_w``), a
    globalpool mode that is neither avg nor max, fractional or non-numeric concat channels, a
    value that is no number; each fails only its own layer, alike in process and over gRPC."""
    local, client = both
    conv = {"h": 28, "w": 28, "c_in": 16, "c_out": 32, "k_h": 3, "k_w": 3}
    specs = [("conv2d", conv), ("conv2d", dict(conv, stride=2)), ("globalpool", {"h": 7, "w": 7, "c": 8, "mode": "mean"}),
             ("concat", {"h": 8, "w": 8, "channels": [16.7, 32]}), ("concat", {"h": 8, "w": 8, "channels": ["a", "b"]}),
             ("conv2d", dict(conv, h={"a": 1})), ("conv2d", dict(conv, groups=None)), ("concat", {"h": 8, "w": 8, "channels": [16.0, 32]}),
             ("activation", {"h": 8, "w": 8, "c": 8, "kind": "relu66"})]
    a, b = local.estimate_layers(specs, DEVICE), client.estimate_layers(specs, DEVICE)
    assert a == b and [r.ok for r in a] == [True, False, False, False, False, False, True, True, False]
    assert a[8].error.message.startswith("layers[8] (activation): activation kind 'relu66' unknown; known: relu, ")
    assert a[6] == a[0]  # None: as if not given
    msgs = [r.error.message for r in a if not r.ok]
    assert msgs[0].startswith("layers[1] (conv2d): unknown parameter 'stride' for conv2d; it reads ") and "s_h" in msgs[0]
    assert msgs[1] == "layers[2] (globalpool): globalpool mode 'mean' unknown; use 'avg' or 'max'"
    assert msgs[2] == "layers[3] (concat): parameter 'channels' must list integers, got '16.7' at 0"
    assert msgs[3] == "layers[4] (concat): parameter 'channels' must list integers, got 'a' at 0"
    assert msgs[4] == "layers[5] (conv2d): parameter 'h' must be a number, got \"{'a': 1}\""


def test_confidence_lists_and_empty_input_shapes_are_taken_alike(both) -> None:
    local, client = both
    conv = [("conv2d", {"h": 28, "w": 28, "c_in": 16, "c_out": 32, "k_h": 3, "k_w": 3})]
    for impl in both:
        with pytest.raises(EstimationError, match="INVALID_ARGUMENT: at least one confidence level is needed"):
            impl.estimate_network(conv, DEVICE, confidence=[])
        with pytest.raises(EstimationError, match="INVALID_ARGUMENT: at least one confidence level is needed"):
            impl.estimate_layers(conv, DEVICE, confidence=())
    levels = [0.9] * 17  # one level, given 17 times
    assert _fields(local.estimate_network(conv, DEVICE, confidence=levels)) == _fields(
        client.estimate_network(conv, DEVICE, confidence=levels))
    assert _fields(local.estimate_network(conv, DEVICE, input_shapes={})) == _fields(
        client.estimate_network(conv, DEVICE, input_shapes={}))


def test_what_concerns_a_layer_batch_is_warned_alike(both) -> None:
    """A list of layer results has no field for what concerns the whole request: both
    implementations issue it as an EstimationWarning."""
    local, client = both
    conv = {"h": 28, "w": 28, "c_in": 16, "c_out": 32, "k_h": 3, "k_w": 3}
    specs = [("conv2d", conv, "kept"), ("conv2d", dict(conv, c_out=0), "pruned"), ("nope", {"h": 8}, "x")]
    got = []
    for impl in (local, client):
        with pytest.warns(EstimationWarning) as rec:
            impl.estimate_layers(specs, DEVICE, 0.9)
        got.append(sorted(str(w.message) for w in rec))
    assert got[0] == got[1]
    assert any("0 channels" in m for m in got[0]) and any("1 of 3 layer(s) not estimated" in m for m in got[0])


def test_an_impossible_profile_row_is_warned_by_a_layer_batch(tmp_path: Path) -> None:
    """A row of measurements.csv that cannot be a latency is left out of training; a pruning
    tool asking for bare layers through the Python API hears it, with file and line."""
    root = tmp_path / "profiles"
    shutil.copytree(Path(__file__).resolve().parents[1] / "profiles" / DEVICE, root / DEVICE)
    path = root / DEVICE / "measurements.csv"
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    row = next(i for i, r in enumerate(rows) if r[0] == "maxpool")
    rows[row][rows[0].index("t_padded_ms")] = "nan"
    with path.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    with InProcessEstimation(root) as local, pytest.warns(EstimationWarning, match=rf"measurements.csv.*line {row + 1}"):
        r = local.estimate_layers([("maxpool", {"h": 28, "w": 28, "c": 32, "k_h": 3, "k_w": 3, "s_h": 2, "s_w": 2})],
                                  DEVICE, 0.9)
    assert r[0].ok and r[0].prediction_ms > 0


def test_devices_and_reloads_are_reported_alike(both) -> None:
    local, client = both
    assert local.list_devices() == client.list_devices()
    assert local.profile_errors() == client.profile_errors() == []
    ra, rb = local.reload_profiles(), client.reload_profiles()
    assert ra["devices"] == rb["devices"] == [DEVICE] and ra["errors"] == rb["errors"] == []


def test_refusals_carry_the_same_status_and_message(both) -> None:
    local, client = both
    for call in (lambda e: e.estimate_network(b"not onnx", DEVICE),
                 lambda e: e.estimate_network([("conv2d", {"h": 8})], DEVICE),
                 lambda e: e.estimate_network([("nope", {"h": 8})], DEVICE),
                 lambda e: e.estimate_network([("fc", {"c_in": 1e300, "c_out": 1e300})], DEVICE),
                 lambda e: e.estimate_layers([("conv2d", {"h": 8, "w": 8, "c_in": 4, "c_out": 4, "k_h": 3,
                                                          "k_w": 3})], DEVICE, confidence=1.5),
                 lambda e: e.estimate_layers([], DEVICE),
                 lambda e: e.estimate_layers([("nope", {"h": 8})], "no-such-device"),
                 lambda e: e.estimate_network(b"", "no-such-device")):
        a, b = _error(lambda: call(local)), _error(lambda: call(client))
        assert (a.code, a.message) == (b.code, b.message)
        assert a.code in ("INVALID_ARGUMENT", "NOT_FOUND")
    with pytest.raises(TypeError, match="layer spec 0"):  # refused before anything is estimated, by both
        local.estimate_layers([42], DEVICE)
