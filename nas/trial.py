"""One NAS trial: sample, build, export, simplify, strip, estimate, score.

:class:`Evaluator` is the Optuna objective. Per trial it

1. samples the architecture from the search space and builds the torch module (weights
   initialised from a fixed seed, so one architecture always gets the same weights);
2. writes its weightless ONNX graph from the architecture description (the built-in spaces
   :mod:`nas.direct` knows: ``scaled``, ``mobilenet``, ``resnet``), or exports it to ONNX,
   simplifies it with onnxsim (:mod:`nas.export`) and strips the weight data
   (:func:`estimator.onnx_strip.strip_initializers`) (``hybrid`` and user spaces);
3. asks the estimation interface (:mod:`estimator.interface`: the in-process estimator, or
   the service's gRPC client with ``--service``) for the latency at one confidence level,
   per layer;
4. records in the trial's user attributes: ``worker`` (host:pid), ``arch`` (JSON
   description), ``input_shape``,
   ``estimate`` (point estimate ``latency_ms``, ``intervals`` {CM_TV, CM_LV, CM_O: [lower,
   upper]} at the confidence, ``n_layers``, ``n_out_of_design_space``, ``ood_layers`` with
   their reasons, ``n_fallback``, ``model_version``, ``cm_o_drivers``: the layers that drive
   the CM_O interval and why), flat ``latency_ms``,
   ``CM_LV_upper_ms``, ``constraint_ms`` (CM_LV upper - budget) and ``feasible`` (for
   optuna-dashboard's table), with ``--refine`` also ``model`` (the profile that estimated
   it, its model version and the refine step: :mod:`nas.refine`), and after scoring
   ``result`` (score, penalised score, penalty terms, parameter count, per-phase timing);
5. calls the objective with the module and the trial, applies the CM_O penalty
   (:mod:`nas.scoring`) and returns the penalised score (and, in multi-objective mode,
   the point estimate as a second objective to minimise).

Errors of one candidate (export, onnxsim, a refusal of the estimator such as impossible
shapes, an objective that raises or returns a non-number) raise :class:`CandidateError`:
the trial is FAIL with ``fail_reason`` and the search goes on. An estimator that is gone,
refuses the token or does not know the device raises :class:`SearchAborted`.

Repeated architectures (samplers re-propose configurations of a discrete space) are not
exported or estimated again: the estimate is reused from an in-process cache keyed by the
architecture description, and so is the score of a deterministic built-in proxy.
"""
from __future__ import annotations

import json
import math
import os
import socket
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from estimator.errors import UserError
from estimator.interface import Estimation, EstimationError

from . import export as nas_export
from .proxy import call_objective
from .scoring import CONSTRAINT_KEY, Estimate, constraint_value, penalised, penalty
from .direct import direct_onnx, is_direct_space
from .spaces import SpaceFn, param_count, sample

__all__ = ["SearchSettings", "Evaluator", "CandidateError", "SearchAborted", "ABORT_CODES", "TIMING_KEYS",
           "supports_set_constraint"]

#: statuses (gRPC's names, from either implementation) that stop the whole search (the
#: estimator, not the candidate, is the problem)
ABORT_CODES = frozenset({"UNAVAILABLE", "UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND", "UNIMPLEMENTED"})
#: who ran a trial (``worker`` user attribute): host and process id
WORKER = f"{socket.gethostname()}:{os.getpid()}"
#: per-trial phases timed in the ``timing_s`` user attribute
TIMING_KEYS = ("build", "export", "simplify", "strip", "estimate", "objective")


class CandidateError(Exception):
    """This candidate failed; the trial is FAIL and the search goes on."""


class SearchAborted(UserError):
    """The search cannot go on (service gone, bad token, unknown device)."""


def supports_set_constraint() -> bool:
    """Optuna >= 5 stores constraints with ``Trial.set_constraint`` (constraints_func is deprecated)."""
    import optuna  # noqa: PLC0415

    return hasattr(optuna.trial.Trial, "set_constraint")


