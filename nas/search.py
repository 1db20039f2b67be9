"""The search loop: estimator, storage, study, sampler, patience, progress, reports.

:func:`run_search` is what ``nas search`` runs. Several processes (on one or several
machines) running it with the same ``--storage`` and ``--study`` share one study: each
takes the next trial from the sampler (TPE with the constant liar, so running trials are
not proposed twice), heartbeats mark a dead worker's trial FAIL and queue a retry
(:mod:`nas.storage`), and ``--trials`` counts the trials *this* worker runs.
"""
from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

from estimator.errors import UserError
from estimator.interface import Estimation, EstimationError

from .device import device_runner
from .polish import DEFAULT_POLISH, polish
from .report import best_feasible, records, write_reports
from .scoring import latency_constraint
from .storage import default_url, open_storage, redact
from .trial import CandidateError, Evaluator, SearchAborted, SearchSettings, supports_set_constraint
from .units import format_ms

__all__ = ["SearchRequest", "SearchOutcome", "run_search", "connect", "Patience", "STUDY_KEYS", "worker_shares",
           "start_workers"]

#: study user attributes that must agree between workers and resumed runs
STUDY_KEYS = ("device", "budget_ms", "confidence", "penalty_weight", "multi_objective", "space", "space_options",
              "objective", "objective_options")


@dataclass
class SearchRequest:
    settings: SearchSettings
    trials: int = 100
    timeout_s: float | None = None
    service: str | None = None
    token: str | None = None
    ca_cert: str | None = None
    profiles: str | None = None
    storage: str | None = None
    study: str | None = None
    out: Path = Path("nas-out")
    patience: int = 25
    seed: int | None = None
    heartbeat_s: int = 10
    progress: bool = True
    connect_timeout_s: float = 15.0
    n_startup_trials: int = 10
    #: measure this many space samples on this machine and calibrate the device on them first
    calibrate: int = 0
    #: ``--adapt MINUTES``: make the device's profile hold on this machine first (``bench adapt``; 0 = off)
    adapt_minutes: float = 0.0
    #: runner options of that measurement (threads, agent, ...)
    calibrate_options: dict[str, Any] = field(default_factory=dict)
    #: local worker processes on this study (``--workers``); ``trials`` is split between them
    workers: int = 1
    #: ``--refine MINUTES``: device minutes of refinement toward the candidates during the search (0 = off)
    refine_minutes: float = 0.0
    #: ``--refine-every K``: a refine step after every K trials of this worker
    refine_every: int = 25
    #: write the reports at the end (off in the extra local workers: the first writes them)
    reports: bool = True
    #: ``--polish N``: after the trials, at most N that step the winner up (:mod:`nas.polish`; 0 = off)
    polish: int = DEFAULT_POLISH


@dataclass
class SearchOutcome:
    study_name: str
    storage: str
    summary: dict[str, Any]
    stopped_reason: str = ""
    trials_run: int = 0
    elapsed_s: float = 0.0
    files: list[str] = field(default_factory=list)


class Patience:
    """Stop when this worker's last ``n`` trials were all infeasible, or all failed."""

    def __init__(self, n: int, settings: SearchSettings) -> None:
        self.n = int(n)
        self.s = settings
        self.infeasible = 0
        self.failed = 0
        self.min_upper = math.inf
        self.last_error = ""
        self.reason = ""
        self.fatal = False

    def __call__(self, study: Any, trial: Any) -> None:
        import optuna  # noqa: PLC0415

        if trial.state == optuna.trial.TrialState.COMPLETE:
            self.failed = 0
            if trial.user_attrs.get("feasible"):
                self.infeasible = 0
            else:
                self.infeasible += 1
                up = trial.user_attrs.get("CM_LV_upper_ms")
                if up is not None:
                    self.min_upper = min(self.min_upper, float(up))
        elif trial.state == optuna.trial.TrialState.FAIL:
            self.failed += 1
            self.last_error = str(trial.user_attrs.get("fail_reason", "")) or "see `nas show`"
        if not self.n or self.reason:
            return
        if self.infeasible >= self.n:
            b = self.s.budget_ms
            hint = ""
            if math.isfinite(self.min_upper):
                hint = (f" (the smallest CM_LV upper bound seen was {format_ms(self.min_upper)} against a budget of "
                        f"{format_ms(b)})")
            suggest = max(self.min_upper, b) * 1.2 if math.isfinite(self.min_upper) else 2 * b
            self.reason = (f"stopped: the last {self.infeasible} candidates were all infeasible: their CM_LV upper bound "
                           f"at confidence {self.s.confidence:g} exceeded the budget{hint}. Raise the budget "
                           f"(e.g. --budget {suggest:.3g}ms), lower the resolution range or the widths "
                           f"(built-in spaces: --space-option resolutions=[96,128] --space-option widths=[0.35,0.5]), "
                           f"use a smaller --space, or wait longer with --patience")
            study.stop()
        elif self.failed >= self.n:
            self.fatal = True
            self.reason = (f"stopped: the last {self.failed} trials all failed; last error: {self.last_error}. "
                           f"Fix the objective or search space (see `nas show` for every trial's fail_reason)")
            study.stop()


