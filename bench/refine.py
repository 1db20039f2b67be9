"""Refinement: measure the layer configurations that widen the target networks' intervals most.

The library behind ``bench refine`` (the CLI is :mod:`bench.cmd_refine`). Each round:

1. estimates the target networks with the current profile (Eq. 7/8, uncalibrated: the layer
   models' own widths, which is what new layer rows can shrink);
2. ranks layer configurations by :func:`rank` (below);
3. measures, down the ranking, each configuration not measured yet and up to ``neighbours``
   around it not measured yet, nearest first (:func:`bench.sampling.neighbours`: one ladder
   step in size or channels, within the sampling limits; then two steps, up to
   :data:`RINGS`), until ``top`` ranked configurations have added
   something, with smart padding through ``bench run``'s one measuring path
   (:func:`bench.measure.measure_plan`: every row committed as it is taken, resumable);
4. writes profile NAME (:func:`write_refined_profile`): BASE's layer rows, then the refine
   database's rows, BASE's network rows and side files unchanged, and ``refined`` in
   ``profile.json`` (base, targets, excluded networks, rounds, rows added, device seconds,
   date), and ``training.calibration_rows``: BASE's row count, so that BASE's rows (its
   sampling plan) calibrate the conformal predictors and the added rows, chosen for their
   uncertainty, train the forests only; trains it (only the types that got rows) and
   estimates again.

It stops after ``rounds`` rounds, when the device-time budget is spent (checked before each
measurement), when nothing is left to measure, or when the targets' mean CM_LV width (each
relative to its width before refining, :func:`mean_lv`) shrank by less than ``min_gain``
(default :data:`MIN_GAIN`; 0: never) in a round. Both budgets count every run of the same
refinement (:func:`refinement_id`): the database keeps each round's plan, device time and
widths beside its rows (``refine_rounds``, :mod:`bench.storage`), so a killed run's round goes
on with its own plan when the command runs again, and ``refined`` lists every round.

Ranking. A layer's score is ``((hi_O - lo_O) + (hi_LV - lo_LV)) / network total`` at 0.9
confidence: its two per-layer interval widths (CM_O for coverage, large far from the
measured rows; CM_LV for variance) as a share of its network's latency. Summed over a
network's layers this is the network's two relative widths added (exactly so were its layer
errors perfectly correlated, an upper bound under the estimator's couplings), so a layer's score is what it adds
to them, and a configuration's score (summed over every layer of every target that uses it)
treats each target alike whatever its latency. Configurations
outside the sampling limits (:func:`bench.sampling.in_space`) or used by an excluded network
are not ranked; ones already measured (BASE's rows or the database's) or failed before are
ranked but not measured again: their neighbours are.

What a device-minute buys is measured by ``tests/perf/refine_curve.py`` (README). BASE's own
rows are kept as they are, so networks held out with ``exclude`` are unseen only by the rows
refinement adds. Why the added rows do not calibrate: refinement measures thousands of small
configurations (the targets' layers and their neighbours); as calibration rows they lowered
CM_LV's absolute floor (a tenth of the median tree spread over the rows) about ninefold and
raised the 90 % conformal quantile threefold on host-cpu, so every layer's interval widened
(held-out networks: 103 % mean CM_LV width against 73 % with BASE's rows calibrating).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from estimator.errors import UserError

__all__ = ["Target", "TargetWidth", "Round", "load_targets", "estimate_targets", "rank", "round_plan",
           "write_refined_profile", "refine", "refinement_id", "mean_lv", "MIN_GAIN", "CONFIDENCE"]

#: stop when the targets' mean CM_LV width (:func:`mean_lv`) shrank by less than this in a round
MIN_GAIN = 0.02
#: the confidence of the widths that rank and are reported
CONFIDENCE = 0.9
#: how far around a ranked configuration its neighbours are looked for (ladder steps), and how
#: many of a ring are expanded into the next
RINGS, RING_WIDTH = 3, 16


@dataclass
class Target:
    name: str
    sha256: str  # of the ONNX bytes the network was built as
    net: Any  # the imported network (estimator.onnx_import), fused with BASE's rules


@dataclass
class TargetWidth:
    name: str
    total_ms: float
    lv: tuple[float, float]
    o: tuple[float, float]

    @property
    def lv_width(self) -> float:
        return self.lv[1] - self.lv[0]

    @property
    def o_width(self) -> float:
        return self.o[1] - self.o[0]

    def to_dict(self) -> dict[str, float]:
        return {"total_ms": self.total_ms, "CM_LV_width_ms": self.lv_width, "CM_O_width_ms": self.o_width}


@dataclass
class Round:
    round: int
    measured: int
    failed: int
    device_seconds: float  # all rounds so far, every run (a killed run's up to its last committed row)
    widths: list[TargetWidth] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "measured": self.measured, "failed": self.failed,
                "device_seconds": round(self.device_seconds, 3),
                "widths": {w.name: w.to_dict() for w in self.widths}}


def load_targets(specs: Sequence[Any], fusion: Any) -> list[Target]:
    """Build and import each :class:`~bench.network_sources.NetworkSpec` once (one line
    naming the network if the estimator cannot read it)."""
    from estimator.onnx_import import load_network  # noqa: PLC0415

    out = []
    for s in specs:
        model = s.build()
        try:
            net = load_network(model, fusion=fusion)
        except UserError as e:
            raise UserError(f"{s.name}: {e}") from None
        if not net.layers:
            raise UserError(f"{s.name}: the network has no layers to estimate")
        out.append(Target(s.name, hashlib.sha256(model).hexdigest(), net))
    return out


def estimate_targets(est: Any, targets: Sequence[Target]) -> list[tuple[Target, Any]]:
    """Each target's uncalibrated estimate with per-layer rows at :data:`CONFIDENCE`."""
    return [(t, est.estimate_network(t.net, [CONFIDENCE], name=t.name, calibrate=False)) for t in targets]


