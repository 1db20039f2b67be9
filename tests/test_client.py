"""The Python client (:mod:`service.client`) against a real server on a free loopback port,
with a REAL device profile measured here once per session (``tests/service_support.py``)
and real ONNX models from the torch zoo."""
from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from estimator.errors import UserError
from service.client import EstimationClient, EstimationError, LayerResult, NetworkResult, strip_initializers
from service.server import EmbeddedServer
from tests.service_support import DEVICE, ProfileSet, conv_net_onnx, free_port, profile_set, self_signed_cert

pytestmark = pytest.mark.slow

CONV = {"h": 28, "w": 28, "c_in": 16, "c_out": 32, "k_h": 3, "k_w": 3}


@pytest.fixture(scope="session")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> ProfileSet:
    return profile_set(tmp_path_factory)


@pytest.fixture(scope="module")
def server(profiles: ProfileSet):
    with EmbeddedServer(profiles.root, cache_root=profiles.cache, workers=4) as srv:
        yield srv


@pytest.fixture()
def client(server: EmbeddedServer):
    with EstimationClient(server.address, timeout_s=120) as c:
        yield c


@pytest.fixture(scope="module")
def mobilenet() -> bytes:
    from estimator import zoo

    return zoo.export_onnx("mobilenet_v2", 96)


