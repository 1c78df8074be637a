"""Imports inside kernelbench_rl/evaluation/ run one way: from a room to the rooms below it, never up.

The rooms, top to bottom: cluster/ (Dask, above the front), front/ (the caller's process), worker/ (drives the
children), timing/ and verdict/ (peers: each decides from plain numbers the worker measured, and neither imports the
other), sandbox/ (the untrusted child), source/ and static_policy/ (the candidate's text; source/ imports the static
policy, never the other way). The top-level modules (result, trace, host_share) import no room, so every room may
import them. Every import statement counts, at module level or deferred inside a function; imports under
`if TYPE_CHECKING:` never run and are left out (tests/test_import_cycles.py builds the graph from the source's ast).
"""

from __future__ import annotations

from test_import_cycles import PACKAGE, PACKAGE_DIR, import_graph

# Room -> its level, 0 the top; a room may import rooms of a greater level only (and never a peer of its own level).
ROOMS: dict[str, int] = {
    "cluster": 0,
    "front": 1,
    "worker": 2,
    "timing": 3,
    "verdict": 3,
    "sandbox": 4,
    "source": 5,
    "static_policy": 6,
}
TOP_LEVEL = ("result", "trace", "host_share")


def room_of(module: str, prefix: str) -> str | None:
    """The room a module of the evaluation package lives in (None: outside the package, or a top-level module)."""
    if not module.startswith(prefix):
        return None
    first = module[len(prefix):].split(".")[0]
    return first if first in ROOMS else None


def wrong_way_imports(graph: dict[str, set[str]], prefix: str) -> list[tuple[str, str]]:
    """(importer, imported) pairs that go up a room, or across between two rooms of one level (timing and verdict)."""
    wrong = []
    for module, targets in graph.items():
        here = room_of(module, prefix)
        if here is None:
            continue
        for target in targets:
            there = room_of(target, prefix)
            if there is not None and there != here and ROOMS[there] <= ROOMS[here]:
                wrong.append((module, target))
    return sorted(wrong)


def describe(wrong: list[tuple[str, str]], package_dir=PACKAGE_DIR) -> str:
    """One line per offending import, naming the importing file."""
    root = package_dir.parent
    lines = []
    for module, target in wrong:
        path = root / (module.replace(".", "/") + ".py")
        if not path.exists():
            path = root / module.replace(".", "/") / "__init__.py"
        lines.append(f"{path.relative_to(root)} ({module}) imports {target}")
    return "\n".join(lines)


def test_the_direction_check_finds_upward_peer_and_deferred_imports(tmp_path):
    evaluation = tmp_path / "pkg" / "evaluation"
    for room in ("worker", "timing", "verdict", "sandbox", "source", "static_policy"):
        (evaluation / room).mkdir(parents=True)
        (evaluation / room / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (evaluation / "__init__.py").write_text("")
    (evaluation / "result.py").write_text("X = 1\n")
    (evaluation / "worker" / "drive.py").write_text(
        "from pkg.evaluation.timing import decide\nfrom pkg.evaluation.sandbox import clock\n")
    (evaluation / "timing" / "decide.py").write_text(
        "from pkg.evaluation import result\nfrom pkg.evaluation.sandbox import clock\n"
        "def late():\n    from pkg.evaluation.worker import drive\n")  # deferred, and upward
    (evaluation / "verdict" / "judge.py").write_text(
        "from typing import TYPE_CHECKING\nfrom pkg.evaluation.timing import decide\n"
        "if TYPE_CHECKING:\n    from pkg.evaluation.worker import drive\n")  # a peer; the TYPE_CHECKING one is left out
    (evaluation / "sandbox" / "clock.py").write_text("from pkg.evaluation.source import text\n")
    (evaluation / "source" / "text.py").write_text("from pkg.evaluation.static_policy import rules\n")
    (evaluation / "static_policy" / "rules.py").write_text("from pkg.evaluation.source import text\n")
    wrong = wrong_way_imports(import_graph(tmp_path / "pkg"), "pkg.evaluation.")
    assert wrong == [
        ("pkg.evaluation.static_policy.rules", "pkg.evaluation.source.text"),
        ("pkg.evaluation.timing.decide", "pkg.evaluation.worker.drive"),
        ("pkg.evaluation.verdict.judge", "pkg.evaluation.timing.decide"),
    ]
    assert "timing/decide.py (pkg.evaluation.timing.decide) imports pkg.evaluation.worker.drive" in describe(
        wrong, tmp_path / "pkg")


def test_imports_inside_the_evaluation_run_one_way():
    wrong = wrong_way_imports(import_graph(), f"{PACKAGE}.evaluation.")
    assert not wrong, "imports from a lower room to a higher one (or between timing/ and verdict/):\n" + describe(wrong)


def test_verdict_and_timing_import_neither_each_other_nor_the_worker():
    """The decisions take plain data: the worker drives the children and hands the numbers down."""
    graph = import_graph()
    prefix = f"{PACKAGE}.evaluation."
    reaches = sorted((module, target) for module, targets in graph.items()
                     if room_of(module, prefix) in ("verdict", "timing") for target in targets
                     if room_of(target, prefix) in ("worker", "front", "cluster")
                     or {room_of(module, prefix), room_of(target, prefix)} == {"verdict", "timing"})
    assert not reaches, describe(reaches)
    assert any(room_of(m, prefix) == "timing" for m in graph) and any(room_of(m, prefix) == "verdict" for m in graph)


def test_the_top_level_modules_import_no_room():
    graph = import_graph()
    prefix = f"{PACKAGE}.evaluation."
    reaches = sorted((f"{prefix}{name}", target) for name in TOP_LEVEL for target in graph[f"{prefix}{name}"]
                     if room_of(target, prefix) is not None)
    assert not reaches, describe(reaches)


def test_every_room_is_a_folder_of_the_evaluation():
    """A room renamed or added must be placed in ROOMS, or the check would pass over its imports."""
    folders = {path.name for path in (PACKAGE_DIR / "evaluation").iterdir()
               if path.is_dir() and (path / "__init__.py").exists()}
    assert folders == set(ROOMS)
