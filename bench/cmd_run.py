"""``bench run``, ``bench show`` and ``bench export``.

``bench run --device NAME --runner onnxruntime`` builds the sampling plan
(:mod:`bench.sampling`), measures it with smart padding (:mod:`bench.smartpad`) and commits
every measurement to a SQLite database (:mod:`bench.storage`) as it is taken. Running the
same command again resumes: what the database holds for the same environment is skipped.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from estimator.cliutil import integer, number
from estimator.dataset import DatasetError, excluded_message, read_measurements
from estimator.errors import UserError

from .measure import make_runner, measure_plan
from .runners.base import RUNNERS

DB_SUFFIXES = (".sqlite", ".sqlite3", ".db")
DEFAULT_OUT = "bench-data"
#: Measurement protocol id, part of every environment's settings.

#: ``bench run`` options forwarded to the runner (flag dest -> runner keyword), only when given.
RUNNER_OPTIONS = {
    "agent": "agent", "token": "token", "delegate": "delegate", "accelerator_config": "accelerator_config",
    "system_config": "system_config", "memory_mode": "memory_mode", "precision": "precision",
    "threads": "threads", "affinity": "affinity", "graph_optimization": "graph_optimization",
    "flush_cache": "flush_cache_mb",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="measure layer configurations on a device with smart padding (resumable)",
        description="Build the sampling plan, measure it with smart padding and commit every measurement to a "
                    "SQLite database as it is taken. Running the same command again resumes: what the database "
                    "already holds for the same environment is skipped, nothing is measured twice.")
    p.add_argument("--device", required=True, help="device name (names the database and the profile)")
    p.add_argument("--runner", default="onnxruntime", choices=sorted(RUNNERS), help="target runner (default onnxruntime)")
    p.add_argument("--layers", default=None, help="comma-separated layer types (default: all benchable types)")
    p.add_argument("--samples", type=integer(min=1), default=1000,
                   help="configurations per layer type from the broad space, FLOPs-balanced (default 1000)")
    p.add_argument("--prior-samples", type=integer(min=0), default=None,
                   help="further configurations per layer type from the network prior: the shapes real CNNs use "
                        "(default: as many as --samples; 0 for the broad space only)")
    from .context_sampling import PLANS  # noqa: PLC0415 (the plans' names, for the help)

    p.add_argument("--context", default=None, metavar="NAME:N[,NAME:N]",
                   help="measure targeted plans of bench.context_sampling instead of the sampling plan "
                        f"({', '.join(PLANS)}; with --seed)")
    p.add_argument("--dry-run", action="store_true",
                   help="with --context: print the plan (type, key, params, ops; one configuration a line) and "
                        "measure nothing")
    p.add_argument("--from-onnx", action="append", default=None, metavar="PATH",
                   help="measure exactly the layer configurations of these ONNX networks instead of a sampling "
                        "plan (a file, or a directory of .onnx files; repeatable), imported with the fusion rules "
                        "of the device's installed profile, if any (bench.network_plan)")
    p.add_argument("--exclude-onnx", action="append", default=None, metavar="PATH",
                   help="with --from-onnx: leave out every layer configuration these networks use (e.g. held-out "
                        "validation networks; a file or a directory; repeatable)")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help=f"database file (*.sqlite, *.db) or directory for DEVICE.sqlite (default {DEFAULT_OUT}/)")
    p.add_argument("--warmup", type=integer(min=0), default=5, help="untimed runs before each measurement (default 5)")
    p.add_argument("--runs", type=integer(min=1), default=20, help="timed runs per measurement (default 20)")
    p.add_argument("--seed", type=integer(min=0), default=0, help="sampling seed (default 0)")
    p.add_argument("--max-ops", type=number(above=0), default=None, help="cap on ops per layer (default: per runner)")
    p.add_argument("--max-elems", type=integer(min=1), default=None,
                   help="cap on elements of any LUM tensor (default: per runner)")
    p.add_argument("--retry-failed", action="store_true", help="retry configurations that failed before")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_runner_options(p)
    p.set_defaults(func=cmd_run)

    s = sub.add_parser("show", help="summarise a benchmark database or exported CSV")
    s.add_argument("dataset", help="database (*.sqlite) or exported CSV")
    s.set_defaults(func=cmd_show)

    e = sub.add_parser("export", help="export a benchmark database as a dataset CSV and/or Parquet")
    e.add_argument("db", help="benchmark database")
    e.add_argument("--csv", default=None, metavar="FILE", help="CSV with the dataset columns")
    e.add_argument("--parquet", default=None, metavar="FILE", help="Parquet file (needs pyarrow)")
    e.set_defaults(func=cmd_export)


def add_runner_options(p: argparse.ArgumentParser) -> None:
    """The runner option flags (``RUNNER_OPTIONS``), shared by every bench command that runs a target."""
    g = p.add_argument_group("runner options (passed to the runner only when given)")
    g.add_argument("--threads", type=integer(min=1), default=None, help="intra-op threads (onnxruntime default 1)")
    g.add_argument("--affinity", default=None, help="CPU ids to pin to, e.g. 0-3,6 (onnxruntime)")
    g.add_argument("--graph-optimization", default=None, choices=("disable", "basic", "extended", "all"),
                   help="ONNX Runtime graph optimisation level (default all)")
    g.add_argument("--flush-cache", type=float, default=None, metavar="MB",
                   help="write an MB buffer before every run so weights come cold from DRAM, as inside a real "
                        "network (onnxruntime, litert; e.g. 64 for a 32 MiB last-level cache; default off; with --layers "
                        "fc,conv2d, added to the warm rows by bench profile --cold-from)")
    g.add_argument("--agent", default=None, metavar="HOST:PORT", help="bench agent address (agent runner)")
    g.add_argument("--token", default=None, help="bench agent token (agent runner)")
    g.add_argument("--delegate", default=None, metavar="PATH", help="TFLite delegate library (litert)")
    g.add_argument("--accelerator-config", default=None, metavar="NAME", help="Ethos-U accelerator (vela)")
    g.add_argument("--system-config", default=None, metavar="NAME", help="Vela system config")
    g.add_argument("--memory-mode", default=None, metavar="NAME", help="Vela memory mode")
    g.add_argument("--precision", default=None, choices=("fp32", "fp16", "int8"),
                   help="model precision (default: a base profile's where the runner renders it, as when adapting, "
                        "calibrating, refining or checking one; else fp32 for ONNX runners, int8 for TFLite and Vela)")


def given_runner_options(a: argparse.Namespace) -> dict[str, Any]:
    """The runner options given on the command line (flag dest -> runner keyword)."""
    return {kw: getattr(a, dest) for dest, kw in RUNNER_OPTIONS.items() if getattr(a, dest, None) is not None}


# ------------------------------------------------------------------------------ run


def db_path(out: str, device: str) -> Path:
    """``--out``: a database file (known suffix) or a directory holding ``DEVICE.sqlite``."""
    p = Path(out)
    if p.suffix.lower() in DB_SUFFIXES and not p.is_dir():
        return p
    return p / f"{device}.sqlite"


def cmd_run(a: argparse.Namespace) -> int:
    from .sampling import layer_types, limits_for, make_plan

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", a.device):
        raise UserError(f"--device {a.device!r}: use letters, digits, '.', '_' and '-' only")
    if a.exclude_onnx and not a.from_onnx:
        raise UserError("--exclude-onnx goes with --from-onnx")
    if a.from_onnx and (a.context or a.layers or a.prior_samples is not None):
        raise UserError("--from-onnx replaces the sampling plan: drop --context, --layers and --prior-samples")
    if a.context and (a.layers or a.prior_samples is not None):
        raise UserError("--context replaces the sampling plan: drop --layers and --prior-samples")
    if a.dry_run and not a.context:
        raise UserError("--dry-run goes with --context (it prints that plan)")
    limits = limits_for(a.runner, max_ops=a.max_ops, max_elems=a.max_elems)
    if a.context:
        from .context_sampling import context_plan, parse_context_spec

        plan = context_plan(parse_context_spec(a.context), seed=a.seed, limits=limits)
        if a.dry_run:  # no runner, no database
            for c in plan:
                print(c.layer_type, c.key, c.params, f"{c.ops:.3g}")
            print(f"bench: {len(plan)} configurations (context plans {a.context}, seed {a.seed}, max ops "
                  f"{limits.max_ops:.3g}) for {a.runner}; dry run, nothing measured", file=sys.stderr)
            return 0
    prior = a.samples if a.prior_samples is None else a.prior_samples
    runner = make_runner(a.runner, given_runner_options(a))
    types = layer_types(a.layers, runner.model_format)
    path = db_path(a.out, a.device)
    t0 = time.monotonic()
    if a.from_onnx:
        plan, what = _network_plan(a, limits)
        types = sorted({c.layer_type for c in plan})
    elif a.context:
        types = sorted({c.layer_type for c in plan})
        what = f"context plans {a.context}"
    else:
        plan = make_plan(types, a.samples, prior_samples=prior, seed=a.seed, limits=limits,
                         model_format=runner.model_format)
        what = f"{a.samples} + {prior} prior per type"
    try:
        stats, env_id, total = measure_plan(
            runner, path, a.device, plan, warmup=a.warmup, runs=a.runs, precision=a.precision,
            retry_failed=a.retry_failed, progress=not a.no_progress,
            announce=lambda env_id: print(
                f"bench: {len(plan)} configurations ({', '.join(types)}; {what}, seed {a.seed}, "
                f"max ops {limits.max_ops:.3g}) on {a.device} with {a.runner} -> {path} (env {env_id})",
                file=sys.stderr))
    finally:
        runner.close()
    dt = time.monotonic() - t0
    print(f"measured {stats.measured} configurations ({stats.already} already present, {stats.failed} failed, "
          f"{stats.skipped_failed} skipped as failed before) and {stats.padding_measured} padding pairs "
          f"({stats.padding_reused} reused) in {dt:.1f} s")
    print(f"data: {path} (env_id {env_id}, {total} rows for this environment)")
    print(f"next: bench show {path}; bench export {path} --csv {path.with_suffix('.csv')}")
    flush = getattr(runner, "flush", None)  # host runners that can flush their caches
    if {"fc", "conv2d"} & set(types) and flush is not None and not flush.mb:
        print(f"note: these rows are warm (weights in cache); inside a network too big for the last-level cache a "
              f"classifier, or a wide convolution on a small map, reads its weights from DRAM (python "
              f"tests/perf/cold_cache.py compares the two with ONNX Runtime). To measure those cold beside them: the "
              f"same command with --layers fc,conv2d --flush-cache 64, then bench profile {path} --env-id {env_id} "
              f"--cold-from <its env>:fc,conv2d (docs/calibration.md)")
    return 1 if stats.failed and not stats.measured and not stats.already else 0


def _network_plan(a: argparse.Namespace, limits: Any) -> tuple[list[Any], str]:
    """``--from-onnx``: the plan and its description; prints what was left out and why."""
    from estimator.errors import NotFoundError
    from estimator.profile import load_profile

    from .network_plan import network_plan

    try:
        fusion, rules = load_profile(a.device).fusion_rules(), f"the fusion rules of profile {a.device!r}"
    except NotFoundError:
        fusion, rules = None, f"the default fusion rules (no profile {a.device!r} is installed)"
    plan, report = network_plan(a.from_onnx, fusion=fusion, limits=limits, exclude=a.exclude_onnx or ())
    print(f"bench: {report.networks} network(s), {report.layers} layers imported with {rules}: "
          f"{len(plan)} distinct benchable configurations", file=sys.stderr)
    for line in report.lines():
        print(f"bench: {line.strip()}", file=sys.stderr)
    if not plan:
        raise UserError("--from-onnx: the networks have no layer configuration to benchmark")
    return plan, f"layers of {report.networks} network(s)"


# ----------------------------------------------------------------------------- show


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _q(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per layer type: counts, T_LUM interval widths, single-layer/T_LUM ratios."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["layer_type"], []).append(r)
    out = []
    for t in sorted(by):
        rs = by[t]
        widths = [float(r["t_lum_hi_ms"]) - float(r["t_lum_lo_ms"]) for r in rs]
        rel = [w / abs(float(r["t_lum_ms"])) for w, r in zip(widths, rs) if float(r["t_lum_ms"]) != 0]
        ratios = [float(r["t_single_ms"]) / float(r["t_lum_ms"]) for r in rs
                  if r.get("t_single_ms") not in (None, "") and not math.isnan(float(r["t_single_ms"]))
                  and float(r["t_lum_ms"]) > 0]
        out.append({
            "layer_type": t, "n": len(rs),
            "t_lum_median_ms": statistics.median(float(r["t_lum_ms"]) for r in rs),
            "width_median_ms": statistics.median(widths), "width_p90_ms": _q(widths, 0.9),
            "rel_width_median": _q(rel, 0.5), "rel_width_p90": _q(rel, 0.9),
            "single_over_lum_median": _q(ratios, 0.5), "single_over_lum_p10": _q(ratios, 0.1),
            "single_over_lum_p90": _q(ratios, 0.9),
            "nonpositive_t_lum": sum(1 for r in rs if float(r["t_lum_ms"]) <= 0),
        })
    return out


def _print_summary(summary: Sequence[dict[str, Any]]) -> None:
    hdr = ("type", "n", "T_LUM med ms", "width med ms", "width p90 ms", "rel width med", "rel width p90",
           "T_single/T_LUM med [p10, p90]", "T_LUM<=0")
    lines = [hdr]
    for s in summary:
        lines.append((s["layer_type"], str(s["n"]), f"{s['t_lum_median_ms']:.4g}", f"{s['width_median_ms']:.3g}",
                      f"{s['width_p90_ms']:.3g}", f"{s['rel_width_median']:.3g}", f"{s['rel_width_p90']:.3g}",
                      f"{s['single_over_lum_median']:.3g} [{s['single_over_lum_p10']:.3g}, "
                      f"{s['single_over_lum_p90']:.3g}]", str(s["nonpositive_t_lum"])))
    widths = [max(len(l[i]) for l in lines) for i in range(len(hdr))]
    for l in lines:
        print("  ".join(x.rjust(w) if i else x.ljust(w) for i, (x, w) in enumerate(zip(l, widths))))


def _print_provenance(envs: Sequence[dict[str, Any]], counts: dict[int, int] | None = None) -> None:
    print("provenance:")
    for e in envs:
        host = e.get("host") or {}
        vers = ", ".join(f"{k} {v}" for k, v in sorted((e.get("versions") or {}).items()))
        n = f", {counts.get(e['env_id'], 0)} rows" if counts is not None else ""
        print(f"  env {e['env_id']}: device {e['device']}, runner {e['runner']} ({e['provenance']}), "
              f"precision {e['precision']}, threads {e.get('threads')}, created {e['created_at']}{n}")
        cpu = host.get("cpu_model") or host.get("processor") or host.get("machine") or "?"
        print(f"    host {host.get('hostname', '?')}: {cpu}, {host.get('cpu_count', '?')} cores, "
              f"{host.get('os') or host.get('system') or '?'}; device_name {e.get('device_name')}")
        note = (e.get("environment") or {}).get("provenance_note")
        if note:
            print(f"    note: {note}")
        print(f"    versions: {vers}; settings {json.dumps(e.get('settings'), sort_keys=True)}")


def cmd_show(a: argparse.Namespace) -> int:
    from .storage import Store, provenance_path

    path = Path(a.dataset)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path} is a directory, not a benchmark database or dataset CSV")
    if _is_sqlite(path):
        with Store.open_existing(path) as store:
            rows = store.export_rows()
            envs = store.environments()
            lut = {e["env_id"]: len(store.padding_lut(e["env_id"])) for e in envs}
            failures = store.failures()
        print(f"{path}: {len(rows)} measurements, {sum(lut.values())} padding pairs, {len(failures)} failed configs")
    else:
        excluded: list[tuple[int, str]] = []
        try:
            rows = list(read_measurements(path, excluded))
        except DatasetError as e:
            raise UserError(f"{path}: not a benchmark database or dataset CSV ({e})") from e
        side = provenance_path(path)
        envs = json.loads(side.read_text())["environments"] if side.exists() else []
        print(f"{path}: {len(rows)} measurements")
        if excluded:
            print(f"warning: {excluded_message(path, excluded)}")
        if not envs:
            print(f"(no provenance sidecar {side.name}; rows name their runner and env_id only)")
    counts: dict[int, int] = {}
    for r in rows:
        counts[int(r["env_id"])] = counts.get(int(r["env_id"]), 0) + 1
    if len(counts) > 1:  # never pool the rows of two environments (two machines, a measurement and a cost model)
        about = {int(e["env_id"]): f"{e.get('runner', '?')}, {e.get('provenance', '?')}" for e in envs if "env_id" in e}
        for env_id in sorted(counts):
            print(f"environment {env_id} ({about.get(env_id, 'see below')}): {counts[env_id]} rows")
            _print_summary(summarize([r for r in rows if int(r["env_id"]) == env_id]))
    elif rows:
        _print_summary(summarize(rows))
    _print_provenance(envs, counts)
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from .storage import Store, export_csv, export_parquet

    if not a.csv and not a.parquet:
        raise UserError("bench export: give --csv FILE and/or --parquet FILE")
    with Store.open_existing(a.db) as store:
        for dest, write in ((a.csv, export_csv), (a.parquet, export_parquet)):
            if not dest:
                continue
            if Path(dest).is_dir():
                raise UserError(f"{dest} is a directory; give the file to write")
            try:
                n, side = write(store, dest)
            except OSError as e:
                raise UserError(f"cannot write {dest}: {e.strerror or e}") from None
            print(f"wrote {n} rows to {dest} (provenance: {side})")
    return 0
