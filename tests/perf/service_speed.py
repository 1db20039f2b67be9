"""Speed of the estimation service (a script, not a test: prints figures, asserts nothing).

Run it on a quiet machine against a real profile, e.g.::

    python tests/perf/service_speed.py --profiles profiles --device host-cpu
    python tests/perf/service_speed.py --address 127.0.0.1:50071 --device host-cpu   # a running server
    python tests/perf/service_speed.py --build-tiny /tmp/tiny --single 20 --stream 50 --layers 1000  # try it

Sections
--------
1. ``EstimateNetwork`` for MobileNetV2 (224, torch zoo, weights stripped by the client; another
   zoo network with ``--network``, e.g. ``deit_tiny``),
   all three CMs at one confidence (``--confidence``, default 0.9), per-layer rows on:
   server-side time (``server_time_ms``) and client round trip, p50/p99 over ``--single``
   calls. The in-process server runs with its response cache off for this section, so
   every call is a real estimate; a cache hit is timed separately. The layer-level caches
   of the fast path (feature-row statistics, layer counts) stay on: a repeated network
   finds all its layers there, as NAS candidates find most of theirs. Beside it, the same
   estimate in-process through ``Estimator.estimate_network`` (no gRPC), once more with
   those layer caches emptied before every call (cold), and, if the estimator exposes a
   switch for its reference (non-fast) evaluation path, that path.
2. A stream of ``--stream`` distinct networks over one ``EstimateNetworks`` call:
   networks/s. ``--stream-kind onnx`` (default) generates MobileNetV2-style ONNX graphs
   with random width, resolution, depth, expansion and kernels (weights stripped, as the
   client sends them; generation is not timed); ``zoo`` exports torch MobileNetV2
   variants (width x resolution) instead (slow to export; exported before timing).
3. ``EstimateLayers`` with ``--layers`` random layer configurations in one request:
   seconds (server-side and round trip).
4. Unless ``--no-reference`` (or ``--address``): the same three sections against a second
   in-process server that runs the estimator's reference path (``fast=False``: ONNX shape
   inference, scikit-learn/crepes per call, fresh Monte Carlo draws; the same answers), in
   the same run, with ``--reference-single`` calls and ``--reference-stream`` networks (the
   first ones of the fast stream), and the speedups of the fast path over it.
5. With section 4: EstimateNetwork on a fast and a reference server in alternation (one
   reference call, then five fast ones, ``--reference-single`` rounds), so that the ratio
   of their p50s is taken over the same stretch of the machine's (drifting) speed.
"""
from __future__ import annotations

import argparse
import inspect
import logging
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service_common import (add_server_args, fmt_rate, mbv2_like_onnx, pick_device, random_layer_specs,  # noqa: E402
                            server_address, summary)

from service.client import EstimationClient, strip_initializers  # noqa: E402


def _reference_switch() -> str | None:
    """The keyword of Estimator.estimate_network that selects the reference path, if any."""
    from estimator.predict import Estimator

    params = inspect.signature(Estimator.estimate_network).parameters
    for name in ("fast", "use_fast", "reference", "naive"):
        if name in params:
            return name
    return None


