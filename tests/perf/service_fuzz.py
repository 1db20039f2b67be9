"""Fuzz the estimation service with malformed requests (a script: prints a table; exit 1 if
any request got a status outside its expected set or the server is unhealthy afterwards).

Categories (``--n`` requests each, at least 200 in all): random bytes, truncated ONNX,
bit-flipped ONNX, mutated input shapes, huge dimensions (in the graph and in
``input_shapes``), unknown devices, bad confidence levels, bad layer specs, random layer
parameter maps, oversized models, and streams mixing good and bad items. Every request
has a set of acceptable statuses (e.g. a bit flip inside weight data may leave a valid
model: OK or INVALID_ARGUMENT); INTERNAL, UNKNOWN or a timeout is always a failure. A bad
configuration in an ``EstimateLayers`` batch is answered OK with its own row's ``error``:
that status is the one judged there.
Afterwards the standard health check must say SERVING and a good request must work.

    python tests/perf/service_fuzz.py --profiles profiles
    python tests/perf/service_fuzz.py --build-tiny /tmp/tiny --n 20      # try it
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402
from service_common import add_server_args, mbv2_like_onnx, server_address  # noqa: E402

from proto import estimation_pb2 as pb2  # noqa: E402
from proto import estimation_pb2_grpc as pb2_grpc  # noqa: E402
from service.client import EstimationClient, strip_initializers  # noqa: E402

OK, INV, NF, RE = "OK", "INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED"
CONV = {"h": 28, "w": 28, "c_in": 16, "c_out": 32, "k_h": 3, "k_w": 3}

Case = tuple[str, Callable[[], Any], set[str]]  # (category, thunk returning a status name, expected)


def _status(fn: Callable[[], Any]) -> str:
    """The call's status; for a batch of one layer, its row's error status when it has one."""
    try:
        r = fn()
    except grpc.RpcError as e:
        return e.code().name
    if isinstance(r, pb2.EstimateLayersResponse) and len(r.layers) == 1 and r.layers[0].HasField("error"):
        return r.layers[0].error.code
    return OK


def _small_net() -> bytes:
    import torch.nn as nn

    from estimator import zoo

    net = nn.Sequential(nn.Conv2d(3, 8, 3, 2), nn.ReLU(), nn.Conv2d(8, 8, 3, 1, 1, groups=8), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)).eval()
    return zoo.export_onnx(net, input_shape=(1, 3, 32, 32))


def build_cases(stub: Any, device: str, md: tuple, n: int, rng: np.random.Generator, max_onnx: int,
                timeout: float) -> list[Case]:
    full = _small_net()
    stripped = strip_initializers(full).SerializeToString()
    mbv2 = mbv2_like_onnx(rng, width=0.5, resolution=96, blocks=8)
    cases: list[Case] = []

    def net(req: pb2.EstimateNetworkRequest) -> Callable[[], Any]:
        return lambda: stub.EstimateNetwork(req, timeout=timeout, metadata=md)

    def layers(req: pb2.EstimateLayersRequest) -> Callable[[], Any]:
        return lambda: stub.EstimateLayers(req, timeout=timeout, metadata=md)

    def onnx_req(data: bytes, **kw: Any) -> pb2.EstimateNetworkRequest:
        return pb2.EstimateNetworkRequest(device=kw.pop("device", device), onnx=data, **kw)

    for _ in range(n):  # random bytes
        data = rng.integers(0, 256, size=int(rng.integers(0, 4096)), dtype=np.uint8).tobytes()
        cases.append(("random bytes", net(onnx_req(data)), {INV}))
    for _ in range(n):  # truncated ONNX
        src = full if rng.random() < 0.5 else mbv2
        cut = int(rng.integers(0, len(src) - 1))
        cases.append(("truncated onnx", net(onnx_req(src[:cut])), {INV}))
    for _ in range(n):  # bit flips
        src = bytearray(stripped if rng.random() < 0.5 else mbv2)
        for _ in range(int(rng.integers(1, 8))):
            src[int(rng.integers(0, len(src)))] ^= 1 << int(rng.integers(0, 8))
        cases.append(("bit-flipped onnx", net(onnx_req(bytes(src))), {OK, INV}))
    for _ in range(n):  # mutated input shapes (graph and request)
        m = onnx.load_from_string(stripped if rng.random() < 0.5 else mbv2)
        dims = m.graph.input[0].type.tensor_type.shape.dim
        choice = rng.integers(0, 4)
        kw: dict[str, Any] = {}
        if choice == 0:  # random sizes, possibly too small for the kernels
            for d in dims[2:]:
                d.dim_value = int(rng.integers(1, 300))
        elif choice == 1:  # zero / negative: not a fixed shape
            dims[int(rng.integers(0, 4))].dim_value = int(rng.choice([0, -1, -7]))
        elif choice == 2:  # channel mismatch with the weights
            dims[1].dim_value = int(rng.integers(1, 64))
        else:  # a request shape of the wrong rank or with a bad dim
            for d in dims[2:]:
                d.Clear()
                d.dim_param = "hw"
            bad = [[1, 3, 32], [1, 3, 0, 32], [1, 3, -4, 4], [1, 3, 32, 32, 1]][int(rng.integers(0, 4))]
            kw["input_shapes"] = {"": pb2.Shape(dims=bad)}
        cases.append(("mutated shapes", net(onnx_req(m.SerializeToString(), **kw)), {OK, INV}))
    for i in range(n):  # huge dims
        m = onnx.load_from_string(stripped)
        dims = m.graph.input[0].type.tensor_type.shape.dim
        big = int(rng.choice([10**5, 10**6, 10**9, 2**40, 2**62]))
        if i % 2 == 0:
            dims[2].dim_value = big
            dims[3].dim_value = big
            cases.append(("huge dims (graph)", net(onnx_req(m.SerializeToString())), {OK, INV, RE} if big < 2**62 else {INV}))
        else:
            for d in dims[2:]:
                d.Clear()
                d.dim_param = "hw"
            req = onnx_req(m.SerializeToString(), input_shapes={"": pb2.Shape(dims=[1, 3, big, big])})
            cases.append(("huge dims (request)", net(req), {OK, INV, RE} if big < 2**31 else {INV}))
    for i in range(n):  # unknown devices
        name = ["", "no-such-device", device + "x", "../" + device, "a" * 300][i % 5]
        expect = {INV} if name == "" else {NF}
        if i % 2:
            cases.append(("unknown device", net(onnx_req(stripped, device=name)), expect))
        else:
            cases.append(("unknown device", layers(pb2.EstimateLayersRequest(
                device=name, layers=[pb2.LayerSpec(type="conv2d", params=CONV)])), expect))
    bad_conf = [0.0, 1.0, -0.5, 1.5, float("nan"), float("inf"), -float("inf"), 100.0]
    for i in range(n):  # bad confidence
        if i % 4 == 3:
            confs = list(np.linspace(0.5, 0.95, 17 + int(rng.integers(0, 10))))
            expect = {RE}
        else:
            confs = [0.9, bad_conf[i % len(bad_conf)]]
            expect = {INV}
        if i % 2:
            cases.append(("bad confidence", net(onnx_req(stripped, confidence=confs)), expect))
        else:
            cases.append(("bad confidence", layers(pb2.EstimateLayersRequest(
                device=device, confidence=confs, layers=[pb2.LayerSpec(type="conv2d", params=CONV)])), expect))
    for i in range(n):  # bad layer specs
        p = dict(CONV)
        kind = i % 8
        typ = "conv2d"
        opts: dict[str, str] = {}
        if kind == 0:
            typ = ["conv9d", "", "Conv", "lstm"][i % 4]
        elif kind == 1:
            del p[["h", "w", "c_in", "c_out", "k_h", "k_w"][i % 6]]
        elif kind == 2:
            p["c_in"] = -float(rng.integers(1, 100))
        elif kind == 3:
            p["h"] = 2.5
        elif kind == 4:
            p["w"] = [float("nan"), float("inf"), -float("inf")][i % 3]
        elif kind == 5:
            p.update(k_h=99, p_t=0, p_b=0)
        elif kind == 6:
            p.update(groups=3)  # does not divide 16/32
        else:
            opts = {"c_in": "sixteen"}  # given twice (number and option)
        spec = pb2.LayerSpec(type=typ, params=p, options=opts)
        if i % 3 == 0:
            req = pb2.EstimateNetworkRequest(device=device, layers=pb2.LayerList(layers=[spec]))
            cases.append(("bad layer spec", net(req), {INV}))
        else:
            cases.append(("bad layer spec", layers(pb2.EstimateLayersRequest(device=device, layers=[spec])), {INV}))
    types = ["conv2d", "dwconv2d", "add", "fc", "concat", "activation", "resize", "softmax", "other"]
    keys = ["h", "w", "c", "c_in", "c_out", "k_h", "k_w", "s_h", "s_w", "groups", "n", "m", "kind", "mode",
            "n_inputs", "c_in1", "c_in2", "h_out", "w_out", "elems_out", "zzz"]
    for _ in range(n):  # random parameter maps
        p = {str(k): float(rng.choice([0, 1, 2, 3, 7, 64, 1e6, 2**40, -3, 0.5]))
             for k in rng.choice(keys, size=int(rng.integers(0, 10)), replace=False)}
        spec = pb2.LayerSpec(type=str(rng.choice(types)), params=p)
        cases.append(("random layer params", layers(pb2.EstimateLayersRequest(device=device, layers=[spec])),
                      {OK, INV}))
    for i in range(max(5, n // 4)):  # oversized models
        size = max_onnx + 1 + int(rng.integers(0, 1024)) if i % 2 == 0 else max_onnx + (2 << 20)
        cases.append(("oversized", net(onnx_req(b"\x08\x08" + b"\0" * size)), {RE}))
    for i in range(max(5, n // 4)):  # streams mixing good and bad items: one case per stream
        items = [onnx_req(stripped, request_id="good0"),
                 onnx_req(bytes(rng.integers(0, 256, 64, dtype=np.uint8)), request_id="bad1"),
                 onnx_req(stripped, device="nope", request_id="bad2"),
                 onnx_req(stripped, confidence=[2.0], request_id="bad3"),
                 onnx_req(mbv2, request_id="good4")]

        def stream(items: list = items) -> None:
            out = list(stub.EstimateNetworks(iter(items), timeout=timeout, metadata=md))
            got = [(r.request_id, r.error.code) for r in out]
            want = [("good0", ""), ("bad1", INV), ("bad2", NF), ("bad3", INV), ("good4", "")]
            if got != want:
                raise AssertionError(f"stream answered {got}, expected {want}")

        cases.append(("stream with bad items", stream, {OK}))
    return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    add_server_args(ap)
    ap.add_argument("--n", type=int, default=25, help="requests per category (default 25: about 280 in all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0, help="deadline per request, s")
    ap.add_argument("--max-message-mb", type=float, default=1.0,
                    help="in-process server's ONNX limit, MiB (default 1, so oversize cases stay small)")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    with server_address(args, max_message_mb=args.max_message_mb) as (address, ckw):
        with EstimationClient(address, timeout_s=60, **ckw) as c:
            c.wait_ready(600)
            names = [d["name"] for d in c.list_devices()]
            device = args.device or ("host-cpu" if "host-cpu" in names else names[0])
            max_onnx = int(c.server_info()["limits"]["max_onnx_bytes"])
        opts = [("grpc.max_send_message_length", max_onnx + (4 << 20))]
        if ckw.get("root_certificates"):
            ch = grpc.secure_channel(address, grpc.ssl_channel_credentials(ckw["root_certificates"]), options=opts)
        else:
            ch = grpc.insecure_channel(address, options=opts)
        stub = pb2_grpc.EstimationStub(ch)
        md = (("authorization", f"Bearer {args.token}"),) if args.token else ()
        cases = build_cases(stub, device, md, args.n, rng, max_onnx, args.timeout)
        order = rng.permutation(len(cases))
        table: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        bad: list[str] = []
        slowest = (0.0, "")
        t_all = time.perf_counter()
        for k in order:
            cat, thunk, expected = cases[int(k)]
            t0 = time.perf_counter()
            try:
                st = _status(thunk)
            except AssertionError as e:
                st = f"WRONG({e})"
            dt = time.perf_counter() - t0
            slowest = max(slowest, (dt, cat))
            table[cat][st] += 1
            if st not in expected:
                bad.append(f"{cat}: got {st}, expected one of {sorted(expected)}")
        wall = time.perf_counter() - t_all
        with EstimationClient(address, timeout_s=60, **ckw) as c:
            c.wait_ready(30)
            ok = c.estimate_layers([("conv2d", CONV)], device)[0].prediction_ms > 0
        ch.close()
    print(f"service fuzz: {len(cases)} requests in {wall:.1f} s against {address} (device {device}); "
          f"slowest {slowest[0] * 1e3:.0f} ms ({slowest[1]})")
    width = max(len(c) for c in table)
    for cat in sorted(table):
        print(f"  {cat:<{width}}  " + ", ".join(f"{s} x{n}" for s, n in sorted(table[cat].items())))
    print(f"unexpected statuses: {len(bad)}")
    for b in bad[:20]:
        print("  " + b)
    print(f"health afterwards: SERVING; a good request afterwards: {'OK' if ok else 'FAILED'}")
    if len(cases) < 200:
        print(f"note: only {len(cases)} requests (--n {args.n}); the acceptance run uses >= 200 (--n 25)")
    return 1 if bad or not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