@dataclass
class SearchSettings:
    """Everything a trial needs to know (and what a study records about itself)."""

    device: str
    budget_ms: float
    confidence: float = 0.9
    penalty_weight: float = 0.1
    multi_objective: bool = False
    space: str = "scaled"
    space_fn: SpaceFn | None = None
    space_options: dict[str, Any] = field(default_factory=dict)
    objective: str = "naswot"
    objective_fn: Callable[..., float] | None = None
    objective_options: dict[str, Any] = field(default_factory=dict)
    #: the objective's value depends only on the architecture (built-in proxies)
    deterministic_objective: bool = True
    #: torch seed for weight initialisation (the same architecture gets the same weights)
    init_seed: int = 0
    #: built-in spaces: send the ONNX written from the description (nas.direct), not the export
    direct_onnx: bool = True

    def study_attrs(self) -> dict[str, Any]:
        """What a study stores so that workers and resumed runs agree (JSON-ready)."""
        return {"device": self.device, "budget_ms": self.budget_ms, "confidence": self.confidence,
                "penalty_weight": self.penalty_weight, "multi_objective": self.multi_objective,
                "space": self.space, "space_options": _jsonable(self.space_options),
                "objective": self.objective, "objective_options": _jsonable(self.objective_options)}


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=lambda o: list(o) if isinstance(o, (tuple, set)) else str(o)))


