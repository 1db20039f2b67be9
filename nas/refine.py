"""``nas search --refine MINUTES``: refine the device's profile toward the search's own candidates.

Every ``--refine-every`` K trials of this worker the search pauses for one step of
``bench refine`` (:func:`bench.refine.refine`, one round):

1. targets: the candidates of the last K trials, those with layers outside the design
   space first, then by CM_O width relative to their estimate, at most :data:`TARGETS`
   (each architecture once; the ONNX bytes the service estimated);
2. it measures the layer configurations that widen their CM_O and CM_LV intervals most
   (and neighbours), down the ranking until the step's slice of the minutes is spent
   (:data:`TOP`), with smart padding on the device's runner here, into ``OUT/refine.sqlite``
   (every row committed as it is taken; a later run resumes from it);
3. it writes profile ``DEVICE-refined`` into ``OUT/profiles``: the base's layer rows plus
   every row the database holds, ``refined`` in ``profile.json`` (as ``bench refine`` does),
   and trains it;
4. the in-process estimator reloads its profiles (``reload_profiles``) and later trials are
   estimated with ``DEVICE-refined``; each trial records the profile and model version that
   estimated it (user attribute ``model``), each step is appended to the study's ``refine``
   user attribute, and the summary says how many steps ran, device minutes and rows added.

Where the profiles live follows ``--calibrate``: the in-process estimator loads
``OUT/profiles``, which holds the base (the calibrated profile when ``--calibrate`` ran,
else a copy of the device's profile: the shipped directory is never written) and the
refined one. The base is the same in every step; each step rebuilds the refined profile
from it and the database, so a run that resumes starts from the base again and the first
step brings back every row measured before.

Budget. MINUTES is device (measuring) time; a step gets the unspent minutes divided by the
steps still planned (``(trials - 1) // K`` in all: none after the last trial), so what one
step does not use goes to the next. Training and reloading are not counted: with incremental retraining (only the types
that got rows) about 8 s of wall time per step on the shipped host-cpu profile (23.7k rows;
a step with a 0.25-minute slice took 23 s in all).

"Can run here" has one rule, shared with ``--calibrate`` (:func:`nas.device.device_runner`):
the device's runner (with ``--calibrate-option``) can be built on this machine.
"""
from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

from estimator.errors import UserError

__all__ = ["RefineSetup", "Refiner", "check_refine", "prepare_refine", "select_targets", "TARGETS",
           "DEFAULT_EVERY", "refined_name"]

#: candidates refined toward in one step
TARGETS = 5
#: default ``--refine-every``
DEFAULT_EVERY = 25
#: ranked configurations a step may measure (with 2 neighbours each): in practice its slice of
#: the minutes ends it first. ``bench refine``'s 20 per round left most of a step's slice unspent
#: (host-cpu: 60 configurations in 7 s of a 30 s slice), and another round costs another
#: retraining
TOP = 500


def refined_name(device: str) -> str:
    return f"{device}-refined"


@dataclass
class RefineSetup:
    base: Any  # the base profile (estimator.profile.Profile) in OUT/profiles
    root: Path  # OUT/profiles: the in-process estimator's profiles directory
    db: Path  # OUT/refine.sqlite
    given: dict[str, Any]  # runner options
    minutes: float
    every: int
    command: str


def check_refine(req: Any) -> None:
    """Refuse, in one line and before anything runs, what ``--refine`` cannot do."""
    m = req.refine_minutes
    if not (isinstance(m, (int, float)) and math.isfinite(m) and m > 0):
        raise UserError(f"--refine MINUTES must be > 0 (device minutes for refinement during the search), got {m:g}")
    if req.refine_every < 1:
        raise UserError(f"--refine-every must be >= 1, got {req.refine_every}")
    if req.service:
        raise UserError("--refine writes a refined profile for the in-process estimator; against --service, refine "
                        "with `bench refine` where that service runs and reload it")
    if req.workers > 1:
        raise UserError("--refine pauses this worker's search to measure; it runs with one worker (leave out "
                        "--workers)")
    if req.refine_every >= req.trials:
        raise UserError(f"--refine-every {req.refine_every} is not below --trials {req.trials}: no refine step "
                        f"would run; lower --refine-every or raise --trials")


