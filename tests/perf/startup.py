"""Start-up figures of the three commands people run first (issue 19 targets in brackets).

* ``estimator devices`` wall time [<= 1 s];
* ``estimator predict MODEL.onnx --device host-cpu`` wall time, on an ONNX file of the zoo's
  MobileNetV2 (exported once, with weights, not timed) and a warm model cache [<= 2 s];
* ``estimation-service serve`` from the process start until health answers SERVING, warm
  model cache [<= 3 s].

Each command runs once untimed (to warm the model cache and the OS file cache), then
``--runs`` times; the script prints every run, the median and the minimum, and which heavy
libraries each command imported (``python -X importtime``), and asserts nothing. Run it
on a quiet machine; on a loaded core the figures include the time spent waiting for it.

    python tests/perf/startup.py [--runs 5] [--profiles profiles] [--device host-cpu]
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "pandas", "sklearn", "scipy", "crepes", "matplotlib", "onnxsim", "onnxruntime", "optuna",
         "tensorflow", "grpc", "onnx", "numpy")


def _cmd(name: str) -> list[str]:
    """The console script, or ``python -m`` of its module where it is not on the PATH."""
    exe = shutil.which(name)
    if exe:
        return [exe]
    mod = {"estimator": "estimator.cli", "estimation-service": "service.cli"}[name]
    return [sys.executable, "-m", mod]


def _timed(argv: list[str], env=None, stderr=subprocess.PIPE) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=stderr, text=True, timeout=600, env=env)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}):\n{(r.stderr or '')[-2000:]}")
    return dt


def _heavy_imports(argv: list[str], measure) -> str:
    """The heavy top-level packages a command imports until it is done (``-X importtime``)."""
    with tempfile.TemporaryFile("w+") as err:
        measure(argv, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}, stderr=err)
        err.seek(0)
        text = err.read()
    found = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)", text,
                                                            flags=re.M)}
    return ", ".join(h for h in HEAVY if h in found) or "none of them"


def _serve_ready(argv: list[str], timeout_s: float = 300.0, env=None, stderr=subprocess.DEVNULL) -> float:
    """Seconds from starting ``argv`` (a serve command on port 0) until health is SERVING."""
    import grpc  # noqa: PLC0415
    from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: PLC0415

    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    try:
        address = None
        for line in p.stdout:  # "estimation-service: listening on ADDRESS"
            m = re.search(r"listening on (\S+)", line)
            if m:
                address = m.group(1)
                break
        if address is None:
            raise SystemExit(f"{' '.join(argv)} did not start (exit {p.wait()})")
        with grpc.insecure_channel(address) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while time.perf_counter() - t0 < timeout_s:
                try:
                    if stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1).status == \
                            health_pb2.HealthCheckResponse.SERVING:
                        return time.perf_counter() - t0
                except grpc.RpcError:
                    pass
                time.sleep(0.01)
        raise SystemExit(f"not SERVING after {timeout_s:.0f} s")
    finally:
        p.kill()  # (SIGKILL: the CPU time counted is the start-up's, not a graceful stop's)
        p.wait()


def _cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far (their children included)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _report(label: str, target: float, values: list[float], cpu: list[float], heavy: str) -> None:
    med = statistics.median(values)
    runs = " ".join(f"{v:.2f}" for v in values)
    print(f"{label}")
    print(f"  wall median {med:5.2f} s, min {min(values):5.2f} s (target <= {target:g} s: "
          f"{'met' if med <= target else 'NOT met'}); runs: {runs}")
    print(f"  CPU (user + system, the process and its children) median {statistics.median(cpu):5.2f} s "
          "(on a loaded core, the wall time an idle one would come close to)")
    print(f"  imports: {heavy}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--runs", type=int, default=5, help="timed runs per command (default 5)")
    ap.add_argument("--profiles", type=Path, default=ROOT / "profiles", help="profiles for the server")
    ap.add_argument("--device", default="host-cpu")
    args = ap.parse_args()

    from estimator import zoo  # noqa: PLC0415
    from estimator.onnx_import import native_core  # noqa: PLC0415

    print(f"native importer: {'built' if native_core() else 'not built (pure Python)'}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="cl-startup-") as tmp:
        model = Path(tmp) / "mobilenet_v2.onnx"
        model.write_bytes(zoo.export_onnx("mobilenet_v2", 224))
        cases = [
            ("estimator devices", 1.0, _cmd("estimator") + ["devices"], _timed),
            (f"estimator predict mobilenet_v2.onnx --device {args.device}", 2.0,
             _cmd("estimator") + ["predict", str(model), "--device", args.device], _timed),
            ("estimation-service serve until SERVING", 3.0,
             _cmd("estimation-service") + ["serve", "--profiles", str(args.profiles), "--port", "0"], _serve_ready),
        ]
        for label, target, argv, measure in cases:
            measure(argv)  # warm the model cache and the file cache
            values, cpu = [], []
            for _ in range(args.runs):
                c0 = _cpu()
                values.append(measure(argv))
                cpu.append(_cpu() - c0)
            heavy = _heavy_imports(argv, measure)
            _report(label, target, values, cpu, heavy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