def widths(estimates: Sequence[tuple[Target, Any]]) -> list[TargetWidth]:
    return [TargetWidth(t.name, e.total_ms, e.interval("CM_LV"), e.interval("CM_O")) for t, e in estimates]


def mean_lv(ws: Sequence[TargetWidth], start: Sequence[TargetWidth]) -> float:
    """The targets' mean CM_LV width, each as a share of its width before refining (so that
    targets of any latency count alike, and a prediction that moves does not look like a
    narrower interval)."""
    ref = {w.name: w.lv_width for w in start}
    return statistics.fmean(w.lv_width / ref[w.name] if ref.get(w.name, 0) > 0 else 1.0 for w in ws)


def rank(estimates: Sequence[tuple[Target, Any]], *, exclude: set[str], limits: Any,
         model_format: str | None = None) -> list[tuple[Any, float]]:
    """``(Config, score)`` of every configuration of the targets inside the sampling limits,
    not in ``exclude`` and (with ``model_format``) renderable to the runner's models, best first
    (see the module docstring). Measured ones stay in the ranking: their neighbours are what
    can still narrow a wide interval there."""
    from estimator.layers import SPECS, layer_bench_params  # noqa: PLC0415

    from .modelgen import BENCHABLE_TYPES  # noqa: PLC0415
    from .sampling import Config, config_key, in_space  # noqa: PLC0415

    scores: dict[str, float] = {}
    configs: dict[str, Any] = {}
    refused: set[str] = set(exclude)
    for t, e in estimates:
        if e.total_ms <= 0:
            continue
        by_name = {l.name: l for l in t.net.layers}
        for row in e.layers:
            layer = by_name.get(row.name)
            if layer is None or layer.type not in BENCHABLE_TYPES:
                continue
            params = layer_bench_params(layer.type, layer.params)
            key = config_key(layer.type, params)
            if key in refused:
                continue
            if key not in configs:
                if not in_space(layer.type, params, limits) or (
                        model_format is not None and not SPECS[layer.type].renders(params, model_format)):
                    refused.add(key)
                    continue
                configs[key] = Config.make(layer.type, params)
            (lo_o, hi_o), (lo_lv, hi_lv) = row.interval("CM_O"), row.interval("CM_LV")
            scores[key] = scores.get(key, 0.0) + ((hi_o - lo_o) + (hi_lv - lo_lv)) / e.total_ms
    order = sorted(scores, key=lambda k: (-scores[k], k))
    return [(configs[k], scores[k]) for k in order]


