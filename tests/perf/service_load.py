"""Load test of the estimation service (a script, not a test: prints figures, asserts nothing).

``--requests`` calls (default 10,000) from ``--clients`` concurrent clients (default 32;
one thread and one channel each) against a server on loopback. Printed: error count
(by status), latency p50/p99 (client round trip, ms), throughput, and the response cache's
hits and misses during the load, measured: the in-process server's own counter, else (with
``--address``) the answers marked ``cached``.

The request mix cycles, in order, through ``--distinct`` distinct workloads (default 500):
stripped MobileNetV2-style ONNX networks (``EstimateNetwork``, per-layer rows off) and
batches of ``--batch`` layer configurations (``EstimateLayers``), in the ratio
``--layers-share``. The response cache (LRU, ``--cache-size``, default 256 entries) answers
a network again only if the cycle comes back to it before 256 other networks pushed it
out: the default cycle holds 341 networks, so nothing is answered from the cache and every
call is estimated (the load is the estimation path's). ``--distinct 300`` (202 networks)
answers every network after the first pass from the cache; ``--distinct`` equal to
``--requests`` makes every network distinct.

    python tests/perf/service_load.py --profiles profiles --device host-cpu
    python tests/perf/service_load.py --address 127.0.0.1:50071 --device host-cpu
    python tests/perf/service_load.py --build-tiny /tmp/tiny --requests 300 --clients 8   # try it
"""
from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service_common import (add_server_args, fmt_rate, mbv2_like_onnx, pick_device, random_layer_specs,  # noqa: E402
                            serve, summary)

from service.client import EstimationClient, EstimationError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    add_server_args(ap)
    ap.set_defaults(workers=32)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--distinct", type=int, default=500, help="distinct workloads cycled through (default 500)")
    ap.add_argument("--layers-share", type=float, default=0.3, help="share of EstimateLayers calls (default 0.3)")
    ap.add_argument("--batch", type=int, default=32, help="layers per EstimateLayers call (default 32)")
    ap.add_argument("--timeout", type=float, default=120.0, help="deadline per call, s (default 120)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.requests < 1 or args.clients < 1 or args.distinct < 1:
        raise SystemExit("--requests, --clients and --distinct must be >= 1")

    rng = np.random.default_rng(args.seed)
    work: list[tuple[str, object]] = []
    for i in range(args.distinct):
        if rng.random() < args.layers_share:
            work.append(("layers", random_layer_specs(rng, args.batch)))
        else:
            work.append(("network", mbv2_like_onnx(rng)))
    n_nets = sum(k == "network" for k, _ in work)
    print(f"service load (noisy unless the machine is quiet): {args.requests} requests, {args.clients} clients, "
          f"{args.distinct} distinct workloads ({n_nets} networks, {args.distinct - n_nets} EstimateLayers batches "
          f"of {args.batch})")

    with serve(args) as (address, ckw, server):
        with EstimationClient(address, timeout_s=60, **ckw) as probe:
            probe.wait_ready(600)
            device = pick_device(probe, args.device)
        cache = server.servicer.cache if server is not None else None
        before = (cache.hits, cache.misses) if cache is not None else None
        lat: list[float] = []
        statuses: collections.Counter[str] = collections.Counter()
        cached = [0]
        lock = threading.Lock()
        next_i = [0]

        def worker() -> None:
            with EstimationClient(address, timeout_s=args.timeout, **ckw) as c:
                while True:
                    with lock:
                        i = next_i[0]
                        if i >= args.requests:
                            return
                        next_i[0] += 1
                    kind, payload = work[i % len(work)]
                    t0 = time.perf_counter()
                    try:
                        if kind == "network":
                            r = c.estimate_network(payload, device, per_layer=False, strip=False)
                            hit = r.cached
                        else:
                            for row in c.estimate_layers(payload, device):  # type: ignore[arg-type]
                                row.raise_for_error()
                            hit = False
                        status = "OK"
                    except EstimationError as e:
                        status, hit = e.code, False
                    dt = (time.perf_counter() - t0) * 1e3
                    with lock:
                        lat.append(dt)
                        statuses[status] += 1
                        cached[0] += hit

        t0 = time.perf_counter()
        threads = [threading.Thread(target=worker, name=f"client-{k}") for k in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        counted = (cache.hits - before[0], cache.misses - before[1]) if cache is not None else None
        with EstimationClient(address, timeout_s=30, **ckw) as probe:
            probe.wait_ready(30)  # still healthy
    n_err = sum(v for k, v in statuses.items() if k != "OK")
    n_net = sum(kind == "network" for kind, _ in (work[i % len(work)] for i in range(args.requests)))
    print(f"device {device} at {address}")
    print(f"completed {sum(statuses.values())} in {wall:.2f} s = {fmt_rate(sum(statuses.values()), wall)}")
    print(f"errors: {n_err} {dict(statuses)}")
    if counted is not None:
        hits, misses = counted
        print(f"response cache (the server's counter): {hits} hits, {misses} misses"
              + (f" ({hits / (hits + misses):.1%} of {hits + misses} lookups)" if hits + misses else "")
              + f"; {cached[0]} answers marked cached")
    else:
        print(f"response cache: {cached[0]} of {n_net} network answers marked cached (the server's counter is "
              f"not served over gRPC)")
    print(f"latency ms: {summary(lat)}")
    print("health after the load: SERVING")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