def connect(req: SearchRequest, stack: list[Any]) -> Estimation:
    """The estimation interface the search asks (:mod:`estimator.interface`): the profiles
    loaded in this process (:class:`~estimator.inprocess.InProcessEstimation`, no round
    trip), or with ``--service`` a ready gRPC client of that service. The search does not
    care which."""
    if req.service:
        from service.client import EstimationClient  # noqa: PLC0415 (gRPC only for --service)

        try:
            client = EstimationClient(req.service, token=req.token, root_certificates=req.ca_cert,
                                      timeout_s=120.0)
        except (ValueError, OSError) as e:
            raise UserError(f"--service {req.service}: {e}") from None
        stack.append(client)
        try:
            client.wait_ready(timeout_s=req.connect_timeout_s)
        except EstimationError as e:
            raise UserError(f"cannot reach the estimation service at {req.service} ({e.message}); start one "
                            f"(`estimation-service serve`) or leave out --service to run it in-process") from None
        return client
    from estimator.inprocess import InProcessEstimation  # noqa: PLC0415 (loads the models: not for --service)

    try:
        local = InProcessEstimation(req.profiles)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001
        raise UserError(f"cannot load the device profiles in-process: {type(e).__name__}: {e}") from None
    stack.append(local)
    return local


def calibrate_device(req: SearchRequest, err: TextIO) -> Path:
    """``--calibrate N``: measure N samples of the search space whole with the device's runner
    (:mod:`bench.calibrate`, resumable in ``OUT/calibration.sqlite``) and write the calibrated
    profile, under the device's own name, to ``OUT/profiles`` (returned: the in-process
    estimator's profiles directory)."""
    from bench.adapt import does_not_carry  # noqa: PLC0415
    from bench.calibrate import bias, measure, precision_for, write_calibrated_profile  # noqa: PLC0415
    from bench.network_sources import space_specs  # noqa: PLC0415
    from estimator.profile import load_profile  # noqa: PLC0415

    from .sources import register  # noqa: PLC0415

    s = req.settings
    if req.service:
        raise UserError("--calibrate writes a calibrated profile for the in-process estimator; against --service, "
                        "calibrate with `bench calibrate` where that service runs and reload it")
    if req.calibrate < 2:
        raise UserError(f"--calibrate needs at least 2 networks (20 or more to calibrate), got {req.calibrate}")
    base = load_profile(s.device, req.profiles)
    given, runner = device_runner(base, req.calibrate_options, "--calibrate")
    register()
    specs = space_specs([s.space], req.calibrate, seed=req.seed or 0, options={s.space: s.space_options})
    out = Path(req.out)
    print(f"calibrating {s.device} on {req.calibrate} samples of {s.space} ({base.runner}, "
          f"{', '.join(f'{k} {v}' for k, v in sorted(given.items())) or 'default options'}) ...", file=err)
    m = measure(s.device, runner, specs, fusion=base.fusion_rules(), precision=precision_for(base.runner,
                runner.model_format, base), db=out / "calibration.sqlite", options=given, progress=req.progress,
                log=lambda text: print(f"nas: {text}", file=err))
    med = bias(base, m.results)[0]
    cal = write_calibrated_profile(base, s.device, out / "profiles", m, replace=True,
                                   command=f"nas search --calibrate {req.calibrate}")
    how = (f"{cal.info['method']} ({cal.info['formula']}), {cal.info['validation']} mean |error| "
           f"{cal.info['cv_mean_abs_error_pct']:.1f} %" if cal.info.get("applied")
           else f"not calibrated: {cal.info.get('reason')}")
    print(f"calibrated {s.device} in {m.seconds:.0f} s: measured/predicted {med:.3f} (median over "
          f"{len(m.results)} samples); {how}; profile in {cal.path}", file=err)
    why = does_not_carry(base, cal.report, m)
    if why:
        print(f"nas: warning: {why}: the calibration does not make {s.device} hold here; --adapt MINUTES measures "
              f"a small profile of this machine instead", file=err)
    return cal.path.parent


