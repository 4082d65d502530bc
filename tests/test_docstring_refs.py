"""Every Sphinx-role reference in the package's source names an object that exists.

A reference is ``:role:`target``` with a Python-domain role (``func``,
``class``, ``mod``, ``meth``, ``attr``, ``data``, ``obj``, ``exc``,
``const``), in a docstring or a comment. The target is read as Sphinx reads
it: a ``~`` or ``!`` prefix and trailing ``()`` are dropped, ``title <target>``
names ``target``. It resolves, in this order, as

* a relative name (``.name``): in the current module, then in its package,
  then as the dotted tail of exactly one object of the package (Sphinx's
  ``.`` search, which warns when the tail names more than one);
* a member of the class the reference sits in (``:meth:`matrix``` inside
  ``StageCosts``), then a name in the current module's namespace
  (``StageCosts.matrix``);
* an absolute name (``partitioner.solvers.dp``, ``json.dumps``): the longest
  prefix that imports as a module, then attributes;
* a builtin (``OSError``).

An attribute is found on the object, or declared by its class without a
class-level value: a dataclass field, an annotation, or ``self.name = ...``
in a method. ``:mod:`` must name a module.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import importlib
import inspect
import pkgutil
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

import partitioner

ROLES = ("func", "class", "mod", "meth", "attr", "data", "obj", "exc", "const")
REFERENCE = re.compile(r":(?:py:)?(?P<role>" + "|".join(ROLES) + r"):`(?P<text>[^`]+)`")
_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Reference:
    """One ``:role:`text``` found in a module's source: its 1-based line and the class it sits in."""

    module: str
    line: int
    role: str
    text: str
    scope: str = ""

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: :{self.role}:`{self.text}`"


def target(text: str) -> str:
    """The dotted name a reference's text points at (title, ``~``/``!`` and ``()`` removed)."""
    text = text.strip()
    if text.endswith(">") and "<" in text:
        text = text[text.rindex("<") + 1 : -1]
    return text.lstrip("~!").removesuffix("()")


def package_modules(package: str) -> dict[str, ModuleType]:
    """Every module of ``package`` (``__main__`` aside), imported, by dotted name."""
    root = importlib.import_module(package)
    found = {package: root}
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            found[info.name] = importlib.import_module(info.name)
    return found


def _class_spans(source: str) -> list[tuple[int, int, str]]:
    """``(first line, last line, qualified name)`` of every class in the source, outer before inner."""
    spans = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = prefix
            if isinstance(child, ast.ClassDef):
                inner = f"{prefix}{child.name}."
                spans.append((child.lineno, child.end_lineno or child.lineno, inner.rstrip(".")))
            visit(child, inner)

    visit(ast.parse(source), "")
    return spans


def references(name: str, module: ModuleType) -> list[Reference]:
    """The references in a module's source file, in order, each with its innermost enclosing class."""
    source = Path(inspect.getfile(module)).read_text()
    spans = _class_spans(source)
    found = []
    for match in REFERENCE.finditer(source):
        line = source.count("\n", 0, match.start()) + 1
        scopes = [qualified for first, last, qualified in spans if first <= line <= last]
        found.append(Reference(name, line, match["role"], match["text"], scopes[-1] if scopes else ""))
    return found