def _rings(cfg: Any, limits: Any, depth: int = RINGS, width: int = RING_WIDTH) -> Iterator[Any]:
    """The configurations around ``cfg``, nearest first: its :func:`bench.sampling.neighbours`
    (ring 1), theirs not seen yet (ring 2), ... up to ``depth`` rings, each ring's first
    ``width`` expanded into the next."""
    from .sampling import neighbours as near  # noqa: PLC0415

    seen = {cfg.key}
    frontier = [cfg]
    for _ in range(depth):
        ring = []
        for c in frontier[:width]:
            for nb in near(c.layer_type, c.params, limits):
                if nb.key not in seen:
                    seen.add(nb.key)
                    ring.append(nb)
                    yield nb
        frontier = ring


def round_plan(ranked: Sequence[tuple[Any, float]], *, top: int, neighbours: int, skip: set[str],
               limits: Any) -> list[Any]:
    """Down the ranking: each configuration not in ``skip`` (measured, failed or excluded)
    and up to ``neighbours`` configurations around it not in ``skip``, nearest first
    (:func:`_rings`: one ladder step, then two, ... so a configuration whose near neighbours
    are measured gets further ones), until ``top`` ranked configurations have added
    something."""
    plan: dict[str, Any] = {}
    used = 0
    for cfg, _ in ranked:
        if used >= top:
            break
        n0 = len(plan)
        if cfg.key not in skip:
            plan.setdefault(cfg.key, cfg)
        n = 0
        for nb in _rings(cfg, limits) if neighbours else ():
            if n >= neighbours:
                break
            if nb.key in skip or nb.key in plan:
                continue
            plan[nb.key] = nb
            n += 1
        used += len(plan) > n0
    return list(plan.values())


def _base_state(base: Any) -> tuple[set[str], int]:
    """BASE's configuration keys and its number of rows (one pass over its measurements)."""
    from .sampling import config_key  # noqa: PLC0415

    keys: set[str] = set()
    n = 0
    for r in base.rows():
        keys.add(config_key(r["layer_type"], r["params"]))
        n += 1
    return keys, n


def _refined_meta(base: Any, name: str, refined: dict[str, Any], command: str, base_rows: int) -> dict[str, Any]:
    """``profile.json`` of the refined profile: BASE's, renamed, with ``refined``, a note
    naming ``command`` (``bench refine``, ``nas search --refine M``) and
    ``training.calibration_rows`` (BASE's, or its ``base_rows``)."""
    meta = base.to_dict()
    meta["name"] = name
    meta["refined"] = refined
    # the base's rows (its sampling plan) calibrate the conformal predictors; the rows added
    # here were chosen for their uncertainty and train the forests only (estimator.models)
    training = dict(meta.get("training") or {})
    training["calibration_rows"] = int(training.get("calibration_rows") or base_rows)
    meta["training"] = training
    previous = (meta.get("description") or "").split(" Refined by ")[0]
    meta["description"] = (previous.rstrip() + f" Refined by `{command} --device {base.name}`: "
                           f"{refined['configurations']} layer rows added toward "
                           f"{', '.join(t['name'] for t in refined['targets'])}.").strip()
    return meta