def adapt_device(req: SearchRequest, err: TextIO) -> Path:
    """``--adapt MINUTES``: make the device's profile hold on this machine (:mod:`bench.adapt`:
    it calibrates the profile where that carries, else measures a small layer profile of this
    machine and calibrates that), on the default calibration networks plus samples of the
    searched space, resumable in ``OUT/adapt.sqlite``; the profile is written under the device's
    own name to ``OUT/profiles`` (returned: the in-process estimator's profiles directory)."""
    from bench.adapt import (DEFAULT_NETWORKS, DEFAULT_RUNS, DEFAULT_SAMPLES, DEFAULT_WARMUP, adapt,  # noqa: PLC0415
                             describe_adapted, sampling_plan)
    from bench.calibrate import DEFAULT_SPACES  # noqa: PLC0415
    from bench.network_sources import space_specs  # noqa: PLC0415
    from estimator.profile import load_profile  # noqa: PLC0415

    from .sources import register  # noqa: PLC0415

    s = req.settings
    if req.service:
        raise UserError("--adapt writes a profile for the in-process estimator; against --service, run "
                        "`bench adapt` where that service runs and reload it")
    if req.calibrate:
        raise UserError("--adapt calibrates too: give --adapt or --calibrate, not both")
    base = load_profile(s.device, req.profiles)
    given, runner = device_runner(base, req.calibrate_options, "--adapt")
    runner.close()
    register()
    spaces = DEFAULT_SPACES.split(",")
    per_space = DEFAULT_NETWORKS // len(spaces)
    if s.space not in spaces:  # the searched space is one more family
        spaces.append(s.space)
    specs = space_specs(spaces, per_space * len(spaces), seed=req.seed or 0, options={s.space: s.space_options})
    out = Path(req.out)
    print(f"nas: adapting {s.device} to this machine ({base.runner}, "
          f"{', '.join(f'{k} {v}' for k, v in sorted(given.items())) or 'default options'}; at most "
          f"{req.adapt_minutes:g} minutes) ...", file=err)
    r = adapt(base, s.device, out / "profiles", runner_name=base.runner, options=given, precision=None, specs=specs,
              db=out / "adapt.sqlite", minutes=req.adapt_minutes, runs=DEFAULT_RUNS, warmup=DEFAULT_WARMUP,
              layer_plan=sampling_plan(None, DEFAULT_SAMPLES, None), replace=True,
              command=f"nas search --adapt {req.adapt_minutes:g}", progress=req.progress,
              log=lambda text: print(f"nas: {text}", file=err), minutes_option="--adapt", networks_option=None)
    for line in describe_adapted(base, r):
        print(f"nas: {line}", file=err)
    return r.path.parent


def _best_number(study: Any) -> int | None:
    """The number of the study's best feasible trial (the reports' winner), None if none."""
    b = best_feasible(records(study))
    return None if b is None else b.number


