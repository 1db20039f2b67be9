"""Where a profile's numbers were measured, and how the machine at hand differs.

A profile measured on one machine holds on that machine. An earlier ``host-cpu`` profile,
measured on a 2-vCPU AMD EPYC VM, was 25-45 % low on every network on another VM with the
same CPU model string, and on a third (AVX-512 VP2INTERSECT, a newer core) the same
networks ran 2.1-2.6x faster than it predicted. Nothing warned. So every profile
records a *fingerprint* of the host and runtime its rows came from, and estimates warn
when a host-runner profile is used where either differs.

A fingerprint is plain JSON (``profile.json`` keys ``fingerprint`` and
``calibration.fingerprint``)::

    {"host": {"cpu_model": "AMD EPYC", "cpu_count": 2, "machine": "x86_64",
              "os": "Linux 6.18.44-fc-v669", "cpu_flags": ["avx2", ...],
              "caches": {"L1d": "48K", "L1i": "32K", "L2": "1024K", "L3": "32768K"},
              "machine_id": "3d1219c7c4c5"},
     "runtime": {"runner": "onnxruntime", "versions": {"onnxruntime": "1.32.0"},
                 "threads": 1}}

``machine_id`` is the first 12 hex digits of the SHA-256 of ``/etc/machine-id``: it tells
two machines of the same kind apart without publishing the id. A key that one side lacks
(a profile measured before fingerprints existed records only what its provenance held) is
not compared.

Which runners are compared on what (:data:`RUNTIME_PACKAGES`): host runners (ONNX Runtime,
LiteRT, TensorRT) on the host and their runtime's version; the Vela cost model on Vela's
version only (any host computes the same estimate); a bench agent not at all (the board is
elsewhere; its own fingerprint is in the profile for the record).

Nothing here imports a runtime: versions come from the installed distributions' metadata.
"""
from __future__ import annotations

import hashlib
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["RUNTIME_PACKAGES", "HOST_RUNNERS", "host_fingerprint", "runtime_fingerprint", "fingerprint", "cpu_differences",
           "from_environment", "differences", "mismatch_warning"]

#: runner -> distributions whose version changes its timings (the first installed one counts)
RUNTIME_PACKAGES: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "litert": ("ai-edge-litert", "tflite-runtime"),
    "tensorrt": ("tensorrt",),
    "vela": ("ethos-u-vela",),
}
#: runners that time on the machine they run on (their host is compared)
HOST_RUNNERS = frozenset({"onnxruntime", "litert", "tensorrt"})

_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


def _cpuinfo() -> tuple[str, list[str]]:
    model, flags = "", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if not model and key in ("model name", "Hardware", "Model", "cpu model") and val.strip():
                    model = val.strip()
                elif not flags and key in ("flags", "Features"):
                    flags = sorted(set(val.split()))
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or platform.machine(), flags


def _caches() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        for d in sorted(_CACHE_DIR.glob("index*")):
            level = (d / "level").read_text().strip()
            kind = (d / "type").read_text().strip()
            size = (d / "size").read_text().strip()
            suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
            out[f"L{level}{suffix}"] = size
    except OSError:
        pass
    return out


def cache_bytes(size: str) -> int:
    """A cache size as :func:`_caches` records it (sysfs: ``"32768K"``; also ``"32M"``,
    ``"480 MiB"``) -> bytes; 0 if unreadable."""
    size = str(size).strip().upper().removesuffix("B").removesuffix("I").strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
    try:
        return int(float(size.rstrip("KMG").strip()) * mult)
    except ValueError:
        return 0


def last_level_cache_bytes(fp: Mapping[str, Any] | None) -> int:
    """The largest cache level a fingerprint records (L3, else L2), in bytes; 0 if none."""
    caches = ((fp or {}).get("host") or {}).get("caches") or {}
    return cache_bytes(caches.get("L3") or caches.get("L2") or "")


