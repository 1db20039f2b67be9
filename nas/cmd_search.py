"""``nas search``: run (or continue) a latency-constrained architecture search."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from estimator.cliutil import DefaultsHelpFormatter, integer, number
from estimator.errors import UserError

from .polish import DEFAULT_POLISH
from .proxy import check_objective_options, resolve_objective
from .refine import DEFAULT_EVERY
from .spaces import DEFAULT_SPACE, check_options, resolve_space
from .trial import SearchSettings
from .units import parse_budget, parse_duration, parse_option

#: default number of trials: `nas search --device imx93 --budget 50ms` takes about 30 s on one
#: CPU core of the development VM (plus model training the first time)
DEFAULT_TRIALS = 100


def register(sub: Any) -> None:
    p = sub.add_parser(
        "search", help="search architectures under a latency budget",
        description="Each trial samples an architecture from the search space, builds it in torch, writes its ONNX "
                    "graph (scaled, mobilenet, resnet: from the description; hybrid and user spaces: torch export + "
                    "onnxsim), asks the estimator (in-process, or --service) for its latency with conformal "
                    "intervals and scores it with the objective. A candidate is feasible when its CM_LV upper bound "
                    "at --confidence is within --budget; the score is penalised for a wide CM_O interval and for "
                    "layers outside the benchmarked design space (docs/nas.md). Running the command again with the "
                    "same --storage/--study continues the study; several workers may share one.",
        formatter_class=DefaultsHelpFormatter)
    p.add_argument("--device", required=True, help="device profile name (one the estimator lists)")
    p.add_argument("--budget", required=True, help="latency budget with a unit: 50ms, 500us, 0.05s")
    p.add_argument("--trials", type=integer(min=1), default=DEFAULT_TRIALS, help="trials this worker runs")
    p.add_argument("--polish", type=integer(min=0), default=DEFAULT_POLISH, metavar="N",
                   help="after the trials, at most N more that step the winner up in one ordered parameter (the next "
                        "width, resolution, depth, ...), kept while a step scores higher within the budget "
                        f"(default {DEFAULT_POLISH}; 0: off)")
    p.add_argument("--timeout", default=None, help="stop this worker after this long (seconds, or 90s, 5min, 2h)")
    p.add_argument("--space", default=DEFAULT_SPACE,
                   help="built-in space (scaled, mobilenet, resnet, hybrid) or MODULE:FUNCTION")
    p.add_argument("--space-option", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword option of the space, VALUE as JSON (e.g. resolutions=[96,128]); repeatable")
    p.add_argument("--objective", default="naswot",
                   help="naswot (zero-cost proxy, default), synflow, or MODULE:FUNCTION(model, trial) -> float, "
                        "higher is better")
    p.add_argument("--objective-option", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword option of the objective (e.g. batch=32); repeatable")
    p.add_argument("--confidence", type=number(above=0, below=1), default=0.9, help="confidence of the intervals used")
    p.add_argument("--service", default=None, metavar="HOST:PORT",
                   help="a running estimation service to ask over gRPC (default: estimate in-process with the "
                        "shipped profiles, no round trip)")
    p.add_argument("--token", default=None, help="bearer token for --service")
    p.add_argument("--ca-cert", default=None, metavar="PEM", help="root certificate(s): TLS to --service")
    p.add_argument("--profiles", default=None, metavar="DIR",
                   help="profiles directory of the in-process estimator (default: CL_PROFILES or profiles/)")
    p.add_argument("--calibrate", type=integer(min=0), default=0, metavar="N",
                   help="first measure N samples of the search space whole on this machine with the device's runner "
                        "and calibrate the device's profile on them (bench calibrate; written to OUT/profiles, "
                        "measurements in OUT/calibration.sqlite); in-process estimator only; 0 = off")
    p.add_argument("--adapt", type=number(above=0), default=None, metavar="MINUTES",
                   help="first make the device's profile hold on this machine within MINUTES (bench adapt: it "
                        "calibrates the profile where that carries, else measures a small profile of this machine "
                        "with the device's runner; written to OUT/profiles, measurements in OUT/adapt.sqlite, "
                        "resumable); in-process estimator only; default off")
    p.add_argument("--refine", type=float, default=None, metavar="MINUTES",
                   help="every --refine-every trials, measure (with the device's runner, on this machine) the layer "
                        "configurations that widen the latest candidates' intervals most: those outside the design "
                        "space, then the widest CM_O (bench refine); later trials are estimated with profile "
                        "DEVICE-refined (written to OUT/profiles, measurements in OUT/refine.sqlite); MINUTES of "
                        "device time in all; in-process estimator, one worker; default off")
    p.add_argument("--refine-every", type=integer(min=1), default=DEFAULT_EVERY, metavar="K",
                   help="trials between two refine steps of --refine")
    p.add_argument("--calibrate-option", action="append", default=[], metavar="KEY=VALUE",
                   help="runner option for --adapt, --calibrate and --refine, e.g. threads=2 or agent=HOST:PORT (default: the "
                        "profile's threads); repeatable")
    p.add_argument("--storage", default=None, metavar="URL",
                   help="Optuna storage URL (default sqlite:///OUT/nas.db; postgresql://user@host/db for workers "
                        "on several machines)")
    p.add_argument("--study", default=None, help="study name (default DEVICE-SPACE)")
    p.add_argument("--out", default="nas-out", help="output directory (reports; default SQLite storage)")
    p.add_argument("--penalty-weight", type=number(min=0), default=0.1,
                   help="W in score - |score| * (1 - exp(-W * P)), P = ln(1 + CM_O width / prediction) + "
                        "ln(1 + flagged layers' CM_O width / prediction) + fraction of layers outside the "
                        "design space (docs/nas.md); 0 disables")
    p.add_argument("--patience", type=integer(min=0), default=25,
                   help="stop after this many consecutive infeasible (or failed) trials; 0 never stops")
    p.add_argument("--seed", type=integer(min=0), default=None, help="sampler seed (give each parallel worker its own)")
    p.add_argument("--multi-objective", action="store_true",
                   help="two objectives, penalised score up and latency down: the result is a Pareto set")
    p.add_argument("--heartbeat", type=integer(min=1), default=10, metavar="S",
                   help="heartbeat interval of running trials; a trial silent for 2x this is failed and retried")
    p.add_argument("--connect-timeout", type=number(above=0), default=15.0, metavar="S",
                   help="how long to wait for --service to answer")
    p.add_argument("--threads", type=integer(min=1), default=1,
                   help="torch intra-op threads of this worker: export and onnxsim are single-threaded, and "
                        "several threads only fight over busy cores; run more workers to use more cores")
    p.add_argument("--workers", type=integer(min=1), default=1, metavar="N",
                   help="local worker processes on this study (--trials is split between them); each is what another "
                        "machine on a shared --storage would be, with its own in-process estimator unless --service")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_search)


def _options(items: list[str], flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for it in items:
        k, v = parse_option(it, flag)
        out[k] = v
    return out


def settings_from_args(args: argparse.Namespace) -> SearchSettings:
    budget = parse_budget(args.budget)
    if not (0.0 < args.confidence < 1.0):
        raise UserError(f"--confidence must be in (0, 1), e.g. 0.9; got {args.confidence}")
    if not (args.penalty_weight >= 0):
        raise UserError(f"--penalty-weight must be >= 0, got {args.penalty_weight}")
    space_name, space_fn = resolve_space(args.space)
    space_opts = _options(args.space_option, "--space-option")
    check_options(space_fn, space_opts, f"search space {space_name}")
    obj_name, obj_fn, deterministic = resolve_objective(args.objective)
    obj_opts = _options(args.objective_option, "--objective-option")
    check_options(obj_fn, obj_opts, f"objective {obj_name}", positional=2)
    check_objective_options(obj_name, obj_opts)
    return SearchSettings(device=args.device, budget_ms=budget, confidence=float(args.confidence),
                          penalty_weight=float(args.penalty_weight), multi_objective=bool(args.multi_objective),
                          space=space_name, space_fn=space_fn, space_options=space_opts, objective=obj_name,
                          objective_fn=obj_fn, objective_options=obj_opts, deterministic_objective=deterministic)


def cmd_search(args: argparse.Namespace) -> int:
    from .search import SearchRequest, run_search  # noqa: PLC0415

    settings = settings_from_args(args)
    req = SearchRequest(settings=settings, trials=args.trials,
                        timeout_s=parse_duration(args.timeout) if args.timeout else None, service=args.service,
                        token=args.token, ca_cert=args.ca_cert, profiles=args.profiles, storage=args.storage,
                        study=args.study, out=Path(args.out), patience=args.patience, seed=args.seed,
                        heartbeat_s=args.heartbeat, progress=not args.no_progress,
                        connect_timeout_s=args.connect_timeout, calibrate=args.calibrate,
                        adapt_minutes=args.adapt or 0.0,
                        calibrate_options=_options(args.calibrate_option, "--calibrate-option"),
                        workers=args.workers, refine_minutes=0.0 if args.refine is None else args.refine,
                        refine_every=args.refine_every, polish=args.polish)
    if args.refine is not None:
        from .refine import check_refine  # noqa: PLC0415

        check_refine(req)  # --refine 0 included: it is a refusal, not "off"
    import torch  # noqa: PLC0415

    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        run_search(req)
    finally:
        torch.set_num_threads(threads)  # in-process callers (tests, notebooks) get theirs back
    return 0