def worker_shares(trials: int, workers: int) -> list[int]:
    """``trials`` split between ``workers`` local workers (the first ones take the remainder)."""
    if workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    if workers > trials:
        raise UserError(f"--workers {workers} is more than --trials {trials}")
    return [trials // workers + (1 if i < trials % workers else 0) for i in range(workers)]


def _worker_main(req: SearchRequest, threads: int) -> None:
    """An extra local worker (a spawned process): the same search on the same storage and study."""
    import io  # noqa: PLC0415

    import torch  # noqa: PLC0415

    from .proxy import resolve_objective  # noqa: PLC0415
    from .spaces import resolve_space  # noqa: PLC0415

    torch.set_num_threads(threads)
    s = req.settings
    s.space_fn = resolve_space(s.space)[1]
    s.objective_fn = resolve_objective(s.objective)[1]
    try:
        run_search(req, out=io.StringIO())
    except UserError as e:
        print(f"nas: local worker: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def start_workers(req: SearchRequest, url: str, study: str, shares: list[int], err: TextIO) -> list[Any]:
    """``--workers N``: start N - 1 more processes on this storage and study. Each is what
    another machine on ``--storage postgresql://...`` would be (its own in-process estimator
    unless ``--service``, its own sampler seed, heartbeats), so nothing here is new
    machinery: the storage shares the study, the constant liar keeps them apart."""
    import dataclasses  # noqa: PLC0415
    import multiprocessing  # noqa: PLC0415

    import torch  # noqa: PLC0415

    ctx = multiprocessing.get_context("spawn")  # a clean interpreter: no forked threads or gRPC state
    procs = []
    for i, n in enumerate(shares, start=1):
        s = dataclasses.replace(req.settings, space_fn=None, objective_fn=None)  # resolved again by name
        child = dataclasses.replace(req, settings=s, trials=n, workers=1, reports=False, progress=False, calibrate=0,
                                    adapt_minutes=0.0,
                                    refine_minutes=0.0,
                                    storage=url, study=study, seed=None if req.seed is None else req.seed + i)
        p = ctx.Process(target=_worker_main, args=(child, torch.get_num_threads()), name=f"nas-worker-{i + 1}",
                        daemon=False)
        p.start()
        procs.append(p)
    print(f"nas: {len(shares) + 1} local workers on study {study!r} ({redact(url)})", file=err)
    return procs


class _Joiner:
    """Waits for the extra local workers (and, on the way out after an error, stops them)."""

    def __init__(self, procs: list[Any]) -> None:
        self.procs = procs

    def join(self, err: TextIO) -> list[tuple[int, int]]:
        bad = []
        for i, p in enumerate(self.procs, start=1):
            p.join()
            if p.exitcode:
                bad.append((i, p.exitcode))
        return bad

    def close(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.join(timeout=0.1)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


def _estimator_name(where: str) -> str:
    return "the in-process estimator" if where == "in-process" else f"the estimation service at {where}"


def check_device(estimation: Estimation, device: str) -> dict[str, Any]:
    """``device``'s ``list_devices`` entry; an unknown one is refused with the known ones
    and the profiles that failed to load."""
    where = estimation.where
    try:
        devices = estimation.list_devices()
    except EstimationError as e:
        raise UserError(f"{_estimator_name(where)} refused ListDevices: {e}") from None
    names = [d["name"] for d in devices]
    if device not in names:
        errors = []
        try:
            errors = estimation.profile_errors()
        except EstimationError:
            pass
        known = ", ".join(names) if names else "none"
        extra = f"; profiles that failed to load: {'; '.join(errors)}" if errors else ""
        raise UserError(f"unknown device {device!r}: {_estimator_name(where)} knows {known}{extra}")
    return next(d for d in devices if d["name"] == device)


def calibration_note(device: dict[str, Any], space: str) -> str:
    """What to say when ``device`` (a ListDevices entry) is calibrated on networks none of which
    is a sample of ``space``, the space being searched: its calibrated intervals hold for
    networks like its calibration networks (estimator/calibration.py), and ``--calibrate N``
    adds this space's own samples. ``""`` when it is uncalibrated or calibrated on the space."""
    cal = device.get("calibration") or {}
    families = list(cal.get("families") or [])
    if not cal.get("applied") or not families:
        return ""
    from bench.network_sources import space_family  # noqa: PLC0415

    from .sources import register  # noqa: PLC0415

    register()
    if space_family(space) in families:
        return ""
    return (f"{device['name']} is calibrated on {cal.get('n_networks', '?')} networks of {', '.join(families)}, "
            f"none a sample of the {space} space searched here: its calibrated intervals hold for networks like "
            f"those; --calibrate 30 measures this space's own samples here first (where the device's runner runs)")


def _study(req: SearchRequest, storage: Any, name: str) -> Any:
    import optuna  # noqa: PLC0415

    s = req.settings
    kwargs: dict[str, Any] = {}
    if not supports_set_constraint():
        kwargs["constraints_func"] = latency_constraint
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=req.seed, multivariate=True, constant_liar=True,
                                             n_startup_trials=req.n_startup_trials, **kwargs)
    directions: list[Any] = ["maximize", "minimize"] if s.multi_objective else ["maximize"]
    try:
        study = optuna.create_study(storage=storage, study_name=name, sampler=sampler, directions=directions,
                                    load_if_exists=True)
    except Exception as e:  # noqa: BLE001 - storage trouble: one line
        raise UserError(f"cannot create or load study {name!r}: {type(e).__name__}: {e}") from None
    have = [d.name.lower() for d in study.directions]
    if have != directions:
        raise UserError(f"study {name!r} was created {'with' if len(have) == 2 else 'without'} --multi-objective; "
                        f"use the same mode or another --study")
    want = s.study_attrs()
    attrs = study.user_attrs
    if "budget_ms" not in attrs:
        try:
            for k, v in want.items():
                study.set_user_attr(k, v)
            study.set_user_attr("created", time.strftime("%Y-%m-%dT%H:%M:%S"))
        except Exception:  # noqa: BLE001 - another worker wrote them at the same moment: compare below
            time.sleep(0.5)
        attrs = study.user_attrs
    if "budget_ms" in attrs:
        diff = [k for k in STUDY_KEYS if k in attrs and not _same_setting(attrs[k], want[k])]
        if diff and not any(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False)):
            for k in diff:  # nothing completed under the old settings: nothing to keep them for
                study.set_user_attr(k, want[k])
            print(f"nas: study {name!r} has no complete trial; its settings "
                  + ", ".join(f"{k}={attrs[k]!r}" for k in diff) + " are replaced by this run's", file=sys.stderr)
            diff = []
        if diff:
            was = ", ".join(f"{k}={attrs[k]!r}" for k in diff)
            now = ", ".join(f"{k}={want[k]!r}" for k in diff)
            raise UserError(f"study {name!r} was created with {was}; this run asks for {now}. Use the same "
                            f"settings to continue it, or a new --study name")
    return study


def check_space(s: SearchSettings) -> None:
    """Build one architecture of the space with its options, before any study exists: an option
    value the space cannot take (``max_depth=0``, ``resolutions=[]``) is refused here in one line,
    not after every trial has failed on it (and a study was created with it)."""
    import optuna  # noqa: PLC0415

    from .spaces import sample  # noqa: PLC0415

    if s.space_fn is None:
        return
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        probe = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    finally:
        optuna.logging.set_verbosity(verbosity)
    try:
        sample(s.space_fn, probe, s.space_options, name=s.space)
    except Exception as e:  # noqa: BLE001 - any failure of the builder is the options' (or the space's)
        opts = " with " + ", ".join(f"{k}={v!r}" for k, v in s.space_options.items()) if s.space_options else ""
        why = " ".join(str(e).split()) or type(e).__name__
        raise UserError(f"search space {s.space}{opts} cannot build an architecture: "
                        f"{why if isinstance(e, UserError) else f'{type(e).__name__}: {why}'}") from None


def other_models(study: Any, version: str) -> dict[str, int]:
    """Model versions other than ``version`` that estimated complete trials of ``study``, with
    their trial counts (a study continued with other profiles mixes models)."""
    out: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        v = str((t.user_attrs.get("estimate") or {}).get("model_version", ""))
        if t.state.name == "COMPLETE" and v != version:
            out[v] = out.get(v, 0) + 1
    return out


def _same_setting(was: Any, now: Any) -> bool:
    """A study setting as stored against this run's (numbers to 1e-9 relative: a budget written
    in another unit, or stored by an older version that rounded differently, is the same)."""
    if isinstance(was, (int, float)) and isinstance(now, (int, float)) and not isinstance(was, bool):
        return math.isclose(float(was), float(now), rel_tol=1e-9)
    return was == now


def run_search(req: SearchRequest, *, err: TextIO | None = None, out: TextIO | None = None,
               on_trial: Callable[[Any], None] | None = None) -> SearchOutcome:
    """Run (or continue) a study; write the reports; return the outcome."""
    import optuna  # noqa: PLC0415
    from tqdm import tqdm  # noqa: PLC0415

    err = err or sys.stderr
    out = out or sys.stdout
    s = req.settings
    if req.trials < 1:
        raise UserError(f"--trials must be >= 1, got {req.trials}")
    if req.patience < 0:
        raise UserError(f"--patience must be >= 0, got {req.patience}")
    check_space(s)
    stack: list[Any] = []
    out_dir = Path(req.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir} is a file, not a directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {out_dir}: cannot create the directory: {e.strerror or e}") from None
    url = req.storage or default_url(out_dir)
    t_start = time.perf_counter()
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # failures are reported one line each, below
    try:
        if req.refine_minutes:
            from .refine import check_refine  # noqa: PLC0415

            check_refine(req)
        if req.adapt_minutes:
            req.profiles = str(adapt_device(req, err))
        if req.calibrate:
            req.profiles = str(calibrate_device(req, err))
        setup = None
        if req.refine_minutes:
            from .refine import prepare_refine  # noqa: PLC0415

            setup = prepare_refine(req, err)
        estimation = connect(req, stack)
        device = check_device(estimation, s.device)
        note = calibration_note(device, s.space)
        if note:
            print(f"note: {note}", file=err)
        storage = open_storage(url, heartbeat_interval=req.heartbeat_s)
        name = req.study or f"{s.device}-{s.space.rpartition(':')[2]}"
        study = _study(req, storage, name)
        other = other_models(study, str(device.get("model_version", "")))
        if other and not req.refine_minutes:
            print(f"nas: warning: study {name!r} has trials estimated with other models ("
                  + ", ".join(f"{v or '?'}: {n} trials" for v, n in other.items())
                  + f") than this run's ({device.get('model_version')}, profiles "
                    f"{req.profiles or 'default'}): their scores, intervals and penalties do not compare with the new "
                    "trials'; continue it with the profiles it began with (--profiles, --calibrate, --adapt), or start "
                    "a new --study", file=err)
        shares = worker_shares(req.trials, req.workers)
        extra = start_workers(req, url, name, shares[1:], err) if len(shares) > 1 else []
        stack.append(_Joiner(extra))
        evaluator = Evaluator(estimation, s)
        patience = Patience(req.patience, s)
        n_done = [0]
        prepared_s = time.perf_counter() - t_start  # adapting, calibrating, loading the estimator
        bar = tqdm(total=shares[0], desc=f"nas {name}" + (f" (worker 1 of {len(shares)})" if extra else ""),
                   unit="cand", file=err, disable=not req.progress,
                   dynamic_ncols=True, leave=True)
        refiner = None
        if setup is not None:
            from .refine import Refiner  # noqa: PLC0415

            refiner = Refiner(setup, estimation, evaluator, shares[0], err, stopped=lambda: bool(patience.reason),
                              write=lambda text: bar.write(text, file=err))

        def progress(study: Any, trial: Any) -> None:
            n_done[0] += 1
            bar.update(1)
            if trial.state == optuna.trial.TrialState.FAIL:
                bar.write(f"trial {trial.number} failed: {trial.user_attrs.get('fail_reason') or 'see nas show'}",
                          file=err)
            ua = trial.user_attrs
            if "latency_ms" in ua:
                bar.set_postfix_str(f"#{trial.number} {ua['latency_ms']:.3g} ms "
                                    f"{'ok' if ua.get('feasible') else 'over'}", refresh=False)
            if on_trial is not None:
                on_trial(trial)

        stopped = ""
        aborted: BaseException | None = None
        interrupted = False
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                warnings.simplefilter("ignore", FutureWarning)
                study.optimize(evaluator, n_trials=shares[0], timeout=req.timeout_s, catch=(CandidateError,),
                               callbacks=[progress, patience] + ([refiner] if refiner else []),
                               gc_after_trial=False)
        except SearchAborted as e:
            aborted = e
        except KeyboardInterrupt:
            interrupted = True
        finally:
            bar.close()
        stopped = patience.reason
        if not req.reports:  # an extra local worker: the first one reports on the whole study
            if aborted:
                raise aborted
            if interrupted:
                raise KeyboardInterrupt
            return SearchOutcome(study_name=name, storage=redact(url), summary={}, stopped_reason=stopped,
                                 trials_run=n_done[0], elapsed_s=time.perf_counter() - t_start)
        failed_workers = _Joiner(extra).join(err)
        polished = 0
        if (req.polish and not aborted and not interrupted and not stopped and len(study.directions) == 1
                and (req.timeout_s is None or time.perf_counter() - t_start < req.timeout_s)):
            polished = polish(study, evaluator, req.polish, best=_best_number, catch=(CandidateError,),
                              callbacks=[lambda st, t: on_trial(t)] if on_trial is not None else [],
                              log=lambda text: print(f"nas: {text}", file=err))
        try:
            doc = write_reports(out_dir, study, estimation=None if aborted else estimation, space_fn=s.space_fn,
                                space_options=s.space_options, init_seed=s.init_seed, device=evaluator.profile)
        except Exception as e:  # noqa: BLE001 - the search result is in the storage; say so
            if aborted:
                raise aborted from None
            raise UserError(f"the search finished but writing the reports to {out_dir} failed: "
                            f"{type(e).__name__}: {e}") from None
        if aborted:
            raise aborted
        if interrupted:  # the reports of what was done so far are written; now say so and stop
            print(f"interrupted; reports of the {doc['n_trials']} trials so far are in {out_dir}", file=err)
            raise KeyboardInterrupt
        elapsed = time.perf_counter() - t_start
        outcome = SearchOutcome(study_name=name, storage=redact(url), summary=doc, stopped_reason=stopped,
                                trials_run=n_done[0], elapsed_s=elapsed, files=list(doc.get("files", [])))
        text = (out_dir / "summary.txt").read_text(encoding="utf-8")
        print(text.rstrip("\n"), file=out)
        who = (f"{len(shares)} local workers ran {sum(shares)} trials" if extra
               else f"this worker ran {n_done[0]} trials") + (f" and {polished} polishing the winner" if polished else "")
        before = [what for what, on in (("adapting", req.adapt_minutes), ("calibrating", req.calibrate)) if on]
        prep = f" after {prepared_s:.1f} s {' and '.join(before)} the profile" if before else ""
        print(f"storage: {redact(url)} (study {name!r}); {who} in {elapsed - prepared_s:.1f} s{prep}; "
              f"{evaluator.n_cache_hits} repeated architectures reused; reports in {out_dir}", file=out)
        for i, code in failed_workers:
            print(f"warning: local worker {i + 1} exited with status {code} (its trials are in the study)", file=err)
        if stopped:
            if patience.fatal or doc.get("best") is None:
                raise UserError(stopped)
            print(f"warning: {stopped}", file=err)
        elif not doc.get("n_complete") and doc.get("n_failed"):
            last = doc["failures"][-1] if doc.get("failures") else {"trial": "?", "reason": "see `nas show`"}
            raise UserError(f"every trial failed ({doc['n_failed']}); last: trial {last['trial']}: {last['reason']}")
        elif doc.get("best") is None and doc.get("n_complete"):
            low = doc.get("min_cm_lv_upper_ms")
            raise UserError(f"no feasible architecture among the study's {doc['n_complete']} candidates"
                            + (f" (smallest CM_LV upper bound {format_ms(low)} against a budget of "
                               f"{format_ms(s.budget_ms)})" if low is not None else "")
                            + "; raise --budget, lower the resolution range or widths (--space-option), or run "
                              "more --trials")
        return outcome
    finally:
        optuna.logging.set_verbosity(verbosity)
        for obj in reversed(stack):
            try:
                if hasattr(obj, "stop"):
                    obj.stop(0.5)
                else:
                    obj.close()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