class Evaluator:
    """The Optuna objective of a NAS search (see the module docstring)."""

    def __init__(self, estimation: Estimation, settings: SearchSettings, *, cache_size: int = 512) -> None:
        if settings.space_fn is None or settings.objective_fn is None:
            raise ValueError("settings need space_fn and objective_fn")
        self.estimation = estimation
        self.s = settings
        self.cache: OrderedDict[str, tuple[Estimate, float | None]] = OrderedDict()
        self.cache_size = cache_size
        self.use_set_constraint = supports_set_constraint()
        self.n_cache_hits = 0
        #: the device the candidates are estimated on (``--refine`` moves it to the refined profile)
        self.profile = settings.device
        #: with ``--refine``: recorded with each trial (user attribute ``model``, plus the model version)
        self.model_info: dict[str, Any] | None = None
        #: keep the ONNX bytes sent for the last ``keep_onnx`` trials in ``sent`` (trial number -> bytes)
        self.keep_onnx = 0
        self.sent: OrderedDict[int, bytes] = OrderedDict()
        self._last_sent: Any = None

    # ------------------------------------------------------------ pieces
    def uses_direct(self) -> bool:
        """Whether candidates are written as ONNX from their description (:mod:`nas.direct`):
        the built-in spaces of :data:`nas.direct.DIRECT_SPACES` only, unless ``settings.direct_onnx`` is off."""
        return self.s.direct_onnx and is_direct_space(self.s.space, self.s.space_fn)

    def estimate(self, arch_module: Any, input_shape: tuple[int, ...], timing: dict[str, float],
                 description: Any = None) -> tuple[Estimate, Any]:
        """The candidate's weightless ONNX (written from ``description`` for :mod:`nas.direct`'s spaces,
        else exported, simplified and stripped), queried; returns the estimate and the model
        sent (the simplified model with weights on the export path)."""
        from estimator.onnx_strip import strip_initializers  # noqa: PLC0415 (export path only)

        t0 = time.perf_counter()
        direct = direct_onnx(description, input_shape) if description is not None and self.uses_direct() else None
        if direct is not None:
            simplified = stripped = direct
            t1 = t2 = t3 = time.perf_counter()
        else:
            try:
                raw = nas_export.export_onnx(arch_module, input_shape)
                t1 = time.perf_counter()
                simplified = nas_export.simplify(raw)
            except nas_export.ExportError as e:
                raise CandidateError(str(e)) from None
            t2 = time.perf_counter()
            stripped = strip_initializers(simplified)
            t3 = time.perf_counter()
        try:
            result = self.estimation.estimate_network(stripped, self.profile, confidence=(self.s.confidence,),
                                                  per_layer=True, strip=False)
        except EstimationError as e:
            if e.code in ABORT_CODES:
                raise SearchAborted(f"{self._who()} failed: {e}") from None
            raise CandidateError(f"{self._who()} refused this candidate: {e}") from None
        t4 = time.perf_counter()
        timing.update(export=t1 - t0, simplify=t2 - t1, strip=t3 - t2, estimate=t4 - t3,
                      server=float(result.server_time_ms) / 1e3)
        self._last_sent = stripped
        return Estimate.from_result(result, self.s.confidence), simplified

    def _who(self) -> str:
        where = getattr(self.estimation, "where", "")
        return "the in-process estimator" if where == "in-process" else "the estimation service"

    def _score(self, module: Any, trial: Any) -> float:
        try:
            v = call_objective(self.s.objective_fn, module, trial, self.s.objective_options)  # type: ignore[arg-type]
        except (SearchAborted, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001 - the objective's failure is this trial's failure
            msg = str(e).strip().splitlines()[0][:500] if str(e).strip() else ""
            raise CandidateError(f"objective {self.s.objective} raised {type(e).__name__}"
                                 f"{': ' + msg if msg else ''}") from None
        try:
            f = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise CandidateError(f"objective {self.s.objective} returned {v!r}, not a number") from None
        if not math.isfinite(f):
            raise CandidateError(f"objective {self.s.objective} returned {f}, not a finite number")
        return f

    # ------------------------------------------------------------- trial
    def __call__(self, trial: Any) -> float | tuple[float, float]:
        try:
            return self._run(trial)
        except (CandidateError, SearchAborted) as e:
            trial.set_user_attr("fail_reason", str(e))
            raise

    def _run(self, trial: Any) -> float | tuple[float, float]:
        s = self.s
        timing: dict[str, float] = {k: 0.0 for k in TIMING_KEYS}
        t0 = time.perf_counter()
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(s.init_seed)
                arch = sample(s.space_fn, trial, s.space_options, name=s.space)  # type: ignore[arg-type]
        except UserError as e:
            raise CandidateError(f"search space {s.space}: {e}") from None
        except Exception as e:  # noqa: BLE001 - a broken builder fails this candidate
            raise CandidateError(f"search space {s.space} failed to build: {type(e).__name__}: {e}") from None
        timing["build"] = time.perf_counter() - t0
        key = json.dumps({"space": s.space, "options": _jsonable(s.space_options), "params": _jsonable(trial.params),
                          "arch": _jsonable(arch.description), "shape": list(arch.input_shape)}, sort_keys=True)
        trial.set_user_attr("worker", WORKER)
        trial.set_user_attr("arch", _jsonable(arch.description))
        trial.set_user_attr("input_shape", list(arch.input_shape))

        cached = self.cache.get(key)
        if cached is not None:
            self.cache.move_to_end(key)
            self.n_cache_hits += 1
            est, cached_score = cached
        else:
            est, _ = self.estimate(arch.module, arch.input_shape, timing, arch.description)
            cached_score = None
            if self.keep_onnx:
                sent = self._last_sent
                self.sent[trial.number] = sent if isinstance(sent, bytes) else sent.SerializeToString()
                while len(self.sent) > self.keep_onnx:
                    self.sent.popitem(last=False)
        c = constraint_value(est, s.budget_ms)
        feasible = c <= 0
        # a few grouped attributes: every attribute is one storage transaction
        trial.set_user_attr("estimate", est.to_dict())
        trial.set_user_attr("latency_ms", est.total_ms)
        trial.set_user_attr("CM_LV_upper_ms", est.intervals["CM_LV"][1])
        trial.set_user_attr("constraint_ms", c)
        trial.set_user_attr("feasible", feasible)
        if self.model_info is not None:
            trial.set_user_attr("model", {**self.model_info, "model_version": est.model_version})
        if self.use_set_constraint:
            with warnings.catch_warnings():  # a retried trial inherits it: then it is kept (same params)
                warnings.simplefilter("ignore")
                trial.set_constraint(CONSTRAINT_KEY, c)
        pen = penalty(est, s.penalty_weight)

        t1 = time.perf_counter()
        if cached_score is not None and s.deterministic_objective:
            score = cached_score
        else:
            score = self._score(arch.module, trial)
        timing["objective"] = time.perf_counter() - t1
        if cached is None:
            self.cache[key] = (est, score if s.deterministic_objective else None)
            while len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        value = penalised(score, pen)
        timing["total"] = time.perf_counter() - t0
        trial.set_user_attr("result", {"score": score, "penalised_score": value, "penalty": pen.to_dict(score),
                                       "n_params": param_count(arch.module), "cache_hit": cached is not None,
                                       "timing_s": {k: round(v, 5) for k, v in timing.items()}})
        if s.multi_objective:
            return value, est.total_ms
        return value