def _machine_id() -> str:
    for p in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            text = Path(p).read_text().strip()
        except OSError:
            continue
        if text:
            return hashlib.sha256(text.encode()).hexdigest()[:12]
    return ""


def host_fingerprint() -> dict[str, Any]:
    """The machine this process runs on."""
    model, flags = _cpuinfo()
    out: dict[str, Any] = {"cpu_model": model, "cpu_count": os.cpu_count(), "machine": platform.machine(),
                           "os": f"{platform.system()} {platform.release()}"}
    if flags:
        out["cpu_flags"] = flags
    caches = _caches()
    if caches:
        out["caches"] = caches
    mid = _machine_id()
    if mid:
        out["machine_id"] = mid
    return out


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def runtime_fingerprint(runner: str, threads: int | None = None) -> dict[str, Any]:
    """The runner's runtime as installed here (versions from package metadata)."""
    versions: dict[str, str] = {}
    for dist in RUNTIME_PACKAGES.get(runner, ()):
        v = _installed(dist)
        if v is not None:
            versions[_key(dist)] = v
            break
    out: dict[str, Any] = {"runner": runner, "versions": versions}
    if threads is not None:
        out["threads"] = int(threads)
    return out


def fingerprint(runner: str, threads: int | None = None) -> dict[str, Any]:
    """Host and runtime of this machine for ``runner`` (what a profile measured here records)."""
    return {"host": host_fingerprint(), "runtime": runtime_fingerprint(runner, threads)}


def from_environment(runner: str, host: Mapping[str, Any] | None, versions: Mapping[str, Any] | None,
                     threads: int | None = None) -> dict[str, Any]:
    """The fingerprint of rows measured in a recorded environment (a bench database's
    ``environments`` record: its ``host`` and ``versions``). When that host is this machine
    (same CPU model, core count and kernel), the host part is this machine's full
    fingerprint (flags, caches, machine id), which the record does not hold."""
    rec = {k: v for k, v in dict(host or {}).items() if k in ("cpu_model", "cpu_count", "machine", "os")}
    runtime: dict[str, Any] = {"runner": runner, "versions": {}}
    names = {_key(d) for d in RUNTIME_PACKAGES.get(runner, ())}
    for k, v in dict(versions or {}).items():
        if _key(str(k)) in names:
            runtime["versions"][_key(str(k))] = str(v)
    if threads is not None:
        runtime["threads"] = int(threads)
    if runner not in HOST_RUNNERS:
        return {"runtime": runtime} if runner in RUNTIME_PACKAGES else {"host": rec, "runtime": runtime}
    here = host_fingerprint()
    if rec and all(rec.get(k) == here.get(k) for k in ("cpu_model", "cpu_count", "os")):
        rec = here
    return {"host": rec, "runtime": runtime}


def _key(dist: str) -> str:
    """Package names compare with '-' and '_' alike (``ai-edge-litert`` is ``ai_edge_litert``)."""
    return dist.replace("-", "_").lower()


def _flag_diff(rec: list[str], here: list[str], limit: int = 4) -> str:
    plus = sorted(set(here) - set(rec))
    minus = sorted(set(rec) - set(here))
    parts = [f"+{f}" for f in plus[:limit]] + [f"-{f}" for f in minus[:limit]]
    more = len(plus) + len(minus) - len(parts)
    return " ".join(parts) + (f" and {more} more" if more > 0 else "")


_HOST_KEYS = (("cpu_model", "CPU"), ("cpu_count", "cores"), ("machine", "architecture"))
#: what names the processor itself (the core count does not)
_CPU_KEYS = tuple(k for k in _HOST_KEYS if k[0] != "cpu_count")


