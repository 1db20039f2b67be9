"""``bench fusion --device NAME``: which pairs the target fuses, detected by timing.

For each candidate pair (:func:`bench.fusion_probe.candidate_pairs`; ``--pairs`` picks some)
A, B and A -> B are timed with smart padding in randomised interleaved rounds, and a pair
whose joint time falls clearly below the sum is fused (:mod:`bench.fusion_probe` says how
clearly). Prints one row per configuration: T(A), B's own time, T(A->B), the saving as a
share of B's time with its 95 % margin, and the verdict; then each pair's verdict.

``--write`` writes the producer + activation verdicts into the installed profile NAME as
its fusion rules (:func:`estimator.profile.write_fusion`): fused pairs fold, pairs that are
not fused no longer fold, undecided pairs keep the profile's rule; every pair's evidence and
how it was measured go beside them (``fusion.detected``).
"""
from __future__ import annotations

import argparse
import math
import sys

from estimator.cliutil import integer
from estimator.errors import UserError

from .cmd_run import add_runner_options, given_runner_options
from .measure import make_runner
from .runners.base import RUNNERS

__all__ = ["register", "cmd_fusion"]


def register(sub: argparse._SubParsersAction) -> None:
    from .fusion_probe import SIZES  # noqa: PLC0415

    c = sub.add_parser(
        "fusion", help="detect which layer pairs the target fuses, by timing A, B and A->B (--write: into the profile)",
        description="Time A, B and A->B of each candidate pair with smart padding in randomised interleaved rounds; "
                    "a pair whose joint time falls clearly below the sum is fused. With --write the producer + "
                    "activation verdicts become the installed profile's fusion rules, with the evidence beside them.")
    c.add_argument("--device", required=True, help="device name; with --write, the installed profile to write into")
    c.add_argument("--root", default=None, metavar="DIR", help="profiles directory (default: $CL_PROFILES or profiles/)")
    c.add_argument("--runner", default=None, choices=sorted(RUNNERS),
                   help="target runner (default: the profile's runner, else onnxruntime)")
    c.add_argument("--pairs", default=None, metavar="P[,P]",
                   help="candidate pairs to test, PRODUCER+CONSUMER with * wildcards (e.g. conv2d+*,fc+gelu; "
                        "default: all)")
    c.add_argument("--sizes", default=",".join(SIZES), metavar="S[,S]",
                   help=f"configurations per pair, of {', '.join(SIZES)} (default all)")
    c.add_argument("--rounds", type=integer(min=2), default=9,
                   help="randomised interleaved rounds over all models (default 9)")
    c.add_argument("--runs", type=integer(min=1), default=20, help="timed runs per model and round (default 20)")
    c.add_argument("--warmup", type=integer(min=0), default=5, help="untimed runs per model and round (default 5)")
    c.add_argument("--seed", type=integer(min=0), default=0, help="seed of the rounds' orders (default 0)")
    c.add_argument("--write", action="store_true",
                   help="write the detected rules and their evidence into the installed profile DEVICE")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_runner_options(c)
    c.set_defaults(func=cmd_fusion)


def _ms(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.4f}"


def cmd_fusion(a: argparse.Namespace) -> int:
    from estimator.errors import NotFoundError  # noqa: PLC0415
    from estimator.profile import load_profile, write_fusion  # noqa: PLC0415

    from .fusion_probe import SIZES, candidate_pairs, detected_block, probe, rules_from, select_pairs  # noqa: PLC0415

    try:
        pairs = select_pairs(candidate_pairs(), a.pairs)
    except ValueError as e:
        raise UserError(f"--pairs: {e}") from None
    sizes = [s.strip() for s in a.sizes.split(",") if s.strip()]
    bad = [s for s in sizes if s not in SIZES]
    if bad or not sizes:
        raise UserError(f"--sizes: unknown size(s) {', '.join(map(repr, bad or [a.sizes]))}; use {', '.join(SIZES)}")
    try:
        prof = load_profile(a.device, a.root)
    except NotFoundError:
        if a.write:
            raise
        prof = None
    runner_name = a.runner or (prof.runner if prof else "onnxruntime")
    if runner_name not in RUNNERS:
        raise UserError(f"profile {a.device}: runner {runner_name!r} is not a bench runner; give --runner")
    options = given_runner_options(a)
    runner = make_runner(runner_name, options)
    with runner:
        env = runner.environment()
        from tqdm import tqdm  # noqa: PLC0415

        bar = tqdm(total=0, unit="timing", file=sys.stderr, dynamic_ncols=True, mininterval=0.5,
                   disable=a.no_progress or not sys.stderr.isatty())

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()

        try:
            results = probe(runner, pairs, sizes=sizes, rounds=a.rounds, runs=a.runs, warmup=a.warmup, seed=a.seed,
                            precision=options.get("precision"), progress=progress)
        finally:
            bar.close()
    print(f"{a.device}: fusion by timing on {runner_name} ({a.rounds} rounds of {a.warmup} + {a.runs} runs; "
          f"T(B) is B's own time, saving = (T(A) + T(B) - T(A->B)) / T(B) +- its 95 % margin)")
    print(f"  {'pair':<22} {'size':<7} {'T(A) ms':>9} {'T(B) ms':>9} {'T(A->B) ms':>10} {'saving':>16}  verdict")
    for r in results:
        for c in r.configs:
            saving = "-" if math.isnan(c.saving) else f"{c.saving:+.2f} +- {c.spread:.2f}"
            verdict = c.verdict + (f" ({c.error})" if c.error else "")
            print(f"  {r.pair.name:<22} {c.size:<7} {_ms(c.t_a):>9} {_ms(c.t_b):>9} {_ms(c.t_ab):>10} {saving:>16}  "
                  f"{verdict}")
    by: dict[str, list[str]] = {}
    for r in results:
        by.setdefault(r.verdict, []).append(r.pair.name)
    for verdict in ("fused", "partly fused", "not fused", "undecided"):
        if by.get(verdict):
            print(f"{verdict}: {', '.join(by[verdict])}")
    if not a.write:
        return 0
    assert prof is not None
    rules, changes = rules_from(results, prof.fusion_rules().to_dict())
    rules["detected"] = detected_block(results, runner=runner_name, options=options, environment=env,
                                       rounds=a.rounds, runs=a.runs, warmup=a.warmup, sizes=sizes)
    written = write_fusion(prof.path, rules)
    print(f"wrote the fusion rules of profile {written.name} ({written.metadata_path}): "
          + ("; ".join(changes) if changes else "no rule changed") + "; evidence in fusion.detected")
    return 0