def write_refined_profile(base: Any, name: str, root: str | Path, rows: Sequence[dict[str, Any]],
                          refined: dict[str, Any], command: str = "bench refine", base_rows: int | None = None) -> Path:
    """Write profile ``name``: BASE's ``measurements.csv`` bytes followed by ``rows`` (those
    not in BASE already), BASE's other files (network rows, side files) unchanged,
    ``refined`` in ``profile.json``. Written aside and moved into place: whole or not at all
    (:func:`estimator.profile.staged_profile`). ``base_rows``: BASE's row count, if known."""
    from estimator.dataset import write_measurements  # noqa: PLC0415
    from estimator.profile import MEASUREMENTS_FILE, PROFILE_FILE, staged_profile, write_profile_json  # noqa: PLC0415

    with staged_profile(root, name, "refine") as tmp:
        if base_rows is None:
            base_rows = _base_state(base)[1]
        write_profile_json(tmp, _refined_meta(base, name, refined, command, base_rows))
        for side in base.path.iterdir():
            if side.name in (PROFILE_FILE, MEASUREMENTS_FILE):
                continue
            (shutil.copytree if side.is_dir() else shutil.copyfile)(side, tmp / side.name)
        data = base.measurements_path.read_bytes()
        if rows:
            extra = tmp.parent / "rows.csv"
            write_measurements(extra, list(rows))
            body = extra.read_bytes().split(b"\n", 1)[1]
            data = data + (b"" if data.endswith(b"\n") else b"\r\n") + body
        (tmp / MEASUREMENTS_FILE).write_bytes(data)
    return Path(root) / name


@dataclass
class Refined:
    path: Path
    rounds: list[Round]  # round 0: the estimates before refining; every run's rounds
    added: int  # refine rows in the profile
    device_seconds: float  # measuring time of every round, killed runs' included
    stopped: str  # why it stopped
    run_seconds: float = 0.0  # measuring time of this run


