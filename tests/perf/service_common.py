"""Shared by the service perf scripts (``service_speed.py``, ``service_load.py``,
``service_fuzz.py``): where the server comes from, and generators of distinct real
workloads (ONNX networks and layer configurations).

Server: ``--address HOST:PORT`` uses a running ``estimation-service`` (``--token``,
``--root-cert``); otherwise an in-process :class:`service.server.EmbeddedServer` is
started on a free loopback port over ``--profiles`` (default: the profiles root).
``--build-tiny DIR`` first measures a small real profile on this machine with
``bench run --runner onnxruntime`` (about 10-20 s) for trying the scripts where no
profile exists yet; figures from it are not the product's figures.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.client import EstimationClient  # noqa: E402

TINY_TYPES = "conv2d,dwconv2d,add,globalpool,fc,activation,concat"


def add_server_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("server")
    g.add_argument("--address", default=None, help="a running service (default: start one in-process)")
    g.add_argument("--token", default=None)
    g.add_argument("--root-cert", default=None, help="PEM root certificate (TLS)")
    g.add_argument("--profiles", type=Path, default=None, help="profiles directory for the in-process server")
    g.add_argument("--device", default=None, help="device (default: host-cpu if loaded, else the first one)")
    g.add_argument("--workers", type=int, default=8, help="in-process server threads (default 8)")
    g.add_argument("--cache-size", type=int, default=256, help="in-process server response cache (default 256)")
    g.add_argument("--build-tiny", type=Path, default=None, metavar="DIR",
                   help="measure a tiny real profile into DIR first and serve it (for trying the script)")


def build_tiny_profile(base: Path, samples: int = 10) -> Path:
    """Measure a small real profile here (bench run, onnxruntime) and return its root."""
    from bench import cli as bench_cli
    from estimator.profile import create_profile

    root = base / "profiles"
    if (root / "tiny" / "profile.json").is_file():
        return root
    base.mkdir(parents=True, exist_ok=True)
    rc = bench_cli.main(["run", "--device", "tiny", "--runner", "onnxruntime", "--layers", TINY_TYPES,
                         "--samples", str(samples), "--warmup", "1", "--runs", "3", "--max-ops", "2e7",
                         "--out", str(base / "bench"), "--no-progress"])
    if rc != 0:
        raise SystemExit("bench run failed")
    csv = base / "tiny.csv"
    if bench_cli.main(["export", str(base / "bench" / "tiny.sqlite"), "--csv", str(csv)]) != 0:
        raise SystemExit("bench export failed")
    create_profile(root, "tiny", csv, source=f"perf script: bench run --samples {samples} ({TINY_TYPES})",
                   training={"n_estimators": 20, "grid_estimators": 20, "grid_max_features": [1.0],
                             "grid_min_samples_leaf": [1], "min_rows": 5})
    return root


@contextlib.contextmanager
def serve(args: argparse.Namespace, **server_kwargs: Any) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """Yields ``(address, client_kwargs, server)`` for the service the script talks to;
    ``server``: the in-process :class:`~service.server.EmbeddedServer`, None with ``--address``."""
    ckw: dict[str, Any] = {"token": args.token}
    if args.root_cert:
        ckw["root_certificates"] = Path(args.root_cert).read_bytes()
    if args.address:
        yield args.address, ckw, None
        return
    from service.server import EmbeddedServer

    profiles = args.profiles
    if args.build_tiny is not None:
        profiles = build_tiny_profile(args.build_tiny)
    kw = {"workers": args.workers, "cache_size": args.cache_size, "token": args.token}
    kw.update(server_kwargs)
    with EmbeddedServer(profiles, **kw) as srv:
        yield srv.address, ckw, srv


@contextlib.contextmanager
def server_address(args: argparse.Namespace, **server_kwargs: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yields ``(address, client_kwargs)`` for the service the script talks to (:func:`serve`)."""
    with serve(args, **server_kwargs) as (address, ckw, _):
        yield address, ckw


def pick_device(client: EstimationClient, wanted: str | None) -> str:
    names = [d["name"] for d in client.list_devices()]
    if not names:
        raise SystemExit("the service has no devices loaded")
    if wanted:
        if wanted not in names:
            raise SystemExit(f"device {wanted!r} is not loaded; loaded: {', '.join(names)}")
        return wanted
    return "host-cpu" if "host-cpu" in names else names[0]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=float), q))


def summary(values: list[float]) -> str:
    if not values:
        return "n=0"
    return (f"n={len(values)} p50={pct(values, 50):.2f} p90={pct(values, 90):.2f} p99={pct(values, 99):.2f} "
            f"mean={statistics.fmean(values):.2f} max={max(values):.2f}")


# ------------------------------------------------------------------------- workloads


def _w(name: str, dims: list[int]) -> TensorProto:
    """A dataless float initializer (what the client's stripping sends)."""
    t = TensorProto()
    t.name, t.data_type = name, TensorProto.FLOAT
    t.dims.extend(dims)
    return t


