"""NAS throughput: candidates per second end to end, and where the time goes.

Runs the real search loop (``nas.trial.Evaluator`` inside ``study.optimize``: sample,
build, the candidate's ONNX written from its description (``nas.direct``; ``--export``:
torch.onnx export, onnxsim and strip, as user spaces do), gRPC query to the in-process
estimation service, NASWOT proxy, CM_O penalty, SQLite storage with heartbeats) on
candidates of the default ``scaled`` space (``--space mobilenet``, ``resnet``), with a
random sampler so that no architecture repeats (no cache hits), and prints

* candidates/s (wall clock) and CPU seconds per candidate (process CPU time, the
  in-process server's threads included: on a busy, shared machine wall time overstates
  the cost; CPU time is what a dedicated core would take);
* the mean per-phase wall time recorded on every trial (``result.timing_s``) and the
  rest (storage writes, sampler, callbacks);
* a per-phase CPU-time breakdown measured separately on the same architectures.

Usage::

    python tests/perf/nas_throughput.py                       # profiles/host-cpu if present
    python tests/perf/nas_throughput.py --device imx93 --n 30
    python tests/perf/nas_throughput.py --profiles DIR --device NAME

Without a usable profile it measures a small one first (``bench run``, ~1 min).
Numbers are printed, never asserted (see DESIGN.md: performance is checked by scripts).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _small_profile(base: Path) -> tuple[Path, str]:
    from tests.test_nas import DEVICE, build_env

    env = build_env(base)
    os.environ["CL_CACHE_DIR"] = str(env["cache"])
    return env["root"], DEVICE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", default=None, help="profiles directory (default: the repository's profiles/)")
    ap.add_argument("--device", default="host-cpu")
    ap.add_argument("--n", type=int, default=20, help="candidates")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--space-option", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (nas search's default: 1)")
    ap.add_argument("--space", default="scaled", help="built-in space (default: nas search's default, scaled)")
    ap.add_argument("--export", action="store_true",
                    help="send the torch export + onnxsim, as before issue 17 (and as user spaces do)")
    args = ap.parse_args(argv)

    import optuna
    import torch

    from nas import export as E
    from nas.proxy import naswot
    from nas.direct import direct_onnx
    from nas.spaces import SPACES, mobilenet, rebuild
    from nas.storage import open_storage
    from nas.trial import Evaluator, SearchSettings
    from nas.units import parse_option
    from service.client import EstimationClient, strip_initializers
    from service.server import EmbeddedServer

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="nas-perf-"))
    root = Path(args.profiles) if args.profiles else REPO / "profiles"
    device = args.device
    if not (root / device / "profile.json").is_file():
        print(f"no profile {device!r} under {root}: measuring a small one first", flush=True)
        root, device = _small_profile(tmp / "env")
    opts = dict(parse_option(o, "--space-option") for o in args.space_option)

    t0 = time.perf_counter()
    c0 = time.process_time()
    srv = EmbeddedServer(root).start()
    client = EstimationClient(srv.address)
    print(f"service: {device} from {root}, ready in {time.perf_counter() - t0:.1f} s wall / "
          f"{time.process_time() - c0:.1f} s CPU (models from the cache if trained before)")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, "
          f"CPUs usable {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}")

    space_fn = SPACES[args.space]
    s = SearchSettings(device=device, budget_ms=1e9, space=args.space, space_fn=space_fn, space_options=opts,
                       objective="naswot", objective_fn=naswot, deterministic_objective=True,
                       direct_onnx=not args.export)
    storage = open_storage(f"sqlite:///{tmp / 'perf.db'}", heartbeat_interval=10)
    study = optuna.create_study(storage=storage, study_name="perf", direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=args.seed))
    ev = Evaluator(client, s)
    # warm-up outside the measurement: first export/onnxsim/RPC pay one-off initialisation
    warm = rebuild(mobilenet, {"resolution": 96, "width": 0.5, **{f"s{i}_{k}": v for i in range(5) for k, v in
                                                                   (("depth", 1), ("expansion", 3), ("kernel", 3),
                                                                    ("se", False), ("act", "relu"))}})
    client.estimate_network(strip_initializers(E.to_onnx(warm.module, warm.input_shape)), device, strip=False)

    t0 = time.perf_counter()
    c0 = time.process_time()
    study.optimize(ev, n_trials=args.n, catch=(Exception,))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    trials = [t for t in study.trials if t.state.name == "COMPLETE"]
    n = len(trials)
    print(f"\n{n}/{args.n} candidates completed; {ev.n_cache_hits} repeats; space {args.space}, "
          f"{'torch export + onnxsim' if args.export else 'ONNX written from the description'}")
    if not n:
        for t in study.trials:
            print(t.number, t.state.name, t.user_attrs.get("fail_reason"))
        return 1
    params = [t.user_attrs["result"]["n_params"] for t in trials]
    layers = [t.user_attrs["estimate"]["n_layers"] for t in trials]
    res = [t.params["resolution"] for t in trials]
    print(f"candidates: {statistics.median(params) / 1e6:.2f} M parameters (median; {min(params) / 1e6:.2f}-"
          f"{max(params) / 1e6:.2f}), {statistics.median(layers):.0f} layers, resolution {min(res)}-{max(res)}")
    print(f"END TO END: {n / wall:.2f} candidates/s wall ({wall / n:.3f} s each); "
          f"{cpu / n:.3f} CPU s each -> {n / cpu:.2f}/s on a dedicated core")
    keys = ("build", "export", "simplify", "strip", "estimate", "server", "objective", "total")
    mean = {k: statistics.fmean(t.user_attrs["result"]["timing_s"].get(k, 0.0) for t in trials) for k in keys}
    print("\nper-phase wall time, mean over trials (s):")
    for k in keys[:-1]:
        note = " (gRPC round trip incl. the server's work)" if k == "estimate" else \
            " (the server's own time, part of estimate)" if k == "server" else ""
        print(f"  {k:9s} {mean[k]:.4f}  {100 * mean[k] / (wall / n):5.1f} %{note}")
    rest = wall / n - mean["total"]
    print(f"  {'other':9s} {rest:.4f}  {100 * rest / (wall / n):5.1f} %  (storage writes of attributes, sampler, "
          f"heartbeat, callbacks)")

    # per-phase CPU time on the same architectures, measured directly
    cpu_t: dict[str, list[float]] = {k: [] for k in ("build", "direct", "fold+export", "simplify", "strip",
                                                      "estimate", "naswot")}
    for t in trials[: min(n, 10)]:
        def clock(k: str, f):  # noqa: ANN001
            c = time.process_time()
            out = f()
            cpu_t[k].append(time.process_time() - c)
            return out

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            arch = clock("build", lambda: rebuild(space_fn, t.params, opts))
        st = clock("direct", lambda: direct_onnx(arch.description, arch.input_shape))
        raw = clock("fold+export", lambda: E.export_onnx(arch.module, arch.input_shape))
        simp = clock("simplify", lambda: E.simplify(raw))
        st_x = clock("strip", lambda: strip_initializers(simp))
        if args.export:
            st = st_x
        st.graph.name = f"perf-{time.time_ns()}"  # new bytes: not answered from the server's cache
        clock("estimate", lambda: client.estimate_network(st, device, confidence=(0.9,), strip=False))

        class _T:
            user_attrs = {"input_shape": list(arch.input_shape)}

        clock("naswot", lambda: naswot(arch.module, _T()))
    used = [k for k in cpu_t if k not in (("direct",) if args.export else ("fold+export", "simplify", "strip"))]
    tot = sum(statistics.fmean(cpu_t[k]) for k in used)
    print(f"\nper-phase CPU time on {len(cpu_t['build'])} of these architectures (s; phases in parentheses are "
          f"not on this run's path):")
    for k, v in cpu_t.items():
        name = k if k in used else f"({k})"
        print(f"  {name:13s} {statistics.fmean(v):.4f}  {100 * statistics.fmean(v) / tot:5.1f} %")
    print(f"  {'sum':13s} {tot:.4f}  -> {1 / tot:.2f} candidates/s without storage and sampler")
    client.close()
    srv.stop(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