class _CpuLog(logging.Handler):
    """Collects ``cpu_ms`` of the in-process server's EstimateNetwork log records."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.cpu_ms: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        f = getattr(record, "fields", None) or {}
        if record.getMessage() == "rpc" and f.get("rpc") == "EstimateNetwork" and "cpu_ms" in f:
            self.cpu_ms.append(float(f["cpu_ms"]))


def section_single(client: EstimationClient, device: str, args: argparse.Namespace, mbv2: bytes,
                   calls: int | None = None, label: str = "") -> dict[str, float]:
    conf = (args.confidence,)
    server_ms: list[float] = []
    rtt_ms: list[float] = []
    client.estimate_network(mbv2, device, confidence=conf, per_layer=True, strip=False)  # warm-up
    cpu_log = _CpuLog()
    svc_log = logging.getLogger("service")
    saved = (svc_log.level, svc_log.propagate)
    if args.address is None:  # the in-process server logs each call's CPU time
        svc_log.addHandler(cpu_log)
        svc_log.setLevel(logging.INFO)
        svc_log.propagate = False
    try:
        for i in range(calls or args.single):
            t0 = time.perf_counter()
            r = client.estimate_network(mbv2, device, confidence=conf, per_layer=True, strip=False, name=f"run{i}")
            rtt_ms.append((time.perf_counter() - t0) * 1e3)
            if r.cached:
                print("  note: answered from the cache; start the server with --cache-size 0 for this section")
            server_ms.append(r.server_time_ms)
    finally:
        svc_log.removeHandler(cpu_log)
        svc_log.setLevel(saved[0])
        svc_log.propagate = saved[1]
    print(f"{label}{args.network} ({r.n_layers} layers, stripped {len(mbv2) / 1e3:.1f} kB, CM_TV/CM_LV/CM_O at "
          f"{args.confidence:g}, per-layer rows on)")
    print(f"  server time ms : {summary(server_ms)}")
    if cpu_log.cpu_ms:
        print(f"  server CPU ms  : {summary(cpu_log.cpu_ms)} (the handler thread's CPU time; wall minus this is "
              "time spent waiting for a core)")
    print(f"  round trip ms  : {summary(rtt_ms)}")
    out = {"server_p50": statistics.median(server_ms), "rtt_p50": statistics.median(rtt_ms)}
    if label or calls:
        return out
    if args.address is None and args.profiles_for_inprocess is not None:
        from estimator.predict import Estimator

        est = Estimator.from_profile(device, root=args.profiles_for_inprocess)
        est.estimate_network(mbv2, conf)
        ms = []
        for _ in range(args.single):
            t0 = time.perf_counter()
            est.estimate_network(mbv2, conf)
            ms.append((time.perf_counter() - t0) * 1e3)
        print(f"  in-process Estimator.estimate_network ms: {summary(ms)}")
        from estimator.onnx_import import clear_counts_cache

        cold = []
        for _ in range(min(args.single, 50)):
            est.fast_models().clear_row_cache()
            clear_counts_cache()
            t0 = time.perf_counter()
            est.estimate_network(mbv2, conf)
            cold.append((time.perf_counter() - t0) * 1e3)
        print(f"  in-process, layer caches emptied before each call ms: {summary(cold)}")
        switch = _reference_switch()
        if switch:
            value = switch not in ("fast", "use_fast")
            ref = []
            for _ in range(min(args.single, args.reference_single)):
                t0 = time.perf_counter()
                est.estimate_network(mbv2, conf, **{switch: value})
                ref.append((time.perf_counter() - t0) * 1e3)
            print(f"  in-process reference path ({switch}={value}) ms: {summary(ref)}")
            print(f"  in-process speedup (reference p50 / fast p50): "
                  f"{statistics.median(ref) / statistics.median(ms):.1f}x")
        else:
            print("  (the estimator exposes no reference-path switch; nothing to compare against)")
    return out


def section_cached(client: EstimationClient, device: str, args: argparse.Namespace, mbv2: bytes) -> None:
    client.estimate_network(mbv2, device, confidence=(args.confidence,), per_layer=True, strip=False, name="c")
    ms, srv = [], []
    for _ in range(max(args.single, 10)):
        t0 = time.perf_counter()
        r = client.estimate_network(mbv2, device, confidence=(args.confidence,), per_layer=True, strip=False, name="c")
        ms.append((time.perf_counter() - t0) * 1e3)
        srv.append(r.server_time_ms)
    print(f"  cache hit (cached={r.cached}) round trip ms: {summary(ms)}; server ms p50 {statistics.median(srv):.3f}")


def section_interleaved(fast: EstimationClient, ref: EstimationClient, device: str, args: argparse.Namespace,
                        mbv2: bytes, per_round: int = 5) -> float:
    """EstimateNetwork on the fast and the reference server in alternation (one reference
    call, then ``per_round`` fast ones, ``--reference-single`` rounds), so that both p50s
    come from the same stretch of the VM's drifting speed; returns the ratio of p50s."""
    conf = (args.confidence,)
    kw = dict(confidence=conf, per_layer=True, strip=False)
    fast.estimate_network(mbv2, device, **kw)
    ref.estimate_network(mbv2, device, **kw)
    f_ms: list[float] = []
    r_ms: list[float] = []
    for i in range(args.reference_single):
        r_ms.append(ref.estimate_network(mbv2, device, name=f"r{i}", **kw).server_time_ms)
        for j in range(per_round):
            f_ms.append(fast.estimate_network(mbv2, device, name=f"f{i}.{j}", **kw).server_time_ms)
    ratio = statistics.median(r_ms) / statistics.median(f_ms)
    print(f"interleaved (1 reference call, then {per_round} fast calls, {args.reference_single} rounds; same "
          f"MobileNetV2 request, response caches off):")
    print(f"  fast server ms      : {summary(f_ms)}")
    print(f"  reference server ms : {summary(r_ms)}")
    print(f"  speedup (p50 / p50) : {ratio:.1f}x")
    return ratio


