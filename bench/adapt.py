"""Adapting a profile to this machine: the route that works, chosen from the evidence.

The library behind ``bench adapt`` and ``nas search --adapt`` (the CLI is
:mod:`bench.cmd_adapt`). A per-layer profile does not carry to another CPU
microarchitecture or runtime through a network-level correction (an Intel-measured
``host-cpu`` calibrated on an AMD VM went from 37 % to 40 % held-out error), while a small
layer profile of the machine itself does (4-6 % after about 5 minutes). So:

1. **networks** (:func:`bench.calibrate.measure`): the calibration networks (by default
   :data:`DEFAULT_NETWORKS` samples of three NAS spaces) are timed here in half of their
   interleaved rounds;
2. **decision** (:func:`decide`): BASE carries when this target runs BASE's runner, precision
   and threads on the processor BASE was measured on (:func:`cpu_differences`: model, flags,
   caches), and BASE calibrated on those networks predicts them within :data:`CARRY_ERROR`
   leave-family-out with families that agree (:func:`estimator.calibration.family_warning`).
   On another processor the calibration can fit the level and still leave the layer rows'
   microarchitecture in the bands: the Intel-measured ``host-cpu`` on an AMD EPYC VM,
   calibrated there within 6 %, predicted 26 held-out networks at 5.0 % with 90 % bands 69 %
   wide; an own profile measured in the same 10 minutes, at 4.9 % with bands 37 % wide
   (docs/results.md). Otherwise:
3. **layers**: a layer profile of this machine is measured with smart padding
   (:func:`bench.measure.measure_plan`, the sampling plan of ``bench run``, ordered by
   :func:`by_time_share` so that wherever the budget cuts it every type has rows, the types the
   networks spend their time in the most) until the budget leaves only what the last steps
   need;
4. **networks again**: the other half of the rounds, so that the network timings behind the
   calibration span the measuring window and their drift enters the band
   (:func:`estimator.calibration.drift_of`);
5. **profile**: NEW is BASE's layer rows (route ``calibrate``) or the measured ones (route
   ``profile``), calibrated on the networks (:func:`bench.calibrate.write_calibrated_profile`):
   written whole, or not at all.

Refinement (``bench refine``) is not part of it: toward 30 NAS samples it raised the held-out
error of an own profile from 5.9 to 9.2 % (docs/results.md), and leave-family-out shows no
case where it helped.

Everything is durable and resumable: the network rounds and layer rows go to one benchmark
database as they are taken, and the route, its reasons and the time spent go to a state file
beside it (``<db>.adapt.json``), so a run started again with the same arguments continues
the same budget instead of restarting it.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from estimator.errors import UserError

__all__ = ["CARRY_ERROR", "DEFAULT_MINUTES", "DEFAULT_ROUNDS", "DEFAULT_NETWORKS", "DEFAULT_RUNS", "DEFAULT_WARMUP", "DEFAULT_SAMPLES", "ROUTES", "FIT_RESERVE_S", "Adapted",
           "AdaptState", "decide", "cpu_differences", "adapt", "state_path", "sampling_plan", "describe_adapted", "setting_differences", "does_not_carry", "time_shares", "by_time_share",
           "TIME_WEIGHT"]

#: BASE carries when its calibration's leave-family-out mean |error| on this machine's networks
#: is at most this: what a small own profile reaches held out (3.9-5.9 % on a 2-vCPU AMD VM)
CARRY_ERROR = 0.06
#: the default budget of the whole command, in minutes of wall time
DEFAULT_MINUTES = 10.0
#: interleaved rounds of the networks in all: half before the layers, half after
DEFAULT_ROUNDS = 4
#: the calibration networks (samples of :data:`bench.calibrate.DEFAULT_SPACES`, round
#: robin), and per network and round the timed and untimed runs: fewer than ``bench
#: calibrate``'s 60 x (5 + 20), so that a slow runtime leaves the layers most of the budget
#: (LiteRT fp32 on a 2-vCPU VM: 60 networks took 3.6 s each to build and convert and 167 s a
#: round pair at 25 runs; a round median over 10 runs moves less than the 5-9 % between rounds)
DEFAULT_NETWORKS = 45
DEFAULT_RUNS = 10
DEFAULT_WARMUP = 3
#: seconds to rebuild a network for the second half of the rounds (its conversion is kept)
_REBUILD_S = 1.0
#: the second half of the rounds is budgeted at this times the first half's timing: a VM's
#: speed moves within minutes (LiteRT fp32 on a 2-vCPU AMD EPYC VM: the networks ran 27.8 %
#: slower after the layers than before, and the command took 609 s of a 600 s budget)
AGAIN_MARGIN = 1.3
#: what the route choice can be forced to (``auto``: the evidence decides)
ROUTES = ("auto", "calibrate", "profile")
#: seconds kept back for training the new profile's layer models and fitting the calibration
#: (on a 2-vCPU VM: 20-60 s for 2,000-3,500 rows)
FIT_RESERVE_S = 60.0
#: configurations per layer type in the plan the budget cuts (broad space, and as many from the
#: network prior); its shuffled order covers every type whatever the cut
DEFAULT_SAMPLES = 200
#: the part of an own profile's rows given to layer types by their share of the calibration
#: networks' time (the rest evenly over every type): with a few hundred rows (LiteRT fp32 on a
#: 2-vCPU VM: 255 rows in 185 s) an even spread left 14 conv2d rows, and the profile predicted
#: held-out CNNs 2-4x too slow
TIME_WEIGHT = 0.5
#: the fewest seconds worth measuring an own layer profile in (at 1 thread on a 2-vCPU VM,
#: 200-400 configurations: every type gets a few rows from the shuffled plan)
MIN_LAYER_S = 60.0
#: the state is written at most this often while layers are measured
_SAVE_EVERY_S = 5.0
#: the share over ``--minutes`` beyond which the run says it went over its budget
OVER_BUDGET_WARN = 0.05


def _digest(names: Sequence[str]) -> str:
    import hashlib  # noqa: PLC0415

    return f"{len(names)} networks, sha256 {hashlib.sha256(chr(10).join(names).encode()).hexdigest()[:16]}"


def state_path(db: str | Path) -> Path:
    db = Path(db)
    return db.with_name(db.name + ".adapt.json")


@dataclass
class AdaptState:
    """What a run of ``bench adapt`` has done, kept beside its database: the arguments it was
    started with (a resume must give the same), the seconds spent in earlier runs, the route."""

    path: Path
    key: dict[str, Any]
    spent_s: float = 0.0
    route: str = ""
    why: str = ""
    phases: dict[str, Any] = field(default_factory=dict)
    _t0: float = field(default_factory=time.monotonic)
    _saved: float = 0.0

    @classmethod
    def open(cls, path: Path, key: dict[str, Any]) -> "AdaptState":
        if not path.exists():
            return cls(path, key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise UserError(f"{path}: unreadable state of an earlier bench adapt ({e}); delete it to start over") from None
        old = data.get("key") or {}
        differ = sorted(k for k in set(old) | set(key) if old.get(k) != key.get(k))
        if differ:
            raise UserError(f"{path}: an earlier bench adapt into this database ran with other {', '.join(differ)} "
                            f"({', '.join(f'{k} {old.get(k)!r}' for k in differ)}); give the same arguments to "
                            f"resume it, or another --db")
        return cls(path, key, float(data.get("spent_s", 0.0)), str(data.get("route", "")), str(data.get("why", "")),
                   dict(data.get("phases") or {}))

    def elapsed(self) -> float:
        """Seconds spent in all runs so far, this one included."""
        return self.spent_s + time.monotonic() - self._t0

    def save(self, **phase: Any) -> None:
        self.phases.update(phase)
        data = {"key": self.key, "spent_s": round(self.elapsed(), 3), "route": self.route, "why": self.why,
                "phases": self.phases}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)
        self._saved = time.monotonic()

    def save_now_and_then(self) -> None:
        if time.monotonic() - self._saved >= _SAVE_EVERY_S:
            self.save()


@dataclass
class Adapted:
    path: Path  # the profile written
    route: str
    why: str
    base_report: dict[str, Any] | None  # BASE calibrated on this machine's networks (None: not fitted)
    report: dict[str, Any] | None  # NEW's calibration report
    info: dict[str, Any]  # NEW's calibration info
    layer_rows: int  # rows of the own profile (0 on route calibrate)
    layer_seconds: float
    networks: int
    rounds: int
    seconds: float  # all runs together
    ratio: tuple[float, float, float]  # BASE's measured / predicted here: median, min, max


def setting_differences(base: Any, runner: str, options: dict[str, Any], precision: str) -> list[str]:
    """How this target's runner setting differs from BASE's: each a reason its layer rows
    describe another runtime."""
    out = []
    if runner != base.runner:
        out.append(f"runner {runner} here, {base.runner} in {base.name}")
    if precision != base.precision:
        out.append(f"precision {precision} here, {base.precision} in {base.name}")
    threads = options.get("threads")
    if runner == base.runner and threads is not None and base.threads is not None and int(threads) != int(base.threads):
        out.append(f"{threads} thread(s) here, {base.threads} in {base.name}")
    return out


def cpu_differences(base: Any) -> list[str]:
    """How this machine's processor differs from the one BASE's layer rows were measured on
    (:func:`estimator.fingerprint.cpu_differences`; empty for a board or a cost model)."""
    from estimator import fingerprint as fp  # noqa: PLC0415

    return fp.cpu_differences(base.recorded_fingerprint(), fp.fingerprint(base.runner, base.threads), base.runner)


def decide(base: Any, report: dict[str, Any] | None, setting: Sequence[str], cpu: Sequence[str] = ()
           ) -> tuple[str, str]:
    """``(route, why)`` from the evidence (see the module docstring). ``setting``: how the
    runner setting differs from BASE's (:func:`setting_differences`); ``cpu``: how the
    processor does (:func:`cpu_differences`)."""
    if setting:
        return "profile", f"{base.name}'s layer rows were measured with another setting ({'; '.join(setting)})"
    if cpu:
        return "profile", (f"{base.name}'s layer rows were measured on another processor ({'; '.join(cpu[:3])}): a "
                           f"network-level correction leaves another microarchitecture's layer times in its bands")
    if report is None:
        return "profile", f"{base.name} could not be calibrated on these networks"
    err = float(report["cv_mean_abs_error_pct"][report["method"]])
    if report.get("warning"):
        return "profile", (f"{base.name}'s bias differs between the network families here (each predicted from the "
                           f"others: " + ", ".join(f"{f} {100 * math.expm1(v['shift']):+.0f} %"
                                                   for f, v in report["families"].items() if "shift" in v) +
                           "): a network-level correction does not carry")
    if err > 100 * CARRY_ERROR:
        held = "held-out families" if report["validation"] == "leave-family-out" else "held-out networks"
        return "profile", (f"{base.name} calibrated here misses {held} by {err:.1f} % "
                           f"({report['validation']}, {report['method']}), more than {100 * CARRY_ERROR:.0f} %")
    held = "held-out families" if report["validation"] == "leave-family-out" else "held-out networks"
    return "calibrate", (f"{base.name} calibrated here ({report['method']}) predicts {held} within "
                         f"{err:.1f} % ({report['validation']}; uncalibrated "
                         f"{report['uncalibrated_mean_abs_error_pct']:.1f} %), and the families agree")


def does_not_carry(base: Any, report: dict[str, Any] | None, m: Any) -> str:
    """Why a calibration of ``base`` on networks ``m`` (:class:`bench.calibrate.Measured`)
    does not make it hold here, by :func:`decide`'s rule, when ``base`` comes from another
    machine or runner setting; ``""`` when it carries, cannot be judged (a cost model, no
    report), or ``base`` was measured here (its error is then the layer model's own, which
    another profile of this machine would share)."""
    from estimator import fingerprint as fp  # noqa: PLC0415

    if report is None or m.kind != "measured":
        return ""
    setting = setting_differences(base, m.runner, m.options, m.precision)
    recorded, here = base.recorded_fingerprint(), fp.fingerprint(base.runner, base.threads)
    elsewhere = setting or fp.differences(recorded, here, base.runner)
    route, why = decide(base, report, setting, fp.cpu_differences(recorded, here, base.runner))
    return why if elsewhere and route == "profile" else ""


def adapt(base: Any, name: str, root: str | Path, *, runner_name: str, options: dict[str, Any],
          precision: str | None, specs: Sequence[Any], db: str | Path, minutes: float = DEFAULT_MINUTES,
          route: str = "auto", rounds: int = DEFAULT_ROUNDS, runs: int, warmup: int,
          layer_plan: Callable[[Any], tuple[list[Any], str]], training: dict[str, Any] | None = None,
          replace: bool = False, command: str = "bench adapt", progress: bool = False,
          log: Callable[[str], None] = lambda text: None, minutes_option: str = "--minutes",
          networks_option: str | None = "--networks") -> Adapted:
    """Make profile ``name`` under ``root`` hold here (see the module docstring). ``options``
    are the runner's (threads, affinity, ...); ``layer_plan(runner)`` gives the layer plan and
    its description for the ``profile`` route; ``log`` gets every progress line.
    ``minutes_option`` and ``networks_option`` name the caller's options for the budget and the
    number of networks in the errors that suggest them (None: the caller has no such option)."""
    from estimator.profile import load_profile  # noqa: PLC0415

    from .calibrate import bias, describe_sources, measure, precision_for, write_calibrated_profile  # noqa: PLC0415
    from .profile_db import profile_from_db  # noqa: PLC0415
    from .measure import make_runner, measure_plan  # noqa: PLC0415

    if route not in ROUTES:
        raise UserError(f"--route {route!r}: choose one of {', '.join(ROUTES)}")
    if rounds < 2:
        raise UserError("--rounds must be >= 2: half of them are taken before the layers, half after")
    root = Path(root)
    if (root / name).exists() and not replace:
        raise UserError(f"profile {name!r} exists in {root}; give --replace to overwrite it, or another --name")
    runner = make_runner(runner_name, options)  # a runner that cannot run here: one line, before anything
    precision = precision or precision_for(runner_name, runner.model_format, base)
    if runner.provenance == "estimated":
        runner.close()
        raise UserError(f"runner {runner_name!r} is a cost model: there is no machine to adapt to; use "
                        f"`bench calibrate --device {base.name} --name {name}`")
    db = Path(db)
    state = AdaptState.open(state_path(db), {
        "base": base.name, "name": name, "runner": runner_name, "options": {k: v for k, v in options.items()
                                                                            if k != "token"},
        "precision": precision, "networks": _digest([s.name for s in specs]), "rounds": rounds,
        "route": route})
    if state.spent_s:
        log(f"resuming: {state.spent_s:.0f} s of the {minutes:g}-minute budget spent by earlier runs"
            + (f"; route {state.route}" if state.route else ""))
    budget = 60.0 * minutes
    half = rounds // 2

    # 1. the networks, first half of the rounds
    log(f"[1/4] timing {len(specs)} networks ({describe_sources(specs)}) in {half} of {rounds} interleaved rounds")
    m = measure(name, runner, specs, fusion=base.fusion_rules(), db=db, rounds=half, runs=runs, warmup=warmup,
                precision=precision, options=options, progress=progress, log=log, of_rounds=rounds,
                tick=state.save_now_and_then)
    # what the second half of the rounds will take: the first half's timing with a margin for
    # the machine's drift, and rebuilding
    again_s = (AGAIN_MARGIN * sum(sum(r.round_medians_ms[:half]) for r in m.results) * (runs + warmup) / 1e3
               + _REBUILD_S * len(specs))
    state.save(networks_first={"seconds": round(m.seconds, 1), "rounds": half, "again_s": round(again_s, 1)})
    med, lo, hi, n = bias(base, m.results)
    off = f"{(med - 1) * 100:+.0f} %"
    log(f"{base.name} here: measured / predicted {med:.3f} median ({lo:.2f}-{hi:.2f}) over {n} networks ({off})")

    # 2. the decision
    setting = setting_differences(base, runner_name, m.options, precision)
    base_report: dict[str, Any] | None = None
    if not setting:
        with tempfile.TemporaryDirectory(prefix="bench-adapt-") as tmp:
            base_report = write_calibrated_profile(base, name, tmp, m, command=command).report
    if route != "auto":
        state.route, state.why = route, f"--route {route}"
    elif not state.route:
        state.route, state.why = decide(base, base_report, setting, cpu_differences(base))
    state.save()
    if base_report is not None:
        cv = base_report["cv_mean_abs_error_pct"]
        log(f"[2/4] {base.name} calibrated on them: {base_report['method']}, {base_report['validation']} mean |error| "
            f"{cv[base_report['method']]:.1f} % (uncalibrated {base_report['uncalibrated_mean_abs_error_pct']:.1f} %)")
    log(f"[2/4] route {state.route}: {state.why}")

    # 3. the layers (route profile), until the budget leaves what steps 4 and 5 need
    layer_rows, layer_s = 0, float(state.phases.get("layers", {}).get("seconds", 0.0))
    if state.route == "profile":
        runner = make_runner(runner_name, options)
        try:  # closed however the budget check or the measuring ends
            plan, what = layer_plan(runner)
            shares = time_shares(base, m.results)
            plan = by_time_share(plan, shares)
            what += "; types in proportion to " + ", ".join(f"{t} {v:.0%}" for t, v in sorted(
                shares.items(), key=lambda kv: -kv[1])[:4]) + f"... of the networks' time under {base.name}, half evenly"
            deadline = budget - again_s - FIT_RESERVE_S
            left = deadline - state.elapsed()
            if left < MIN_LAYER_S and not state.phases.get("layers", {}).get("rows"):
                need = (state.elapsed() + MIN_LAYER_S + again_s + FIT_RESERVE_S) / 60
                raise UserError(f"{minutes_option} {minutes:g} leaves {max(left, 0):.0f} s for the layer profile after the "
                                f"networks (about {again_s:.0f} s more for them after the layers): too little; run the same "
                                f"command with {minutes_option} {math.ceil(need) + 1} or more (what was measured is kept)"
                                + (f", or fewer {networks_option}" if networks_option else ""))
            log(f"[3/4] measuring a layer profile of this machine ({what}): {max(left, 0):.0f} s of the budget left "
                f"for it")
            t0, before = time.monotonic(), layer_s

            def stop() -> bool:
                state.phases["layers"] = {"seconds": round(before + time.monotonic() - t0, 1)}
                state.save_now_and_then()
                return state.elapsed() >= deadline

            stats, env_id, layer_rows = measure_plan(runner, db, name, plan, warmup=5, runs=20, precision=precision,
                                                     progress=progress, stop=stop)
        finally:
            runner.close()
        layer_s = before + time.monotonic() - t0
        state.save(layers={"seconds": round(layer_s, 1), "rows": layer_rows, "env_id": env_id})
        if not layer_rows:
            raise UserError(f"no layer configuration measured within the budget ({minutes_option} {minutes:g}); run the "
                            f"same command with a larger {minutes_option} (what was measured is kept)")
        log(f"measured {stats.measured} configurations ({stats.already} from earlier runs, {stats.failed} failed): "
            f"{layer_rows} rows in {layer_s:.0f} s")

    # 4. the networks again: the other half of the rounds
    log(f"[4/4] timing the networks again: rounds {half + 1}-{rounds}")
    runner = make_runner(runner_name, options)
    m = measure(name, runner, specs, fusion=base.fusion_rules(), db=db, rounds=rounds, runs=runs, warmup=warmup,
                precision=precision, options=options, progress=progress, log=log, first_round=half, warn_moved=False,
                tick=state.save_now_and_then)
    state.save(networks={"rounds": rounds})
    drift = sorted(100 * (statistics.median(r.round_medians_ms[half:]) / statistics.median(r.round_medians_ms[:half])
                          - 1) for r in m.results)
    log(f"the networks ran {statistics.median(drift):+.1f} % in median ({drift[0]:+.0f} to {drift[-1]:+.0f} %) after the "
        f"layers against before: the calibrated band includes that drift")

    # 5. the profile, whole or not at all
    with tempfile.TemporaryDirectory(prefix="bench-adapt-layers-") as tmp:
        under = base
        if state.route == "profile":
            hw = m.environment.get("device_name") or runner_name
            source = (f"Measured with `{command} --device {base.name} --name {name}` (smart padding, "
                      f"{layer_rows} configurations in {layer_s:.0f} s of a {minutes:g}-minute budget) on {hw}, "
                      f"{runner_name} ({', '.join(f'{k} {v}' for k, v in sorted(m.options.items())) or 'defaults'}), "
                      f"{precision}")
            profile_from_db(db, name, source=source, root=tmp, env_id=state.phases["layers"]["env_id"],
                            hardware=str(hw), training=training or None)
            under = load_profile(Path(tmp) / name)
        out = write_calibrated_profile(under, name, root, m, replace=replace, command=command,
                                       origin=f"{command} --device {base.name} --name {name}")
    state.save(done={"profile": str(out.path), "route": state.route})
    if state.elapsed() > budget * (1 + OVER_BUDGET_WARN):
        log(f"warning: {state.elapsed() / 60:.1f} minutes in all, over the {minutes:g}-minute budget: the network "
            f"rounds are not cut short (only the layer profile is fitted to the budget); fewer --networks or --rounds "
            f"keep within it")
    return Adapted(out.path, state.route, state.why, base_report, out.report, out.info, layer_rows, layer_s,
                   len(m.results), rounds, state.elapsed(), (med, lo, hi))


def time_shares(base: Any, results: Sequence[Any]) -> dict[str, float]:
    """Each layer type's share of the networks' Eq. 7 time under ``base`` (each network
    weighing the same): where a layer profile of this machine has to be right."""
    from estimator.calibration import by_type  # noqa: PLC0415
    from estimator.predict import Estimator  # noqa: PLC0415

    est = Estimator.from_profile(base)
    out: dict[str, float] = {}
    for r in results:
        row, _ = est.calibration_row(r.spec.weightless_onnx, r.spec.name, r.spec.family, r.measured_ms)
        for t, v in by_type(row.shares).items():
            out[t] = out.get(t, 0.0) + v / len(results)
    return out


def by_time_share(plan: Sequence[Any], shares: dict[str, float]) -> list[Any]:
    """``plan`` reordered so that any prefix of it (where the budget cuts) gives each layer type
    a part of its rows in proportion to ``TIME_WEIGHT x`` its time share plus ``1 -
    TIME_WEIGHT`` spread evenly over the plan's types; each type keeps the plan's own (shuffled)
    order. Stride scheduling: the next row goes to the type furthest below its part."""
    queues: dict[str, list[Any]] = {}
    for c in plan:
        queues.setdefault(c.layer_type, []).append(c)
    total = sum(shares.get(t, 0.0) for t in queues) or 1.0
    w = {t: (1 - TIME_WEIGHT) / len(queues) + TIME_WEIGHT * shares.get(t, 0.0) / total for t in queues}
    taken = {t: 0 for t in queues}
    out = []
    while len(out) < len(plan):
        t = min((t for t in queues if taken[t] < len(queues[t])), key=lambda t: ((taken[t] + 1) / w[t], t))
        out.append(queues[t][taken[t]])
        taken[t] += 1
    return out


def sampling_plan(layers: str | None, samples: int, max_ops: float | None, seed: int = 0) -> Any:
    """``runner -> (plan, description)``: the sampling plan of ``bench run`` for the runner's format."""
    from .sampling import layer_types, limits_for, make_plan  # noqa: PLC0415

    def plan(runner: Any) -> tuple[list[Any], str]:
        types = layer_types(layers, runner.model_format)
        limits = limits_for(runner.name, max_ops=max_ops)
        got = make_plan(types, samples, prior_samples=samples, seed=seed, limits=limits,
                        model_format=runner.model_format)
        return got, f"{len(got)} configurations of {len(types)} types in a shuffled plan the budget cuts"

    return plan


