"""Vela runner: Arm's Ethos-U compiler as a *cost model*.

``prepare`` compiles an int8 TFLite model with Vela (the installed ``ethos-u-vela``, run as
``python -m ethosu.vela`` in a temporary directory: a separate process, because Vela's
native reader can crash on malformed flatbuffers) and reads its performance estimate:

* the network time is ``inference_time`` of the summary CSV
  (``<model>_summary_<system config>.csv``), i.e. Vela's estimated NPU cycles divided by
  the configured core clock;
* the per-layer times come from the per-layer CSV that ``--verbose-performance`` writes
  (``<model>_per-layer.csv``: ``Op Cycles`` per operator, by output tensor ``Name``),
  summed per name and divided by the core clock.

These are estimates, not measurements: :attr:`provenance` is ``"estimated"`` and
:meth:`time` returns ``n = 1`` with zero dispersion. Operators Vela leaves on the CPU get
no cycles in Vela's estimate; they are listed in ``Prepared.info["cpu_ops"]`` (op type,
tensor name and Vela's reason) so later code can flag them, and a model with no NPU
operator at all is refused rather than reported as taking 0 ms.

Default configuration: the NXP i.MX93 (Ethos-U65-256)
-----------------------------------------------------
NXP's own Vela fork (github.com/nxp-imx/ethos-u-vela, the ``vela`` shipped in NXP's i.MX
Yocto BSP for the i.MX93) compiles, when given no configuration, with its
``Imx93ArchitectureFeatures``: an Ethos-U65-256 with the *Ethos-U65 High-End* system
(1 GHz NPU clock, SRAM on AXI0 at clock scale 1.0 = 16 GB/s, burst 32, latency 32/32
cycles; DRAM on AXI1 at clock scale 0.234375 = 3.75 GB/s, burst 128, read/write latency
500/250 cycles) and the *Dedicated SRAM* memory mode (weights and arena in DRAM, a 384 KiB
SRAM cache: ``--arena-cache-size`` default 384 KiB). Arm's upstream Vela, installed here,
bundles exactly these settings in its ``Arm/vela.ini`` as ``System_Config.Ethos_U65_High_End``
and ``Memory_Mode.Dedicated_Sram_384KB`` (which also sets the max outstanding transactions
upstream adds: SRAM 16/16, DRAM 24/12), so the defaults below select them from the bundled
file and no configuration file of our own is needed. Note that 1 GHz is the i.MX93's
overdrive NPU clock; boards running the NPU slower scale linearly in the compute-bound part.
"""
from __future__ import annotations

import configparser
import csv
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .base import Prepared, Runner, RunnerError, Timing

__all__ = ["VelaRunner", "VelaEstimate", "IMX93", "vela_version", "bundled_config_dir", "vela_compile"]

#: The NXP i.MX93 configuration (see the module docstring for its source).
IMX93 = {
    "accelerator_config": "ethos-u65-256",
    "system_config": "Ethos_U65_High_End",
    "memory_mode": "Dedicated_Sram_384KB",
    "config_file": "Arm/vela.ini",
}

ACCELERATORS = (
    "ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u65-512",
    "ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048",
)

_TFLITE_IDENT = b"TFL3"


