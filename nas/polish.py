"""Polishing the winner: after the search's trials, a few more that step the best feasible
candidate up in one ordered parameter at a time (the next width, resolution, depth, expansion
or kernel; a categorical parameter counts as ordered when its choices are numbers). A step is
kept when it scores higher (after the CM_O penalty) and stays within the budget; the next
steps start from it. It stops when no step of the winner does, or the trials are spent.

Why: the sampler ranks candidates by a proxy whose draws are noisy, so a search can end with
its best feasible candidate well below the budget while one step up would still fit it and
score higher (``nas search --device imx93 --budget 50ms``: winners at 65-72 % of the budget in
4 of 20 seeds). Every step is an ordinary trial of the study: it is estimated, constrained and
reported like the others, and the winner is still the best feasible trial.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

__all__ = ["DEFAULT_POLISH", "step_ups", "polish"]

#: ``nas search --polish``: trials at most (0: off)
DEFAULT_POLISH = 20


def step_ups(params: dict[str, Any], distributions: dict[str, Any]) -> list[dict[str, Any]]:
    """The candidates one step above ``params`` in one ordered parameter each: an integer
    parameter one ``step`` up (within its range), a categorical one of numbers to its next
    larger choice. Boolean and text choices (SE on/off, an activation) are not ordered."""
    import optuna  # noqa: PLC0415

    out = []
    for name, dist in distributions.items():
        v = params.get(name)
        if v is None:
            continue
        nv: Any = None
        if isinstance(dist, optuna.distributions.IntDistribution):
            if v + dist.step <= dist.high:
                nv = v + dist.step
        elif isinstance(dist, optuna.distributions.CategoricalDistribution):
            choices = list(dist.choices)
            if all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in choices):
                above = sorted(c for c in choices if c > v)
                if above:
                    nv = above[0]
        if nv is not None:
            out.append({**params, name: nv})
    return out


def polish(study: Any, objective: Callable[[Any], Any], n: int, *, best: Callable[[Any], Any],
           callbacks: Sequence[Any] = (), catch: tuple[type[BaseException], ...] = (),
           log: Callable[[str], None] = lambda text: None) -> int:
    """Run at most ``n`` step-up trials from ``best(study)`` (a trial number, None: no feasible
    one) as described in the module docstring; returns how many ran."""
    ran = 0
    tried = {_key(t.params) for t in study.get_trials(deepcopy=False)}
    start = best(study)
    number = start
    while ran < n and number is not None:
        incumbent = study.get_trials(deepcopy=False)[number]
        steps = [p for p in step_ups(dict(incumbent.params), dict(incumbent.distributions)) if _key(p) not in tried]
        steps = steps[:n - ran]
        if not steps:
            break
        for p in steps:
            study.enqueue_trial(p)
            tried.add(_key(p))
        study.optimize(objective, n_trials=len(steps), catch=catch, callbacks=list(callbacks), gc_after_trial=False)
        ran += len(steps)
        after = best(study)
        if after == number:
            break
        number = after
    if ran:
        won = "the winner is unchanged" if number == start else f"trial {number} steps the winner up"
        log(f"polished the winner (trial {start}) with {ran} step-up trial{'s' if ran != 1 else ''}: {won}")
    return ran


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))
