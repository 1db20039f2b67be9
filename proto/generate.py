"""Regenerate the Python modules of every ``.proto`` file in ``proto/``.

Run from anywhere: ``python proto/generate.py`` (or ``python -m proto.generate``). Needs
``grpcio-tools`` (in the ``test`` extra); nothing else in the package imports it. For
``proto/foo.proto`` it writes ``proto/foo_pb2.py``, ``proto/foo_pb2.pyi`` and
``proto/foo_pb2_grpc.py``. The include root is the repository root, so the generated
gRPC modules import their messages as ``from proto import foo_pb2``; the generated files
are committed, and ``tests/test_proto_generated.py`` checks they are up to date.

``--out DIR`` writes the tree (``DIR/proto/...``) elsewhere instead, which is how the test
regenerates without touching the checkout.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
ROOT = PROTO_DIR.parent


def proto_files() -> list[Path]:
    """Every ``.proto`` file in ``proto/``, sorted."""
    return sorted(PROTO_DIR.glob("*.proto"))


def generated_names(proto: Path) -> list[str]:
    """The module files protoc writes for one ``.proto`` (relative to ``proto/``)."""
    stem = proto.stem
    return [f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"]


def generate(out_root: Path = ROOT) -> list[Path]:
    """Run protoc on every ``.proto`` in ``proto/``, writing under ``out_root/proto``.

    Returns the paths written. Raises ``RuntimeError`` with protoc's message on failure.
    """
    import importlib.util
    import subprocess

    if importlib.util.find_spec("grpc_tools") is None:
        raise RuntimeError("regenerating the protos needs grpcio-tools: pip install grpcio-tools "
                           "(it is in the 'test' extra)")
    files = proto_files()
    if not files:
        return []
    out_root = Path(out_root)
    (out_root / "proto").mkdir(parents=True, exist_ok=True)
    spec = importlib.util.find_spec("grpc_tools")
    assert spec is not None and spec.submodule_search_locations
    well_known = str(Path(list(spec.submodule_search_locations)[0]) / "_proto")
    args = [
        sys.executable, "-m", "grpc_tools.protoc",
        f"-I{ROOT}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        # absolute paths inside the -I root: protoc names them proto/<file>.proto
        *[str(p) for p in files],
    ]
    # A separate process: protoc's C++ protobuf must not share a process with another
    # copy of it (TensorFlow's, for one), which crashes.
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"protoc failed (exit {proc.returncode}) on {', '.join(p.name for p in files)}: "
                           f"{(proc.stderr or proc.stdout).strip()}")
    return [out_root / "proto" / n for p in files for n in generated_names(p)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT, help="root to write proto/*_pb2*.py under (default: the repository)")
    args = ap.parse_args(argv)
    try:
        written = generate(args.out)
    except RuntimeError as e:
        print(f"generate: error: {e}", file=sys.stderr)
        return 1
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