def refinement_id(name: str, targets: Sequence[Target]) -> str:
    """What identifies one refinement in the database: the refined profile's name and its
    targets (their ONNX digests). Running the same command again continues it (its rounds and
    its budget); other targets (``nas search --refine``'s steps) are a refinement of their own."""
    ident = json.dumps({"name": name, "targets": sorted(t.sha256 for t in targets)}, sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _db_state(store: Any, env_id: int, base_keys: set[str]) -> tuple[list[dict[str, Any]], set[str], set[str]]:
    """The refine database's rows of this environment not in BASE, its measured keys and its
    failed ones."""
    from .sampling import config_key  # noqa: PLC0415

    rows = store.export_rows(env_id)
    fresh = [r for r in rows if config_key(r["layer_type"], json.loads(r["params"])) not in base_keys]
    return fresh, store.done_keys(env_id), store.failed_keys(env_id)


def _history(recorded: Sequence[dict[str, Any]], done: set[str], failed: set[str]) -> list[Round]:
    """The refinement's rounds as the database holds them: each configuration measured (or
    failed) counts in the last round whose plan holds it (a plan leaves out what was measured
    or failed before it, so only a round cut by the budget shares keys with a later one);
    device seconds summed over the rounds so far."""
    from .sampling import config_key  # noqa: PLC0415

    counted: set[str] = set()
    out: list[Round] = []
    for rec in reversed(recorded):
        keys = {config_key(t, p) for t, p in rec["plan"]} - counted
        counted |= keys
        ws = [TargetWidth(n, w["total_ms"], tuple(w["lv"]), tuple(w["o"])) for n, w in (rec["widths"] or {}).items()]
        out.append(Round(rec["round"], len(keys & done), len(keys & (failed - done)), 0.0, ws))
    out.reverse()
    total = 0.0
    for rnd, rec in zip(out, recorded):
        total += rec["device_seconds"]
        rnd.device_seconds = total
    return out


def _widths_record(ws: Sequence[TargetWidth]) -> dict[str, Any]:
    return {w.name: {"total_ms": w.total_ms, "lv": list(w.lv), "o": list(w.o)} for w in ws}


def refine(base: Any, name: str, root: str | Path, targets: Sequence[Target], runner: Any, *, db: str | Path,
           limits: Any, rounds: int = 3, minutes: float | None = None, top: int = 20, neighbours: int = 2,
           exclude_keys: set[str] = frozenset(), excluded: Sequence[dict[str, str]] = (), warmup: int = 5,
           runs: int = 20, precision: str | None = None, options: dict[str, Any] | None = None,
           min_gain: float = MIN_GAIN, progress: bool = False, report: Callable[[Round], None] | None = None,
           log: Callable[[str], None] | None = None, command: str = "bench refine") -> Refined:
    """Refine ``base`` toward ``targets`` on ``runner`` (closed afterwards) and write profile
    ``name`` under ``root`` after every round (see the module docstring); ``command`` is what
    the provenance says ran it.

    ``rounds`` and ``minutes`` are the refinement's budget in all: the database keeps its rounds
    (:meth:`bench.storage.Store.refine_rounds`: each round's plan, committed before it is
    measured, its device time and widths), so running the same refinement again continues the
    round a killed run was in, counts the rounds and device time already spent (a killed run's
    up to its last committed row) and records them all in the profile. ``report`` is told
    round 0 on the first run, then each round measured."""
    from estimator.predict import Estimator  # noqa: PLC0415
    from estimator.profile import load_profile, write_profile_json  # noqa: PLC0415

    from .measure import exclusive, layer_settings, measure_plan  # noqa: PLC0415
    from .sampling import Config  # noqa: PLC0415
    from .storage import Store  # noqa: PLC0415

    if precision is not None and base.precision and precision != base.precision:
        raise UserError(f"precision {precision}: {base.name}'s layer rows were measured in {base.precision}; refined "
                        f"rows are measured like them (leave --precision out)")
    db = Path(db)
    db.parent.mkdir(parents=True, exist_ok=True)
    settings = layer_settings(runner, warmup=warmup, runs=runs, precision=precision)
    base_keys, base_rows = _base_state(base)
    ident = refinement_id(name, targets)
    history: list[Round] = []
    run_seconds = 0.0
    opts = {k: v for k, v in dict(options or {}).items() if k != "token"}

    def spent() -> float:
        return history[-1].device_seconds if history else 0.0

    def provenance(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"base": base.name, "targets": [{"name": t.name, "sha256": t.sha256} for t in targets],
                "excluded": list(excluded), "rounds": [r.to_dict() for r in history], "configurations": len(rows),
                "device_seconds": round(spent(), 3), "runner": runner.name, "runner_options": opts,
                "database": str(db), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "source": f"`{command} --device {base.name}`: smart-padding rows of the layer configurations "
                          f"that widened the targets' CM_O and CM_LV intervals most, and their neighbours"}

    def write(rows: list[dict[str, Any]], train: bool = True) -> Any:
        write_refined_profile(base, name, root, rows, provenance(rows), command, base_rows)
        return Estimator.from_profile(load_profile(name, root)) if train else None

    try:
        with exclusive(db), Store(db) as store:
            env_id = store.environment_id(base.name, runner.environment(), settings)
            cut = store.close_cut_rounds(env_id, ident)
            rows, done, failed = _db_state(store, env_id, base_keys)
            recorded = store.refine_rounds(env_id, ident)
            history = _history(recorded, done, failed)
            est = Estimator.from_profile(base) if not rows else write(rows)
            estimates = estimate_targets(est, targets)
            if not recorded:  # round 0: the widths before refining, the reference of every later round
                store.add_refine_round(env_id, ident, 0, [], widths=_widths_record(widths(estimates)))
            elif recorded[-1]["finished_at"] and recorded[-1]["widths"] is None:  # killed while retraining
                store.set_refine_widths(env_id, ident, recorded[-1]["round"], _widths_record(widths(estimates)))
            recorded = store.refine_rounds(env_id, ident)
            history = _history(recorded, done, failed)
            first = history[0]
            if len(history) == 1:
                if report:
                    report(first)
            elif log:
                open_round = None if recorded[-1]["finished_at"] else recorded[-1]["round"]
                log(f"resuming: the database holds {len(history) - 1} round(s) of this refinement "
                    f"({sum(r.measured for r in history)} configurations, {spent():.1f} device s"
                    + (f", {cut:.1f} s of them up to the last row a killed run committed" if cut else "")
                    + (f"; round {open_round} was cut and goes on" if open_round else "") + ")")
            deadline = None if minutes is None else minutes * 60.0
            measured_here = False
            while True:
                last = recorded[-1]
                if last["finished_at"]:
                    r = last["round"] + 1
                    plan = None
                else:  # a killed run's round: its own plan, not a new ranking
                    r = last["round"]
                    plan = [Config.make(t, p) for t, p in last["plan"]]
                if r > rounds:
                    stopped = f"{rounds} round(s) done" + (f" ({r - 1} in the database)" if r - 1 > rounds else "")
                    break
                if deadline is not None and spent() >= deadline:
                    stopped = f"the {minutes:.3g}-minute budget is spent"
                    break
                if plan is None:
                    skip = base_keys | done | failed | set(exclude_keys)
                    plan = round_plan(rank(estimates, exclude=set(exclude_keys), limits=limits,
                                           model_format=runner.model_format), top=top,
                                      neighbours=neighbours, skip=skip, limits=limits)
                    if not plan:
                        stopped = "no configuration of the targets is left to measure"
                        break
                    store.add_refine_round(env_id, ident, r, [[c.layer_type, c.params] for c in plan])
                store.start_refine_measuring(env_id, ident, r)
                before_s = spent()
                t0 = time.monotonic()
                stop = None if deadline is None else (lambda t0=t0: before_s + time.monotonic() - t0 >= deadline)
                measure_plan(runner, db, base.name, plan, warmup=warmup, runs=runs, precision=precision,
                             progress=progress, stop=stop, locked=True,
                             announce=lambda env_id: log and log(
                                 f"round {r}: measuring {len(plan)} configurations -> {db} (env {env_id})"))
                dt = time.monotonic() - t0
                run_seconds += dt
                store.end_refine_measuring(env_id, ident, r, dt)
                measured_here = True
                rows, done, failed = _db_state(store, env_id, base_keys)
                recorded = store.refine_rounds(env_id, ident)
                history = _history(recorded, done, failed)
                est = write(rows)
                estimates = estimate_targets(est, targets)
                history[-1].widths = widths(estimates)
                store.set_refine_widths(env_id, ident, r, _widths_record(history[-1].widths))
                recorded = store.refine_rounds(env_id, ident)
                # the round's widths in the provenance: profile.json only (the rows are written)
                write_profile_json(Path(root) / name, _refined_meta(base, name, provenance(rows), command, base_rows))
                if report:
                    report(history[-1])
                if deadline is not None and spent() >= deadline:
                    stopped = f"the {minutes:.3g}-minute budget is spent"
                    break
                if history[-1].measured == 0 and history[-1].failed == 0:
                    stopped = "nothing was measured"
                    break
                if min_gain > 0 and history[-2].widths:
                    before, after = mean_lv(history[-2].widths, first.widths), mean_lv(history[-1].widths, first.widths)
                    if before > 0 and (before - after) / before < min_gain:
                        stopped = (f"the targets' mean CM_LV width shrank by less than {min_gain:.0%} in round {r} "
                                   f"({before:.3f} -> {after:.3f} of its width before refining)")
                        break
            if not measured_here:  # nothing measured in this run: the profile still says what it holds
                write(rows, train=False)
    finally:
        runner.close()
    return Refined(Path(root) / name, history, len(rows), spent(), stopped, run_seconds)