def describe_adapted(base: Any, r: Adapted) -> list[str]:
    """What ``bench adapt`` (and ``nas search --adapt``) did, a line each: the route and why,
    the figures before and after; warnings start with ``warning:``."""
    out = [f"route: {r.route}: {r.why}"]
    med, lo, hi = r.ratio
    b = r.base_report
    out.append(f"before: {base.name} here: measured / predicted {med:.3f} median ({lo:.2f}-{hi:.2f}) over {r.networks} "
               f"networks" + (f"; calibrated on them {b['method']}, {b['validation']} mean |error| "
                              f"{b['cv_mean_abs_error_pct'][b['method']]:.1f} % (uncalibrated "
                              f"{b['uncalibrated_mean_abs_error_pct']:.1f} %)" if b else ""))
    if r.route == "profile":
        out.append(f"own layer profile: {r.layer_rows} rows in {r.layer_seconds:.0f} s")
    if r.report is not None:
        cv = r.report["cv_mean_abs_error_pct"]
        out.append(f"after: {r.path.name} calibrated on {r.report['n_networks']} networks ({r.rounds} rounds): "
                   f"{r.report['method']} ({r.report['correction']['formula']}); {r.report['validation']} mean "
                   f"|error| {cv[r.report['method']]:.1f} % against {r.report['uncalibrated_mean_abs_error_pct']:.1f} % "
                   f"uncalibrated")
        if r.report.get("warning"):
            out.append(f"warning: {r.report['warning']}")
    else:
        out.append(f"warning: {r.path.name} is not calibrated: {r.info.get('reason')}")
    out.append(f"wrote profile {r.path.name} ({r.path}) in {r.seconds / 60:.1f} min")
    return out
