"""Every public function of the library packages is fully annotated (PEP 484), and each ships `py.typed`.

Public: a module-level function, or a method of a module-level class, whose name does not start with
`_` (`__init__` counts as public). Its parameters (but `self`/`cls`) and its return must be annotated.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workloads", "search", "cost_model", "tuner")

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _is_public(name: str) -> bool:
    return not name.startswith("_") or name == "__init__"


def _is_static(func: Function) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in func.decorator_list)


def _missing(func: Function, is_method: bool) -> list[str]:
    """What of `func`'s signature lacks an annotation: parameter names, and 'return'."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    if is_method and not _is_static(func) and positional:
        positional = positional[1:]  # self or cls
    params = [*positional, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a is not None)]
    missing = [a.arg for a in params if a.annotation is None]
    if func.returns is None:
        missing.append("return")
    return missing


def _public_functions(tree: ast.Module) -> list[tuple[str, Function, bool]]:
    found: list[tuple[str, Function, bool]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_public(node.name):
            found.append((node.name, node, False))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_public(item.name):
                    found.append((f"{node.name}.{item.name}", item, True))
    return found


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_the_packages_have_modules() -> None:
    assert len(_modules()) > 40


def test_every_public_function_is_annotated() -> None:
    problems = []
    for path in _modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for name, func, is_method in _public_functions(tree):
            missing = _missing(func, is_method)
            if missing:
                problems.append(f"{path.relative_to(ROOT)}:{func.lineno} {name}: {', '.join(missing)}")
    assert not problems, "public functions lacking annotations:\n" + "\n".join(problems)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_is_marked_typed(package: str) -> None:
    assert (ROOT / package / "py.typed").is_file()


def test_the_check_sees_what_it_must() -> None:
    tree = ast.parse("def f(a, b: int) -> int: ...\n"
                     "def _g(a): ...\n"
                     "class C:\n"
                     "    def __init__(self, x): ...\n"
                     "    def m(self, *args: int, **kw) -> None: ...\n"
                     "    @staticmethod\n"
                     "    def s(x: int): ...\n"
                     "    def __repr__(self): ...\n"
                     "class _P:\n"
                     "    def m(self, x): ...\n")
    found = {name: _missing(func, is_method) for name, func, is_method in _public_functions(tree)}
    assert found == {"f": ["a"], "C.__init__": ["x", "return"], "C.m": ["kw"], "C.s": ["return"]}
