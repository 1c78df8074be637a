"""No import cycles inside kernelbench_rl.

Every import statement counts, at module level or deferred inside a function: a deferred import
that closes a loop still means two modules that need each other, and hides an import-order bug
until the first call. Imports under `if TYPE_CHECKING:` never run and are left out (two classes
that refer to each other in annotations may live in two modules). The graph is built from the
source's ast, so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from pathlib import Path


PACKAGE = "kernelbench_rl"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / PACKAGE

# Cycles known and being removed; each entry is the sorted tuple of the cycle's modules.
ALLOWED_CYCLES: set[tuple[str, ...]] = set()  # none: a cycle that must stay is named here, with its reason


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import statements inside `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`) blocks."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for statement in node.body:
                ids |= {id(inner) for inner in ast.walk(statement)}
    return ids


def module_files(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (packages by their __init__)."""
    modules: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _absolute(module: str | None, level: int, importer: str, is_package: bool) -> str:
    if not level:
        return module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports: `from a import b` is a.b when that is a module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    skipped = _type_checking_only(tree)
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, name, is_package)
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for candidate in candidates:
            # `import a.b.c` needs a.b.c; fall back to the deepest package module it names.
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def import_graph(package_dir: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    files = module_files(package_dir)
    known = set(files)
    return {name: imported_modules(name, path, known) for name, path in files.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Strongly connected components with more than one module (Tarjan), each as a sorted tuple."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[tuple[str, ...]] = []

    def visit(start: str) -> None:
        # Iterative, so a deep package cannot hit the recursion limit.
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def test_the_cycle_finder_finds_a_deferred_two_module_loop(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "factory.py").write_text("def make():\n    from pkg.backend import Backend\n    return Backend()\n")
    (package / "backend.py").write_text("from pkg.factory import make\nclass Backend: ...\n")
    (package / "user.py").write_text("from . import config\nfrom .config import X\n")
    (package / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.user import X\n")
    (package / "config.py").write_text("from pkg import typed\nX = 1\n")
    graph = import_graph(package)
    assert graph["pkg.user"] == {"pkg.config"}
    assert graph["pkg.typed"] == set()
    assert find_cycles(graph) == [("pkg.backend", "pkg.factory")]


def test_a_package_init_that_imports_its_children_is_no_cycle(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.sub import helper\n")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.helper import run\n")
    (package / "sub" / "helper.py").write_text("from pkg.sub import other\ndef run(): ...\n")
    (package / "sub" / "other.py").write_text("")
    assert find_cycles(import_graph(package)) == []


def test_kernelbench_rl_has_no_import_cycles():
    cycles = find_cycles(import_graph())
    unexpected = [cycle for cycle in cycles if cycle not in ALLOWED_CYCLES]
    assert not unexpected, "import cycles: " + "; ".join(" <-> ".join(cycle) for cycle in unexpected)


def test_every_allowed_cycle_still_exists():
    # An allowed cycle that is gone must leave the list, so the list cannot hide a new one later. (One test over
    # the list, not one per entry: an empty list is the goal, not a skip.)
    cycles = find_cycles(import_graph())
    gone = sorted(cycle for cycle in ALLOWED_CYCLES if cycle not in cycles)
    assert not gone, f"{gone} no longer form cycles: remove them from ALLOWED_CYCLES"


def test_the_childs_code_imports_nothing_of_the_worker_the_verdict_the_front_or_the_cluster():
    """evaluation/sandbox/ is the only code that runs in the untrusted child; what it imports runs there too, so it
    reaches no further than the contract (result), the timeline, the host share, the candidate's text (source/ and
    static_policy/); its timing loop is its own (sandbox/timer.py)."""
    graph = import_graph()
    forbidden = tuple(f"{PACKAGE}.evaluation.{part}" for part in ("worker", "verdict", "front", "cluster"))
    reaches = {(module, target) for module, targets in graph.items()
               if module.startswith(f"{PACKAGE}.evaluation.sandbox.") for target in targets
               if target.startswith(forbidden)}
    assert not reaches, sorted(reaches)
    assert any(m.startswith(f"{PACKAGE}.evaluation.sandbox.") for m in graph)  # (the folder is where it is said to be)
