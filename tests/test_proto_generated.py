"""The committed ``proto/*_pb2*.py`` modules are exactly what ``proto/generate.py`` makes
from the committed ``.proto`` files (so nobody edits generated code or forgets to
regenerate). Needs grpcio-tools (the ``test`` extra)."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

pytest.importorskip("grpc_tools")

from proto import generate  # noqa: E402


def test_every_proto_has_committed_modules_identical_to_regenerated(tmp_path: Path) -> None:
    protos = generate.proto_files()
    assert protos, "no .proto files found in proto/"
    written = generate.generate(tmp_path)
    assert written
    for proto in protos:
        for name in generate.generated_names(proto):
            fresh = tmp_path / "proto" / name
            committed = generate.PROTO_DIR / name
            assert fresh.exists(), f"protoc did not write {name}"
            assert committed.exists(), f"{name} is not committed; run python proto/generate.py"
            assert committed.read_bytes() == fresh.read_bytes(), (
                f"proto/{name} is stale or hand-edited; run python proto/generate.py "
                f"(generated with another grpcio-tools? compare the version stamps)")


def test_generated_grpc_modules_import_messages_from_the_proto_package() -> None:
    for proto in generate.proto_files():
        grpc_src = (generate.PROTO_DIR / f"{proto.stem}_pb2_grpc.py").read_text()
        assert f"from proto import {proto.stem}_pb2" in grpc_src
        importlib.import_module(f"proto.{proto.stem}_pb2_grpc")
