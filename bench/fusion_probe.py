"""Fusion detected by timing (nn-Meter's kernel detection, Sec. 4.1): for a black-box target
with no per-node profile (a board through the agent, a LiteRT delegate), time A, B and
A -> B with smart padding; a pair whose joint time falls clearly below the sum is fused.

Models (:func:`pair_models`), for one configuration of a pair (A, B):

* ``A``: ``padded_model(A)`` with no activation: pad-in(A's input) -> A -> pad-out(A's output);
* ``B``: ``padded_model(B)``: pad-in(B's input) -> B -> pad-out(B's output);
* ``P``: ``padding_model`` at B's input key: pad-in(B's input) -> pad-out(B's input);
* ``AB``: pad-in(A's input) -> A -> B -> pad-out(B's output): ``padded_model(A, act=B)`` when
  B is an activation A takes fused (how the benchmark measures a fused activation, and how
  networks write it: a classifier's Gemm then its Relu, no reshape between), else
  :func:`bench.modelgen.chained_model`.

B keeps A's output shape, so ``AB`` holds exactly A's padding and ``A`` + ``B`` hold it plus
one padding pair at B's input key, which ``P`` is. So, per round,

    S = T(A) + [T(B) - T(P)] - T(AB)

is the time the pair saves by running together, padding cancelled without Eq. 4's interval
(every padding conv appears on both sides). ``T(B) - T(P)`` is B's own time; the table
reports it as T(B).

Decision (:func:`decide`). The models are timed in ``rounds`` randomised interleaved rounds
(every model once per round, in a new order each round: a slow spell of a shared VM hits all
four alike), and S is formed within each round. With ``s`` the median of the rounds' S,
``sigma`` their robust spread (1.4826 MAD) and ``margin = t(0.975, n-1) sigma / sqrt(n)``,
a configuration is

* ``fused`` when ``s - margin > ALPHA * T(B)``,
* ``not fused`` when ``s + margin < ALPHA * T(B)``,
* ``undecided`` otherwise (the rounds disagree more than the saving tells apart), and when
  B's own time is not above zero (it drowns in the padding).

``ALPHA = 0.5`` is nn-Meter's coefficient (their Inequation 1 with min(T_A, T_B) = T_B, B
the cheap one here): fused when more than half of B's time vanishes. Not zero: ONNX Runtime
applies most fused activations as a pass over a convolution's output while it is in cache,
which saves part of B, and a saving that small (0.1-0.4 of T(B)) is in the noise of a VM
whose adjacent measurements move +-20 %. On that VM (1 thread, 9 rounds, 45 pairs x 3
sizes) the median margin was 2.0 of T(B) for B under 5 us, 0.57 for 5-20 us, 0.29-0.40 for
20-100 us and 0.18 above: a B of a few microseconds beside A is undecided, as it should be.

A negative saving (the chain slower than its parts) is data, not fusion: in A -> B, B reads
A's signed output, alone it reads a padding conv's ReLU output. PReLU after a convolution
(171 against 48 us per node) and a Softmax of unscaled attention scores (128 against 59 us,
and the padding conv reading its near one-hot output 58 against 13 us) show it; both are
rightly not fused.

A pair's verdict over its configurations (:func:`pair_verdict`): all decided ones agree ->
that; they disagree -> ``partly fused``; none decided -> ``undecided``. Rules written from it
(:func:`rules_from`): an activation that is fused or partly fused folds into the producer;
one that is not fused does not; an undecided pair keeps the profile's rule. Splitting a fused
pair charges the saved time to the estimate; splitting one that is not fused lets the
standalone activation's rows, which cover every kind, estimate B, where a folded kind is
estimated from the producer's rows with that ``act`` only. Where some configurations fuse and
others do not, folding wins: the folded layer's rows are measured with the activation, one
kernel or two.

"Fused" here means time saved, not one kernel in the graph: ONNX Runtime folds a Clip
(ReLU6) into a depthwise convolution's NCHWc kernel, yet applies it as a pass of its own over
the output, and the pair times as the sum of its parts.
Pairs that are not producer + activation (matmul + softmax, add + layernorm) have no rule in
:class:`estimator.fusion.FusionRules`; their evidence is recorded only.

Caveat, smart padding's row layout: token tensors are padded as ``(1, rows, 1, c)``
(:func:`estimator.layers.registry.rows_of`). ONNX Runtime's SkipLayerNormalization fusion
wants 3-D input, so add + layernorm times as not fused here although an Add of two token
tensors with one consumer fuses on 3-D tensors (``docs/layer-types.md``, "Fusion on ONNX
Runtime").
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Sequence

from estimator.layers import ACTIVATION_KINDS, SPECS

from .modelgen import ModelIR, chained_model, padded_model, padding_keys, padding_model
from .runners.base import Runner, RunnerError
from .smartpad import render_model

__all__ = ["ALPHA", "SIZES", "Pair", "ConfigResult", "PairResult", "candidate_pairs", "select_pairs", "pair_models",
           "decide", "pair_verdict", "probe", "rules_from", "detected_block"]

#: nn-Meter's alpha: fused when the saving exceeds this share of B's own time (module docstring)
ALPHA = 0.5
#: configuration sizes, smallest first
SIZES = ("small", "medium", "large")
#: activation kinds a benchmark model renders (``other`` has no operator)
KINDS = tuple(k for k in ACTIVATION_KINDS if k != "other")


@dataclass(frozen=True)
class Pair:
    """A candidate fusion: producer type ``a`` then consumer type ``b`` (``kind``: the
    activation kind when ``b`` is ``activation``), at configurations per size: ``(A's raw
    params, B's raw params)``. ``rule``: the (producer, kind) a verdict writes, or None."""

    name: str
    a: str
    b: str
    configs: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]]
    kind: str | None = None

    @property
    def rule(self) -> tuple[str, str] | None:
        return (self.a, self.kind) if self.kind and SPECS[self.a].takes_act else None


