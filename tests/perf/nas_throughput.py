"""NAS throughput: candidates per second end to end, and where the time goes.

Runs the real search loop (``nas.trial.Evaluator`` inside ``study.optimize``: sample,
build, the candidate's ONNX written from its description (``nas.direct``; ``--export``:
torch.onnx export, onnxsim and strip, as user spaces do), the estimate, NASWOT proxy, CM_O
penalty, SQLite storage with heartbeats) on candidates of the default ``scaled`` space
(``--space mobilenet``, ``resnet``), with a random sampler so that no architecture repeats
(no cache hits), and prints, for each implementation of the estimation interface
(``--estimator``: ``in-process``, what ``nas search`` uses by default; ``grpc``, a client of
an estimation service started in this process, what ``--service`` adds; ``both``, the
default: the same candidates through each, in interleaved rounds of random order, so that
the machine's drift falls on both alike)

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
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
                    help="send the torch export + onnxsim (as user spaces do)")
    ap.add_argument("--estimator", choices=("in-process", "grpc", "both"), default="both",
                    help="implementation(s) of the estimation interface to measure")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds (each runs --n / rounds candidates)")
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
    from estimator.inprocess import InProcessEstimation
    from estimator.onnx_strip import strip_initializers
    from service.client import EstimationClient
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

    modes = ["in-process", "grpc"] if args.estimator == "both" else [args.estimator]
    est: dict[str, Any] = {}
    srv = None
    for mode in modes:
        t0 = time.perf_counter()
        c0 = time.process_time()
        if mode == "grpc":
            srv = EmbeddedServer(root).start()
            est[mode] = EstimationClient(srv.address)
        else:
            est[mode] = InProcessEstimation(root)
        print(f"{mode}: {device} from {root}, ready in {time.perf_counter() - t0:.1f} s wall / "
              f"{time.process_time() - c0:.1f} s CPU (models from the cache if trained before)")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, "
          f"CPUs usable {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}")

    space_fn = SPACES[args.space]
    s = SearchSettings(device=device, budget_ms=1e9, space=args.space, space_fn=space_fn, space_options=opts,
                       objective="naswot", objective_fn=naswot, deterministic_objective=True,
                       direct_onnx=not args.export)
    storage = open_storage(f"sqlite:///{tmp / 'perf.db'}", heartbeat_interval=10)
    # one study per implementation, same sampler seed: the same candidates, in the same order
    studies = {m: optuna.create_study(storage=storage, study_name=f"perf-{m}", direction="maximize",
                                      sampler=optuna.samplers.RandomSampler(seed=args.seed)) for m in modes}
    evs = {m: Evaluator(est[m], s) for m in modes}
    # warm-up outside the measurement: first export/onnxsim/estimate pay one-off initialisation
    warm = rebuild(mobilenet, {"resolution": 96, "width": 0.5, **{f"s{i}_{k}": v for i in range(5) for k, v in
                                                                   (("depth", 1), ("expansion", 3), ("kernel", 3),
                                                                    ("se", False), ("act", "relu"))}})
    for m in modes:
        est[m].estimate_network(strip_initializers(E.to_onnx(warm.module, warm.input_shape)), device, strip=False)

    rounds = max(1, min(args.rounds, args.n))
    per = [args.n // rounds + (1 if i < args.n % rounds else 0) for i in range(rounds)]
    wall = {m: 0.0 for m in modes}
    cpu = {m: 0.0 for m in modes}
    order = random.Random(args.seed)
    for k in per:
        for m in order.sample(modes, len(modes)):
            t0 = time.perf_counter()
            c0 = time.process_time()
            studies[m].optimize(evs[m], n_trials=k, catch=(Exception,))
            wall[m] += time.perf_counter() - t0
            cpu[m] += time.process_time() - c0
    keys = ("build", "export", "simplify", "strip", "estimate", "server", "objective", "total")
    for m in modes:
        trials = [t for t in studies[m].trials if t.state.name == "COMPLETE"]
        n = len(trials)
        print(f"\n[{m}] {n}/{args.n} candidates completed; {evs[m].n_cache_hits} repeats; space {args.space}, "
              f"{'torch export + onnxsim' if args.export else 'ONNX written from the description'}")
        if not n:
            for t in studies[m].trials:
                print(t.number, t.state.name, t.user_attrs.get("fail_reason"))
            return 1
        params = [t.user_attrs["result"]["n_params"] for t in trials]
        layers = [t.user_attrs["estimate"]["n_layers"] for t in trials]
        res = [t.params["resolution"] for t in trials]
        print(f"candidates: {statistics.median(params) / 1e6:.2f} M parameters (median; {min(params) / 1e6:.2f}-"
              f"{max(params) / 1e6:.2f}), {statistics.median(layers):.0f} layers, resolution {min(res)}-{max(res)}")
        print(f"END TO END [{m}]: {n / wall[m]:.2f} candidates/s wall ({wall[m] / n:.3f} s each); "
              f"{cpu[m] / n:.3f} CPU s each -> {n / cpu[m]:.2f}/s on a dedicated core")
        mean = {k: statistics.fmean(t.user_attrs["result"]["timing_s"].get(k, 0.0) for t in trials) for k in keys}
        print("per-phase wall time, mean over trials (s):")
        for k in keys[:-1]:
            note = (" (the estimate as the search sees it: with grpc the round trip incl. the server's work)"
                    if k == "estimate" else " (the estimator's own time, part of estimate)" if k == "server" else "")
            print(f"  {k:9s} {mean[k]:.4f}  {100 * mean[k] / (wall[m] / n):5.1f} %{note}")
        rest = wall[m] / n - mean["total"]
        print(f"  {'other':9s} {rest:.4f}  {100 * rest / (wall[m] / n):5.1f} %  (storage writes of attributes, "
              f"sampler, heartbeat, callbacks)")
    if len(modes) == 2:
        same = [(a.params, a.values) for a in studies[modes[0]].trials] == \
               [(b.params, b.values) for b in studies[modes[1]].trials]
        print(f"\nsame candidates and scores through both: {same}")
    m = modes[0]
    trials = [t for t in studies[m].trials if t.state.name == "COMPLETE"]
    n = len(trials)

    # per-phase CPU time on the same architectures, measured directly
    cpu_t: dict[str, list[float]] = {k: [] for k in ("build", "direct", "fold+export", "simplify", "strip",
                                                      *(f"estimate {x}" for x in modes), "naswot")}
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
        for x in order.sample(modes, len(modes)):  # the second call meets warmer caches: alternate who is first
            st.graph.name = f"perf-{time.time_ns()}"
            clock(f"estimate {x}", lambda x=x: est[x].estimate_network(st, device, confidence=(0.9,), strip=False))

        class _T:
            user_attrs = {"input_shape": list(arch.input_shape)}

        clock("naswot", lambda: naswot(arch.module, _T()))
    used = [k for k in cpu_t if k not in (("direct",) if args.export else ("fold+export", "simplify", "strip"))
            and k not in [f"estimate {x}" for x in modes[1:]]]
    tot = sum(statistics.fmean(cpu_t[k]) for k in used)
    print(f"\nper-phase CPU time on {len(cpu_t['build'])} of these architectures (s; phases in parentheses are "
          f"not on the path of the sum, {m}):")
    for k, v in cpu_t.items():
        name = k if k in used else f"({k})"
        print(f"  {name:13s} {statistics.fmean(v):.4f}  {100 * statistics.fmean(v) / tot:5.1f} %")
    print(f"  {'sum':13s} {tot:.4f}  -> {1 / tot:.2f} candidates/s without storage and sampler")
    for e in est.values():
        e.close()
    if srv is not None:
        srv.stop(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
