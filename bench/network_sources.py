"""Whole networks to measure: samples of the NAS search spaces, zoo networks, the user's ONNX files.

``bench calibrate`` and ``bench networks`` measure whole networks on the target
(:mod:`bench.network_measure`). This module says which: every source yields
:class:`NetworkSpec` records, each with a stable ``name`` (the resume key), a ``family``
(what leave-family-out validation holds out together), a JSON ``detail`` that rebuilds it,
and the network itself in two forms: ``model`` (with weights, what the target runs) and
``weightless`` (simplified and stripped, :mod:`estimator.onnx_strip`: what the estimator
reads and what a profile keeps in ``networks/``).

Sources
-------
``space``  ``N`` architectures drawn at random (Optuna's ``RandomSampler``, ``seed``) from
           search spaces of :mod:`nas.spaces` (built-in names or ``module:function``), built
           with fixed weights (``torch.manual_seed(0)``) and exported the way ``nas search``
           exports its candidates (:func:`nas.export.to_onnx`); repeated architectures are
           drawn again. Family ``space:<name>``.
``zoo``    :mod:`estimator.zoo` networks (``NAME[@RESOLUTION]`` or ``all``); family
           ``zoo:<family>`` (resnet18 and resnet50 are one family).
``onnx``   files, or directories of ``*.onnx`` files; family ``onnx:<file stem>``.

:func:`row_specs` rebuilds the networks of a network set's rows (``networks.csv``) from
their ``detail``, under their own names (``bench check`` re-times a profile's networks).

The search spaces live in :mod:`nas.spaces`, the one definition of them; it is imported
here lazily, only for ``space`` sources.

Every network is built and imported with the device's fusion rules *before* anything is
measured, so a file the estimator cannot read, an unknown space or an empty directory
stops the command with one line before any time is spent or anything is written.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from estimator.errors import UserError

__all__ = ["NetworkSpec", "SourceError", "space_specs", "space_family", "zoo_specs", "onnx_specs", "row_specs",
           "weightless", "ZOO_FAMILY", "parse_zoo"]

#: zoo networks that are one family for leave-family-out validation
ZOO_FAMILY = {"resnet18": "resnet", "resnet50": "resnet"}


class SourceError(UserError):
    """An unknown space or zoo network, a missing or unreadable ONNX file, an empty directory."""


@dataclass
class NetworkSpec:
    name: str
    family: str
    source: str  # "space" | "zoo" | "onnx"
    detail: dict[str, Any]
    #: builds the network with weights (ONNX bytes), what the target runs
    build: Callable[[], bytes] = field(repr=False)
    #: filled by :func:`weightless`
    weightless_onnx: bytes = field(default=b"", repr=False)
    onnx_sha256: str = ""
    n_layers: int = 0


def weightless(spec: NetworkSpec, model: bytes, fusion: Any) -> None:
    """Import ``model`` as the estimator does (onnxsim, ``fusion`` rules) and keep its
    simplified, weightless form on ``spec`` (raises :class:`SourceError` naming the network)."""
    from estimator.onnx_import import load_network  # noqa: PLC0415
    from estimator.onnx_strip import strip_initializers  # noqa: PLC0415

    try:
        net = load_network(model, fusion=fusion)
        stripped = strip_initializers(net.model).SerializeToString()
    except UserError as e:
        raise SourceError(f"{spec.name}: {e}") from None
    if not net.layers:
        raise SourceError(f"{spec.name}: the network has no layers to estimate")
    spec.weightless_onnx = stripped
    spec.onnx_sha256 = hashlib.sha256(stripped).hexdigest()
    spec.n_layers = len(net.layers)


# --------------------------------------------------------------------------- spaces


def space_family(space: str) -> str:
    """The family of ``space``'s samples (``space:<label>``, the label :func:`nas.spaces.resolve_space`
    gives a registered name or ``MODULE:FUNCTION``): what leave-family-out validation holds out
    together, and what a calibration's ``families`` list."""
    return f"space:{_space_fn(space)[0]}"


def _space_fn(name: str) -> tuple[str, Any]:
    try:
        from nas.spaces import resolve_space  # noqa: PLC0415 (nas.spaces is the one definition of the spaces)
    except ImportError as e:  # pragma: no cover - one distribution
        raise SourceError(f"space samples need the nas package: {e}") from e
    try:
        return resolve_space(name)
    except UserError as e:
        raise SourceError(f"--space {name}: {e}") from None


