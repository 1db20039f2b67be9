"""bench's network sources and the layering rule behind them: bench names no nas module; the
NAS search spaces reach it as a space provider that nas registers (an entry point in
pyproject.toml, or :func:`bench.network_sources.register_space_provider`)."""
from __future__ import annotations

import ast
import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from bench import network_sources as ns
from estimator.cliutil import run
from estimator.errors import UserError

from .source_metadata import with_entry_points

REPO = Path(__file__).resolve().parents[1]
ENTRY = importlib.metadata.EntryPoint(name="space", value="nas.sources:provider", group=ns.ENTRY_POINT_GROUP)
TINY = {"mobilenet": {"resolutions": (64,), "max_depth": 1, "widths": (0.5,)}}


def _nas_imports(path: Path, root: Path = REPO) -> list[str]:
    """``file:line module`` for each absolute import of ``nas`` or a ``nas.*`` module in ``path``
    (at any depth: module level, in functions, under ``if``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        out += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names if n == "nas" or n.startswith("nas.")]
    return out


def test_bench_imports_no_nas_module():
    files = sorted((REPO / "bench").rglob("*.py"))
    assert REPO / "bench" / "network_sources.py" in files and REPO / "bench" / "runners" / "__init__.py" in files
    assert [hit for f in files for hit in _nas_imports(f)] == []


def test_the_import_scan_sees_nas_imports(tmp_path):
    f = tmp_path / "probe.py"
    f.write_text("import nas\nimport nasty\nfrom nas.spaces import sample\nfrom .nas import x\n"
                 "def f():\n    import nas.export as e\n", encoding="utf-8")
    assert sorted(_nas_imports(f, tmp_path)) == ["probe.py:1 nas", "probe.py:3 nas.spaces", "probe.py:6 nas.export"]


@pytest.fixture
def providers(monkeypatch):
    """No registered provider and the entry points ``eps`` (a list to fill) in place of the
    installed ones; the discovery cache cleared before and after."""
    eps: list[importlib.metadata.EntryPoint] = []

    def entry_points(**params: Any) -> importlib.metadata.EntryPoints:
        return importlib.metadata.EntryPoints(e for e in eps if e.group == params.get("group"))

    monkeypatch.setattr(ns, "_REGISTERED", [])
    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    ns._entry_point_providers.cache_clear()
    yield eps
    ns._entry_point_providers.cache_clear()


def test_pyproject_names_the_nas_provider_as_the_entry_point():
    with (REPO / "pyproject.toml").open("rb") as fh:
        group = tomllib.load(fh)["project"]["entry-points"][ns.ENTRY_POINT_GROUP]
    assert group == {ENTRY.name: ENTRY.value}
    import nas.sources

    assert ENTRY.load() is nas.sources.provider


def test_the_provider_is_found_through_the_entry_point(providers):
    import nas.sources

    with pytest.raises(UserError, match="no provider of NAS search spaces"):
        ns.space_family("mobilenet")
    providers.append(ENTRY)
    ns._entry_point_providers.cache_clear()
    assert ns.space_providers() == [nas.sources.provider]
    assert ns.space_family("mobilenet") == "space:mobilenet"
    specs = ns.space_specs(["mobilenet"], 2, seed=4, options=TINY)
    assert [s.name for s in specs] == ["space:mobilenet#4-0", "space:mobilenet#4-1"]
    assert {s.family for s in specs} == {"space:mobilenet"} and all(s.source == "space" for s in specs)
    rebuilt, skipped = ns.row_specs([{"name": s.name, "family": s.family, "source": s.source, "detail": s.detail}
                                     for s in specs[:1]])
    assert not skipped and rebuilt[0].build() == specs[0].build()


def test_the_provider_is_found_through_explicit_registration(providers):
    import nas.sources

    nas.sources.register()
    nas.sources.register()  # once
    providers.append(ENTRY)  # the same object again through the entry point: asked once
    ns._entry_point_providers.cache_clear()
    assert ns.space_providers() == [nas.sources.provider]
    assert ns.space_family("resnet") == "space:resnet"
    with pytest.raises(TypeError, match="not a space provider"):
        ns.register_space_provider(object())  # type: ignore[arg-type]


class _Fixed:
    """A provider of one space, ``fixed``, whose samples are the same bytes."""

    def resolve(self, space: str) -> tuple[str, Any]:
        if space != "fixed":
            raise UserError(f"unknown space {space!r}")
        return "fixed", b"onnx"

    def sample(self, space, label, handle, n, *, seed, options):
        return [ns.space_network(label, i, seed=seed, detail={"space": space, "index": i},
                                 build=lambda: handle) for i in range(n)]

    def rebuild(self, label, handle, detail):
        return lambda: handle


def test_registered_providers_are_asked_in_order_and_the_first_resolves(providers):
    import nas.sources

    ns.register_space_provider(_Fixed())
    nas.sources.register()
    specs = ns.space_specs(["fixed", "mobilenet"], 3, options=TINY)
    assert [(s.name, s.family) for s in specs] == [("space:fixed#0-0", "space:fixed"), ("space:fixed#0-1", "space:fixed"),
                                                   ("space:mobilenet#0-0", "space:mobilenet")]
    assert specs[0].build() == b"onnx"
    with pytest.raises(UserError, match=r"^--space nosuch: unknown space 'nosuch'$"):  # the first provider's reason
        ns.space_specs(["nosuch"], 1)


def test_a_broken_entry_point_is_named(providers):
    providers.append(importlib.metadata.EntryPoint(name="space", value="no_such_module_here:provider",
                                                   group=ns.ENTRY_POINT_GROUP))
    with pytest.raises(UserError) as e:
        ns.space_specs(["mobilenet"], 1)
    assert "space = no_such_module_here:provider: ModuleNotFoundError" in str(e.value)


def test_without_a_provider_space_is_one_line_naming_the_entry_point_group(providers, tmp_path, capsys):
    assert ns.space_specs([], 3) == []  # no space asked for: no provider needed
    rc = run("bench", "test", ["bench.cmd_calibrate"],
             ["networks", "--device", "nodevice", "--out", str(tmp_path / "out"), "--root", str(tmp_path),
              "--space", "mobilenet", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("bench: error: --space mobilenet: no provider of NAS search spaces is installed")
    assert repr(ns.ENTRY_POINT_GROUP) in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_process_finds_the_provider_through_installed_entry_points_alone(tmp_path):
    """A fresh process, nothing registered, reading pyproject's entry points from package
    metadata on its path (tests/source_metadata.py) as importlib.metadata reads them."""
    code = ("import sys\n"
            "from bench import network_sources as ns\n"
            "assert not ns._REGISTERED and 'nas' not in sys.modules\n"
            "import nas.sources\n"
            "assert ns.space_providers() == [nas.sources.provider], ns.space_providers()\n"
            "print(ns.space_family('mobilenet'), [s.name for s in ns.space_specs(['resnet'], 2, seed=1)])\n")
    done = subprocess.run([sys.executable, "-c", code], env=with_entry_points(os.environ, tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "space:mobilenet ['space:resnet#1-0', 'space:resnet#1-1']"


def test_the_installed_package_finds_the_nas_provider():
    """Where confident-latency is installed with this pyproject's entry points, bench finds
    nas's provider there with nothing registered."""
    try:
        dist = importlib.metadata.distribution("confident-latency")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("confident-latency is not installed")
    if not dist.entry_points.select(group=ns.ENTRY_POINT_GROUP):
        pytest.skip("the installed metadata predates the network-source entry point (reinstall: pip install -e .)")
    import nas.sources

    ns._entry_point_providers.cache_clear()
    try:
        assert nas.sources.provider in ns._entry_point_providers()[0]
    finally:
        ns._entry_point_providers.cache_clear()