def _cpu_differences(rh: Mapping[str, Any], hh: Mapping[str, Any], keys: Sequence[tuple[str, str]] = _HOST_KEYS
                     ) -> list[str]:
    out: list[str] = []
    for key, what in keys:
        if key in rh and key in hh and rh[key] != hh[key]:
            out.append(f"{what} {rh[key]} there, {hh[key]} here")
    if rh.get("cpu_flags") and hh.get("cpu_flags") and set(rh["cpu_flags"]) != set(hh["cpu_flags"]):
        out.append(f"CPU flags differ ({_flag_diff(rh['cpu_flags'], hh['cpu_flags'])} here)")
    rc, hc = rh.get("caches") or {}, hh.get("caches") or {}
    for level in sorted(set(rc) & set(hc)):
        if rc[level] != hc[level]:
            out.append(f"{level} cache {rc[level]} there, {hc[level]} here")
    return out


def cpu_differences(recorded: Mapping[str, Any], here: Mapping[str, Any], runner: str) -> list[str]:
    """The part of :func:`differences` that says the processor itself differs (its model,
    architecture, flags or caches: another microarchitecture or part), for a runner on this
    host; not the number of cores, the kernel, the runtime's version or another VM of the same
    kind."""
    if runner not in HOST_RUNNERS:
        return []
    return _cpu_differences(recorded.get("host") or {}, here.get("host") or {}, _CPU_KEYS)


def differences(recorded: Mapping[str, Any], here: Mapping[str, Any], runner: str) -> list[str]:
    """What differs between a recorded fingerprint and this machine's, for ``runner``, as
    short phrases ("onnxruntime 1.31.1 there, 1.32.0 here"). Keys one side lacks are not
    compared; an unknown runner or a bench agent compares nothing."""
    out: list[str] = []
    rh, hh = recorded.get("host") or {}, here.get("host") or {}
    if runner in HOST_RUNNERS:
        out += _cpu_differences(rh, hh)
        if "os" in rh and "os" in hh and rh["os"] != hh["os"]:
            out.append(f"kernel {rh['os']} there, {hh['os']} here")
        if not out and rh.get("machine_id") and hh.get("machine_id") and rh["machine_id"] != hh["machine_id"]:
            out.append("another machine of the same kind (machine-id differs; VMs of one type still differ "
                       "in speed)")
    if runner in RUNTIME_PACKAGES:
        rv = {_key(k): v for k, v in ((recorded.get("runtime") or {}).get("versions") or {}).items()}
        hv = {_key(k): v for k, v in ((here.get("runtime") or {}).get("versions") or {}).items()}
        names = [_key(d) for d in RUNTIME_PACKAGES[runner]]
        for name in names:
            if name in rv:
                if name not in hv:
                    installed = [n for n in names if n in hv]
                    now = f"{installed[0]} {hv[installed[0]]}" if installed else "not installed"
                    out.append(f"{name} {rv[name]} there, {now} here")
                elif rv[name] != hv[name]:
                    out.append(f"{name} {rv[name]} there, {hv[name]} here")
                break
    return out


def mismatch_warning(profile_name: str, recorded: Mapping[str, Any] | None, runner: str, *,
                     what: str = "measured", here: Mapping[str, Any] | None = None) -> str | None:
    """One warning line when this machine differs from where ``profile_name``'s numbers were
    ``what`` ("measured", "calibrated"), or None. ``recorded=None`` (no fingerprint) and runners
    that are not compared give None."""
    if not recorded or (runner not in HOST_RUNNERS and runner not in RUNTIME_PACKAGES):
        return None
    threads = (recorded.get("runtime") or {}).get("threads")
    here = here if here is not None else fingerprint(runner, threads)
    diffs = differences(recorded, here, runner)
    if not diffs:
        return None
    route = ("it measures a small profile of this machine, since a calibration does not carry to another processor"
             if cpu_differences(recorded, here, runner) else
             f"it calibrates {profile_name} where that carries, else measures a small profile of its own")
    return (f"profile {profile_name} was {what} on another {'host or runtime' if runner in HOST_RUNNERS else 'runtime'}"
            f" ({'; '.join(diffs)}): its estimates may be off here; make it hold with "
            f"`bench adapt --device {profile_name} --name NEW` (at most 10 minutes of this machine: {route}) and use NEW")
