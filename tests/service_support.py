"""A small REAL device profile for the service tests, measured here once per test session.

``bench run --runner onnxruntime`` times a few layer types (few samples, small layers,
few runs) on this machine, ``bench export`` writes the dataset and
:func:`estimator.profile.create_profile` turns it into ``<tmp>/profiles/tiny``. Nothing
synthetic; nothing written outside pytest's temporary directory. Training options are
small (few trees, ``min_rows=5``) so that every measured type gets a model.

Measured on the 1-core test box: about 10 s of benchmarking plus 5-10 s of training;
later servers load the trained models from ``<tmp>/model-cache``.
"""
from __future__ import annotations

import datetime
import ipaddress
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

DEVICE = "tiny"
TYPES = "conv2d,dwconv2d,add,globalpool,fc,activation,concat"
SAMPLES = 10
TRAINING = {"n_estimators": 20, "grid_estimators": 20, "grid_max_features": [1.0], "grid_min_samples_leaf": [1],
            "min_rows": 5}


@dataclass(frozen=True)
class ProfileSet:
    root: Path  # the profiles directory (holding DEVICE)
    cache: Path  # the model cache (cache_root / CL_CACHE_DIR)
    base: Path


_lock = threading.Lock()
_built: dict[Path, ProfileSet] = {}


def profile_set(tmp_path_factory: pytest.TempPathFactory) -> ProfileSet:
    """Build (once per session: cached by pytest's base temp dir) and return the profile."""
    key = tmp_path_factory.getbasetemp()
    with _lock:
        if key in _built:
            return _built[key]
        from bench import cli as bench_cli
        from estimator.predict import Estimator
        from estimator.profile import create_profile

        base = tmp_path_factory.mktemp("service-profile")
        db = base / "bench"
        rc = bench_cli.main(["run", "--device", DEVICE, "--runner", "onnxruntime", "--layers", TYPES,
                             "--samples", str(SAMPLES), "--warmup", "1", "--runs", "3", "--max-ops", "2e7",
                             "--out", str(db), "--no-progress"])
        assert rc == 0, "bench run failed"
        csv = base / f"{DEVICE}.csv"
        assert bench_cli.main(["export", str(db / f"{DEVICE}.sqlite"), "--csv", str(csv)]) == 0
        root = base / "profiles"
        create_profile(root, DEVICE, csv, source=f"pytest: bench run --samples {SAMPLES} --max-ops 2e7 ({TYPES})",
                       training=TRAINING)
        cache = base / "model-cache"
        Estimator.from_profile(DEVICE, root=root, cache_root=cache)  # train once, into the cache
        ps = ProfileSet(root=root, cache=cache, base=base)
        _built[key] = ps
        return ps


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent_port(proc: Any, runner: str, model_format: str, timeout: float = 120.0) -> int:
    """The port a ``bench agent`` subprocess (stderr piped, text) says it serves on, read from
    its start-up line; fails with what it printed if it does not say so in ``timeout`` s."""
    pattern = re.compile(rf"bench agent: runner {re.escape(runner)} \({re.escape(model_format)}\) on 127\.0\.0\.1:(\d+)")
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = pattern.search(line)
        if m:
            return int(m.group(1))
    pytest.fail("the agent did not start:\n" + "".join(lines))


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 / localhost: (cert.pem, key.pem)."""
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
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def conv_chain_onnx(n_layers: int, *, c: int = 8, hw: int = 16) -> bytes:
    """A long real ONNX chain of Conv+Relu layers (zero weights): small to send, and its
    import and estimate take about half a millisecond per layer on the server."""
    import onnx
    from onnx import TensorProto, helper

    nodes, inits, x = [], [], "x"
    for i in range(n_layers):
        inits.append(helper.make_tensor(f"w{i}", TensorProto.FLOAT, [c, c, 3, 3], [0.0] * (c * c * 9)))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, hw, hw])], inits)
    return onnx.helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def conv_net_onnx(resolution: int = 32, *, dynamic_hw: bool = False, kernel: int = 3, width: int = 8) -> bytes:
    """A small real torch network (conv, dwconv, add, pool, fc) exported to ONNX."""
    import onnx
    import torch
    import torch.nn as nn

    from estimator import zoo

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, kernel, 2), nn.BatchNorm2d(width), nn.ReLU())
            self.dw = nn.Sequential(nn.Conv2d(width, width, 3, 1, 1, groups=width), nn.ReLU6())
            self.pw = nn.Conv2d(width, width, 1)
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10))

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = self.stem(x)
            return self.head(y + self.pw(self.dw(y)))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = Net().eval()
    data = zoo.export_onnx(net, input_shape=(1, 3, resolution, resolution))
    if not dynamic_hw:
        return data
    m = onnx.load_from_string(data)
    for d in m.graph.input[0].type.tensor_type.shape.dim[2:]:
        d.Clear()
        d.dim_param = "hw"
    return m.SerializeToString()