def _act_pair(producer: str, kind: str, outs: Mapping[str, Mapping[str, Any]],
              shapes: Mapping[str, tuple[int, int, int]]) -> Pair:
    """``producer`` + activation ``kind``; ``shapes``: B's (h, w, c) per size (A's output)."""
    cfgs = {size: ({**p, "act": "none"}, {"h": shapes[size][0], "w": shapes[size][1], "c": shapes[size][2],
                                          "kind": kind}) for size, p in outs.items()}
    return Pair(f"{producer}+{kind}", producer, "activation", cfgs, kind)


def candidate_pairs() -> list[Pair]:
    """The pairs ``bench fusion`` tests by default.

    * conv2d, dwconv2d and fc followed by every activation kind (:data:`KINDS`, GELU, SiLU and
      HardSwish included): the types whose fused activation the estimator folds. Sizes are
      chosen so that B is not lost beside A: 1x1 convolutions with few channels and depthwise
      3x3s (A about 1-6 times B), fc as a classifier (one row, small: its activation is
      0.01-0.1 of the Gemm on a CPU, so it is mostly undecided, and matters as little) and over
      token rows with a short reduction (medium, large: a transformer's MLP, where GELU and SiLU
      live; with c_in 192 the Gemm is 20 times a ReLU and buries it in its noise);
    * add + relu (ResNet's residual, and over token rows);
    * matmul + softmax (attention scores: ``(heads, tokens, tokens)``);
    * add + layernorm (a residual sum then LayerNorm: SkipLayerNormalization; see the caveat
      in the module docstring).
    """
    conv = {"small": dict(h=28, w=28, c_in=16, c_out=16, k_h=1, k_w=1),
            "medium": dict(h=56, w=56, c_in=24, c_out=24, k_h=1, k_w=1),
            "large": dict(h=56, w=56, c_in=64, c_out=64, k_h=1, k_w=1)}
    conv_out = {"small": (28, 28, 16), "medium": (56, 56, 24), "large": (56, 56, 64)}
    dw = {"small": dict(h=28, w=28, c=32, k_h=3, k_w=3), "medium": dict(h=56, w=56, c=32, k_h=3, k_w=3),
          "large": dict(h=56, w=56, c=96, k_h=3, k_w=3)}
    dw_out = {"small": (28, 28, 32), "medium": (56, 56, 32), "large": (56, 56, 96)}
    fc = {"small": dict(c_in=64, c_out=2048), "medium": dict(m=49, c_in=32, c_out=384),
          "large": dict(m=197, c_in=64, c_out=768)}
    fc_out = {"small": (1, 1, 2048), "medium": (1, 384, 49), "large": (1, 768, 197)}
    pairs = []
    for producer, outs, shapes in (("conv2d", conv, conv_out), ("dwconv2d", dw, dw_out), ("fc", fc, fc_out)):
        pairs += [_act_pair(producer, k, outs, shapes) for k in KINDS]
    add = {"small": dict(h=28, w=28, c=32), "medium": dict(h=56, w=56, c=32), "large": dict(h=1, w=192, c=197)}
    pairs.append(_act_pair("add", "relu", add, {s: (p["h"], p["w"], p["c"]) for s, p in add.items()}))
    mm = {"small": (3, 49, 32), "medium": (3, 197, 64), "large": (6, 197, 64)}  # heads, tokens, head dim
    pairs.append(Pair("matmul+softmax", "matmul", "softmax", {
        s: (dict(b=b, m=t, k=d, n_cols=t, act="none"), dict(c=b, h=t, w=t, axis_len=t))
        for s, (b, t, d) in mm.items()}))
    ln = {"small": (49, 96), "medium": (197, 192), "large": (197, 384)}  # tokens, width
    pairs.append(Pair("add+layernorm", "add", "layernorm", {
        s: (dict(h=1, w=c, c=t, act="none"), dict(rows=t, c=c)) for s, (t, c) in ln.items()}))
    return pairs