def vela_version() -> str:
    """Installed ethos-u-vela version; :class:`RunnerError` when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version("ethos-u-vela")
    except metadata.PackageNotFoundError:
        raise RunnerError("Arm Vela is not installed: pip install 'confident-latency[tflite]' "
                          "(ethos-u-vela)") from None


def bundled_config_dir() -> Path:
    """The ``config_files`` directory shipped inside ethos-u-vela."""
    import importlib.util

    spec = importlib.util.find_spec("ethosu")
    if spec is None or not spec.submodule_search_locations:
        raise RunnerError("Arm Vela is not installed: pip install 'confident-latency[tflite]' (ethos-u-vela)")
    return Path(list(spec.submodule_search_locations)[0]) / "config_files"


def _resolve_config(config_file: str | os.PathLike[str]) -> Path:
    """A bundled ``Vendor/file.ini`` name (as Vela's ``--config`` accepts) or a path."""
    p = Path(config_file)
    if not p.is_absolute() and len(p.parts) == 2 and not str(config_file).startswith((".", "~")):
        bundled = bundled_config_dir() / p
        if bundled.exists():
            return bundled
    p = p.expanduser()
    if not p.exists():
        raise RunnerError(f"Vela configuration file {str(config_file)!r} not found (neither a bundled "
                          f"'Vendor/file.ini' under {bundled_config_dir()} nor a path)")
    return p.resolve()


@dataclass
class VelaEstimate:
    """What one Vela compilation estimated."""

    inference_ms: float
    per_layer_ms: dict[str, float]
    cpu_ops: list[dict[str, str]]
    npu_ops: int
    core_clock_hz: float
    summary: dict[str, Any] = field(default_factory=dict)
    log: str = field(default="", repr=False)


# --------------------------------------------------------------------- output parsing

_WARN_RE = re.compile(r"^Warning \(supported operators\) operator: (?P<op>[^,]+), ofm: '(?P<name>.*)'\s*$")


def _cpu_reasons(log: str) -> dict[str, str]:
    """Vela's "Warning (supported operators)" blocks: ofm tensor name -> reason text."""
    reasons: dict[str, str] = {}
    lines = log.splitlines()
    i = 0
    while i < len(lines):
        m = _WARN_RE.match(lines[i])
        if not m:
            i += 1
            continue
        text: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() and not _WARN_RE.match(lines[i]):
            line = lines[i].strip()
            text.append(line[len("Reason:"):].strip() if line.startswith("Reason:") else line)
            i += 1
        reasons[m.group("name")] = f"{m.group('op')}: " + " ".join(text)
    return reasons


def _find_one(out: Path, pattern: str, what: str, log: str) -> Path:
    hits = sorted(out.glob(pattern))
    if not hits:
        raise RunnerError(f"Vela wrote no {what} ({pattern}); its output ends:\n{_tail(log)}")
    return hits[0]


def _tail(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def _num(v: Any) -> Any:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return int(f) if f.is_integer() and "." not in str(v) and "e" not in str(v).lower() else f


def parse_vela_output(out_dir: Path, log: str) -> VelaEstimate:
    """Read the summary and per-layer CSVs Vela wrote into ``out_dir``."""
    summary_path = _find_one(out_dir, "*_summary_*.csv", "summary CSV", log)
    with open(summary_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise RunnerError(f"Vela's summary {summary_path.name} is empty")
    summary = {k: _num(v) for k, v in rows[0].items()}
    try:
        clock = float(summary["core_clock"])
        inference_s = float(summary["inference_time"])
    except (KeyError, TypeError, ValueError) as e:
        raise RunnerError(f"Vela's summary {summary_path.name} lacks core_clock/inference_time: {e}") from None

    per_layer_path = _find_one(out_dir, "*_per-layer.csv", "per-layer CSV", log)
    with open(per_layer_path, newline="") as f:
        layer_rows = list(csv.DictReader(f))
    reasons = _cpu_reasons(log)
    per_layer_cycles: dict[str, float] = {}
    cpu_ops: list[dict[str, str]] = []
    npu_ops = 0
    for r in layer_rows:
        name = r.get("Name", "")
        target = (r.get("Target") or "").strip().upper()
        if target == "CPU":
            cpu_ops.append({"op": r.get("Original Operator", ""), "name": name,
                            "reason": reasons.get(name, "not supported on the NPU")})
            continue
        npu_ops += 1
        try:
            cycles = float(r.get("Op Cycles") or 0.0)
        except ValueError:
            raise RunnerError(f"Vela's per-layer CSV has a non-numeric 'Op Cycles' for {name!r}") from None
        per_layer_cycles[name] = per_layer_cycles.get(name, 0.0) + cycles
    # Operators Vela could not place that never reached the per-layer table (it lists the
    # NPU graph's operators) are still reported from the log.
    listed = {c["name"] for c in cpu_ops}
    for name, reason in reasons.items():
        if name not in listed:
            cpu_ops.append({"op": reason.split(":", 1)[0], "name": name, "reason": reason})
    per_layer_ms = {k: v / clock * 1e3 for k, v in per_layer_cycles.items()}
    return VelaEstimate(inference_s * 1e3, per_layer_ms, cpu_ops, npu_ops, clock, summary, log)


# ----------------------------------------------------------------------------- runner


class VelaRunner(Runner):
    """Vela's performance estimate for an Ethos-U configuration (default: NXP i.MX93).

    Options: ``accelerator_config``, ``system_config``, ``memory_mode``, ``config_file``
    (a bundled ``Vendor/file.ini`` name or a path; default ``Arm/vela.ini``),
    ``optimise`` (``"Performance"`` or ``"Size"``), ``arena_cache_size`` (bytes; overrides
    the memory mode's), ``extra_args`` (more Vela CLI arguments), ``timeout_s``.
    """

    name = "vela"
    model_format = "tflite"
    provenance = "estimated"

    def __init__(self, accelerator_config: str = IMX93["accelerator_config"],
                 system_config: str = IMX93["system_config"], memory_mode: str = IMX93["memory_mode"],
                 config_file: str | os.PathLike[str] | None = None, optimise: str = "Performance",
                 arena_cache_size: int | None = None, extra_args: Sequence[str] = (),
                 timeout_s: float = 600.0) -> None:
        self.version = vela_version()
        accelerator_config = str(accelerator_config).lower()
        if accelerator_config not in ACCELERATORS:
            raise RunnerError(f"unknown Ethos-U accelerator {accelerator_config!r}; known: {', '.join(ACCELERATORS)}")
        if optimise not in ("Performance", "Size"):
            raise RunnerError(f"optimise must be 'Performance' or 'Size', got {optimise!r}")
        self.accelerator_config = accelerator_config
        self.system_config = str(system_config)
        self.memory_mode = str(memory_mode)
        self.config_name = str(config_file) if config_file is not None else IMX93["config_file"]
        self.config_path = _resolve_config(self.config_name)
        # Vela wants bundled files by their 'Vendor/file.ini' name (it warns on a full path)
        bundled = bundled_config_dir()
        self._config_arg = (str(self.config_path.relative_to(bundled))
                            if self.config_path.is_relative_to(bundled) else str(self.config_path))
        self.optimise = optimise
        self.arena_cache_size = int(arena_cache_size) if arena_cache_size is not None else None
        self.extra_args = [str(a) for a in extra_args]
        self.timeout_s = float(timeout_s)
        self.core_clock_hz = self._check_sections()
        self._config_sha256 = hashlib.sha256(self.config_path.read_bytes()).hexdigest()

    def _check_sections(self) -> float | None:
        """Check the system config and memory mode exist; return the system's core clock."""
        cp = configparser.ConfigParser()
        try:
            cp.read(self.config_path)
        except configparser.Error as e:
            raise RunnerError(f"cannot parse Vela configuration {self.config_path}: {e}") from e
        systems = [s.split(".", 1)[1] for s in cp.sections() if s.startswith("System_Config.")]
        modes = [s.split(".", 1)[1] for s in cp.sections() if s.startswith("Memory_Mode.")]
        if self.system_config not in systems:
            raise RunnerError(f"system config {self.system_config!r} is not in {self.config_name}; "
                              f"it has: {', '.join(systems)}")
        if self.memory_mode not in modes:
            raise RunnerError(f"memory mode {self.memory_mode!r} is not in {self.config_name}; it has: {', '.join(modes)}")
        clock = cp.get(f"System_Config.{self.system_config}", "core_clock", fallback=None)
        try:
            return float(clock) if clock is not None else None
        except ValueError:
            raise RunnerError(f"{self.config_name}: core_clock {clock!r} of {self.system_config} is not a number") from None

    @property
    def configuration(self) -> str:
        return f"{self.accelerator_config} / {self.system_config} / {self.memory_mode} ({self.config_name})"

    def _command(self, model_path: Path, out_dir: Path) -> list[str]:
        cmd = [sys.executable, "-m", "ethosu.vela", str(model_path),
               "--output-dir", str(out_dir),
               "--accelerator-config", self.accelerator_config,
               "--config", self._config_arg,
               "--system-config", self.system_config,
               "--memory-mode", self.memory_mode,
               "--optimise", self.optimise,
               "--verbose-performance", "--show-cpu-operations"]
        if self.arena_cache_size is not None:
            cmd += ["--arena-cache-size", str(self.arena_cache_size)]
        return cmd + self.extra_args

    def compile(self, model: bytes) -> VelaEstimate:
        """Run Vela on ``model`` and parse its estimate (:class:`RunnerError` on failure)."""
        model = bytes(model)
        if len(model) < 8 or model[4:8] != _TFLITE_IDENT:
            raise RunnerError(f"not a TFLite model: {len(model)} bytes without the 'TFL3' flatbuffer identifier")
        with tempfile.TemporaryDirectory(prefix="vela-") as tmp:
            tmp_path = Path(tmp)
            model_path = tmp_path / "model.tflite"
            model_path.write_bytes(model)
            out_dir = tmp_path / "out"
            try:
                proc = subprocess.run(self._command(model_path, out_dir), cwd=tmp, capture_output=True,
                                      text=True, timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                raise RunnerError(f"Vela did not finish within {self.timeout_s:.0f} s") from None
            log = (proc.stdout or "") + (("\n" + proc.stderr) if proc.stderr else "")
            if proc.returncode != 0:
                how = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"failed (exit {proc.returncode})"
                raise RunnerError(f"Vela {self.version} {how} on the model; output ends:\n{_tail(log)}")
            est = parse_vela_output(out_dir, log)
        if est.npu_ops == 0:
            ops = ", ".join(sorted({c['op'] for c in est.cpu_ops})) or "none"
            raise RunnerError(f"Vela placed no operator on the NPU (CPU operators: {ops}); is the model "
                              "int8-quantised? An estimate of 0 ms would be meaningless.")
        if not est.inference_ms > 0:
            raise RunnerError(f"Vela estimated a non-positive inference time ({est.inference_ms} ms)")
        return est

    # ------------------------------------------------------------------ Runner API

    def prepare(self, model: bytes) -> Prepared:
        est = self.compile(model)
        keep = ("core_clock", "arena_cache_size", "sram_memory_used", "dram_memory_used", "nn_macs",
                "cycles_npu", "cycles_sram_access", "cycles_dram_access", "cycles_total",
                "weights_storage_area", "feature_map_storage_area", "inference_time")
        info: dict[str, Any] = {
            "precision": "int8",
            "estimate_ms": est.inference_ms,
            "npu_ops": est.npu_ops,
            "cpu_ops": est.cpu_ops,
            "cpu_op_count": len(est.cpu_ops),
            # Vela gives CPU-placed operators no time: the estimate covers the NPU part only.
            "estimate_excludes_cpu_ops": bool(est.cpu_ops),
            "vela_summary": {k: est.summary[k] for k in keep if k in est.summary},
        }
        return Prepared(est, "tflite", info)

    def time(self, prepared: Prepared, *, warmup: int = 0, runs: int = 1) -> Timing:
        """Vela's estimate as a :class:`Timing` (``n = 1``, no dispersion; warmup/runs unused)."""
        est: VelaEstimate = prepared.handle
        t = float(est.inference_ms)
        return Timing(median_ms=t, p10_ms=t, p90_ms=t, mad_ms=0.0, mean_ms=t, std_ms=0.0, min_ms=t, n=1)

    def per_layer(self, prepared: Prepared) -> dict[str, float]:
        """Estimated ms per NPU operator, keyed by its output tensor name (CPU ops excluded:
        see ``Prepared.info["cpu_ops"]``)."""
        est: VelaEstimate = prepared.handle
        return dict(est.per_layer_ms)

    def environment(self) -> dict[str, Any]:
        from .base import host_info

        host = host_info()
        accel = self.accelerator_config.replace("ethos-u", "Ethos-U")
        return {
            "runner": self.name,
            "runtime": "ethos-u-vela",
            "runtime_version": self.version,
            "versions": {"ethos-u-vela": self.version, "python": host["python"]},
            "provenance": self.provenance,
            "provenance_note": f"estimated by Vela {self.version}, {self.configuration}; not measured on hardware",
            "device_name": f"Arm {accel} (Vela estimate: {self.system_config}, {self.memory_mode})",
            "accelerator_config": self.accelerator_config,
            "system_config": self.system_config,
            "memory_mode": self.memory_mode,
            "config_file": self.config_name,
            "config_sha256": self._config_sha256,
            "optimise": self.optimise,
            "arena_cache_size": self.arena_cache_size,
            "extra_args": list(self.extra_args),
            "core_clock_hz": self.core_clock_hz,
            "precision": "int8",
            "threads": None,
            "host": host,
        }


# ------------------------------------------------------- compiling models for a board


def vela_compile(model: bytes, *, accelerator_config: str = IMX93["accelerator_config"],
                 system_config: str | None = IMX93["system_config"], memory_mode: str | None = IMX93["memory_mode"],
                 config_file: str | None = IMX93["config_file"], timeout_s: float = 600.0) -> tuple[bytes, str]:
    """Vela's optimised TFLite model (NPU parts as ``ethos-u`` custom operators), which is what
    the Ethos-U TFLite delegate (``libethosu_delegate.so`` on the i.MX93) executes; a model
    that was not compiled by Vela runs entirely on the CPU there. Returns ``(bytes, how)``
    where ``how`` names the Vela used.

    Uses the ``ethos-u-vela`` Python package when installed, otherwise a ``vela`` executable
    on ``PATH`` (NXP's i.MX BSP ships one, whose defaults are the i.MX93's); with the latter
    only ``--accelerator-config`` is passed (its own defaults select the rest).
    """
    import shutil  # noqa: PLC0415

    model = bytes(model)
    if len(model) < 8 or model[4:8] != _TFLITE_IDENT:
        raise RunnerError(f"not a TFLite model: {len(model)} bytes without the 'TFL3' flatbuffer identifier")
    try:
        how = f"ethos-u-vela {vela_version()}"
        cmd = [sys.executable, "-m", "ethosu.vela"]
        extra = ["--accelerator-config", accelerator_config]
        if config_file:
            cfg = _resolve_config(config_file)
            bundled = bundled_config_dir()
            extra += ["--config", str(cfg.relative_to(bundled)) if cfg.is_relative_to(bundled) else str(cfg)]
            if system_config:
                extra += ["--system-config", system_config]
            if memory_mode:
                extra += ["--memory-mode", memory_mode]
    except RunnerError:
        exe = shutil.which("vela")
        if exe is None:
            raise RunnerError("compiling for the Ethos-U delegate needs Vela: pip install ethos-u-vela, or NXP's "
                              "'vela' on PATH") from None
        how, cmd, extra = f"{exe}", [exe], ["--accelerator-config", accelerator_config]
    with tempfile.TemporaryDirectory(prefix="vela-") as tmp:
        src = Path(tmp) / "model.tflite"
        src.write_bytes(model)
        out = Path(tmp) / "out"
        try:
            proc = subprocess.run(cmd + [str(src), "--output-dir", str(out)] + extra, cwd=tmp, capture_output=True,
                                  text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RunnerError(f"Vela did not finish within {timeout_s:.0f} s") from None
        log = (proc.stdout or "") + "\n" + (proc.stderr or "")
        compiled = out / "model_vela.tflite"
        if proc.returncode != 0 or not compiled.is_file():
            raise RunnerError(f"Vela ({how}) could not compile the model (exit {proc.returncode}); output ends:\n"
                              f"{_tail(log)}")
        return compiled.read_bytes(), how
