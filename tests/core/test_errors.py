"""The exception tree: one root, no two classes of one name, and :mod:`monitor.errors` as its map.

Every module of ``monitor`` and ``connectors`` is imported and every exception class it defines is
checked against the tree drawn in ``monitor/errors.py``'s docstring: the class is there, under its
parent, with its module and its built-in base.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import connectors
import monitor
import monitor.errors
from monitor.errors import MonitorError

#: Modules that cannot be imported on their own, and why.
NOT_IMPORTABLE = {
    "monitor.cli.__main__": "runs the `monitor` command on import",
    "monitor.db.migrations.env": "runs only inside Alembic (it reads `alembic.context.config`)",
}

#: One class's line in the tree: glyphs, name, (built-in bases), then its module.
TREE_LINE = re.compile(
    r"^(?P<glyphs>[│├└─ ]*)(?P<name>[A-Z]\w*)"
    r"(?: \((?P<builtins>[\w, ]+)\))? {2,}(?P<module>[\w.]+)$"
)
GLYPHS_PER_LEVEL = 4  # "├── " and "│   "


@dataclass(frozen=True)
class TreeEntry:
    """A class as the docstring draws it."""

    module: str
    parent: str | None
    builtins: tuple[str, ...]


def _project_modules() -> list[ModuleType]:
    modules: list[ModuleType] = [monitor, connectors]
    for package in (monitor, connectors):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name not in NOT_IMPORTABLE:
                modules.append(importlib.import_module(info.name))
    return modules


@cache
def defined_exceptions() -> tuple[type[Exception], ...]:
    """Every exception class defined (not only imported) in a module of the project."""
    found = []
    for module in _project_modules():
        for value in vars(module).values():
            if (inspect.isclass(value) and issubclass(value, Exception)
                    and value.__module__ == module.__name__):
                found.append(value)
    return tuple(found)


@cache
def drawn_tree() -> dict[str, TreeEntry]:
    """The classes drawn in ``monitor.errors``' docstring, by name."""
    doc = monitor.errors.__doc__ or ""
    block = doc.split("Hierarchy::\n\n", 1)[1].split("\n\n", 1)[0]
    ancestors: list[str] = []
    tree: dict[str, TreeEntry] = {}
    for line in block.splitlines():
        match = TREE_LINE.match(line.removeprefix("    "))
        if match is None:
            continue  # a line saying when the class above is raised
        depth = len(match["glyphs"]) // GLYPHS_PER_LEVEL
        del ancestors[depth:]
        builtins = tuple(b.strip() for b in (match["builtins"] or "").split(",") if b.strip())
        parent = ancestors[-1] if ancestors else None
        tree[match["name"]] = TreeEntry(match["module"], parent, builtins)
        ancestors.append(match["name"])
    return tree


def as_drawn(cls: type[Exception]) -> TreeEntry:
    """What the docstring should say of ``cls``: module (without ``monitor.``), project parent,
    built-in bases."""
    builtins = tuple(b.__name__ for b in cls.__bases__
                     if b.__module__ == "builtins" and b is not Exception)
    project_bases = [b for b in cls.__bases__ if b.__module__ != "builtins"]
    parent = project_bases[0].__name__ if project_bases else None
    return TreeEntry(cls.__module__.removeprefix("monitor."), parent, builtins)


def test_the_walk_finds_the_exceptions_of_every_layer() -> None:
    modules = {cls.__module__.split(".")[1] for cls in defined_exceptions()}
    assert {"core", "streams", "engine", "db", "alerts", "ops", "api", "cli", "errors"} <= modules


def test_every_exception_derives_from_monitor_error() -> None:
    outside = [f"{c.__module__}.{c.__qualname__}" for c in defined_exceptions()
               if not issubclass(c, MonitorError)]
    assert outside == [], "derive these from monitor.errors.MonitorError"


def test_no_two_exceptions_share_a_name() -> None:
    counts = Counter(cls.__name__ for cls in defined_exceptions())
    shared = {name: [f"{c.__module__}.{c.__qualname__}" for c in defined_exceptions()
                     if c.__name__ == name]
              for name, n in counts.items() if n > 1}
    assert shared == {}


def test_the_tree_draws_every_exception_and_no_other() -> None:
    defined = {cls.__name__ for cls in defined_exceptions()}
    drawn = set(drawn_tree())
    assert sorted(defined - drawn) == [], "add these to monitor/errors.py's docstring"
    assert sorted(drawn - defined) == [], "monitor/errors.py's docstring draws classes not defined"


def test_the_tree_gives_each_exception_its_module_parent_and_built_in_base() -> None:
    tree = drawn_tree()
    wrong = {cls.__name__: (tree[cls.__name__], as_drawn(cls))
             for cls in defined_exceptions()
             if cls.__name__ in tree and tree[cls.__name__] != as_drawn(cls)}
    assert wrong == {}, "drawn (left) differs from the code (right)"


def test_the_root_imports_nothing_of_the_project() -> None:
    source = Path(monitor.errors.__file__ or "").read_text(encoding="utf-8")
    imports = [node for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Import | ast.ImportFrom)]
    assert [ast.unparse(node) for node in imports] == ["from __future__ import annotations"]