def select_pairs(pairs: Sequence[Pair], spec: str | None) -> list[Pair]:
    """``--pairs``: comma-separated names, each exact or a ``*`` wildcard (``conv2d+*``,
    ``*+gelu``); ValueError naming what matched nothing."""
    if not spec:
        return list(pairs)
    import fnmatch  # noqa: PLC0415

    pats = [p.strip() for p in spec.split(",") if p.strip()]
    bad = [p for p in pats if not any(fnmatch.fnmatchcase(x.name, p) for x in pairs)]
    if bad or not pats:
        raise ValueError(f"no candidate pair matches {', '.join(map(repr, bad or [spec]))}; pairs are "
                         f"PRODUCER+CONSUMER, e.g. conv2d+relu, fc+gelu, matmul+softmax, add+layernorm "
                         f"(wildcards: conv2d+*)")
    return [x for x in pairs if any(fnmatch.fnmatchcase(x.name, p) for p in pats)]


def pair_models(pair: Pair, size: str) -> dict[str, ModelIR]:
    """The four models of one configuration: ``A``, ``B``, ``P`` (B's input padding pair) and
    ``AB`` (module docstring)."""
    pa, pb = pair.configs[size]
    a = padded_model(pair.a, pa)
    if pair.rule:
        ab = padded_model(pair.a, {**pa, "act": pair.kind})
    else:
        ab = chained_model((pair.a, pa), (pair.b, pb))
    keys = padding_keys(pair.b, pb)
    if len(keys.inputs) != 1:
        raise ValueError(f"{pair.name}: B must read one tensor")
    return {"A": a, "B": padded_model(pair.b, pb), "P": padding_model(*keys.inputs[0]), "AB": ab}


def renders(pair: Pair, size: str, model_format: str) -> bool:
    """Whether every model of the configuration renders to ``model_format``."""
    pa, pb = pair.configs[size]
    return SPECS[pair.a].renders(pa, model_format) and SPECS[pair.b].renders(pb, model_format)


# ------------------------------------------------------------------------------ decision


def _t975(df: int) -> float:
    """Student's t 0.975 quantile (two-sided 95 %)."""
    from scipy.stats import t  # noqa: PLC0415

    return float(t.ppf(0.975, df))


