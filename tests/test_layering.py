"""Dependencies point one way: library modules never import command-line modules, and the
estimator imports none of the packages built on it."""
import ast
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
    out: set[str] = set()
    for node in _nodes(ast.parse(path.read_text()), skip_main):
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


def test_nas_refine_and_search_import_no_cycle():
    refine = _imports(ROOT / "nas" / "refine.py")
    assert "nas.search" not in refine and not any(m.startswith("nas.search.") for m in refine)


def test_estimator_models_and_fast_path_import_no_cycle():
    """The fast path evaluates the models' arrays; what both need (the metrics, their
    difficulties, the prediction record) lives below them in estimator.conformal."""
    fast = _imports(ROOT / "estimator" / "fastpath.py")
    assert "estimator.models" not in fast and not any(m.startswith("estimator.models.") for m in fast)
    assert "estimator.fastpath" not in _imports(ROOT / "estimator" / "conformal.py")