def space_specs(spaces: Sequence[str], n: int, *, seed: int = 0, options: Mapping[str, Mapping[str, Any]] | None = None
                ) -> list[NetworkSpec]:
    """``n`` random architectures, round robin over ``spaces`` (``options[space]`` are the
    space's keyword options)."""
    import optuna  # noqa: PLC0415

    from nas.spaces import sample  # noqa: PLC0415

    if not spaces:
        return []
    if n < 1:
        raise SourceError(f"--networks must be >= 1, got {n}")
    resolved = [(s, *_space_fn(s)) for s in spaces]
    per = {s: n // len(spaces) + (1 if i < n % len(spaces) else 0) for i, s in enumerate(spaces)}
    out: list[NetworkSpec] = []
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for spec_name, label, fn in resolved:
        opts = dict((options or {}).get(spec_name) or {})
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
        seen: set[str] = set()
        i = tries = 0
        while i < per[spec_name]:
            tries += 1
            if tries > 20 * per[spec_name] + 20:
                raise SourceError(f"--space {spec_name}: only {i} distinct architectures in {tries} draws")
            trial = study.ask()
            try:
                arch = sample(fn, trial, opts, name=label)
            except UserError as e:
                raise SourceError(f"--space {spec_name}: {e}") from None
            key = repr(sorted(trial.params.items()))
            if key in seen:
                continue
            seen.add(key)
            params = dict(trial.params)
            detail = {"space": spec_name, "options": opts, "seed": seed, "index": i, "params": params,
                      "architecture": arch.description, "input_shape": list(arch.input_shape)}
            out.append(NetworkSpec(name=f"space:{label}#{seed}-{i}", family=space_family(spec_name), source="space",
                                   detail=detail, build=_space_builder(fn, params, opts, label)))
            i += 1
    return out


def _space_builder(fn: Any, params: Mapping[str, Any], opts: Mapping[str, Any], label: str) -> Callable[[], bytes]:
    def build() -> bytes:
        import torch  # noqa: PLC0415

        from nas.export import to_onnx  # noqa: PLC0415
        from nas.spaces import rebuild  # noqa: PLC0415

        torch.manual_seed(0)
        arch = rebuild(fn, params, opts, name=label)
        try:
            return to_onnx(arch.module, arch.input_shape).SerializeToString()
        except UserError as e:
            raise SourceError(f"space {label} sample {dict(params)}: {e}") from None
    return build


# ------------------------------------------------------------------------------ zoo


def parse_zoo(text: str) -> list[tuple[str, int | None]]:
    """``all`` or ``NAME[@RES],...`` -> [(name, resolution or None)]."""
    from estimator import zoo  # noqa: PLC0415

    names = zoo.names()
    if text.strip() == "all":
        return [(n, None) for n in names]
    out: list[tuple[str, int | None]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, res = part.partition("@")
        if name not in names:
            raise SourceError(f"--zoo: unknown network {name!r}; known: {', '.join(names)} (or all)")
        try:
            r = int(res) if res else None
        except ValueError:
            raise SourceError(f"--zoo {part}: the resolution must be an integer") from None
        if r is not None and not 32 <= r <= 4096:
            raise SourceError(f"--zoo {part}: resolution must be in 32..4096")
        out.append((name, r))
    if not out:
        raise SourceError("--zoo: no network named")
    return out


def zoo_specs(items: Iterable[tuple[str, int | None]]) -> list[NetworkSpec]:
    from estimator import zoo  # noqa: PLC0415

    out = []
    for name, res in items:
        r = res or zoo.default_resolution(name)

        def build(name: str = name, r: int = r) -> bytes:
            from estimator import zoo  # noqa: PLC0415

            return zoo.export_onnx(name, r)

        out.append(NetworkSpec(name=f"zoo:{name}@{r}", family=f"zoo:{ZOO_FAMILY.get(name, name)}", source="zoo",
                               detail={"zoo": name, "resolution": r}, build=build))
    return out


# ----------------------------------------------------------------------------- files


def _onnx_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    for p in map(Path, paths):
        if p.is_dir():
            files = sorted(p.glob("*.onnx"))
            if not files:
                raise SourceError(f"--onnx {p}: the directory holds no .onnx file")
            yield from files
        elif p.is_file():
            yield p
        else:
            raise SourceError(f"--onnx {p}: no such file or directory")


def onnx_specs(paths: Iterable[str | Path]) -> list[NetworkSpec]:
    out: list[NetworkSpec] = []
    names: set[str] = set()
    for f in _onnx_files(paths):
        try:
            data = f.read_bytes()
        except OSError as e:
            raise SourceError(f"--onnx {f}: {e.strerror}") from None
        if not data:
            raise SourceError(f"--onnx {f}: the file is empty")
        digest = hashlib.sha256(data).hexdigest()
        name = f"onnx:{f.stem}"
        if name in names:
            name = f"onnx:{f.stem}-{digest[:8]}"
        names.add(name)
        out.append(NetworkSpec(name=name, family=f"onnx:{f.stem}", source="onnx",
                               detail={"path": str(f.resolve()), "sha256": digest},
                               build=lambda data=data: data))
    return out


# ------------------------------------------------------------------ network rows


def row_specs(rows: Iterable[Mapping[str, Any]]) -> tuple[list[NetworkSpec], dict[str, str]]:
    """Specs that rebuild the networks of network rows (:func:`estimator.profile.read_network_set`)
    from their ``detail``, under the rows' names and families, and, by name, why the rows that
    cannot be rebuilt here are left out (an ONNX file no longer at its path, or changed)."""
    out: list[NetworkSpec] = []
    skipped: dict[str, str] = {}
    for row in rows:
        name, family, d = row["name"], row["family"], dict(row["detail"])
        if row["source"] == "space":
            label, fn = _space_fn(str(d.get("space")))
            out.append(NetworkSpec(name=name, family=family, source="space", detail=d,
                                   build=_space_builder(fn, d.get("params") or {}, d.get("options") or {}, label)))
        elif row["source"] == "zoo":
            spec = zoo_specs([(str(d.get("zoo")), int(d.get("resolution") or 0) or None)])[0]
            out.append(NetworkSpec(name=name, family=family, source="zoo", detail=d, build=spec.build))
        else:
            path = Path(str(d.get("path", "")))
            try:
                data = path.read_bytes()
            except OSError:
                skipped[name] = f"its file {path} is not here"
                continue
            if hashlib.sha256(data).hexdigest() != d.get("sha256"):
                skipped[name] = f"its file {path} changed since it was measured"
                continue
            out.append(NetworkSpec(name=name, family=family, source="onnx", detail=d, build=lambda data=data: data))
    return out, skipped