@dataclass
class ConfigResult:
    """One configuration of a pair: medians over rounds (ms), the saving and the verdict."""

    pair: str
    size: str
    t_a: float = math.nan
    t_b: float = math.nan  # B's own time: T(B) - T(P)
    t_ab: float = math.nan
    saving_ms: float = math.nan
    margin_ms: float = math.nan
    verdict: str = "undecided"
    rounds: int = 0
    error: str = ""

    @property
    def saving(self) -> float:
        """The saving as a fraction of B's own time."""
        return self.saving_ms / self.t_b if self.t_b > 0 else math.nan

    @property
    def spread(self) -> float:
        """The margin as a fraction of B's own time."""
        return self.margin_ms / self.t_b if self.t_b > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        r = (lambda v: None if math.isnan(v) else round(v, 5))
        d = {"size": self.size, "verdict": self.verdict, "t_a_ms": r(self.t_a), "t_b_ms": r(self.t_b),
             "t_ab_ms": r(self.t_ab), "saving": r(self.saving), "spread": r(self.spread), "rounds": self.rounds}
        if self.error:
            d["error"] = self.error
        return d


def decide(pair: str, size: str, rounds: Mapping[str, Sequence[float]], alpha: float = ALPHA) -> ConfigResult:
    """The verdict of one configuration from its per-round times (ms) of ``A``, ``B``, ``P``
    and ``AB`` (equal-length lists, round i of each taken in the same round)."""
    n = min(len(rounds[k]) for k in ("A", "B", "P", "AB"))
    res = ConfigResult(pair, size, rounds=n)
    if n == 0:
        res.error = "not timed"
        return res
    a, b, p, ab = ([float(x) for x in rounds[k][:n]] for k in ("A", "B", "P", "AB"))
    own_b = [b[i] - p[i] for i in range(n)]
    s = [a[i] + own_b[i] - ab[i] for i in range(n)]
    res.t_a, res.t_b, res.t_ab = statistics.median(a), statistics.median(own_b), statistics.median(ab)
    res.saving_ms = statistics.median(s)
    if n < 2:
        res.margin_ms = math.inf
    else:
        sigma = 1.4826 * statistics.median(abs(x - res.saving_ms) for x in s)
        res.margin_ms = _t975(n - 1) * sigma / math.sqrt(n)
    if not res.t_b > 0:
        res.error = "B's own time is not above its padding's"
    elif res.saving_ms - res.margin_ms > alpha * res.t_b:
        res.verdict = "fused"
    elif res.saving_ms + res.margin_ms < alpha * res.t_b:
        res.verdict = "not fused"
    return res


def pair_verdict(configs: Sequence[ConfigResult]) -> str:
    """A pair's verdict over its configurations (module docstring)."""
    decided = {c.verdict for c in configs if c.verdict != "undecided"}
    if not decided:
        return "undecided"
    return decided.pop() if len(decided) == 1 else "partly fused"


@dataclass
class PairResult:
    pair: Pair
    configs: list[ConfigResult] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return pair_verdict(self.configs)


# ------------------------------------------------------------------------------- timing


