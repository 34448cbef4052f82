"""The house's layers point one way: every import of the library, at module level or inside a
function, goes to the same layer or one below, and no module imports itself back in a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workloads", "search", "cost_model", "tuner")
# Bottom first; a module belongs to the longest prefix that names it.
LAYERS = ("workloads", "search", "cost_model", "tuner.measure", "tuner")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int | None:
    matches = [i for i, name in enumerate(LAYERS) if module == name or module.startswith(name + ".")]
    return max(matches, key=lambda i: len(LAYERS[i])) if matches else None


def imports(path: Path) -> set[str]:
    """The library modules `path` imports, resolved to full names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    modules = {module_name(p) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return {m for m in found if m in modules and m != name}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def test_no_import_goes_to_a_higher_layer():
    upward = [f"{source} -> {target}" for source, targets in graph().items() for target in targets
              if layer(target) > layer(source)]  # type: ignore[operator]
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(sorted(upward))


def test_no_import_cycle():
    edges = graph()
    # A package's __init__ gathers its own modules; a cycle through it is not a dependency.
    edges = {m: {t for t in ts if not (m.startswith(t + ".") and t in edges)} for m, ts in edges.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_every_library_module_has_a_layer():
    assert all(layer(m) is not None for m in graph())
