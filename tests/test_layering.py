"""Dependencies point one way: library modules never import command-line modules, the
estimator imports none of the packages built on it, and no modules import each other in a
cycle."""
from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("estimator", "bench", "service", "nas")


def _nodes(tree: ast.AST, skip_main: bool):
    """The tree's nodes; with ``skip_main``, none inside a ``main()`` (a module's script entry)."""
    for node in ast.iter_child_nodes(tree):
        if skip_main and isinstance(node, ast.FunctionDef) and node.name == "main":
            continue
        yield node
        yield from _nodes(node, skip_main)


def _imports(path: Path, *, skip_main: bool = False) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    return _imported(_nodes(ast.parse(path.read_text()), skip_main), pkg)


def _imported(nodes: Iterable[ast.AST], pkg: str) -> set[str]:
    """The absolute module (and module.name) names the import statements among ``nodes`` name,
    relative ones resolved against package ``pkg``."""
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _is_cli(module: str) -> bool:
    leaf = module.rsplit(".", 1)[-1]
    return leaf.startswith("cmd_") or leaf in ("cli", "__main__")


def _modules():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield ".".join(path.relative_to(ROOT).with_suffix("").parts), path


@pytest.mark.parametrize("module,path", [m for m in _modules() if not _is_cli(m[0])], ids=lambda v: str(v))
def test_library_modules_import_no_cli_module(module, path):
    cli = sorted(m for m in _imports(path, skip_main=True) if m.split(".")[0] in PACKAGES and _is_cli(m))
    assert not cli, f"{module} imports command-line module(s) {cli}"


def test_estimator_imports_none_of_the_packages_built_on_it():
    for module, path in _modules():
        if module.startswith("estimator."):
            up = sorted(m for m in _imports(path) if m.split(".")[0] in ("bench", "service", "nas"))
            assert not up, f"{module} imports {up}"


def test_nas_reaches_the_estimator_through_the_interface_only():
    """The search asks :class:`estimator.interface.Estimation`: the in-process
    implementation, or the gRPC client for ``--service``; never the server, never the
    estimator's models."""
    allowed = {"estimator.interface", "estimator.inprocess", "estimator.errors", "estimator.onnx_strip",
               "estimator.profile", "estimator.cliutil", "estimator.cliargs", "service.client"}
    for module, path in _modules():
        if module.startswith("nas."):
            used = {m for m in _imports(path) if m.split(".")[0] in ("estimator", "service")}
            modules = {m for m in used if m in allowed or m.rpartition(".")[0] not in allowed}
            assert modules <= allowed, f"{module} imports {sorted(modules - allowed)}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports, at module level or inside functions alike
    (a function-level import hides a cycle from the interpreter, not from the design);
    imports under ``if TYPE_CHECKING:`` are left out (they never run)."""
    paths = {_module_name(p): p for pkg in (*PACKAGES, "proto") for p in sorted((ROOT / pkg).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):  # drop TYPE_CHECKING blocks before collecting
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
        found = _imported(ast.walk(tree), name if path.name == "__init__.py" else name.rpartition(".")[0])
        deps = set()
        for m in found:  # a name inside a module counts as that module
            while m and m not in paths:
                m = m.rpartition(".")[0]
            if m and m != name:
                deps.add(m)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [("a", "b", "c")]
    assert "nas.device" in _import_graph()["nas.refine"]  # a function-level import is an edge


def test_no_import_cycles():
    assert _cycles(_import_graph()) == []
