"""The sampling plan: which layer configurations ``bench run`` measures.

For each benchable layer type, random raw parameters are drawn from the type's space
(below), invalid or over-limit ones are rejected, and the survivors are **balanced across
the operation count** (Sec. III-B: "sub-sampled randomly and then balanced across the
FLOPs dimension"):

1. draw a candidate pool of ``pool_factor x samples`` valid, distinct configurations;
2. split ``log10(ops)`` (``estimator.layers.describe(...).ops``: FLOPs for conv/fc,
   window-ops for pools, elements for element-wise types) over the pool's range into
   ``bins`` equal-width bins;
3. take the same number of configurations from each bin (``samples / bins``, rounded
   so the total is ``samples``), at random; a bin with too few candidates gives all it
   has and the remainder is spread over the other bins the same way.

So small layers (dominated by fixed overheads) and large ones (compute or bandwidth
bound) are equally represented, instead of the random draw's natural pile-up.

Limits (:class:`Limits`) keep a run finite and each model loadable on the device: a cap
on ops per layer, on elements of any LUM input or output tensor, and on weights. They are
per device class (:data:`DEFAULT_LIMITS`, chosen by runner name) and overridable
(``bench run --max-ops``). The raw space itself is the paper's: h, w <= 1024, kernels
<= 11, strides 1-2 (asymmetric kernels and strides included), channels up to 2048 (fc up
to 4096), which covers ResNet (2048-channel 1x1 convs, 7x7/2 stem, 3x3/2 maxpool,
fc 2048->1000), MobileNetV2/V3 and EfficientNet (depthwise 3x3/5x5 with stride 2,
SE-style broadcast mul, hardswish/silu, 1280-channel heads), Inception (1x7/7x1) and
YOLO-style detectors (640x640 inputs, 5x5/1 SPPF maxpools, 4-way concats, nearest x2
upsampling).

**The network prior.** FLOPs-balanced draws from that broad space put few samples where
real CNNs live (a broad draw is rarely a square 3x3 conv on 56x56x64), and the layer
models' error there is what network estimates inherit. So a plan adds, per type,
``prior_samples`` configurations drawn from a *network prior* (``prior=True`` in the
draws below): square inputs from the resolutions CNNs use (7..320, the ladder a 224 or
320 input is divided down to, plus YOLO-style 10/20/40/80), channels that are multiples
of 8 (3 for stems), square kernels 1/3/5/7 (1xk/kx1 now and then), strides 1/2, SAME
padding, and the type-specific shapes of real blocks (3x3/2 and 5x5/1 max pools, SE-style
broadcast mul, x2 nearest upsampling), with the fused activations networks use (ReLU,
ReLU6, none, ...: ``act``), RegNet/ResNeXt-style grouped convolutions and, for a
share of the convolutions, channel counts off the multiple-of-8 ladder (ShuffleNetV2's 58,
pruned networks; :func:`_prior_variants`). They are *not* FLOPs-balanced: the point is the
prior's own density (balancing would turn the rare 7x7 depthwise and 3-channel stems into
a third of the draws). They come from their own generator, so the broad part of a plan is
unchanged by them (a database
measured with ``prior_samples=0`` is resumed, not redone). The prior lies inside the
broad space, so :func:`in_space` is the same for both.

Everything is seeded: the plan for ``(types, samples, prior_samples, seed, limits)`` is identical on
every run (that is what lets ``bench run`` resume). Each type draws from its own
generator (seeded by ``seed`` and the type name), so adding a type to ``--layers`` does
not change the others' configurations. Configurations are deduplicated by
:func:`config_key`, a stable hash of the type and the canonical JSON of the raw params.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from estimator.errors import UserError
from estimator.layers import SAMPLED_TYPES, SPECS, LayerSpecError, describe
from estimator.layers.params import same_pads
from estimator.layers.space import PRIOR_C as _PRIOR_C
from estimator.layers.space import PRIOR_HW as _PRIOR_HW
from estimator.layers.space import SPACE_MAX

from .modelgen import lum_io_shapes

__all__ = ["Config", "Limits", "DEFAULT_LIMITS", "limits_for", "config_key", "canonical_params",
           "sample_type", "make_plan", "in_space", "neighbours", "SPACE_MAX", "SAMPLED_TYPES"]


@dataclass(frozen=True)
class Limits:
    """Caps on one configuration: ``max_ops`` (describe().ops), ``max_elems`` (elements of
    any LUM input/output tensor), ``max_params`` (weights)."""

    max_ops: float = 2e9
    max_elems: int = 1 << 24
    max_params: int = 1 << 24

    def to_dict(self) -> dict[str, float]:
        return {"max_ops": float(self.max_ops), "max_elems": int(self.max_elems), "max_params": int(self.max_params)}


#: Limits per runner (device class). CPUs: ~2 GFLOP per layer is ~0.1 s at a few
#: GFLOP/s single-threaded; MCU-class NPUs (Ethos-U via vela/litert) have little SRAM.
DEFAULT_LIMITS: dict[str, Limits] = {
    "onnxruntime": Limits(2e9, 1 << 24, 1 << 24),
    "litert": Limits(1e9, 1 << 22, 1 << 22),
    "vela": Limits(5e8, 1 << 20, 1 << 21),
    "tensorrt": Limits(2e10, 1 << 25, 1 << 25),
    "agent": Limits(1e9, 1 << 22, 1 << 22),
}

def limits_for(runner: str, *, max_ops: float | None = None, max_elems: int | None = None,
               max_params: int | None = None) -> Limits:
    """The runner's default limits, with the given caps overridden."""
    lim = DEFAULT_LIMITS.get(runner, Limits())
    return Limits(lim.max_ops if max_ops is None else float(max_ops),
                  lim.max_elems if max_elems is None else int(max_elems),
                  lim.max_params if max_params is None else int(max_params))


