"""The bench agent end to end on loopback: a real gRPC server (in this process, on a free
port) wrapping the LiteRT runner, timing a real int8 TFLite model, and the ``agent``
runner talking to it. Every refusal (malformed model, oversized model, wrong or missing
token, wrong format) gets its precise status, and the agent answers a good request after
each. Also: timings never overlap, ``bench agent`` stops cleanly on SIGTERM, and TLS.

Needs the ``tflite`` extra (TensorFlow to write the model, ai-edge-litert to time it).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

pytest.importorskip("ai_edge_litert")
tm = pytest.importorskip("bench.tflite_models", reason="needs the tflite extra (TensorFlow)", exc_type=ImportError)

from bench.agent import make_server  # noqa: E402
from bench.modelgen import padded_model  # noqa: E402
from bench.runners.base import Prepared, RunnerError, Timing, get_runner  # noqa: E402
from bench.runners.litert_runner import LiteRTRunner  # noqa: E402
from proto import bench_agent_pb2 as pb2  # noqa: E402
from proto import bench_agent_pb2_grpc as pb2_grpc  # noqa: E402

from .service_support import agent_port  # noqa: E402

TOKEN = "s3cret-token"
MAX_BYTES = 200_000
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model() -> bytes:
    return tm.to_tflite(padded_model("conv2d", dict(h=8, w=8, c_in=4, c_out=8, k_h=3, k_w=3, s_h=2, s_w=2)), "int8")


@pytest.fixture(scope="module")
def agent():
    server = make_server(LiteRTRunner(threads=1), host="127.0.0.1", port=0, token=TOKEN, max_model_bytes=MAX_BYTES)
    yield server
    server.stop(grace=1.0)


@pytest.fixture(scope="module")
def stub(agent):
    with grpc.insecure_channel(agent.address) as ch:
        yield pb2_grpc.BenchAgentStub(ch)


AUTH = (("authorization", f"Bearer {TOKEN}"),)


def _good(stub, model: bytes) -> pb2.TimeResponse:
    r = stub.Time(pb2.TimeRequest(model=model, model_format="tflite", warmup=1, runs=5), metadata=AUTH, timeout=60)
    assert r.timing.n == 5 and r.timing.median_ms > 0 and r.timing.min_ms <= r.timing.median_ms
    return r


def _status(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as ei:
        call()
    return ei.value


def test_agent_runner_times_a_real_model_through_the_agent(agent, model) -> None:
    with get_runner("agent", agent=agent.address, token=TOKEN) as r:
        assert r.model_format == "tflite" and r.provenance == "measured"
        env = r.environment()
        assert env["runner"] == "litert" and env["runtime"] == "ai_edge_litert" and env["runtime_version"]
        assert env["agent"] == agent.address and env["threads"] == 1
        prep = r.prepare(model)
        t = r.time(prep, warmup=2, runs=7)
        assert isinstance(t, Timing) and t.n == 7 and 0 < t.min_ms <= t.median_ms <= t.p90_ms
        assert prep.info["precision"] == "int8"  # the agent's view of the model, merged
        assert prep.info["inputs"][0]["shape"] == [1, 8, 8, 1]
        with pytest.raises(RunnerError, match="per-layer"):  # LiteRT has no per-layer profiler
            r.per_layer(prep)
        with pytest.raises(RunnerError, match="at most 200000 bytes"):
            r.prepare(b"\0" * (MAX_BYTES + 1))


def test_malformed_model_is_invalid_argument_and_agent_keeps_serving(stub, model) -> None:
    e = _status(lambda: stub.Time(pb2.TimeRequest(model=b"not a flatbuffer" * 10, model_format="tflite", runs=3),
                                  metadata=AUTH, timeout=30))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "rejected the model" in e.details() and "TFLite" in e.details()
    e = _status(lambda: stub.Time(pb2.TimeRequest(model=b"\0\0\0\0TFL3" + b"\x05" * 100, model_format="tflite", runs=3),
                                  metadata=AUTH, timeout=30))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    _good(stub, model)


def test_oversized_model_is_resource_exhausted_and_agent_keeps_serving(stub, model) -> None:
    big = model + b"\0" * (MAX_BYTES + 10 - len(model))
    e = _status(lambda: stub.Time(pb2.TimeRequest(model=big, model_format="tflite", runs=3), metadata=AUTH, timeout=30))
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"at most {MAX_BYTES} bytes" in e.details()
    _good(stub, model)


def test_wrong_or_missing_token_is_unauthenticated_and_agent_keeps_serving(agent, stub, model) -> None:
    req = pb2.TimeRequest(model=model, model_format="tflite", runs=3)
    for md in [(("authorization", "Bearer wrong"),), (), (("authorization", TOKEN),)]:
        e = _status(lambda: stub.Time(req, metadata=md, timeout=30))
        assert e.code() == grpc.StatusCode.UNAUTHENTICATED, md
        e = _status(lambda: stub.Describe(pb2.DescribeRequest(), metadata=md, timeout=30))
        assert e.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(RunnerError, match="UNAUTHENTICATED"):
        get_runner("agent", agent=agent.address, token="wrong")
    _good(stub, model)


def test_bad_requests_are_invalid_argument(stub, model) -> None:
    for req, words in [
        (pb2.TimeRequest(model=model, model_format="onnx", runs=3), "takes tflite models"),
        (pb2.TimeRequest(model=model, model_format="tflite", runs=0), "runs must be"),
        (pb2.TimeRequest(model=b"", model_format="tflite", runs=3), "empty model"),
    ]:
        e = _status(lambda: stub.Time(req, metadata=AUTH, timeout=30))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and words in e.details()
    _good(stub, model)


def test_describe_reports_limits_and_environment(stub) -> None:
    d = stub.Describe(pb2.DescribeRequest(), metadata=AUTH, timeout=30)
    assert d.runner == "litert" and d.model_format == "tflite" and d.provenance == "measured"
    assert d.max_model_bytes == MAX_BYTES and d.max_runs > 0
    assert json.loads(d.environment_json)["runtime"] == "ai_edge_litert"


def test_health_answers_without_token(agent) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(agent.address) as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="benchagent.v1.BenchAgent"),
                                                    timeout=10)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


class _OverlapProbe(LiteRTRunner):
    """LiteRT runner that records how many time() calls run at once."""

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.active = 0
        self.max_active = 0
        self._mu = threading.Lock()

    def time(self, prepared: Prepared, *, warmup: int, runs: int) -> Timing:
        with self._mu:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            time.sleep(0.05)  # widen the window in which an overlap would show
            return super().time(prepared, warmup=warmup, runs=runs)
        finally:
            with self._mu:
                self.active -= 1


def test_timings_never_overlap(model) -> None:
    probe = _OverlapProbe()
    server = make_server(probe, port=0, max_workers=8)
    try:
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                with grpc.insecure_channel(server.address) as ch:
                    pb2_grpc.BenchAgentStub(ch).Time(pb2.TimeRequest(model=model, model_format="tflite", runs=3),
                                                     timeout=60)
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors
        assert probe.max_active == 1
    finally:
        server.stop(grace=1.0)


def test_tls(tmp_path: Path, model) -> None:
    pytest.importorskip("cryptography")  # only to make a test certificate
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_pem, key_pem = tmp_path / "agent.crt", tmp_path / "agent.key"
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    server = make_server(LiteRTRunner(), host="127.0.0.1", port=0, token=TOKEN, tls_cert=cert_pem, tls_key=key_pem)
    try:
        with get_runner("agent", agent=f"localhost:{server.port}", token=TOKEN, tls_ca=cert_pem) as r:
            assert r.time(r.prepare(model), warmup=0, runs=2).n == 2
        with pytest.raises(RunnerError):  # a plaintext client cannot talk to a TLS agent
            get_runner("agent", agent=f"localhost:{server.port}", token=TOKEN, connect_timeout_s=3)
    finally:
        server.stop(grace=1.0)


def test_bench_agent_command_serves_until_sigterm(tmp_path: Path, model) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    code = ("import sys; from estimator.cliutil import run; "
            "sys.exit(run('bench', 'bench', ['bench.cmd_agent'], sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", code, "agent", "--runner", "litert", "--threads", "1",
                             "--port", "0", "--token-file", str(token_file), "--max-model-mb", "1"],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        port = agent_port(proc, "litert", "tflite")
        with get_runner("agent", agent=f"127.0.0.1:{port}", token=TOKEN) as r:
            assert r.describe.max_model_bytes == 1 << 20
            assert r.time(r.prepare(model), warmup=1, runs=3).n == 3
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=60)[1]
        assert proc.returncode == 0, rest
        assert "bench agent: stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bench_agent_command_refuses_bad_options(tmp_path: Path) -> None:
    code = ("import sys; from estimator.cliutil import run; "
            "sys.exit(run('bench', 'bench', ['bench.cmd_agent'], sys.argv[1:]))")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    for args, words in [
        (["--port", "0", "--token-file", str(empty)], "is empty"),
        (["--port", "0", "--delegate", "/nonexistent/lib.so"], "does not exist"),
        (["--port", "0", "--max-model-mb", "0"], "--max-model-mb"),
    ]:
        out = subprocess.run([sys.executable, "-c", code, "agent", "--runner", "litert", *args], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out.stderr
        assert words in out.stderr and "Traceback" not in out.stderr
