"""The fast evaluation path of :class:`estimator.models.DeviceModels`: the same numbers as the
reference path (scikit-learn forests, crepes difficulty estimators, one call per type),
without their per-call overhead.

What is precomputed
-------------------
The flattened forests (:class:`FlatForests`) and the k-NN data (:class:`FastKNN`) are made
at training time and stored as plain arrays in the model cache (:mod:`estimator.cache`), so a
warm start reads them without scikit-learn or crepes; the k-d trees are built from them on
first use (``scipy.spatial``), the feature-row statistics as requests come.

* **Forests.** The trees of every type's forest are flattened into four arrays shared by
  all types: split feature, threshold, index of the left child (the right child is the
  next node: nodes are renumbered breadth-first so that siblings are adjacent; a leaf is
  its own left child with threshold ``+inf``) and leaf value. A batch of layers of several
  types is evaluated in one vectorised walk over (layer, tree) lanes, ``depth`` steps of
  ``node = left[node] + (x[feature[node]] > threshold[node])``, with finished lanes dropped
  as they reach leaves. The comparison is scikit-learn's: features cast to float32, then
  compared in float64 against the float64 threshold (``x <= t`` goes left), so every
  tree's prediction is bit for bit the tree's own ``predict``. Large batches walk in blocks
  of trees and rows (:data:`WALK_LANES` lanes), whose nodes stay in cache: 10,000 layer
  variants on host-cpu take 0.63-0.66 s against 0.61-0.62 s with the trees' compiled
  ``predict``, which needs scikit-learn's objects (walked in one block: 0.41 against 0.28 s
  in a quieter window).
* **k-NN difficulty (CM_O).** The min-max scaling is applied as crepes/scikit-learn apply
  it (``X * scale_ + min_``, clipping off) and the neighbours come from a k-d tree over
  the scaled training matrix ``NearestNeighbors`` holds: the same neighbours and the same
  distances as ``DifficultyEstimator.apply``, without the estimator's input validation
  and joblib dispatch.
* **Feature rows.** The per-row statistics above are kept per ``(type, feature row)``
  (:class:`FastModels`, bounded; see :meth:`FastModels._compute_rows` for the one bit of
  batch context in the key), so a layer configuration seen before is not evaluated again;
  the per-layer arithmetic then runs once over all modelled layers.
* **Conformal parts.** Unchanged arithmetic (:func:`estimator.conformal.sigmas`) on the same
  inputs; the per-layer intervals come from :func:`estimator.aggregate.layer_intervals`
  (crepes' ``predict_int`` arithmetic, vectorised over the batch). The network-level Monte
  Carlo draws come from a :class:`~estimator.aggregate.SampleBank` (kept sample-slot
  blocks; see :mod:`estimator.aggregate`).

``tests/test_fastpath.py`` checks fast == reference (1e-9 relative; in practice equal but
for the last bit: the reference averages the trees in scikit-learn's ``forest.predict``
and sums the Monte Carlo draws in another order).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Mapping, Sequence

import numpy as np

from .aggregate import DistBatch
from .conformal import METRICS, BatchPrediction, sigmas
from .layers import Layer

__all__ = ["FlatForests", "FastKNN", "FastModels", "ROW_CACHE_SIZE", "WALK_LANES"]

#: (tree, row) lanes walked together (see :meth:`FlatForests.tree_predictions`).
WALK_LANES = 1 << 15
#: Feature rows whose statistics :class:`FastModels` keeps (about 300 bytes each).
ROW_CACHE_SIZE = 1 << 16
_LEAF = -1
_FEATURE_BITS = 8


def _flatten_tree(tree: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """One sklearn tree -> (feature, threshold, left, value, depth), breadth-first numbered."""
    cl = np.asarray(tree.children_left, dtype=np.intp)
    cr = np.asarray(tree.children_right, dtype=np.intp)
    n = int(tree.node_count)
    new_id = np.empty(n, dtype=np.intp)
    new_id[0] = 0
    order = [np.zeros(1, dtype=np.intp)]
    frontier = order[0]
    nxt = 1
    depth = 0
    while True:
        internal = frontier[cl[frontier] != _LEAF]
        if internal.size == 0:
            break
        kids = np.empty(2 * internal.size, dtype=np.intp)
        kids[0::2] = cl[internal]
        kids[1::2] = cr[internal]
        new_id[kids] = nxt + np.arange(kids.size)
        nxt += kids.size
        order.append(kids)
        frontier = kids
        depth += 1
    old = np.concatenate(order)
    if old.size != n:
        raise ValueError("unreachable nodes in a tree")
    leaf = cl[old] == _LEAF
    here = np.arange(n, dtype=np.intp)
    left = np.where(leaf, here, new_id[np.where(leaf, 0, cl[old])])
    feature = np.where(leaf, 0, np.asarray(tree.feature, dtype=np.intp)[old])
    threshold = np.where(leaf, np.inf, np.asarray(tree.threshold, dtype=np.float64)[old])
    value = np.asarray(tree.value, dtype=np.float64).reshape(n, -1)[old, 0]
    return feature, threshold, left, value, depth


class FlatForests:
    """The trees of several forests in flat arrays, evaluated together (see module docstring).

    ``nodes`` (complex128, one record per node) and ``value`` hold every tree of every type;
    ``roots[type]`` are the indices of a type's tree roots, ``depth[type]`` its deepest leaf.
    :meth:`from_forests` flattens fitted scikit-learn forests (at training time); the arrays
    are what the model cache stores (:meth:`arrays`, :meth:`from_arrays`)."""

    def __init__(self, nodes: np.ndarray, value: np.ndarray, roots: Mapping[str, np.ndarray],
                 depth: Mapping[str, int]) -> None:
        self.nodes = np.asarray(nodes, dtype=np.complex128)
        self.value = np.asarray(value, dtype=np.float64)
        self.roots = {t: np.asarray(r, dtype=np.intp) for t, r in roots.items()}
        self.depth = {t: int(d) for t, d in depth.items()}
        for a in (self.value, self.nodes):
            a.setflags(write=False)

    @classmethod
    def from_forests(cls, forests: Mapping[str, Any]) -> "FlatForests":
        feats, thrs, lefts, vals = [], [], [], []
        roots: dict[str, np.ndarray] = {}
        depths: dict[str, int] = {}
        off = 0
        for name, forest in forests.items():
            rts, depth = [], 0
            for est in forest.estimators_:
                f, t, l, v, d = _flatten_tree(est.tree_)
                feats.append(f)
                thrs.append(t)
                lefts.append(l + off)
                vals.append(v)
                rts.append(off)
                off += f.size
                depth = max(depth, d)
            roots[name] = np.asarray(rts, dtype=np.intp)
            depths[name] = depth
        cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt))
        feature = cat(feats, np.int64)
        threshold = cat(thrs, np.float64)
        left = cat(lefts, np.int64)
        if feature.size and (int(feature.max()) >= 1 << _FEATURE_BITS or int(left.max()) >= 1 << (62 - _FEATURE_BITS)):
            raise ValueError("forest too large to flatten")
        # One 16-byte record per node, fetched with one gather: the threshold (real part)
        # and left child << _FEATURE_BITS | feature (imaginary part, as int64 bits).
        nodes = np.empty(feature.size, dtype=np.complex128)
        nodes.real = threshold
        nodes.imag = ((left << _FEATURE_BITS) | feature).view(np.float64)
        return cls(nodes, cat(vals, np.float64), roots, depths)

    @classmethod
    def concat(cls, parts: Sequence["FlatForests"]) -> "FlatForests":
        """The forests of ``parts`` (distinct types) in one set, bit for bit what
        :meth:`from_forests` makes of all their forests at once (the model cache assembles a
        model set from per-type entries this way)."""
        nodes, values, roots, depths = [], [], {}, {}
        off = 0
        for part in parts:
            bits = np.ascontiguousarray(part.nodes.imag).view(np.int64)
            left = (bits >> _FEATURE_BITS) + off
            if part.nodes.size and int(left.max()) >= 1 << (62 - _FEATURE_BITS):
                raise ValueError("forest too large to flatten")
            n = np.empty(part.nodes.size, dtype=np.complex128)
            n.real = part.nodes.real
            n.imag = ((left << _FEATURE_BITS) | (bits & ((1 << _FEATURE_BITS) - 1))).view(np.float64)
            nodes.append(n)
            values.append(part.value)
            for t, r in part.roots.items():
                if t in roots:
                    raise ValueError(f"type {t!r} in two parts")
                roots[t] = r + off
                depths[t] = part.depth[t]
            off += part.nodes.size
        cat = (lambda xs, dt: np.concatenate(xs).astype(dt, copy=False) if xs else np.zeros(0, dtype=dt))
        return cls(cat(nodes, np.complex128), cat(values, np.float64), roots, depths)

    def arrays(self, prefix: str = "forest.") -> dict[str, np.ndarray]:
        """Plain arrays (for the model cache); :meth:`from_arrays` reads them back."""
        out = {prefix + "nodes": self.nodes, prefix + "value": self.value}
        for t, r in self.roots.items():
            out[f"{prefix}roots.{t}"] = r.astype(np.int64)
        out[prefix + "depth"] = np.array(list(self.depth.values()), dtype=np.int64)
        out[prefix + "types"] = np.array(list(self.depth), dtype=str)
        return out

    @classmethod
    def from_arrays(cls, a: Mapping[str, np.ndarray], prefix: str = "forest.") -> "FlatForests":
        types = [str(t) for t in a[prefix + "types"].tolist()]
        return cls(a[prefix + "nodes"], a[prefix + "value"], {t: a[f"{prefix}roots.{t}"] for t in types},
                   dict(zip(types, a[prefix + "depth"].tolist())))

    @property
    def n_nodes(self) -> int:
        return int(self.nodes.size)

    def tree_predictions(self, parts: Sequence[tuple[str, np.ndarray]]) -> list[np.ndarray]:
        """Per part ``(name, X)``: every tree's prediction, shape ``(n_trees, m)``, exactly
        what ``np.stack([tree.predict(X) for tree in forest])`` gives. Parts are walked
        together in groups of at most :data:`WALK_LANES` (tree, row) lanes; a larger part in
        blocks of trees and rows of about that size."""
        out: list[np.ndarray | None] = [None] * len(parts)
        group: list[tuple[int, np.ndarray, int, np.ndarray]] = []
        lanes = 0

        def flush() -> None:
            if group:
                for (i, *_), P in zip(group, self._walk([g[1:] for g in group])):
                    out[i] = P
                group.clear()

        for i, (name, X) in enumerate(parts):
            X32 = np.ascontiguousarray(X, dtype=np.float32)
            roots, depth, m = self.roots[name], self.depth[name], X32.shape[0]
            n = roots.size * m
            if n <= WALK_LANES:
                if lanes + n > WALK_LANES:
                    flush()
                    lanes = 0
                group.append((i, roots, depth, X32))
                lanes += n
                continue
            P = np.empty((roots.size, m))
            tb = max(1, WALK_LANES // m)
            rb = max(1, WALK_LANES // min(tb, roots.size))
            for t0 in range(0, roots.size, tb):
                for r0 in range(0, m, rb):
                    P[t0:t0 + tb, r0:r0 + rb] = self._walk([(roots[t0:t0 + tb], depth, X32[r0:r0 + rb])])[0]
            out[i] = P
        flush()
        return out  # type: ignore[return-value]

    def _walk(self, parts: Sequence[tuple[np.ndarray, int, np.ndarray]]) -> list[np.ndarray]:
        """Per part ``(tree roots, their depth, X as float32)``: the trees' predictions."""
        width = max(X.shape[1] for _, _, X in parts)
        rows = sum(X.shape[0] for _, _, X in parts)
        Xf = np.zeros((rows, width), dtype=np.float64)  # float32 values, compared in float64 (as sklearn)
        starts, bases, shapes = [], [], []
        r0 = 0
        for roots, _, X in parts:
            m, d = X.shape
            Xf[r0:r0 + m, :d] = X
            starts.append(np.repeat(roots, m))  # tree-major: lane = tree * m + row
            bases.append(np.tile((r0 + np.arange(m, dtype=np.intp)) * width, roots.size))
            shapes.append((roots.size, m))
            r0 += m
        Xf = Xf.reshape(-1)
        node = np.concatenate(starts)
        base = np.concatenate(bases)
        final = node.copy()
        idx = np.arange(node.size, dtype=np.intp)
        steps = max(depth for _, depth, _ in parts)
        nodes, inf, mask = self.nodes, np.inf, (1 << _FEATURE_BITS) - 1
        for step in range(steps):
            rec = nodes.take(node)
            thr = rec.real
            if step >= 4 and step % 3 == 1:  # drop lanes that reached a leaf (threshold +inf)
                done = thr == inf
                if done.any():
                    final[idx[done]] = node[done]
                    keep = ~done
                    idx, node, base, rec = idx[keep], node[keep], base[keep], rec[keep]
                    if not idx.size:
                        break
                    thr = rec.real
            packed = rec.imag.view(np.int64)
            f = packed & mask
            f += base
            node = (packed >> _FEATURE_BITS) + (Xf.take(f) > thr)
        final[idx] = node
        vals = self.value[final]
        out, o = [], 0
        for T, m in shapes:
            out.append(vals[o:o + T * m].reshape(T, m))
            o += T * m
        return out