def prepare_refine(req: Any, err: TextIO) -> RefineSetup:
    """The base profile in ``OUT/profiles`` (copied there unless ``--calibrate`` wrote it),
    and the runner checked on this machine. Sets ``req.profiles`` to ``OUT/profiles``."""
    from estimator.profile import default_root, load_profile, staged_profile  # noqa: PLC0415

    from .device import device_runner  # noqa: PLC0415

    s = req.settings
    out = Path(req.out)
    root = out / "profiles"
    src = load_profile(s.device, req.profiles)
    given, runner = device_runner(src, req.calibrate_options, "--refine")
    runner.close()
    if src.path.resolve() != (root / s.device).resolve():
        with staged_profile(root, s.device, "refine-base") as tmp:
            shutil.copytree(src.path, tmp)
        print(f"nas: --refine: {s.device} copied from {Path(req.profiles) if req.profiles else default_root()} "
              f"to {root} (the in-process estimator loads that directory)", file=err)
    req.profiles = str(root)
    base = load_profile(s.device, root)
    return RefineSetup(base=base, root=root, db=out / "refine.sqlite", given=given, minutes=float(req.refine_minutes),
                       every=int(req.refine_every), command=f"nas search --refine {req.refine_minutes:g}")


def _rel(est: dict[str, Any], metric: str) -> float:
    lo, hi = est["intervals"][metric]
    total = float(est.get("latency_ms") or 0.0)
    return (float(hi) - float(lo)) / total if total > 0 else math.inf


def select_targets(trials: list[Any], n: int = TARGETS) -> list[Any]:
    """The ``n`` trials to refine toward: those with layers outside the design space first,
    then by CM_O width relative to the estimate; each architecture once."""
    seen: set[str] = set()
    cands = []
    for t in trials:
        est = t.user_attrs.get("estimate")
        key = repr(sorted(t.params.items()))
        if not est or key in seen:
            continue
        seen.add(key)
        cands.append(t)
    cands.sort(key=lambda t: (-int(t.user_attrs["estimate"].get("n_out_of_design_space", 0) > 0),
                              -_rel(t.user_attrs["estimate"], "CM_O"), t.number))
    return cands[:n]


