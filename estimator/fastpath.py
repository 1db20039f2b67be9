"""The fast evaluation path of :class:`estimator.models.DeviceModels`: the same numbers as the
reference path (scikit-learn forests, crepes difficulty estimators, one call per type),
without their per-call overhead.

What is precomputed (once per loaded model set, never pickled)
--------------------------------------------------------------
* **Forests.** The trees of every type's forest are flattened into four arrays shared by
  all types: split feature, threshold, index of the left child (the right child is the
  next node: nodes are renumbered breadth-first so that siblings are adjacent; a leaf is
  its own left child with threshold ``+inf``) and leaf value. A batch of layers of several
  types is evaluated in one vectorised walk over (layer, tree) lanes, ``depth`` steps of
  ``node = left[node] + (x[feature[node]] > threshold[node])``, with finished lanes dropped
  as they reach leaves. The comparison is scikit-learn's: features cast to float32, then
  compared in float64 against the float64 threshold (``x <= t`` goes left), so every
  tree's prediction is bit for bit the tree's own ``predict``. Types with many layers in one
  batch (``>= PER_TREE_ROWS``) use the trees' compiled ``predict`` instead, which is faster
  there and gives the same numbers.
* **k-NN difficulty (CM_O).** The min-max scaling is applied as crepes/scikit-learn apply
  it (``X * scale_ + min_``, clipping off) and the neighbours come from the k-d tree that
  ``NearestNeighbors`` built at training time, queried directly: the same neighbours and
  the same distances as ``DifficultyEstimator.apply``, without the estimator's input
  validation and joblib dispatch.
* **Feature rows.** The per-row statistics above are kept per ``(type, feature row)``
  (:class:`FastModels`, bounded; see :meth:`FastModels._compute_rows` for the one bit of
  batch context in the key), so a layer configuration seen before is not evaluated again;
  the per-layer arithmetic then runs once over all modelled layers.
* **Conformal parts.** Unchanged arithmetic (:func:`estimator.models._sigmas`) on the same
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
from .layers import Layer

__all__ = ["FlatForests", "FastKNN", "FastModels", "PER_TREE_ROWS", "ROW_CACHE_SIZE"]

#: From this many layers of one type in a batch on, that type's trees use their compiled predict.
PER_TREE_ROWS = 256
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
    """The trees of several forests in flat arrays, evaluated together (see module docstring)."""

    def __init__(self, forests: Mapping[str, Any]) -> None:
        feats, thrs, lefts, vals = [], [], [], []
        self.roots: dict[str, np.ndarray] = {}
        self.depth: dict[str, int] = {}
        self.estimators: dict[str, list[Any]] = {}
        off = 0
        for name, forest in forests.items():
            roots, depth = [], 0
            for est in forest.estimators_:
                f, t, l, v, d = _flatten_tree(est.tree_)
                feats.append(f)
                thrs.append(t)
                lefts.append(l + off)
                vals.append(v)
                roots.append(off)
                off += f.size
                depth = max(depth, d)
            self.roots[name] = np.asarray(roots, dtype=np.intp)
            self.depth[name] = depth
            self.estimators[name] = list(forest.estimators_)
        cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt))
        feature = cat(feats, np.int64)
        threshold = cat(thrs, np.float64)
        left = cat(lefts, np.int64)
        self.value = cat(vals, np.float64)
        if feature.size and (int(feature.max()) >= 1 << _FEATURE_BITS or int(left.max()) >= 1 << (62 - _FEATURE_BITS)):
            raise ValueError("forest too large to flatten")
        # One 16-byte record per node, fetched with one gather: the threshold (real part)
        # and left child << _FEATURE_BITS | feature (imaginary part, as int64 bits).
        self.nodes = np.empty(feature.size, dtype=np.complex128)
        self.nodes.real = threshold
        self.nodes.imag = ((left << _FEATURE_BITS) | feature).view(np.float64)
        for a in (self.value, self.nodes):
            a.setflags(write=False)

    @property
    def n_nodes(self) -> int:
        return int(self.nodes.size)

    def tree_predictions(self, parts: Sequence[tuple[str, np.ndarray]]) -> list[np.ndarray]:
        """Per part ``(name, X)``: every tree's prediction, shape ``(n_trees, m)``, exactly
        what ``np.stack([tree.predict(X) for tree in forest])`` gives."""
        out: list[np.ndarray | None] = [None] * len(parts)
        walk = []
        for i, (name, X) in enumerate(parts):
            X32 = np.ascontiguousarray(X, dtype=np.float32)
            if X32.shape[0] >= PER_TREE_ROWS:
                n = X32.shape[0]
                out[i] = np.stack([e.tree_.predict(X32).reshape(n, -1)[:, 0] for e in self.estimators[name]])
            elif X32.shape[0]:
                walk.append((i, name, X32))
            else:
                out[i] = np.zeros((self.roots[name].size, 0))
        if walk:
            for i, P in zip([w[0] for w in walk], self._walk([(name, X32) for _, name, X32 in walk])):
                out[i] = P
        return out  # type: ignore[return-value]

    def _walk(self, parts: Sequence[tuple[str, np.ndarray]]) -> list[np.ndarray]:
        width = max(X.shape[1] for _, X in parts)
        rows = sum(X.shape[0] for _, X in parts)
        Xf = np.zeros((rows, width), dtype=np.float64)  # float32 values, compared in float64 (as sklearn)
        starts, bases, shapes = [], [], []
        r0 = 0
        for name, X in parts:
            m, d = X.shape
            Xf[r0:r0 + m, :d] = X
            roots = self.roots[name]
            starts.append(np.repeat(roots, m))  # tree-major: lane = tree * m + row
            bases.append(np.tile((r0 + np.arange(m, dtype=np.intp)) * width, roots.size))
            shapes.append((roots.size, m))
            r0 += m
        Xf = Xf.reshape(-1)
        node = np.concatenate(starts)
        base = np.concatenate(bases)
        final = node.copy()
        idx = np.arange(node.size, dtype=np.intp)
        steps = max(self.depth[name] for name, _ in parts)
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
    """crepes' k-NN difficulty of one type without per-call overhead.

    The neighbours come from a ``scipy.spatial.cKDTree`` over the training matrix that
    ``NearestNeighbors`` holds (crepes' scaling applied as ``MinMaxScaler.transform`` applies
    it); their distances are then recomputed as scikit-learn's k-d tree computes them (the
    squared differences summed feature by feature, then the square root) and summed in
    ascending order, so the difficulty is scikit-learn's to the last bit unless two
    training points tie for the k-th neighbour to within rounding (then it differs by
    rounding only). Estimators of another kind, or fitted with brute force (whose expanded
    distance formula rounds differently; training fits a k-d tree), use crepes' own ``apply``.
    """

    def __init__(self, knn_de: Any) -> None:
        self.de = knn_de
        nn = knn_de.nn
        sc = knn_de.nn_scaler
        self.scale = np.asarray(sc.scale_, dtype=np.float64)
        self.min = np.asarray(sc.min_, dtype=np.float64)
        self.clip = bool(getattr(sc, "clip", False))
        self.k = int(nn.n_neighbors)
        self.beta = float(knn_de.beta)
        metric = getattr(nn, "effective_metric_", None)
        self.exact = (knn_de.estimator_type == "knn" and knn_de.target_type == "none" and not knn_de.scaler
                      and not self.clip and metric == "euclidean" and getattr(nn, "_fit_X", None) is not None
                      and getattr(nn, "_fit_method", None) in ("kd_tree", "ball_tree"))
        self.tree = None
        if self.exact:
            from scipy.spatial import cKDTree  # noqa: PLC0415

            self.Y = np.ascontiguousarray(nn._fit_X, dtype=np.float64)
            self.tree = cKDTree(self.Y)
            self.k = min(self.k, self.Y.shape[0])

    def apply(self, X: np.ndarray) -> np.ndarray:
        if not self.exact:
            return np.asarray(self.de.apply(X), dtype=float)
        Xs = np.array(X, dtype=np.float64)  # a copy, scaled in place as MinMaxScaler.transform does
        Xs *= self.scale
        Xs += self.min
        _, ind = self.tree.query(Xs, self.k)
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
        self.forests = FlatForests({t: m.forest for t, m in sorted(models.types.items())})
        self.types = {t: _TypeEval(t, m, FastKNN(m.knn_de), itemgetter(*m.feature_names))
                      for t, m in sorted(models.types.items())}
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
            if mdl.log_target:
                p = np.exp(P.mean(axis=0))
                rel_sd = P.std(axis=0)
            else:
                p = P.mean(axis=0)
                rel_sd = P.std(axis=0) / np.maximum(p, 1e-12)
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
        from .models import METRICS, BatchPrediction, _sigmas  # noqa: PLC0415 (models imports this module lazily)

        N = len(layers)
        pred = np.zeros(N)
        t_op = np.full(N, np.nan)
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
            sig = _sigmas({"CM_TV": b_tv, "CM_LV": b_lv, "CM_O": b_o}, p, rel_sd, d_knn, t_scale, o)
            t_op_ms = p * t_scale
            pred_ms = t_op_ms * o
            scale_top = t_scale * o
            t_op[idx] = t_op_ms
            pred[idx] = pred_ms
            for m in METRICS:
                center[m][idx] = pred_ms
            scale["CM_TV"][idx] = sig["CM_TV"] * scale_top
            scale["CM_LV"][idx] = sig["CM_LV"]
            scale["CM_O"][idx] = sig["CM_O"] * scale_top
            for i, r in zip(idx_l, recs):
                if r[3]:
                    reasons[i].extend(r[3])
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
        return BatchPrediction(pred, t_op, ops, fb, ood, reasons, dists)