def probe(runner: Runner, pairs: Sequence[Pair], *, sizes: Sequence[str] = SIZES, rounds: int = 9, runs: int = 20,
          warmup: int = 5, seed: int = 0, precision: str | None = None,
          progress: Callable[[int, int], None] | None = None) -> list[PairResult]:
    """Time every configuration's models on ``runner`` in ``rounds`` randomised interleaved
    rounds and decide each (:func:`decide`). Models shared by several pairs (A alone, a
    padding pair) are prepared and timed once per round. A configuration that does not render
    to the runner's format, or that the runner cannot prepare or run, is reported with its
    error and undecided."""
    fmt = runner.model_format
    plan: list[tuple[PairResult, str, dict[str, str] | str]] = []  # (pair, size, role -> model key | error)
    models: dict[str, ModelIR] = {}
    results = [PairResult(p) for p in pairs]
    for pr in results:
        for size in (s for s in sizes if s in pr.pair.configs):
            if not renders(pr.pair, size, fmt):
                plan.append((pr, size, f"does not render to {fmt} models"))
                continue
            keys = {}
            for role, ir in pair_models(pr.pair, size).items():
                models.setdefault(ir.name, ir)
                keys[role] = ir.name
            plan.append((pr, size, keys))
    prepared: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for key, ir in models.items():
        try:
            prep = runner.prepare(render_model(ir, fmt, 0, precision))
            info = prep.info if isinstance(prep.info, dict) else {}
            if info.get("estimate_excludes_cpu_ops"):
                raise RunnerError("operator(s) placed on the CPU, which the runner's estimate excludes")
            prepared[key] = prep
        except (RunnerError, ValueError) as e:
            failed[key] = str(e).splitlines()[0] if str(e) else type(e).__name__
    times: dict[str, list[float]] = {k: [] for k in prepared}
    rng = random.Random(seed)
    order = list(prepared)
    total, done = rounds * len(order), 0
    for _ in range(rounds):
        rng.shuffle(order)
        for key in order:
            if key not in failed:
                try:
                    times[key].append(runner.time(prepared[key], warmup=warmup, runs=runs).median_ms)
                except RunnerError as e:
                    failed[key] = str(e).splitlines()[0] if str(e) else "RunnerError"
            done += 1
            if progress:
                progress(done, total)
    prepared.clear()
    for pr, size, keys in plan:
        if isinstance(keys, str):
            pr.configs.append(ConfigResult(pr.pair.name, size, error=keys))
            continue
        bad = [f"{role}: {failed[k]}" for role, k in keys.items() if k in failed]
        if bad:
            pr.configs.append(ConfigResult(pr.pair.name, size, error="; ".join(bad)))
        else:
            pr.configs.append(decide(pr.pair.name, size, {role: times[k] for role, k in keys.items()}))
    return results


# -------------------------------------------------------------------------------- rules


def rules_from(results: Sequence[PairResult], current: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``current`` fusion rules (:meth:`estimator.fusion.FusionRules.to_dict` form) updated by
    the decided producer + activation verdicts; returns the new rules and one line per change."""
    acts = {p: set(k) for p, k in dict(current.get("activations") or {}).items()}
    changes = []
    for r in results:
        rule, v = r.pair.rule, r.verdict
        if rule is None or v == "undecided":
            continue
        producer, kind = rule
        had = kind in acts.get(producer, set())
        if v in ("fused", "partly fused") and not had:
            acts.setdefault(producer, set()).add(kind)
            changes.append(f"{producer}: {kind} folds ({v})")
        elif v == "not fused" and had:
            acts[producer].discard(kind)
            changes.append(f"{producer}: {kind} no longer folds (not fused)")
    out = dict(current)
    out["activations"] = {p: sorted(k) for p, k in sorted(acts.items())}
    return out, changes


def detected_block(results: Sequence[PairResult], *, runner: str, options: Mapping[str, Any],
                   environment: Mapping[str, Any], rounds: int, runs: int, warmup: int,
                   sizes: Sequence[str]) -> dict[str, Any]:
    """The evidence written beside the rules (``fusion.detected`` of ``profile.json``)."""
    versions = environment.get("versions") or {}
    return {
        "method": f"timed A, B and A->B with smart padding (bench fusion): fused when the saving exceeds "
                  f"{ALPHA:g} x T(B) by more than the rounds' 95 % margin; {rounds} interleaved rounds of "
                  f"{warmup} + {runs} runs, runner {runner}",
        "runner": runner,
        "runner_options": dict(options),
        "versions": {str(k): str(v) for k, v in versions.items()},
        "host": str((environment.get("host") or {}).get("cpu_model", "")),
        "rounds": rounds, "runs": runs, "warmup": warmup, "alpha": ALPHA, "sizes": list(sizes),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "pairs": {r.pair.name: {"verdict": r.verdict, "configs": [c.to_dict() for c in r.configs]}
                  for r in results},
    }
