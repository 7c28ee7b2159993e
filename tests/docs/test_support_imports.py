"""Shared test helpers live in tests/support (issue 25): no test module is imported as a library.

A test module (``tests/**/test_*.py``), a conftest or any other module of a test folder is never
imported by another module; what two modules share moves to ``tests/support/``. ``bench/`` does
not import ``tests/`` at all (tests may import ``bench/``): what a bench shares with the tests
lives in ``bench/``. Every import is read from the syntax tree, the lazy ones inside functions
included.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every import in the file at ``path``; relative ones start with '.'."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, "." * node.level + (node.module or "")


def is_tests_module(module: str) -> bool:
    """Whether ``module`` is the package ``tests`` or one of its modules."""
    return module == "tests" or module.startswith("tests.")


def is_support_module(module: str) -> bool:
    """Whether ``module`` is ``tests.support`` or one of its modules (the shared helpers)."""
    return module == "tests.support" or module.startswith("tests.support.")


def where(path: Path, line: int, module: str) -> str:
    """``path:line imports module``, relative to the project root."""
    return f"{path.relative_to(ROOT)}:{line} imports {module}"


def test_bench_does_not_import_tests() -> None:
    found = [
        where(path, line, module)
        for path in sorted((ROOT / "bench").rglob("*.py"))
        for line, module in imported_modules(path)
        if is_tests_module(module)
    ]
    assert not found, "bench/ imports tests/; move what it needs into bench/:\n" + "\n".join(found)


def test_tests_import_only_the_support_modules_of_tests() -> None:
    found = [
        where(path, line, module)
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line, module in imported_modules(path)
        if module.startswith(".") or (is_tests_module(module) and not is_support_module(module))
    ]
    assert not found, (
        "a test module, conftest or test-folder module is imported as a library; move what is "
        "shared into tests/support/:\n" + "\n".join(found)
    )


def test_the_checks_see_the_imports_they_forbid(tmp_path: Path) -> None:
    """The walk finds top-level, lazy and relative imports, so a clean result means something."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import tests.api.test_events\n"
        "from tests.support.streams import STREAMS\n"
        "def lazy():\n"
        "    from tests.conftest import postgres_database\n"
        "from . import sibling\n",
        encoding="utf-8",
    )
    modules = [module for _, module in imported_modules(sample)]
    assert sorted(modules) == sorted(
        ["tests.api.test_events", "tests.support.streams", "tests.conftest", "."]
    )
    assert [is_support_module(m) for m in modules if is_tests_module(m)].count(False) == 2