def canonical_params(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"))


def config_key(layer_type: str, params: Mapping[str, Any]) -> str:
    """Stable id of a configuration: sha256 of the type and canonical params (16 hex)."""
    return hashlib.sha256(f"{layer_type}|{canonical_params(params)}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Config:
    layer_type: str
    params: dict[str, Any] = field(hash=False)
    key: str = ""
    ops: float = 0.0

    @classmethod
    def make(cls, layer_type: str, params: Mapping[str, Any]) -> "Config":
        p = dict(params)
        return cls(layer_type, p, config_key(layer_type, p), float(describe(layer_type, p).ops))


# ------------------------------------------------------------- network prior variants


def _unit_hash(layer_type: str, params: Mapping[str, Any], salt: str) -> float:
    """A uniform number in [0, 1) fixed by the configuration."""
    h = hashlib.sha256(f"{salt}|{layer_type}|{canonical_params(params)}".encode()).digest()
    return int.from_bytes(h[:8], "little") / 2.0**64


def _prior_variants(layer_type: str, p: dict[str, Any]) -> dict[str, Any]:
    """The prior's type-specific variants (off-ladder channel counts, groups:
    :meth:`~estimator.layers.registry.LayerTypeSpec.prior_variant`) and fused activation
    (:attr:`~estimator.layers.registry.LayerTypeSpec.prior_acts`), chosen by a hash of the
    drawn configuration instead of the generator, so that adding them left the other draws
    (and configurations measured before) unchanged: a configuration that keeps its drawn
    channels, the LUM's default activation and no groups has the key it had without this
    step. Kernels differ by fused activation (ONNX Runtime fuses ReLU into its convolution
    kernels but applies Clip/ReLU6 as a second pass: 40 % slower depthwise convs), and
    networks use more than ReLU."""
    spec = SPECS[layer_type]
    p = spec.prior_variant(dict(p), lambda q, salt: _unit_hash(layer_type, q, salt))
    acts = spec.prior_acts
    if acts:
        u, acc = _unit_hash(layer_type, p, "act"), 0.0
        for i, (a, w) in enumerate(acts):
            acc += w
            if u < acc or i == len(acts) - 1:
                if i:
                    p["act"] = a if a is not None else "none"
                break
    return p


def limit_reason(layer_type: str, params: Mapping[str, Any], lim: Limits) -> str | None:
    """Why a configuration cannot be measured: ``"invalid"`` (the vocabulary or the padded
    model cannot describe it), ``"limits"`` (ops, weights or a LUM tensor over ``lim``), or None."""
    try:
        counts = describe(layer_type, params)
        ins, out = lum_io_shapes(layer_type, params)
    except LayerSpecError:
        return "invalid"
    if counts.ops > lim.max_ops or counts.params > lim.max_params or counts.ops < 1:
        return "limits"
    if any(math.prod(s) > lim.max_elems for s in (*ins, out)):
        return "limits"
    return None


def _within(layer_type: str, params: Mapping[str, Any], lim: Limits) -> Config | None:
    """The configuration if it is valid, benchable, inside the space and within limits."""
    if limit_reason(layer_type, params, lim) is not None:
        return None
    ins, out = lum_io_shapes(layer_type, params)
    if not SPECS[layer_type].in_ranges(params, ins, out):
        return None
    p = dict(params)
    return Config(layer_type, p, config_key(layer_type, p), float(describe(layer_type, p).ops))


def in_space(layer_type: str, params: Mapping[str, Any], limits: Limits = Limits()) -> bool:
    """Whether a configuration lies inside the sampled space: valid and benchable, within
    :data:`SPACE_MAX` (h, w, kernels, strides, channels, dilation) and within ``limits``."""
    return _within(layer_type, params, limits) is not None


def _type_rng(seed: int, layer_type: str, prior: bool = False) -> np.random.Generator:
    name = f"sampling:{layer_type}" + (":prior" if prior else "")
    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return np.random.default_rng([int(seed), h])


def sample_type(layer_type: str, samples: int, *, seed: int = 0, limits: Limits = Limits(), bins: int = 10,
                pool_factor: int = 10, prior: bool = False, model_format: str | None = None) -> list[Config]:
    """``samples`` distinct configurations of one type, balanced across log10(ops), from the
    broad space or (``prior=True``) from the network prior."""
    if layer_type not in SAMPLED_TYPES:
        raise LayerSpecError(f"no sampler for layer type {layer_type!r}; sampled types: {', '.join(SAMPLED_TYPES)}")
    if samples < 1:
        return []
    r = _type_rng(seed, layer_type, prior)
    want = samples * pool_factor
    if bins > 1:  # balancing needs a pool to choose from, even for a few samples
        want = max(want, 200)
    pool: dict[str, Config] = {}
    attempts = 0
    max_attempts = want * 50
    while len(pool) < want and attempts < max_attempts:
        attempts += 1
        raw = SPECS[layer_type].draw(r, prior)
        cfg = _within(layer_type, _prior_variants(layer_type, raw) if prior else raw, limits)
        if cfg is not None and model_format is not None and not SPECS[layer_type].renders(cfg.params, model_format):
            continue
        if cfg is not None and cfg.key not in pool:
            pool[cfg.key] = cfg
    cands = list(pool.values())
    if len(cands) <= samples:
        return cands
    logops = np.log10(np.array([c.ops for c in cands]))
    lo, hi = float(logops.min()), float(logops.max())
    width = (hi - lo) / bins or 1.0
    idx = np.minimum(((logops - lo) / width).astype(int), bins - 1)
    members = [list(r.permutation(np.flatnonzero(idx == b))) for b in range(bins)]
    chosen: list[int] = []
    remaining = samples
    open_bins = [b for b in range(bins) if members[b]]
    while remaining > 0 and open_bins:
        share, extra = divmod(remaining, len(open_bins))
        # the bins that get one more are chosen at random, so no bin is favoured
        bonus = set(r.permutation(open_bins)[:extra].tolist())
        for b in open_bins:
            n = share + (1 if b in bonus else 0)
            take, members[b] = members[b][:n], members[b][n:]
            chosen += take
            remaining -= len(take)
        open_bins = [b for b in open_bins if members[b]]
    return [cands[i] for i in chosen]


def layer_types(spec: str | None, model_format: str) -> list[str]:
    """``--layers``: the types to sample (default: every type whose LUM renders to the
    runner's model format)."""
    from estimator.layers import sampled_types  # noqa: PLC0415 (the runner's format decides)

    ok = sampled_types(model_format)
    if spec is None:
        return list(ok)
    types = [t.strip() for t in spec.split(",") if t.strip()]
    if not types:
        raise UserError(f"--layers {spec!r} names no layer type; benchable: {', '.join(ok)} (leave it out for all)")
    bad = [t for t in types if t not in ok]
    if bad:
        raise UserError(f"--layers: cannot benchmark {', '.join(bad)} with {model_format} models; "
                        f"benchable: {', '.join(ok)}")
    return list(dict.fromkeys(types))


def make_plan(layer_types: Sequence[str], samples: int, *, prior_samples: int = 0, seed: int = 0,
              limits: Limits = Limits(), bins: int = 10, model_format: str | None = None) -> list[Config]:
    """The measurement plan: per type, ``samples`` configurations from the broad space
    (balanced over ``bins`` log-ops bins) and ``prior_samples`` from the network prior (at
    its own density), deduplicated, in a seeded shuffled order (so
    a partial run covers every type, and machine drift does not line up with layer size).
    With ``model_format``, only configurations whose LUM renders to it are drawn."""
    seen: dict[str, Config] = {}
    for t in layer_types:
        for prior, n in ((False, samples), (True, prior_samples)):
            # the prior at its own density: the first n distinct draws, no pool, no bins
            kw = dict(bins=1, pool_factor=1) if prior else dict(bins=bins)
            for c in sample_type(t, n, seed=seed, limits=limits, prior=prior, model_format=model_format, **kw):
                seen.setdefault(c.key, c)
    plan = list(seen.values())
    order = np.random.default_rng([int(seed), 7]).permutation(len(plan))
    return [plan[i] for i in order]


# ------------------------------------------------------------------------ neighbours

#: Raw params that are channel counts (``concat``'s ``channels`` list moves as a whole).
_CHANNEL_KEYS = ("c", "c_in", "c_out", "c_in1", "c_in2")


def _ladder_step(v: int, ladder: Sequence[int], up: bool) -> int | None:
    """The next value of ``ladder`` above (``up``) or below ``v``, or None at its end."""
    cands = [x for x in ladder if (x > v if up else x < v)]
    return (min(cands) if up else max(cands)) if cands else None


def _resized(p: Mapping[str, Any], h: int, w: int) -> dict[str, Any]:
    """``p`` at input size ``h`` x ``w``: SAME pads follow the size, fixed pads stay, a
    resize keeps its scale."""
    q = dict(p)
    q["h"], q["w"] = h, w
    if "h_out" in p:
        q["h_out"], q["w_out"] = max(1, int(p["h_out"]) * h // int(p["h"])), max(1, int(p["w_out"]) * w // int(p["w"]))
    if all(k in p for k in ("p_t", "p_l", "p_b", "p_r")) and "k_h" in p:
        k_h, k_w, s_h, s_w = (int(p[k]) for k in ("k_h", "k_w", "s_h", "s_w"))
        d_h, d_w = int(p.get("d_h") or 1), int(p.get("d_w") or 1)
        (t, b), (l, r) = same_pads(int(p["h"]), k_h, s_h, d_h), same_pads(int(p["w"]), k_w, s_w, d_w)
        if (p["p_t"], p["p_l"], p["p_b"], p["p_r"]) == (t, l, b, r) != (0, 0, 0, 0):
            (t, b), (l, r) = same_pads(h, k_h, s_h, d_h), same_pads(w, k_w, s_w, d_w)
            q.update(p_t=t, p_l=l, p_b=b, p_r=r)
    return q


def neighbours(layer_type: str, params: Mapping[str, Any], limits: Limits = Limits()) -> list[Config]:
    """The configurations one ladder step from ``params``: the spatial size one step up and
    down the network prior's feature-map sizes (:data:`_PRIOR_HW`; square sizes move
    together, SAME pads follow, a resize keeps its scale) and each channel count one step up
    and down its channel ladder (:data:`_PRIOR_C`; a grouped convolution keeps its group
    width). Only those :func:`in_space` within ``limits`` are kept, in that order, distinct
    and without ``params`` itself: what ``bench refine`` measures around a configuration
    whose estimates are uncertain."""
    p = dict(params)
    out: dict[str, Config] = {}
    own = config_key(layer_type, p)
    cands: list[dict[str, Any]] = []
    if "h" in p and "w" in p:
        h, w = int(p["h"]), int(p["w"])
        for up in (False, True):
            nh = _ladder_step(h, _PRIOR_HW, up)
            nw = nh if h == w else _ladder_step(w, _PRIOR_HW, up)
            if nh is not None and nw is not None:
                cands.append(_resized(p, nh, nw))
    for key in _CHANNEL_KEYS:
        if key not in p:
            continue
        for up in (False, True):
            c = _ladder_step(int(p[key]), _PRIOR_C, up)
            if c is None:
                continue
            q = dict(p)
            q[key] = c
            g = int(p.get("groups") or 1)
            if g > 1 and key in ("c_in", "c_out"):  # the same group width: groups follow c_in
                q["groups"] = max(1, g * int(q["c_in"]) // int(p["c_in"]))
            cands.append(q)
    if "channels" in p:
        for up in (False, True):
            chans = [_ladder_step(int(c), _PRIOR_C, up) for c in p["channels"]]
            if all(c is not None for c in chans):
                cands.append({**p, "channels": chans})
    for q in cands:
        cfg = _within(layer_type, q, limits)
        if cfg is not None and cfg.key != own:
            out.setdefault(cfg.key, cfg)
    return list(out.values())