class FastKNN:
    """crepes' k-NN difficulty of one type without per-call overhead, from plain arrays.

    ``Y`` is the training matrix that ``NearestNeighbors`` holds, scaled as crepes scales it
    (``MinMaxScaler``: ``X * scale + min``, clipping off). The neighbours come from a
    ``scipy.spatial.cKDTree`` over ``Y`` (built on first use); their distances are then
    recomputed as scikit-learn's k-d tree computes them (the squared differences summed
    feature by feature, then the square root) and summed in ascending order, so the
    difficulty is scikit-learn's to the last bit unless two training points tie for the
    k-th neighbour to within rounding (then it differs by rounding only). Training fits
    only estimators this reproduces (:meth:`from_estimator` refuses others).
    """

    def __init__(self, Y: np.ndarray, scale: np.ndarray, min_: np.ndarray, k: int, beta: float) -> None:
        self.Y = np.ascontiguousarray(Y, dtype=np.float64)
        self.scale = np.asarray(scale, dtype=np.float64)
        self.min = np.asarray(min_, dtype=np.float64)
        self.k = min(int(k), self.Y.shape[0])
        self.beta = float(beta)
        self._tree: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_estimator(cls, knn_de: Any) -> "FastKNN":
        """From a fitted crepes k-NN ``DifficultyEstimator`` (what training fits: a k-d tree,
        Euclidean, no target, scaler clipping off)."""
        nn, sc = knn_de.nn, knn_de.nn_scaler
        if not (knn_de.estimator_type == "knn" and knn_de.target_type == "none" and not knn_de.scaler
                and not getattr(sc, "clip", False) and getattr(nn, "effective_metric_", None) == "euclidean"
                and getattr(nn, "_fit_X", None) is not None
                and getattr(nn, "_fit_method", None) in ("kd_tree", "ball_tree")):
            raise ValueError("FastKNN reproduces only k-d tree, Euclidean, unclipped k-NN difficulty estimators")
        return cls(nn._fit_X, sc.scale_, sc.min_, nn.n_neighbors, knn_de.beta)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {prefix + "Y": self.Y, prefix + "scale": self.scale, prefix + "min": self.min,
                prefix + "k_beta": np.array([self.k, self.beta], dtype=np.float64)}

    @classmethod
    def from_arrays(cls, a: Mapping[str, np.ndarray], prefix: str) -> "FastKNN":
        k, beta = a[prefix + "k_beta"].tolist()
        return cls(a[prefix + "Y"], a[prefix + "scale"], a[prefix + "min"], int(k), beta)

    def _kdtree(self) -> Any:
        if self._tree is None:
            with self._lock:
                if self._tree is None:
                    from scipy.spatial import cKDTree  # noqa: PLC0415 (scipy only when a layer is estimated)

                    self._tree = cKDTree(self.Y)
        return self._tree

    def apply(self, X: np.ndarray) -> np.ndarray:
        Xs = np.array(X, dtype=np.float64)  # a copy, scaled in place as MinMaxScaler.transform does
        Xs *= self.scale
        Xs += self.min
        _, ind = self._kdtree().query(Xs, self.k)
        ind = ind.reshape(Xs.shape[0], self.k)
        diff = Xs[:, None, :] - self.Y[ind]
        diff *= diff
        rd = np.cumsum(diff, axis=2)[:, :, -1]  # sequential over features, as sklearn's rdist
        dist = np.sqrt(rd)
        dist.sort(axis=1)
        return dist.sum(axis=1) + self.beta