@functools.cache
def _instance_attributes(cls: type) -> frozenset[str]:
    """Names the class's own methods assign to ``self.<name>``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return frozenset()
    return frozenset(
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name) and node.value.id == "self"
    )


def _member(obj: object, name: str) -> object:
    """``obj.name``; None for an attribute a class declares without a class-level value; else ``_MISSING``.

    Declared: a dataclass field, a class annotation, or an assignment to
    ``self.<name>`` in one of its methods (or its bases').
    """
    value = getattr(obj, name, _MISSING)
    if value is not _MISSING:
        return value
    if inspect.isclass(obj):
        fields = obj.__dataclass_fields__ if dataclasses.is_dataclass(obj) else {}
        bases = obj.__mro__[:-1]
        annotated = any(name in vars(base).get("__annotations__", {}) for base in bases)
        if name in fields or annotated or any(name in _instance_attributes(base) for base in bases):
            return None
    return _MISSING


def _walk(obj: object, parts: list[str]) -> object:
    """Follow attribute names from ``obj``; ``_MISSING`` when one is absent."""
    for index, part in enumerate(parts):
        obj = _member(obj, part)
        if obj is _MISSING or (obj is None and index < len(parts) - 1):
            return _MISSING
    return obj


def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _fits(obj: object, role: str) -> bool:
    """Whether a found object can be what the role names (``:mod:`` names a module)."""
    return obj is not _MISSING and (role != "mod" or isinstance(obj, ModuleType))


class Resolver:
    """Resolves references against a set of imported modules (see the module docstring for the rules)."""

    def __init__(self, modules: dict[str, ModuleType]) -> None:
        self.modules = modules
        self.tails: dict[str, set[str]] = {}
        for full in self._index(modules):
            parts = full.split(".")
            for cut in range(1, len(parts)):
                self.tails.setdefault(".".join(parts[cut:]), set()).add(full)

    @staticmethod
    def _index(modules: dict[str, ModuleType]) -> set[str]:
        """Dotted names of the modules, their globals, and members of the classes they define."""
        names = set(modules)
        for name, module in modules.items():
            for key, value in vars(module).items():
                names.add(f"{name}.{key}")
                if inspect.isclass(value) and value.__module__ == name:
                    members = set(dir(value)) | set(getattr(value, "__dataclass_fields__", {}))
                    names.update(f"{name}.{key}.{member}" for member in members)
        return names

    def absolute(self, dotted: str) -> object:
        """The object an absolute dotted name names, importing its longest module prefix."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            head = ".".join(parts[:cut])
            module = self.modules.get(head) or _import(head)
            if module is not None:
                return _walk(module, parts[cut:])
        return _MISSING

    def candidates(self, reference: Reference) -> list[object]:
        """Objects the reference may name, in Sphinx's order of search (``_MISSING`` where none)."""
        name, here = target(reference.text), self.modules[reference.module]
        module, scope = reference.module, reference.scope
        if name.startswith("."):
            bare = name.lstrip(".")
            package = module if hasattr(here, "__path__") else module.rpartition(".")[0]
            found = [self.absolute(f"{prefix}.{bare}") for prefix in (module, package) if prefix]
            by_tail = [self.absolute(full) for full in sorted(self.tails.get(bare, ()))]
            distinct = {id(obj): obj for obj in by_tail if _fits(obj, reference.role)}
            return found + (list(distinct.values()) if len(distinct) == 1 else [])
        in_class = [_walk(here, f"{scope}.{name}".split("."))] if scope else []
        return in_class + [
            _walk(here, name.split(".")),
            self.absolute(name),
            _walk(builtins, name.split(".")),
        ]

    def resolves(self, reference: Reference) -> bool:
        """Whether the reference names an object (a module, for ``:mod:``); one, for a dotted tail."""
        return any(_fits(obj, reference.role) for obj in self.candidates(reference))

    def unresolved(self) -> list[Reference]:
        """Every reference in the modules that does not resolve."""
        return [
            reference
            for name, module in sorted(self.modules.items())
            for reference in references(name, module)
            if not self.resolves(reference)
        ]


SAMPLE = {
    "__init__.py": '''"""Sample package: :func:`.a.good`, :func:`.only_in_b`; bad: :class:`.Box` (in a and b)."""''',
    "a.py": '''"""Sample: :func:`.good`, :func:`~sample_refs.a.good`, :class:`Box.size`, :mod:`json`,
:func:`the title <json.dumps>`, :exc:`OSError`, :attr:`Crate.count` (set in ``__init__``);
bad: :func:`.gone`, :mod:`.good`, :attr:`Box.weight`, :func:`json.nothing`."""
import dataclasses


@dataclasses.dataclass
class Box:
    size: int


class Crate:
    def __init__(self) -> None:
        self.count = 0


def good() -> None:
    """A function; a comment may refer to :meth:`Box.__init__` too."""
''',
    "b.py": '''class Box:
    pass


def only_in_b() -> None:
    pass
''',
}


def test_resolver_flags_only_the_bad_references(tmp_path, monkeypatch):
    package = tmp_path / "sample_refs"
    package.mkdir()
    for name, text in SAMPLE.items():
        (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("sample_refs", "sample_refs.a", "sample_refs.b"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    bad = [(reference.module, reference.text) for reference in Resolver(package_modules("sample_refs")).unresolved()]
    assert bad == [("sample_refs", ".Box"), ("sample_refs.a", ".gone"), ("sample_refs.a", ".good"),
                   ("sample_refs.a", "Box.weight"), ("sample_refs.a", "json.nothing")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("~.a.b", ".a.b"), ("title <x.y>", "x.y"), ("f()", "f"), ("!plain", "plain")],
)
def test_target_reads_sphinx_forms(text, expected):
    assert target(text) == expected


def test_every_package_reference_resolves():
    unresolved = Resolver(package_modules(partitioner.__name__)).unresolved()
    assert not unresolved, f"{len(unresolved)} unresolved references:\n" + "\n".join(map(str, unresolved))