def test_the_client_imports_no_estimator_internals() -> None:
    src = Path(__file__).resolve().parent.parent / "service" / "client.py"
    imported = set()
    for node in ast.walk(ast.parse(src.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    # the interface it implements, with its plain records, and the one definition of a
    # weightless model (a leaf module: onnx only)
    assert {m for m in imported if m.startswith("estimator")} == {"estimator.interface", "estimator.onnx_strip"}
    assert not {m for m in imported if m.startswith(("service.server", "bench", "nas"))}
    interface = Path(__file__).resolve().parent.parent / "estimator" / "interface.py"
    below = {n.module for n in ast.walk(ast.parse(interface.read_text())) if isinstance(n, ast.ImportFrom) and n.level}
    assert below == {"errors"}  # the interface itself stands on the error base only
    strip_src = Path(__file__).resolve().parent.parent / "estimator" / "onnx_strip.py"
    leaf = set()
    for node in ast.walk(ast.parse(strip_src.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            leaf.add(node.module)
        elif isinstance(node, ast.Import):
            leaf.update(a.name for a in node.names)
    assert leaf <= {"__future__", "os", "pathlib", "typing", "onnx"}


def test_list_devices(client: EstimationClient) -> None:
    devs = client.list_devices()
    assert [d["name"] for d in devs] == [DEVICE]
    d = devs[0]
    assert d["provenance"]["kind"] == "measured" and d["runner"] == "onnxruntime"
    lo, hi = d["coverage"]["conv2d"]["ranges"]["c_in"]
    assert 1 <= lo <= hi and d["coverage"]["conv2d"]["n_samples"] >= 5
    assert "reshape" in d["fallback_types"]
    assert d["refined"] == {"configurations": 0}  # not refined
    info = client.server_info()
    assert info["devices"] == [DEVICE] and info["limits"]["max_layers"] > 0


def test_a_refined_section_survives_the_wire() -> None:
    from proto import estimation_pb2 as pb2
    from service.client import refinement_dict
    from service.server import refinement_pb

    summary = {"configurations": 42, "base": "host-cpu", "targets": ["onnx:resnet18", "zoo:mnasnet"],
               "excluded": ["zoo:ghostnet"], "rounds": 2, "device_seconds": 61.5, "runner": "onnxruntime",
               "runner_options": {"threads": "1"}, "source": "`bench refine`", "date": "2026-11-24T10:00:00+00:00"}
    wire = pb2.Refinement.FromString(refinement_pb(summary).SerializeToString())
    assert refinement_dict(wire) == summary
    assert refinement_dict(refinement_pb({"configurations": 0})) == {"configurations": 0}
    assert refinement_dict(pb2.DeviceInfo().refined) == {"configurations": 0}  # an older server sends none


def test_zoo_network_full_and_stripped_give_the_same_estimate(client: EstimationClient, mobilenet: bytes) -> None:
    stripped = strip_initializers(mobilenet).SerializeToString()
    assert len(stripped) < len(mobilenet) / 20
    full = client.estimate_network(mobilenet, DEVICE, strip=False, confidence=(0.9, 0.95))
    lean = client.estimate_network(mobilenet, DEVICE, confidence=(0.9, 0.95))  # strip=True by default
    assert isinstance(full, NetworkResult) and full.ok and not full.cached and not lean.cached
    assert full.n_layers == lean.n_layers == len(full.layers) > 50
    assert lean.total_ms == pytest.approx(full.total_ms, rel=1e-12)
    assert lean.intervals.keys() == full.intervals.keys() == {"CM_TV", "CM_LV", "CM_O"}
    for m in ("CM_TV", "CM_LV", "CM_O"):
        for c in (0.9, 0.95):
            assert lean.interval(m, c) == pytest.approx(full.interval(m, c), rel=1e-12)
            lo, hi = lean.interval(m, c)
            assert lo <= lean.total_ms <= hi
    assert [(l["name"], l["type"], l["prediction_ms"]) for l in lean.layers] == \
        [(l["name"], l["type"], l["prediction_ms"]) for l in full.layers]
    # the server did the onnxsim path for the full model and the shape-only path for the stripped one
    assert any("onnxsim skipped" in w for w in lean.warnings)
    assert not any("onnxsim skipped" in w for w in full.warnings)
    row = lean.layers[0]
    assert set(row) >= {"name", "type", "op_type", "features", "prediction_ms", "intervals", "out_of_design_space",
                        "fallback", "flags"}
    assert lean.n_fallback == sum(l["fallback"] for l in lean.layers)
    assert lean.n_out_of_design_space == sum(l["out_of_design_space"] for l in lean.layers)
    # path and ModelProto inputs are the same question
    again = client.estimate_network(onnx.load_from_string(mobilenet), DEVICE, confidence=(0.9, 0.95))
    assert again.cached and again.total_ms == lean.total_ms


def test_strip_initializers_keeps_what_shapes_need(tmp_path: Path) -> None:
    from estimator import zoo

    big = numpy_helper.from_array(np.ones((64, 3, 3, 3), dtype="float32"), "w")
    shape = numpy_helper.from_array(np.array([1, -1], dtype="int64"), "shape")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], dtype="float32"), "scales")
    const = helper.make_node("Constant", [], ["bias"], value=numpy_helper.from_array(
        np.zeros(64, dtype="float32"), "bias_t"))
    g = helper.make_graph(
        [const, helper.make_node("Conv", ["x", "w", "bias"], ["y"], pads=[1, 1, 1, 1]),
         helper.make_node("Resize", ["y", "", "scales"], ["z"], mode="nearest"),
         helper.make_node("Reshape", ["z", "shape"], ["out"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], [big, shape, scales])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    before = model.SerializeToString()
    s = strip_initializers(model)
    assert model.SerializeToString() == before  # the input is not modified
    inits = {t.name: t for t in s.graph.initializer}
    assert list(inits["w"].dims) == [64, 3, 3, 3] and not inits["w"].raw_data and not inits["w"].float_data
    assert numpy_helper.to_array(inits["shape"]).tolist() == [1, -1]
    assert numpy_helper.to_array(inits["scales"]).tolist() == [1, 1, 2, 2]
    assert "bias" in inits and list(inits["bias"].dims) == [64] and not inits["bias"].raw_data
    assert [n.op_type for n in s.graph.node] == ["Conv", "Resize", "Reshape"]
    inferred = onnx.shape_inference.infer_shapes(s, data_prop=True)
    out = [vi for vi in inferred.graph.output if vi.name == "out"][0]
    assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [1, 64 * 16 * 16]
    # a path works, and a ResNet-50 query is kilobytes, not 100 MB
    p = tmp_path / "r50.onnx"
    p.write_bytes(zoo.export_onnx("resnet50", 224))
    lean = strip_initializers(p).SerializeToString()
    assert p.stat().st_size > 90e6 and len(lean) < 100e3


def test_layer_lists_and_estimate_layers(client: EstimationClient) -> None:
    specs = [
        {"type": "conv2d", "params": CONV, "name": "stem"},
        ("dwconv2d", {"h": 28, "w": 28, "c": 32, "k_h": 3, "k_w": 3}),
        ("activation", {"h": 28, "w": 28, "c": 32, "kind": "relu6"}, "act"),
        ("concat", {"h": 28, "w": 28, "channels": [32, 32]}),
        {"type": "transpose", "params": {"h": 7, "w": 7, "c": 64, "rank": 4}},  # no data: fallback
    ]
    rows = client.estimate_layers(specs, DEVICE, confidence=(0.8, 0.9))
    assert [r.name for r in rows] == ["stem", "dwconv2d", "act", "concat", "transpose"]
    assert all(isinstance(r, LayerResult) and r.prediction_ms > 0 for r in rows)
    assert rows[4].fallback and rows[4].out_of_design_space and rows[4].t_op_ms is None and "no_data" in rows[4].ood_reasons
    assert rows[0].features["c_out"] == 32 and rows[0].t_op_ms is not None
    lo, hi = rows[0].interval("CM_O", 0.9)
    assert lo <= rows[0].prediction_ms <= hi
    net = client.estimate_network(specs, DEVICE, confidence=0.9)
    assert net.n_layers == 5 and net.total_ms == pytest.approx(sum(r.prediction_ms for r in rows), rel=1e-9)
    assert net.n_fallback == 1 and [l["name"] for l in net.layers] == [r.name for r in rows]
    full = client.estimate_layers_response(specs[:1], DEVICE)
    assert full["model_version"] and full["layers"][0].prediction_ms == rows[0].prediction_ms


def test_stream_of_networks_in_order_with_a_bad_item(client: EstimationClient, mobilenet: bytes) -> None:
    small = conv_net_onnx(32)
    pulled: list[int] = []

    def items():
        for i, item in enumerate([(small, DEVICE), (b"not onnx at all", DEVICE),
                                  {"model": mobilenet, "device": DEVICE, "confidence": [0.8], "per_layer": True},
                                  (small, "imx93"), ([("add", {"h": 4, "w": 4, "c": 4})], DEVICE), (small, DEVICE)]):
            pulled.append(i)
            yield item

    out = list(client.estimate_networks(items()))
    assert pulled == list(range(6)) and len(out) == 6
    assert [r.ok for r in out] == [True, False, True, False, True, True]
    assert out[1].error.code == "INVALID_ARGUMENT" and isinstance(out[1].error, UserError)
    assert out[3].error.code == "NOT_FOUND" and "imx93" in out[3].error.message
    with pytest.raises(EstimationError):
        out[3].raise_for_error()
    assert out[2].layers and list(out[2].intervals["CM_LV"]) == [0.8]
    assert not out[0].layers  # per_layer defaults to off on streams
    assert out[5].total_ms == out[0].total_ms and out[5].cached
    assert [r.request_id for r in out] == [str(i) for i in range(6)]


def test_a_stream_item_that_cannot_be_sent_is_answered_in_its_place(profiles: ProfileSet, tmp_path: Path) -> None:
    """A missing file, a model of the wrong kind, a malformed item, a model larger than the
    server takes (gRPC would refuse it in transport and end the whole stream) and an empty
    confidence list each get an error result in their place; the stream goes on."""
    small = conv_net_onnx(32)
    r = np.random.default_rng(0)
    big = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(r.random(400_000).astype(np.float32), "unused")]))  # 1.6 MB of weights
    items = [(small, DEVICE), (tmp_path / "missing.onnx", DEVICE), (12345, DEVICE), (small,),
             {"model": big, "device": DEVICE, "strip": False}, {"model": small, "device": DEVICE, "confidence": []},
             (small, DEVICE)]
    with EmbeddedServer(profiles.root, cache_root=profiles.cache, max_message_mb=1.0) as srv, \
            EstimationClient(srv.address, timeout_s=120) as c:
        out = list(c.estimate_networks(items))
        with pytest.raises(EstimationError, match=r"RESOURCE_EXHAUSTED: the ONNX model is \d+ bytes; this server "
                                                  r"accepts at most 1048576 bytes"):
            c.estimate_network(big, DEVICE, strip=False)
    assert [x.ok for x in out] == [True, False, False, False, False, False, True]
    assert [x.request_id for x in out] == [str(i) for i in range(7)]
    assert out[6].total_ms == out[0].total_ms
    assert [x.error.code for x in out[1:6]] == ["NOT_FOUND", "INVALID_ARGUMENT", "INVALID_ARGUMENT",
                                                "RESOURCE_EXHAUSTED", "INVALID_ARGUMENT"]
    assert out[1].error.message.startswith("stream item 1: FileNotFoundError") and "missing.onnx" in out[1].error.message
    assert "give (model, device)" in out[3].error.message
    assert "this server accepts at most 1048576 bytes" in out[4].error.message
    assert out[5].error.message == "stream item 5: at least one confidence level is needed"