@dataclass
class _TypeEval:
    name: str
    model: Any  # TypeModel
    knn: FastKNN
    get: Any  # itemgetter of the feature names


class FastModels:
    """:meth:`DeviceModels.predict_layers` with precomputed evaluators (same results).

    The statistics of a feature row (forest mean and spread, k-NN difficulty, the
    out-of-design-space reasons) depend on that row alone, so they are kept per
    ``(type, feature row)`` (plus whether the row is alone of its type in its batch, see
    :meth:`_compute_rows`): networks repeat blocks and NAS candidates share most of their
    layer configurations, and a layer seen before costs a dictionary look-up. Only the
    rows not seen before go through the forests and k-d trees (all types in one walk).
    """

    def __init__(self, models: Any, row_cache_size: int = ROW_CACHE_SIZE) -> None:
        self.models = models
        self.forests = models.forests
        self.types = {t: _TypeEval(t, m, m.knn, itemgetter(*m.feature_names)) for t, m in sorted(models.types.items())}
        #: (type, feature row, alone) -> (p, rel_sd, d_knn, out-of-design-space reasons), at most
        #: ``row_cache_size`` entries (the oldest go first)
        self._row_cache: dict[tuple, tuple[float, float, float, tuple[str, ...]]] = {}
        self._row_lock = threading.Lock()
        self.row_cache_size = int(row_cache_size)

    def clear_row_cache(self) -> None:
        """Forget every kept feature row (for measuring cold evaluations)."""
        with self._row_lock:
            self._row_cache.clear()

    def _row_stats(self, layers: Sequence[Layer], by_type: Mapping[str, list[int]], modelled: Sequence[str]
                   ) -> list[list[tuple[float, float, float, tuple[str, ...]]]]:
        """Per modelled type, per layer (in ``by_type`` order): the statistics of its feature
        row, ``(p, rel_sd, d_knn, reasons)``, from the row cache; the rows not in it are
        computed together (one forest walk for all types, :meth:`_compute_rows`) and added."""
        cache = self._row_cache
        found: list[list[Any]] = []
        missing: list[tuple[str, list[tuple]]] = []
        for t in modelled:
            te = self.types[t]
            get = te.get
            single = len(te.model.feature_names) == 1
            alone = len(by_type[t]) == 1  # (see _compute_rows)
            keys = [(t, (get(layers[i].features),) if single else get(layers[i].features), alone)
                    for i in by_type[t]]
            recs = [cache.get(k) for k in keys]
            if None in recs:
                miss = list(dict.fromkeys(k for k, r in zip(keys, recs) if r is None))
                missing.append((t, miss))
                found.append([keys, recs])
            else:
                found.append([None, recs])
        if missing:
            new = self._compute_rows(missing)
            for entry in found:
                keys, recs = entry
                if keys is not None:
                    entry[1] = [r if r is not None else new[k] for k, r in zip(keys, recs)]
            with self._row_lock:
                cache.update(new)
                while len(cache) > self.row_cache_size:
                    del cache[next(iter(cache))]
        return [recs for _, recs in found]

    def _compute_rows(self, missing: Sequence[tuple[str, list[tuple]]]
                      ) -> dict[tuple, tuple[float, float, float, tuple[str, ...]]]:
        """The statistics of these ``(type, feature row, alone)`` keys: forest mean and relative
        spread, k-NN difficulty, and the out-of-design-space reasons.

        They are the reference path's numbers to the last bit, and they do not depend on what
        else was evaluated with them: the means and spreads over the trees are column
        reductions of a ``(trees, rows)`` matrix, which numpy sums tree by tree when there are
        two columns or more but pairwise for a single column. The reference evaluates every
        layer of a type together, so its last bit depends on whether the layer is ``alone``
        of its type in the batch (part of the key); here an alone row is evaluated as a single
        column, any other row among at least two columns (a single one twice)."""
        parts = []
        for t, keys in missing:
            X = np.array([k[1] for k in keys], dtype=float).reshape(len(keys), -1)
            parts.append((t, X if len(keys) > 1 or keys[0][2] else np.repeat(X, 2, axis=0)))
        out: dict[tuple, tuple[float, float, float, tuple[str, ...]]] = {}
        for (t, X), P, (_, keys) in zip(parts, self.forests.tree_predictions(parts), missing):
            te = self.types[t]
            mdl = te.model
            p = np.exp(P.mean(axis=0))
            rel_sd = P.std(axis=0)
            d_knn = te.knn.apply(X)
            out_of_range = (X < mdl.feat_min) | (X > mdl.feat_max)
            far = d_knn > mdl.knn_threshold * (1 + 1e-9)
            names = mdl.feature_names
            flagged = out_of_range.any(axis=1) | far
            for j, (k, pj, sj, dj) in enumerate(zip(keys, p.tolist(), rel_sd.tolist(), d_knn.tolist())):
                why: tuple[str, ...] = ()
                if flagged[j]:
                    why = tuple(f"range:{names[c]}" for c in np.flatnonzero(out_of_range[j]).tolist())
                    if far[j]:
                        why += ("knn",)
                out[k] = (pj, sj, dj, why)
        return out

    def predict_layers(self, layers: Sequence[Layer]) -> Any:
        N = len(layers)
        pred = np.zeros(N)
        t_op = np.full(N, np.nan)
        knn = np.full(N, np.nan)
        ops = np.fromiter((max(float(l.ops), 1.0) for l in layers), dtype=float, count=N)
        fb = np.zeros(N, dtype=bool)
        reasons: list[list[str]] = [[] for _ in range(N)]
        by_type: dict[str, list[int]] = {}
        for i, l in enumerate(layers):
            by_type.setdefault(l.type, []).append(i)
            p = l.params
            n = p.get("n", 1) if type(p) is dict or isinstance(p, Mapping) else 1
            if n != 1:
                try:
                    if int(n) > 1:
                        reasons[i].append("batch")
                except (TypeError, ValueError):
                    pass
        present = sorted(by_type)
        family = np.empty(N, dtype=np.int64)
        center = {m: np.empty(N) for m in METRICS}
        scale = {m: np.empty(N) for m in METRICS}
        families: dict[str, list[Any]] = {m: [] for m in METRICS}
        modelled = [t for t in present if t in self.types]
        if modelled:
            # every modelled layer at once: per-layer statistics and per-type constants as
            # arrays, then the same element-wise arithmetic as per type
            stats = self._row_stats(layers, by_type, modelled)
            idx_l: list[int] = []
            consts: list[tuple[float, float, float, float]] = []
            recs: list[tuple[float, float, float, tuple[str, ...]]] = []
            for t, r in zip(modelled, stats):
                mdl = self.types[t].model
                b = mdl.betas
                idx_l.extend(by_type[t])
                consts.extend([(mdl.t_scale, b["CM_TV"], b["CM_LV"], b["CM_O"])] * len(r))
                recs.extend(r)
            idx = np.asarray(idx_l, dtype=np.intp)
            p, rel_sd, d_knn = np.array([r[:3] for r in recs], dtype=float).T
            t_scale, b_tv, b_lv, b_o = np.array(consts, dtype=float).T
            o = ops[idx]
            sig = sigmas({"CM_TV": b_tv, "CM_LV": b_lv, "CM_O": b_o}, p, rel_sd, d_knn, t_scale, o)
            t_op_ms = p * t_scale
            pred_ms = t_op_ms * o
            t_op[idx] = t_op_ms
            pred[idx] = pred_ms
            knn[idx] = d_knn
            for m in METRICS:
                center[m][idx] = pred_ms
                scale[m][idx] = sig[m]
            for i, r in zip(idx_l, recs):
                if r[3]:
                    reasons[i].extend(r[3])
            for t in modelled:
                mdl = self.types[t].model
                if mdl.fixed:
                    for i in by_type[t]:
                        reasons[i].extend(mdl.unbenchmarked(layers[i].features))
        for fi, t in enumerate(present):
            idx = np.asarray(by_type[t], dtype=np.intp)
            family[idx] = fi
            te = self.types.get(t)
            if te is not None:
                for m in METRICS:
                    families[m].append(te.model.families[m])
            else:
                byt = np.array([self.models._layer_bytes(layers[i]) for i in idx.tolist()])
                out = self.models.fallback.predict(ops[idx], byt)
                fb[idx] = True
                for i in idx.tolist():
                    reasons[i].insert(0, "no_data")
                pred[idx] = out["pred_ms"]
                for m in METRICS:
                    c, s = out["dist"][m]
                    center[m][idx] = c
                    scale[m][idx] = s
                    families[m].append(self.models.fallback.families[m])
        dists = {m: DistBatch(center[m], scale[m], family, families[m]) for m in METRICS}
        ood = np.fromiter((bool(r) for r in reasons), dtype=bool, count=N)
        return BatchPrediction(pred, t_op, ops, fb, ood, reasons, dists, knn)