def stream_networks(args: argparse.Namespace) -> list[bytes]:
    rng = np.random.default_rng(args.seed)
    if args.stream_kind == "zoo":
        from estimator import zoo

        widths, resolutions = [0.35, 0.5, 0.75, 1.0, 1.3, 1.4], list(range(96, 321, 8))
        nets = []
        for i in range(args.stream):
            w, res = widths[i % len(widths)], resolutions[(i // len(widths)) % len(resolutions)]
            nets.append(strip_initializers(zoo.export_onnx(zoo.MobileNetV2(width_mult=w), res)).SerializeToString())
        return nets
    return [mbv2_like_onnx(rng) for _ in range(args.stream)]


def section_stream(client: EstimationClient, device: str, args: argparse.Namespace, nets: list[bytes],
                   label: str = "") -> float:
    distinct = len(set(nets))
    items = [{"model": b, "device": device, "confidence": (args.confidence,), "strip": False} for b in nets]
    t0 = time.perf_counter()
    n = errors = cached = 0
    srv = []
    for r in client.estimate_networks(items, per_layer=False):
        n += 1
        errors += not r.ok
        cached += r.cached
        srv.append(r.server_time_ms)
    dt = time.perf_counter() - t0
    print(f"{label}EstimateNetworks stream: {n} networks ({distinct} distinct, {args.stream_kind}) in {dt:.2f} s = "
          f"{fmt_rate(n, dt)}; errors {errors}, cached {cached}; per-item server ms: {summary(srv)}")
    return n / dt if dt > 0 else float("nan")


def section_layers(client: EstimationClient, device: str, args: argparse.Namespace, label: str = "") -> float:
    if args.layers <= 0:
        print(f"{label}EstimateLayers: skipped (--layers {args.layers})")
        return float("nan")
    rng = np.random.default_rng(args.seed + 1)
    specs = random_layer_specs(rng, args.layers)
    t0 = time.perf_counter()
    resp = client.estimate_layers_response(specs, device, confidence=(args.confidence,), timeout_s=600)
    dt = time.perf_counter() - t0
    n_fb = sum(r.fallback for r in resp["layers"])
    n_err = sum(not r.ok for r in resp["layers"])
    print(f"{label}EstimateLayers: {len(resp['layers'])} layer variants in one request: {dt:.3f} s round trip, "
          f"{resp['server_time_ms'] / 1e3:.3f} s server ({n_fb} fallback, {n_err} refused)")
    return resp["server_time_ms"] / 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    add_server_args(ap)
    ap.add_argument("--confidence", type=float, default=0.9)
    ap.add_argument("--network", default="mobilenet_v2",
                    help="zoo network of section 1, at its default resolution (default mobilenet_v2; e.g. deit_tiny)")
    ap.add_argument("--single", type=int, default=200, help="EstimateNetwork calls for p50/p99 (default 200)")
    ap.add_argument("--stream", type=int, default=1000, help="distinct networks on the stream (default 1000)")
    ap.add_argument("--stream-kind", choices=("onnx", "zoo"), default="onnx")
    ap.add_argument("--layers", type=int, default=10_000, help="layer variants for EstimateLayers (default 10000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-reference", action="store_true", help="skip the reference-path server (section 4)")
    ap.add_argument("--reference-single", type=int, default=30,
                    help="EstimateNetwork calls on the reference path (default 30)")
    ap.add_argument("--reference-stream", type=int, default=100,
                    help="networks streamed to the reference path (default 100)")
    args = ap.parse_args(argv)

    from estimator import zoo

    mbv2 = strip_initializers(zoo.export_onnx(args.network)).SerializeToString()
    args.profiles_for_inprocess = None
    if args.address is None:
        from estimator.profile import default_root
        from service_common import build_tiny_profile

        args.profiles_for_inprocess = (build_tiny_profile(args.build_tiny) if args.build_tiny
                                       else (args.profiles or default_root()))
        args.profiles = args.profiles_for_inprocess
        args.build_tiny = None
    print("service speed (noisy unless the machine is quiet)")
    nets = stream_networks(args)  # generated before any timing
    # section 1 without the response cache (in-process server), then the rest with it
    with server_address(args, cache_size=0) as (address, ckw):
        with EstimationClient(address, timeout_s=600, **ckw) as client:
            client.wait_ready(600)
            device = pick_device(client, args.device)
            print(f"device {device} at {address}")
            fast_single = section_single(client, device, args, mbv2)
            if args.address is None:  # (the in-process servers run this process's modules)
                from estimator.onnx_import import native_core

                print(f"  native importer: {'built' if native_core() else 'not built (pure Python)'}")
            else:
                section_cached(client, device, args, mbv2)
            fast_rate = section_stream(client, device, args, nets)
            fast_layers = section_layers(client, device, args)
    if args.address is None:
        with server_address(args) as (address, ckw):
            with EstimationClient(address, timeout_s=600, **ckw) as client:
                client.wait_ready(600)
                section_cached(client, device, args, mbv2)
        if not args.no_reference:
            label = "[reference path] "
            print("reference path (fast=False), same run, response cache off:")
            with server_address(args, cache_size=0, fast=False) as (address, ckw):
                with EstimationClient(address, timeout_s=600, **ckw) as client:
                    client.wait_ready(600)
                    ref_single = section_single(client, device, args, mbv2, calls=args.reference_single, label=label)
                    ref_rate = section_stream(client, device, args, nets[:args.reference_stream], label=label)
                    ref_layers = section_layers(client, device, args, label=label)
                    with server_address(args, cache_size=0) as (f_address, f_ckw):
                        with EstimationClient(f_address, timeout_s=600, **f_ckw) as f_client:
                            f_client.wait_ready(600)
                            section_interleaved(f_client, client, device, args, mbv2)
            print("speedup of the fast path over the reference path:")
            print(f"  EstimateNetwork MobileNetV2 server p50: {ref_single['server_p50']:.2f} ms -> "
                  f"{fast_single['server_p50']:.2f} ms = {ref_single['server_p50'] / fast_single['server_p50']:.1f}x")
            print(f"  EstimateNetworks stream: {ref_rate:.1f}/s -> {fast_rate:.1f}/s = {fast_rate / ref_rate:.1f}x")
            print(f"  EstimateLayers {args.layers} layers server: {ref_layers:.3f} s -> {fast_layers:.3f} s = "
                  f"{ref_layers / fast_layers:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