@dataclass
class Refiner:
    """The Optuna callback that runs a refine step every ``setup.every`` trials (see the module
    docstring); ``evaluator`` is switched to the refined profile after the first step."""

    setup: RefineSetup
    estimation: Any  # the in-process estimator (estimator.inprocess.InProcessEstimation)
    evaluator: Any
    trials: int  # this worker's trials
    err: TextIO
    stopped: Callable[[], bool] = lambda: False
    write: Callable[[str], None] | None = None
    n: int = 0
    seconds: float = 0.0  # device seconds of this run's steps
    steps: list[dict[str, Any]] = field(default_factory=list)  # this run's steps
    pending: list[Any] = field(default_factory=list)
    off: str = ""  # why refinement stopped for the rest of the search

    def __post_init__(self) -> None:
        self.planned = (self.trials - 1) // self.setup.every
        self.evaluator.keep_onnx = max(self.evaluator.keep_onnx, 2 * self.setup.every)
        self.evaluator.model_info = {"profile": self.evaluator.profile, "refine_step": 0}

    def say(self, text: str) -> None:
        (self.write or (lambda x: print(x, file=self.err)))(f"nas: {text}")

    def __call__(self, study: Any, trial: Any) -> None:
        import optuna  # noqa: PLC0415

        self.n += 1
        if trial.state == optuna.trial.TrialState.COMPLETE and trial.number in self.evaluator.sent:
            self.pending.append(trial)
        if self.n % self.setup.every or self.n >= self.trials or self.stopped() or self.off:
            return
        left = self.setup.minutes * 60.0 - self.seconds
        if left <= 0:
            return
        try:
            self.step(study, left / max(1, self.planned - len(self.steps)))
        except UserError as e:  # the search goes on with the models it has
            self.off = str(e)
            self.say(f"refine step failed: {e}; no more refinement in this run")

    def step(self, study: Any, seconds: float) -> None:
        from bench.network_sources import NetworkSpec  # noqa: PLC0415
        from bench.calibrate import precision_for  # noqa: PLC0415
        from bench.refine import load_targets, refine  # noqa: PLC0415
        from bench.sampling import limits_for  # noqa: PLC0415

        from .device import device_runner  # noqa: PLC0415

        st = self.setup
        base = st.base
        picked = select_targets(self.pending)
        self.pending = []
        specs, targets = [], []
        for t in picked:
            data = self.evaluator.sent[t.number]
            specs.append(NetworkSpec(f"trial-{t.number}", "nas", "space", {"trial": t.number},
                                     build=lambda data=data: data))
        for spec in specs:  # one the estimator cannot read again is left out, not fatal
            try:
                targets += load_targets([spec], base.fusion_rules())
            except UserError as e:
                self.say(f"refine: {e}; left out")
        if not targets:
            return
        number = len(study.user_attrs.get("refine") or []) + 1
        name = refined_name(base.name)
        _, runner = device_runner(base, st.given, "--refine")
        self.say(f"refine step {number}: toward {', '.join(t.name for t in targets)} ({seconds / 60:.2f} device min "
                 f"at most) ...")
        t0 = time.monotonic()
        res = refine(base, name, st.root, targets, runner, db=st.db, limits=limits_for(base.runner), rounds=1,
                     minutes=seconds / 60.0, top=TOP, min_gain=0.0, options=st.given, command=st.command,
                     precision=precision_for(base.runner, runner.model_format, base))
        self.seconds += res.device_seconds
        history = list(study.user_attrs.get("refine") or [])
        self._provenance(study, name, history, number, picked, targets, res)
        before, after = res.rounds[0].widths, res.rounds[-1].widths
        was = {"profile": self.evaluator.profile, "model_version": self._version(self.evaluator.profile)}
        switched = False
        if res.added:
            reg = self.estimation.reload_profiles()
            if name not in reg.get("devices", []):
                raise UserError(f"the in-process estimator did not load the refined profile {name}: "
                                f"{'; '.join(reg.get('errors', [])) or 'no error given'}")
            self.evaluator.profile = name
            self.evaluator.cache.clear()  # the estimates changed; the architectures did not
            switched = True
        version = self._version(self.evaluator.profile)
        self.evaluator.model_info = {"profile": self.evaluator.profile, "refine_step": number}
        rec = {"step": number, "after_trial": max(t.number for t in picked), "targets": [t.name for t in targets],
               "measured": sum(r.measured for r in res.rounds[1:]), "failed": sum(r.failed for r in res.rounds[1:]),
               "rows": res.added, "device_seconds": round(res.device_seconds, 3),
               "wall_seconds": round(time.monotonic() - t0, 3), "stopped": res.stopped, "profile": self.evaluator.profile,
               "model_version": version, "model_version_before": was["model_version"], "reloaded": switched,
               "widths_before": {w.name: w.to_dict() for w in before},
               "widths_after": {w.name: w.to_dict() for w in after}}
        self.steps.append(rec)
        study.set_user_attr("refine", history + [rec])
        o0, o1 = _mean_rel(before, "o"), _mean_rel(after, "o")
        l0, l1 = _mean_rel(before, "lv"), _mean_rel(after, "lv")
        self.say(f"refine step {number}: {rec['measured']} configurations measured in {res.device_seconds / 60:.2f} "
                 f"device min ({self.seconds / 60:.2f} of {st.minutes:g} so far), {name} = {base.name} + {res.added} "
                 f"rows; targets' mean uncalibrated CM_O width / estimate {o0:.3f} -> {o1:.3f}, CM_LV {l0:.3f} -> {l1:.3f}; "
                 f"estimating with {self.evaluator.profile} (model {was['model_version']} -> {version}) "
                 f"[{res.stopped}]")

    def _provenance(self, study: Any, name: str, history: list[dict[str, Any]], number: int, picked: list[Any],
                    targets: list[Any], res: Any) -> None:
        """``refined.search`` in the refined profile's ``profile.json``: every step of the study
        (``bench refine``'s own record names only this step's targets and device time)."""
        from estimator.profile import load_profile, write_profile_json  # noqa: PLC0415

        steps = [{"step": h["step"], "after_trial": h["after_trial"], "targets": h["targets"], "rows": h["rows"],
                  "device_seconds": h["device_seconds"]} for h in history]
        steps.append({"step": number, "after_trial": max(t.number for t in picked),
                      "targets": [t.name for t in targets], "rows": res.added,
                      "device_seconds": round(res.device_seconds, 3)})
        meta = load_profile(name, self.setup.root).to_dict()
        meta["refined"]["search"] = {"command": self.setup.command, "study": study.study_name, "steps": steps,
                                     "device_seconds": round(sum(x["device_seconds"] for x in steps), 3)}
        write_profile_json(self.setup.root / name, meta)

    def _version(self, device: str) -> str:
        for d in self.estimation.list_devices():
            if d["name"] == device:
                return str(d.get("model_version", ""))
        return ""


def _mean_rel(ws: list[Any], which: str) -> float:
    xs = [(w.o_width if which == "o" else w.lv_width) / w.total_ms for w in ws if w.total_ms > 0]
    return sum(xs) / len(xs) if xs else math.nan