def test_errors_are_estimation_errors(client: EstimationClient) -> None:
    bad, good = client.estimate_layers([("conv2d", {"h": 8}), ("conv2d", CONV)], DEVICE)  # a bad item, not a bad call
    assert not bad.ok and good.ok and good.prediction_ms > 0
    with pytest.raises(EstimationError) as ei:
        bad.raise_for_error()
    assert ei.value.code == "INVALID_ARGUMENT" and ei.value.message.startswith("layers[0] (conv2d): missing parameter")
    assert isinstance(ei.value, UserError) and ei.value.grpc_status == "INVALID_ARGUMENT"
    with pytest.raises(EstimationError) as ei:
        client.estimate_network(b"\x00\x01\x02", DEVICE)
    assert ei.value.code == "INVALID_ARGUMENT"
    with pytest.raises(EstimationError) as ei:
        client.estimate_layers([("conv2d", CONV)], "nope")
    assert ei.value.code == "NOT_FOUND" and ei.value.request_id
    with pytest.raises(EstimationError) as ei:
        client.estimate_layers([("conv2d", CONV)], DEVICE, confidence=2.0)
    assert ei.value.code == "INVALID_ARGUMENT"
    with pytest.raises(TypeError):
        client.estimate_layers(["conv2d"], DEVICE)
    with pytest.raises(TypeError, match="unknown key.*'options'"):  # never silently dropped
        client.estimate_layers([{"type": "conv2d", "params": CONV, "options": {"act": "relu6"}}], DEVICE)


