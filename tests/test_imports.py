"""The package's import graph: no cycle among any imports that run, and the core never imports the CLI.

The graph is read from the source (``ast``), so nothing is executed: a node is
a module of ``partitioner``; an edge ``a -> b`` means ``a`` imports ``b``
anywhere it can run -- at module level or inside a function or method body.
An import under ``if TYPE_CHECKING:`` never runs and is not an edge (type
annotations may name a module that imports this one). ``from . import x`` points at
the submodule ``x`` when there is one, otherwise at the package. Importing a
submodule also runs its parent packages' ``__init__``; those implicit edges
are left out, as every import-graph checker does, since a package's
``__init__`` importing its own submodules is not a cycle.
"""
from __future__ import annotations

import ast
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import partitioner

ROOT = "partitioner"
CLI = "partitioner.cli"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _modules() -> dict[str, Path]:
    """Every module of the package, by dotted name, with its source file."""
    found = {ROOT: Path(partitioner.__file__)}
    for info in pkgutil.walk_packages(partitioner.__path__, prefix=f"{ROOT}."):
        spec = importlib.util.find_spec(info.name)
        assert spec is not None and spec.origin, info.name
        found[info.name] = Path(spec.origin)
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of a (possibly relative) import's module part."""
    if level == 0:
        return target or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _imports(module: str, path: Path, modules: dict[str, Path], module_level: bool) -> set[str]:
    """Modules of the package that ``module`` imports (at module level, or anywhere that can run)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    statements = _module_level(tree.body) if module_level else _runnable(tree)
    found: set[str] = set()
    for node in statements:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, _is_package(path), node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {name for name in found if name in modules and name != module}


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements run on import: the body, descending into if/try/with but not def/class."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            out.extend(_module_level(node.orelse))  # the body never runs on import
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody"):
                out.extend(_module_level(getattr(node, field, []) or []))
            for handler in getattr(node, "handlers", []):
                out.extend(_module_level(handler.body))
    return out


def _runnable(tree: ast.Module) -> list[ast.AST]:
    """Every node of the module, function bodies included, except what sits under ``if TYPE_CHECKING:``."""
    hidden = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node.test)
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    return [node for node in ast.walk(tree) if id(node) not in hidden]


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _graph(module_level: bool) -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules, module_level) for name, path in modules.items()}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_walk_sees_the_whole_package():
    graph = _graph(module_level=True)
    for name in ("partitioner.solvers.dp.solver", "partitioner.solvers.feasibility", "partitioner.simulate.engine"):
        assert name in graph
    assert "partitioner.solvers.dp.recursion" in graph["partitioner.solvers.dp.solver"]


def test_find_cycle_finds_one():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.slow
def test_no_import_cycle_at_module_level():
    cycle = _find_cycle(_graph(module_level=True))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.slow
def test_no_import_cycle_even_through_function_bodies():
    """A function-level import keeps a heavy dependency off ``import partitioner``; it never dodges a cycle."""
    cycle = _find_cycle(_graph(module_level=False))
    assert cycle is None, "import cycle (counting imports inside functions): " + " -> ".join(cycle or [])


def test_the_runnable_walk_sees_function_bodies_but_not_type_checking_blocks():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import hidden_one\n"
        "def f():\n    import seen_one\n"
    )
    names = {alias.name for node in _runnable(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert names == {"seen_one"}


@pytest.mark.slow
def test_the_core_never_imports_the_cli():
    graph = _graph(module_level=False)  # any import that can run, even inside a function
    allowed = {f"{ROOT}.__main__"}
    offenders = {
        name: sorted(n for n in deps if n == CLI or n.startswith(CLI + "."))
        for name, deps in graph.items()
        if name not in allowed and name != CLI and not name.startswith(CLI + ".")
    }
    offenders = {name: deps for name, deps in offenders.items() if deps}
    assert not offenders, f"the core imports the CLI: {offenders}"


def test_every_subpackage_is_installed():
    """``pip install .`` ships only the packages pyproject.toml lists: a new package must be listed."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (the package supports 3.10)
    listed = set(tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["packages"])
    found = {ROOT} | {info.name for info in pkgutil.walk_packages(partitioner.__path__, prefix=f"{ROOT}.") if info.ispkg}
    assert found <= listed, f"not in pyproject.toml's [tool.setuptools] packages: {sorted(found - listed)}"


# The packages in dependency order (DESIGN.md, "Layout"): each imports only packages before it.
LAYERS = ("core", "problem", "cluster", "plan", "simulate", "solvers", "presets", "costs", "frameworks",
          "planning", "batch", "cli")


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_packages_import_only_the_packages_before_them():
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = sorted(
        f"{name} -> {dep}"
        for name, deps in _graph(module_level=False).items()
        for dep in deps
        if _package(name) and _package(dep) and rank[_package(dep)] > rank[_package(name)]
    )
    assert not upward, f"imports against the dependency order {' <- '.join(LAYERS)}: {upward}"


def test_every_package_is_placed_in_the_order():
    found = {info.name for info in pkgutil.iter_modules(partitioner.__path__) if info.ispkg}
    assert found == set(LAYERS), f"packages not in LAYERS: {sorted(found - set(LAYERS))}"


# Subpackages in dependency order (DESIGN.md, "Layout"): within each package, a subpackage imports only
# the ones before it. The modules at the top of a package are not ranked (in costs, options and comm
# below them all, layers, entry and build above; in planning, options, run, records and results between
# the subpackages, plan_model above them all).
SUBPACKAGE_LAYERS = {
    "costs": ("attention", "memory", "compute", "axes"),
    "planning": ("reports", "schedules", "targets", "search", "recipes"),
}


def _subpackage(module: str, package: str) -> str | None:
    parts = module.split(".")
    layers = SUBPACKAGE_LAYERS[package]
    return parts[2] if len(parts) > 2 and parts[1] == package and parts[2] in layers else None


@pytest.mark.parametrize("package", sorted(SUBPACKAGE_LAYERS))
def test_subpackages_import_only_the_ones_before_them(package):
    rank = {name: i for i, name in enumerate(SUBPACKAGE_LAYERS[package])}
    upward = sorted(
        f"{name} -> {dep}"
        for name, deps in _graph(module_level=False).items()
        for dep in deps
        if (low := _subpackage(name, package)) and (high := _subpackage(dep, package)) and rank[high] > rank[low]
    )
    order = " <- ".join(SUBPACKAGE_LAYERS[package])
    assert not upward, f"imports against the order of {package}'s subpackages {order}: {upward}"


@pytest.mark.parametrize("package", sorted(SUBPACKAGE_LAYERS))
def test_every_subpackage_is_placed_in_the_order(package):
    found = {info.name for info in pkgutil.iter_modules(importlib.import_module(f"{ROOT}.{package}").__path__)
             if info.ispkg}
    layers = set(SUBPACKAGE_LAYERS[package])
    assert found == layers, f"{package}'s subpackages not in SUBPACKAGE_LAYERS: {sorted(found ^ layers)}"


def test_the_subpackage_order_check_sees_an_upward_import():
    """The planning order is not vacuous: search imports targets, never the reverse."""
    graph = _graph(module_level=False)
    assert "partitioner.planning.targets.rules" in graph["partitioner.planning.search.target_solve"]
    assert _subpackage("partitioner.planning.search.target_solve", "planning") == "search"
    assert _subpackage("partitioner.planning.run", "planning") is None
