"""A network's whole time against the sum of its layers benchmarked alone, warm and cold (a script,
not a test: prints figures, asserts nothing).

Smart padding times each layer between padding convolutions in a small model that runs again and
again, so its weights and maps stay in the caches; inside a network the other layers' traffic
evicts them. This script measures how much that matters for one network on one runner:

1. the network, timed whole in ``--rounds`` rounds (their medians' median);
2. every distinct layer configuration of it at exactly its shape (:func:`bench.network_plan.
   network_plan`, the layers the estimator imports with the runner's fusion rules), with smart
   padding, twice: as the profiles measure them (warm), and with ``--flush-cache`` MB written
   before every run (cold);
3. the sums of the layers' padded times (each configuration as often as the network has it),
   warm and cold, overall and by quarter of the network, beside the network's time.

Where the warm sum falls short of the network and the cold one does not, the network runs its
layers colder than the rows were measured.

    taskset -c 1 python tests/perf/network_gap.py --runner litert --space mobilenet --index 0
    taskset -c 1 python tests/perf/network_gap.py --runner onnxruntime --zoo mobilenet_v2@160
    taskset -c 1 python tests/perf/network_gap.py --runner litert --onnx net.onnx --keep DIR

LiteRT runs float32 with the rules of :func:`bench.profile_db.litert_fusion`; ONNX Runtime one
thread with ``--device``'s rules (default ``host-cpu``). Pin it to one core and keep the other idle.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _network(args: argparse.Namespace, out: Path) -> Path:
    """The network as an ONNX file with weights (what the runner runs)."""
    if args.onnx:
        return Path(args.onnx)
    from bench.network_sources import parse_zoo, space_specs, zoo_specs  # noqa: PLC0415

    if args.zoo:
        spec = zoo_specs(parse_zoo(args.zoo))[0]
    else:
        from nas.sources import register  # noqa: PLC0415

        register()
        spec = space_specs([args.space], args.index + 1, seed=args.seed)[args.index]
    path = out / "network.onnx"
    path.write_bytes(spec.build())
    print(f"network: {spec.name}")
    return path


def _fusion(args: argparse.Namespace):  # noqa: ANN202
    from estimator.fusion import FusionRules  # noqa: PLC0415

    if args.runner == "litert":
        from bench.profile_db import litert_fusion  # noqa: PLC0415

        return FusionRules.from_dict(litert_fusion())
    from estimator.profile import load_profile  # noqa: PLC0415

    return load_profile(args.device).fusion_rules()


def _runner(args: argparse.Namespace, flush: float):  # noqa: ANN202
    from bench.measure import make_runner  # noqa: PLC0415

    opts: dict = {"threads": 1}
    if flush:
        opts["flush_cache_mb"] = flush
    if args.runner == "litert":
        opts["precision"] = "fp32"
    return make_runner(args.runner, opts)


def _network_ms(args: argparse.Namespace, path: Path) -> tuple[float, float]:
    """Median of the rounds' medians and the rounds' spread (max / min - 1)."""
    runner = _runner(args, 0.0)
    model = path.read_bytes()
    if args.runner == "litert":
        from bench.tflite_convert import convert_onnx  # noqa: PLC0415

        model = convert_onnx(model, "float32")
    prepared = runner.prepare(model)
    rounds = [runner.time(prepared, warmup=5, runs=args.runs).median_ms for _ in range(args.rounds)]
    runner.close()
    return statistics.median(rounds), max(rounds) / min(rounds) - 1.0


def _layer_ms(args: argparse.Namespace, path: Path, db: Path, flush: float) -> dict[str, float]:
    """Padded time (T_LUM, ms) of every configuration of the network, by configuration key."""
    from bench.measure import measure_plan  # noqa: PLC0415
    from bench.network_plan import network_plan  # noqa: PLC0415
    from bench.sampling import config_key  # noqa: PLC0415
    from bench.storage import Store  # noqa: PLC0415

    plan, _ = network_plan([path], fusion=_fusion(args))
    runner = _runner(args, flush)
    _, env_id, _ = measure_plan(runner, db, f"network-gap-{args.runner}", plan, warmup=5, runs=args.runs,
                                precision="fp32" if args.runner == "litert" else None, progress=not args.no_progress)
    runner.close()
    out: dict[str, float] = {}
    with Store.open_existing(db) as st:
        for r in st.export_rows(env_id):
            params = json.loads(r["params"]) if isinstance(r["params"], str) else r["params"]
            out[config_key(r["layer_type"], params)] = float(r["t_lum_ms"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--onnx", help="an ONNX network with weights")
    src.add_argument("--zoo", help="an estimator.zoo network, NAME[@RES]")
    src.add_argument("--space", default="mobilenet", help="a NAS space to take a sample of (default mobilenet)")
    ap.add_argument("--index", type=int, default=0, help="which sample of --space (default 0)")
    ap.add_argument("--seed", type=int, default=0, help="the samples' seed (default 0)")
    ap.add_argument("--runner", choices=("litert", "onnxruntime"), default="litert")
    ap.add_argument("--device", default="host-cpu", help="onnxruntime: the profile whose fusion rules import the "
                    "network (default host-cpu)")
    ap.add_argument("--flush-cache", type=float, default=64.0, help="MB written before every cold run (default 64)")
    ap.add_argument("--rounds", type=int, default=9, help="rounds of the whole network (default 9)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--keep", help="a folder for the network and the benchmark databases (default: a temporary one)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    from bench.network_plan import network_layer_configs  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        path = _network(args, work)
        warm = _layer_ms(args, path, work / "warm.sqlite", 0.0)
        cold = _layer_ms(args, path, work / "cold.sqlite", args.flush_cache)
        net, spread = _network_ms(args, path)
        layers = [(t, key) for t, key, p in network_layer_configs(path, fusion=_fusion(args)) if p is not None]
        have = [(t, k) for t, k in layers if k in warm and k in cold]
        n = len(have)
        parts: dict[str, list[float]] = {}
        by_type: dict[str, Counter] = {"warm": Counter(), "cold": Counter()}
        for i, (t, k) in enumerate(have):
            q = f"quarter {1 + min(3, 4 * i // max(n, 1))}"
            parts.setdefault(q, [0.0, 0.0])
            parts[q][0] += warm[k]
            parts[q][1] += cold[k]
            by_type["warm"][t] += warm[k]
            by_type["cold"][t] += cold[k]
        tw, tc = sum(v[0] for v in parts.values()), sum(v[1] for v in parts.values())
        print(f"runner {args.runner}; {len(layers)} benchable layers, {len(layers) - n} without a row; "
              f"{len(warm)} distinct configurations")
        print(f"network {net:.3f} ms ({args.rounds} rounds, spread {spread:.0%}); layers' padded sum warm "
              f"{tw:.3f} ms ({tw / net - 1:+.1%}), cold ({args.flush_cache:g} MB flush) {tc:.3f} ms ({tc / net - 1:+.1%})")
        for q in sorted(parts):
            print(f"  {q}: warm {parts[q][0]:.3f}, cold {parts[q][1]:.3f} ms")
        for t, v in by_type["warm"].most_common():
            print(f"  {t:12s} warm {v:.3f}, cold {by_type['cold'][t]:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