def _make_div(v: float, d: int = 8) -> int:
    return max(d, int(v + d / 2) // d * d)


def mbv2_like_onnx(rng: np.random.Generator, *, width: float | None = None, resolution: int | None = None,
                   blocks: int | None = None) -> bytes:
    """A MobileNetV2-style ONNX graph (weights stripped: dims only) with random width,
    resolution, depth, expansion and kernel sizes: conv/Clip(relu6) stem, inverted
    residual blocks (1x1 expand, kxk depthwise, 1x1 project, residual Add), 1x1 head,
    GlobalAveragePool, Flatten, Gemm. Distinct parameters give distinct networks."""
    width = float(width if width is not None else rng.choice([0.35, 0.5, 0.75, 1.0, 1.3]))
    res = int(resolution if resolution is not None else rng.choice([96, 128, 160, 192, 224]))
    n_blocks = int(blocks if blocks is not None else rng.integers(6, 17))
    nodes: list[onnx.NodeProto] = []
    inits: list[TensorProto] = []
    six = helper.make_tensor("six", TensorProto.FLOAT, [], [6.0])
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    inits += [six, zero]
    k = [0]

    def conv(x: str, c_in: int, c_out: int, ks: int, stride: int, groups: int = 1, act: bool = True) -> str:
        k[0] += 1
        i = k[0]
        inits.append(_w(f"w{i}", [c_out, c_in // groups, ks, ks]))
        inits.append(_w(f"b{i}", [c_out]))
        y = f"c{i}"
        p = ks // 2
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y], kernel_shape=[ks, ks], strides=[stride, stride],
                                      pads=[p, p, p, p], group=groups, name=f"conv{i}"))
        if act:
            nodes.append(helper.make_node("Clip", [y, "zero", "six"], [f"{y}r"], name=f"relu6_{i}"))
            return f"{y}r"
        return y

    c = _make_div(32 * width)
    x = conv("input", 3, c, 3, 2)
    stages = [(1, 16, 1), (6, 24, 2), (6, 32, 2), (6, 64, 2), (6, 96, 1), (6, 160, 2), (6, 320, 1)]
    for b in range(n_blocks):
        t, c_base, s = stages[min(b * len(stages) // n_blocks, len(stages) - 1)]
        c_out = _make_div(c_base * width)
        stride = s if (b == 0 or stages[min((b - 1) * len(stages) // n_blocks, len(stages) - 1)][1] != c_base) else 1
        e = int(rng.choice([3, 4, 6])) if t > 1 else 1
        ks = int(rng.choice([3, 5]))
        h = conv(x, c, c * e, 1, 1) if e > 1 else x
        h = conv(h, c * e, c * e, ks, stride, groups=c * e)
        h = conv(h, c * e, c_out, 1, 1, act=False)
        if stride == 1 and c == c_out:
            k[0] += 1
            nodes.append(helper.make_node("Add", [x, h], [f"add{k[0]}"], name=f"add{k[0]}"))
            h = f"add{k[0]}"
        x, c = h, c_out
    last = _make_div(1280 * max(width, 1.0))
    x = conv(x, c, last, 1, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], axis=1, name="flatten"))
    inits += [_w("fc_w", [1000, last]), _w("fc_b", [1000])]
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["output"], transB=1, name="fc"))
    g = helper.make_graph(nodes, f"mbv2_w{width}_r{res}_b{n_blocks}",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, res, res])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="service-perf")
    m.ir_version = 8
    return m.SerializeToString()


def random_layer_specs(rng: np.random.Generator, n: int) -> list[dict[str, Any]]:
    """``n`` random layer configurations (conv2d, dwconv2d, add, fc, globalpool, activation)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        kind = rng.choice(["conv2d", "conv2d", "dwconv2d", "add", "fc", "globalpool", "activation"])
        h = int(rng.choice([7, 14, 28, 56, 112]))
        if kind == "conv2d":
            ks = int(rng.choice([1, 3, 5]))
            p = {"h": h, "w": h, "c_in": int(rng.integers(8, 513)), "c_out": int(rng.integers(8, 513)), "k_h": ks,
                 "k_w": ks, "s_h": int(rng.choice([1, 2])), "s_w": 1}
            p["s_w"] = p["s_h"]
        elif kind == "dwconv2d":
            ks = int(rng.choice([3, 5, 7]))
            s = int(rng.choice([1, 2]))
            p = {"h": h, "w": h, "c": int(rng.integers(8, 961)), "k_h": ks, "k_w": ks, "s_h": s, "s_w": s}
        elif kind == "fc":
            p = {"c_in": int(rng.integers(16, 4097)), "c_out": int(rng.integers(10, 4097))}
        elif kind == "activation":
            p = {"h": h, "w": h, "c": int(rng.integers(8, 513)), "kind": str(rng.choice(["relu", "relu6", "hardswish"]))}
        else:
            p = {"h": h, "w": h, "c": int(rng.integers(8, 1025))}
        out.append({"type": str(kind), "params": p, "name": f"l{i}"})
    return out


def fmt_rate(n: int, seconds: float) -> str:
    return f"{n / seconds:.1f}/s" if seconds > 0 and math.isfinite(seconds) else "n/a"