def test_retries_unavailable_until_the_server_comes_up(profiles: ProfileSet) -> None:
    port = free_port()
    result: dict[str, object] = {}

    def call() -> None:
        with EstimationClient(f"127.0.0.1:{port}", retries=10, timeout_s=60) as c:
            try:
                result["rows"] = c.estimate_layers([("conv2d", CONV)], DEVICE)
            except Exception as e:  # noqa: BLE001
                result["error"] = e

    th = threading.Thread(target=call)
    th.start()
    time.sleep(0.5)  # the first attempts find nothing listening: UNAVAILABLE, retried
    assert th.is_alive()
    srv = EmbeddedServer(profiles.root, port, cache_root=profiles.cache)
    srv.start(wait=False)  # and then a server that is still loading: UNAVAILABLE too
    try:
        th.join(120)
        assert "error" not in result, result
        assert result["rows"][0].prediction_ms > 0
    finally:
        srv.stop(0)
    with EstimationClient(f"127.0.0.1:{port}", retries=1, timeout_s=5) as c:  # nobody there any more
        t0 = time.monotonic()
        with pytest.raises(EstimationError) as ei:
            c.list_devices()
        assert ei.value.code == "UNAVAILABLE" and time.monotonic() - t0 < 5


def test_token_and_tls(profiles: ProfileSet, tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    with EmbeddedServer(profiles.root, cache_root=profiles.cache, token="abc", tls_cert=cert, tls_key=key) as srv:
        with EstimationClient(srv.address, token="abc", root_certificates=cert) as c:
            c.wait_ready(30)
            assert c.list_devices()[0]["name"] == DEVICE
            assert c.estimate_layers([("conv2d", CONV)], DEVICE)[0].prediction_ms > 0
        with EstimationClient(srv.address, token="wrong", root_certificates=cert.read_bytes()) as c:
            with pytest.raises(EstimationError) as ei:
                c.list_devices()
            assert ei.value.code == "UNAUTHENTICATED"
            with pytest.raises(EstimationError) as ei:
                list(c.estimate_networks([([("add", {"h": 2, "w": 2, "c": 2})], DEVICE)]))
            assert ei.value.code == "UNAUTHENTICATED"


def test_stream_with_an_ask_tell_source_does_not_deadlock(client: EstimationClient) -> None:
    """NAS-style: the next candidate is only produced after the previous result was told."""
    import queue

    told: queue.Queue[float] = queue.Queue()

    def ask():
        for i in range(5):
            yield ([("add", {"h": 4, "w": 4, "c": 4 + i})], DEVICE)
            told.get(timeout=60)  # waits for the consumer; raises queue.Empty (fails) instead of hanging

    n = 0
    for res in client.estimate_networks(ask()):
        assert res.ok and res.request_id == str(n)
        n += 1
        told.put(res.total_ms)
    assert n == 5


def test_stream_resumes_on_a_restarted_server(profiles: ProfileSet) -> None:
    port = free_port()
    srv = EmbeddedServer(profiles.root, port, cache_root=profiles.cache).start()
    restarted = threading.Event()
    servers = [srv]

    def items():
        for i in range(8):
            if i == 3:
                assert restarted.wait(60), "the consumer never restarted the server"
            yield ([("add", {"h": 4, "w": 4, "c": 4 + i})], DEVICE)

    out = []
    try:
        with EstimationClient(f"127.0.0.1:{port}", retries=10, timeout_s=60) as c:
            for i, res in enumerate(c.estimate_networks(items())):
                out.append(res)
                if i == 2:  # items 3.. do not exist yet: they can only be answered by the new server
                    servers[0].stop(0)
                    servers.append(EmbeddedServer(profiles.root, port, cache_root=profiles.cache).start())
                    restarted.set()
    finally:
        for s in servers:
            s.stop(0)
    assert [r.request_id for r in out] == [str(i) for i in range(8)]
    assert all(r.ok for r in out), [r.error for r in out if not r.ok]
    assert len({r.total_ms for r in out}) == 8
