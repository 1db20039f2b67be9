"""Instructions per in-process network estimate, counted by callgrind (a script, not a test:
prints figures, asserts nothing).

Wall time on a shared 2-vCPU VM moves by 1.5x between the VM's speed levels; an instruction
count does not: two versions of the code compare exactly, with no interleaving. For each
``--network`` (a zoo name, weights stripped as the client sends them) the script runs a child
process twice under ``valgrind --tool=callgrind``, one that makes 1 call of
``Estimator.estimate_network(onnx_bytes, 0.9)`` after a warm-up call and one that makes
``1 + --calls``, and prints the difference divided by ``--calls``: the instructions of one warm
estimate (import, prediction, Monte Carlo sums, calibration, per-layer rows; what the server adds
for protobuf is not in it). ``PYTHONHASHSEED`` is fixed and the collector is frozen after the
warm-up, as the server does. Each child loads the profile under valgrind: minutes per network.

    python tests/perf/estimate_instructions.py --network mobilenet_v2 --network deit_tiny
    python tests/perf/estimate_instructions.py --profiles DIR --device host-cpu --calls 5

Needs ``valgrind`` on the PATH.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _child(device: str, profiles: str | None, network: str, calls: int) -> None:
    import gc

    sys.path.insert(0, str(ROOT))
    from estimator import zoo
    from estimator.predict import Estimator
    from service.client import strip_initializers

    est = Estimator.from_profile(device, root=profiles)
    data = strip_initializers(zoo.export_onnx(network)).SerializeToString()
    est.estimate_network(data, 0.9)
    gc.collect()
    gc.freeze()
    for _ in range(calls):
        est.estimate_network(data, 0.9)


def _count(args: argparse.Namespace, network: str, calls: int) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__, "--child",
           "--device", args.device, "--network", network, "--calls", str(calls)]
    if args.profiles:
        cmd += ["--profiles", args.profiles]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    m = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or m is None:
        raise SystemExit(f"callgrind run failed for {network} ({calls} calls): {out.stderr.strip()[-500:]}")
    return int(m.group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="host-cpu")
    ap.add_argument("--profiles", default=None, metavar="DIR", help="profiles directory (default: the shipped ones)")
    ap.add_argument("--network", action="append", default=None, help="zoo network (repeatable; default mobilenet_v2)")
    ap.add_argument("--calls", type=int, default=3, help="warm calls the difference is taken over (default 3)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    networks = a.network or ["mobilenet_v2"]
    if a.child:
        _child(a.device, a.profiles, networks[0], a.calls)
        return 0
    if shutil.which("valgrind") is None:
        print("estimate_instructions: valgrind is not on the PATH", file=sys.stderr)
        return 2
    # the profile's models built into the model cache here first, so that both children load
    # them from it alike and differ only by the counted calls (a child that trained them, or
    # found a cache another process was writing, counted that work too)
    sys.path.insert(0, str(ROOT))
    from estimator.predict import Estimator  # noqa: PLC0415

    Estimator.from_profile(a.device, root=a.profiles).fast_models()
    for net in networks:
        one, more = _count(a, net, 1), _count(a, net, 1 + a.calls)
        print(f"{a.device} {net}: {(more - one) / a.calls / 1e6:.2f} M instructions per warm estimate_network call "
              f"(callgrind, {a.calls} calls)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
