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
``space``  ``N`` architectures drawn from NAS search spaces by a *space provider*
           (:class:`SpaceProvider`), round robin over the spaces. bench defines the interface
           and names no provider: providers are found through the entry-point group
           ``confident_latency.network_sources`` (:data:`ENTRY_POINT_GROUP`; the nas package
           registers its search spaces there, :mod:`nas.sources`) or registered in-process with
           :func:`register_space_provider`. Family ``space:<label>``.
``zoo``    :mod:`estimator.zoo` networks (``NAME[@RESOLUTION]`` or ``all``); family
           ``zoo:<family>`` (resnet18 and resnet50 are one family).
``onnx``   files, or directories of ``*.onnx`` files; family ``onnx:<file stem>``.

:func:`row_specs` rebuilds the networks of a network set's rows (``networks.csv``) from
their ``detail``, under their own names (``bench check`` re-times a profile's networks).

Every network is built and imported with the device's fusion rules *before* anything is
measured, so a file the estimator cannot read, an unknown space or an empty directory
stops the command with one line before any time is spent or anything is written.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

from estimator.errors import UserError

__all__ = ["NetworkSpec", "SourceError", "SpaceProvider", "ENTRY_POINT_GROUP", "register_space_provider",
           "space_providers", "space_network", "space_specs", "space_family", "zoo_specs", "onnx_specs", "row_specs",
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
        m = strip_initializers(net.model)
    except UserError as e:
        raise SourceError(f"{spec.name}: {e}") from None
    if not net.layers:
        raise SourceError(f"{spec.name}: the network has no layers to estimate")
    # onnxsim's bookkeeping (its options, what it changed) says how the graph was simplified,
    # not what it is: the network's identity (its SHA-256 in a benchmark database) leaves it out
    kept = [p for p in m.metadata_props if not p.key.startswith("onnxsim.")]
    del m.metadata_props[:]
    m.metadata_props.extend(kept)
    stripped = m.SerializeToString()
    spec.weightless_onnx = stripped
    spec.onnx_sha256 = hashlib.sha256(stripped).hexdigest()
    spec.n_layers = len(net.layers)


# --------------------------------------------------------------------------- spaces


#: the entry-point group in which installed packages name their space providers
#: (``[project.entry-points."confident_latency.network_sources"]``, each a provider object)
ENTRY_POINT_GROUP = "confident_latency.network_sources"


class SpaceProvider(Protocol):
    """A provider of NAS-space networks: resolves space names and samples architectures.

    ``resolve`` turns a space name (as the user gives it to ``--space``) into ``(label,
    handle)``: the label names the space in network names and families, the handle is
    whatever the provider needs to sample it again; it raises a
    :class:`~estimator.errors.UserError` for a name it cannot resolve. ``sample`` draws ``n``
    distinct architectures (``seed`` fixes the draws, ``options`` are the space's keyword
    options) as :class:`NetworkSpec` records made with :func:`space_network`, each with a
    ``detail`` that ``rebuild`` reads back and a ``build`` that returns the ONNX bytes.
    ``rebuild`` returns that ``build`` from a ``detail`` (:func:`row_specs`). Errors in
    ``resolve`` and ``sample`` are reported after ``--space NAME:``."""

    def resolve(self, space: str) -> tuple[str, Any]: ...

    def sample(self, space: str, label: str, handle: Any, n: int, *, seed: int,
               options: Mapping[str, Any]) -> list[NetworkSpec]: ...

    def rebuild(self, label: str, handle: Any, detail: Mapping[str, Any]) -> Callable[[], bytes]: ...


_REGISTERED: list[SpaceProvider] = []


def register_space_provider(provider: SpaceProvider) -> None:
    """Add ``provider`` ahead of the entry-point ones (once; for code that runs without
    installed package metadata, such as a source checkout's tests)."""
    if not all(callable(getattr(provider, m, None)) for m in ("resolve", "sample", "rebuild")):
        raise TypeError(f"{provider!r} is not a space provider: it needs resolve, sample and rebuild")
    if not any(p is provider for p in _REGISTERED):
        _REGISTERED.append(provider)


@functools.lru_cache(maxsize=1)
def _entry_point_providers() -> tuple[tuple[SpaceProvider, ...], tuple[str, ...]]:
    """The providers named in :data:`ENTRY_POINT_GROUP` (by entry-point name), and a line
    for each entry point that failed to load."""
    import importlib.metadata  # noqa: PLC0415

    found: list[SpaceProvider] = []
    failed: list[str] = []
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        try:
            found.append(ep.load())
        except Exception as e:  # noqa: BLE001 - a broken plug-in is reported, not raised
            failed.append(f"entry point {ep.name} = {ep.value}: {type(e).__name__}: {e}")
    return tuple(found), tuple(failed)


def space_providers() -> list[SpaceProvider]:
    """The space providers, in the order they are asked: the registered ones, then the
    entry points' (each once)."""
    out: list[SpaceProvider] = []
    for p in (*_REGISTERED, *_entry_point_providers()[0]):
        if not any(q is p for q in out):
            out.append(p)
    return out


def _resolve(space: str) -> tuple[SpaceProvider, str, Any]:
    """The first provider that resolves ``space``, with its ``(label, handle)``."""
    providers = space_providers()
    if not providers:
        failed = _entry_point_providers()[1]
        why = (f"no entry point of group {ENTRY_POINT_GROUP!r} loads: {'; '.join(failed)}" if failed else
               f"no package names one in the entry-point group {ENTRY_POINT_GROUP!r} (confident-latency's nas "
               "package does once installed, e.g. pip install -e .)")
        raise SourceError(f"--space {space}: no provider of NAS search spaces is installed: {why}")
    errors: list[str] = []
    for p in providers:
        try:
            label, handle = p.resolve(space)
        except UserError as e:
            errors.append(str(e))
            continue
        return p, label, handle
    raise SourceError(f"--space {space}: {errors[0]}")


def _family(label: str) -> str:
    return f"space:{label}"


def space_family(space: str) -> str:
    """The family of ``space``'s samples (``space:<label>``, the label its provider gives the
    name): what leave-family-out validation holds out together, and what a calibration's
    ``families`` list."""
    return _family(_resolve(space)[1])


def space_network(label: str, index: int, *, seed: int, detail: dict[str, Any], build: Callable[[], bytes]
                  ) -> NetworkSpec:
    """Sample ``index`` drawn with ``seed`` from the space ``label``, as a provider returns it: named
    ``space:<label>#<seed>-<index>`` (the resume key), in family ``space:<label>``."""
    return NetworkSpec(name=f"space:{label}#{seed}-{index}", family=_family(label), source="space", detail=detail,
                       build=build)


def space_specs(spaces: Sequence[str], n: int, *, seed: int = 0, options: Mapping[str, Mapping[str, Any]] | None = None
                ) -> list[NetworkSpec]:
    """``n`` random architectures, round robin over ``spaces`` (``options[space]`` are the
    space's keyword options); every space is resolved before any is sampled."""
    if not spaces:
        return []
    if n < 1:
        raise SourceError(f"--networks must be >= 1, got {n}")
    resolved = [(s, *_resolve(s)) for s in spaces]
    per = {s: n // len(spaces) + (1 if i < n % len(spaces) else 0) for i, s in enumerate(spaces)}
    out: list[NetworkSpec] = []
    for spec_name, provider, label, handle in resolved:
        opts = dict((options or {}).get(spec_name) or {})
        try:
            out += provider.sample(spec_name, label, handle, per[spec_name], seed=seed, options=opts)
        except UserError as e:
            raise SourceError(f"--space {spec_name}: {e}") from None
    return out


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
            provider, label, handle = _resolve(str(d.get("space")))
            out.append(NetworkSpec(name=name, family=family, source="space", detail=d,
                                   build=provider.rebuild(label, handle, d)))
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
