"""``estimator accel build|status|clean``: the optional compiled hot modules (estimator.accel)."""
from __future__ import annotations

import argparse
import json
import sys
import time

from . import accel


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "accel", help="compile the service's hot modules with Cython (optional, faster estimates)",
        description="Compile the modules on the estimation path (importer, shape propagation, aggregation, "
                    "response building) and the typed ONNX import core (estimator.native_import) with Cython "
                    "into the cache directory. They are loaded only while "
                    "their source is unchanged; CL_ACCEL=0 turns them off. Needs the 'accel' extra "
                    "(pip install -e '.[accel]') and a C compiler.")
    sub = p.add_subparsers(dest="accel_command", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="compile the current sources (a few minutes)")
    b.add_argument("--module", action="append", choices=accel.ALL, metavar="MODULE",
                   help=f"only this module (repeatable; default all: {', '.join(accel.ALL)})")
    b.add_argument("--jobs", type=int, default=None, help="parallel compiler jobs (default: all cores)")
    b.set_defaults(func=run_build)
    s = sub.add_parser("status", help="which modules are compiled for their current source")
    s.add_argument("--json", action="store_true", help="print machine-readable JSON")
    s.set_defaults(func=run_status)
    c = sub.add_parser("clean", help="remove the compiled modules (pure Python from the next start)")
    c.set_defaults(func=run_clean)


def run_build(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    files = accel.build(args.module or accel.ALL, jobs=args.jobs,
                        log=lambda msg: print(f"[{time.monotonic() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True))
    print(f"compiled {len(files)} module(s) into {accel.accel_dir()} in {time.monotonic() - t0:.0f} s; "
          "new processes load them (estimator accel status)")
    return 0


def run_status(args: argparse.Namespace) -> int:
    rows = accel.status()
    if args.json:
        json.dump({"enabled": accel.enabled(), "dir": str(accel.accel_dir()), "modules": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"compiled modules: {accel.accel_dir()} ({'enabled' if accel.enabled() else f'disabled by {accel.ENV_ACCEL}=0'})")
    for r in rows:
        print(f"  {r['module']:<24} {r['state']:<10} {r['file'] or ''}")
    return 0


def run_clean(args: argparse.Namespace) -> int:
    gone = accel.clean()
    print(f"removed {len(gone)} compiled module(s) from {accel.accel_dir()}")
    return 0
