"""Problem loaders: the bundled set, an external KernelBench checkout or kernrl problems folder, the HF dataset."""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from kernelbench_rl.errors import UserError
from kernelbench_rl.problems.model import (
    Problem,
    declared_small_sizes,
    declares_small_sizes,
    parse_problem_id,
    resolve_problem,
    unknown_problem_message,
)
from kernelbench_rl.problems.sizing import infer_small_sizes
from kernelbench_rl.problems.suite_sizes import suite_small_sizes

REPO_ROOT = Path(__file__).resolve().parents[2]
BUNDLED_ROOT = REPO_ROOT / "KernelBench"
SOLUTIONS_ROOT = BUNDLED_ROOT / "solutions"
HF_DATASET = "ScalingIntelligence/KernelBench"
SUPPORTED_LEVELS = (1, 2, 3)  # KernelBench's levels that run here (its level 4 downloads models)
# How to load kernrl's problems, for a message about a kernrl id where they are not loaded.
KERNRL_ROOT_HINT = "pass --problems-root <kernrl's problems folder> (or set problems.root) to load kernrl's problems."
KERNELBENCH_LEVELS = 4  # KernelBench has levels 1-4; a problems folder with more levels is kernrl's

_FILE_RE = re.compile(r"^(\d+)_(.+)\.py$")
_LEVEL_DIR_RE = re.compile(r"^level(\d+)$")
LEVEL4_SKIPPED = "Level 4 is skipped: its problems download Hugging Face models, which this harness does not do."


class ProblemFileError(UserError):
    pass


def validate_source(source: str, where: str) -> None:
    """One sentence if the source is not a KernelBench problem (syntax, Model, get_inputs...)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProblemFileError(f"{where} is not valid Python (line {exc.lineno}: {exc.msg}); fix or remove it.") from None
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    if missing:
        raise ProblemFileError(f"{where} does not define {', '.join(missing)}, so it is not a KernelBench problem file.")


# Problems read from files, by (path, its size and modification time, level, origin, suite): every `get_problem`
# loads its level whole, and inferring the small sizes of a level's 100 files took about half a second each time
# (an eval-dir folder of 8 level-2 solutions spent 1.7 s here before its pool started).
_FILE_CACHE: dict[tuple, Problem] = {}
_FILE_CACHE_MAX = 4096


def _problem_from_file(path: Path, level: int, origin: str, suite: str = "kernelbench") -> Problem:
    try:
        stat = path.stat()
        key: tuple | None = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, level, origin, suite)
    except OSError:
        key = None  # read_text below says what is wrong
    cached = _FILE_CACHE.get(key) if key is not None else None
    if cached is not None:
        return dataclasses.replace(cached, small_sizes=dict(cached.small_sizes))  # callers never share one dict
    problem = _read_problem_file(path, level, origin, suite)
    if key is not None:
        if len(_FILE_CACHE) >= _FILE_CACHE_MAX:
            _FILE_CACHE.clear()
        _FILE_CACHE[key] = dataclasses.replace(problem, small_sizes=dict(problem.small_sizes))
    return problem


def _read_problem_file(path: Path, level: int, origin: str, suite: str) -> Problem:
    match = _FILE_RE.match(path.name)
    if not match:
        raise ProblemFileError(f"{path} is not named <number>_<Name>.py as KernelBench problem files are.")
    source = path.read_text()
    validate_source(source, str(path))
    small = declared_small_sizes(source)
    if not small and not declares_small_sizes(source):
        table = suite_small_sizes(suite, f"L{level}_{path.stem}")
        small = table if table is not None else infer_small_sizes(source)
    return Problem(
        level=level, number=int(match.group(1)), name=path.stem, source=source,
        origin=origin, path=str(path), small_sizes=small, suite=suite,
    )


def _level_dirs(root: Path) -> dict[int, Path]:
    """`levelN/` folders of a problems folder, by N."""
    found = {}
    for child in root.iterdir() if root.is_dir() else []:
        match = _LEVEL_DIR_RE.match(child.name)
        if match and child.is_dir():
            found[int(match.group(1))] = child
    return found


def _bundled_suite(level: int) -> str:
    # Levels 1-3 are KernelBench's problems; the bundled levels past them are kernrl-style problems.
    return "kernelbench" if level in SUPPORTED_LEVELS else "kernrl"


def _load_tree(root: Path, origin: str, levels: Iterable[int] | None, suite: Callable[[int], str],
               allowed: Iterable[int] | None = None) -> list[Problem]:
    # `levels=[]` means none (e.g. only level 4 was asked for), not "all levels".
    present = _level_dirs(root)
    wanted = set(present) if allowed is None else set(present) & set(allowed)
    if levels is not None:
        wanted &= set(levels)
    problems: list[Problem] = []
    for level in sorted(wanted):
        level_dir = present[level]
        by_number: dict[int, Path] = {}
        for path in sorted(level_dir.glob("*.py"), key=lambda p: (len(p.name), p.name)):
            match = _FILE_RE.match(path.name)
            if path.name.startswith("_") or not match:
                continue
            number = int(match.group(1))
            if number in by_number:
                by_number[number] = _pick_current(by_number[number], path)
            else:
                by_number[number] = path
        problems.extend(_problem_from_file(path, level, origin, suite(level)) for path in by_number.values())
    problems.sort(key=lambda p: (p.level, p.number))
    return problems


def _pick_current(first: Path, second: Path) -> Path:
    """Two files with one problem number: KernelBench keeps superseded versions as `*_OLD.py`."""
    old_first, old_second = first.stem.endswith("_OLD"), second.stem.endswith("_OLD")
    if old_first != old_second:
        return second if old_first else first
    raise ProblemFileError(
        f"{first} and {second} both claim problem number {first.name.split('_')[0]}; remove or rename one."
    )


@dataclass(frozen=True)
class ProblemSource:
    """Where problems come from: a folder of `levelN/` folders and whose layout it has."""

    path: Path
    suite: str  # "kernelbench" (a KernelBench checkout) | "kernrl" (kernrl's problems folder)

    @property
    def origin(self) -> str:
        return "kernelbench_root" if self.suite == "kernelbench" else "kernrl_root"


def resolve_problems_root(root: str | os.PathLike[str] | None) -> ProblemSource | None:
    """The problem source given on the command line, else in $KBRL_PROBLEMS_ROOT or $KERNELBENCH_ROOT; None: bundled.

    The layout tells the suites apart:
    - a folder holding `KernelBench/level1..` (a KernelBench checkout) or `problems/level1..` (kernrl's env folder)
      is read from that subfolder;
    - a folder of `levelN/` folders is kernrl's when a level past 4 is there or its parent has `openenv.yaml`
      (kernrl's env folder); else it is KernelBench's (levels 1-4).
    """
    value = root if root is not None else os.environ.get("KBRL_PROBLEMS_ROOT") or os.environ.get("KERNELBENCH_ROOT")
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise UserError(f"Problems root {path} does not exist; pass a KernelBench checkout or kernrl's problems folder.")
    if not _level_dirs(path):
        for sub in ("KernelBench", "problems"):
            if _level_dirs(path / sub):
                path = path / sub
                break
    levels = _level_dirs(path)
    if not levels:
        raise UserError(f"{path} has no level1/ level2/ ... folders; point --problems-root at a KernelBench checkout "
                        "or at kernrl's problems folder.")
    if path.resolve() == BUNDLED_ROOT.resolve():
        return None
    kernrl = max(levels) > KERNELBENCH_LEVELS or (path.parent / "openenv.yaml").is_file()
    return ProblemSource(path, "kernrl" if kernrl else "kernelbench")


def resolve_kernelbench_root(root: str | os.PathLike[str] | None) -> Path | None:
    """The folder of a problem source (see `resolve_problems_root`), if one is given."""
    source = resolve_problems_root(root)
    return source.path if source is not None else None


def load_problems(
    problems_root: str | os.PathLike[str] | None = None,
    levels: Iterable[int] | None = None,
    *,
    warn=None,
) -> list[Problem]:
    """The bundled set (every level folder it has), or every problem of an external source.

    A KernelBench checkout gives levels 1-3: its level 4 needs model downloads and is skipped with one sentence
    through `warn`. kernrl's problems folder gives all its levels (1-10).
    """
    levels = list(levels) if levels else None
    source = resolve_problems_root(problems_root)
    if source is None:
        return _load_tree(BUNDLED_ROOT, "bundled", levels, _bundled_suite)
    if source.suite == "kernrl":
        return _load_tree(source.path, source.origin, levels, lambda _level: "kernrl")
    if (levels is not None and 4 in levels) or (levels is None and (source.path / "level4").is_dir()):
        if warn is not None:
            warn(LEVEL4_SKIPPED)
    return _load_tree(source.path, source.origin, levels, lambda _level: "kernelbench", allowed=SUPPORTED_LEVELS)


def default_levels(problems_root: str | os.PathLike[str] | None = None) -> list[int] | None:
    """The levels training and evaluation use when `problems.levels` is not set: KernelBench's levels 1-3 for the
    bundled set and a KernelBench checkout; every level for kernrl's problems (None). A root that cannot be read
    counts as KernelBench's here; loading it says what is wrong."""
    try:
        source = resolve_problems_root(problems_root)
    except UserError:
        source = None
    return None if source is not None and source.suite == "kernrl" else list(SUPPORTED_LEVELS)


def get_problem(problem_id: str, problems_root: str | os.PathLike[str] | None = None) -> Problem:
    """The problem an id names (any form `resolve_problem` accepts) in the bundled set or the given source."""
    try:
        levels = [parse_problem_id(problem_id)[0]]
    except ValueError:
        levels = None  # a prefix shorter than level and number (L10, L1_): every level
    problem = resolve_problem(problem_id, load_problems(problems_root, levels=levels))
    if problem is None:
        every = load_problems(problems_root)
        raise UserError(unknown_problem_message(problem_id, every, KERNRL_ROOT_HINT).rstrip(".") +
                        "; `kernelbench-rl problems list` shows the ids.")
    return problem


def find_problem(problem_id: str, problems: Iterable[Problem], problems_root: str | os.PathLike[str] | None = None
                 ) -> Problem:
    """The problem an id names among loaded `problems`, else in the source they came from (UserError if none)."""
    problem = resolve_problem(problem_id, problems)
    return problem if problem is not None else get_problem(problem_id, problems_root)


def load_hf_problems(
    dataset: str = HF_DATASET,
    levels: Iterable[int] | None = None,
    *,
    revision: str | None = None,
    data_files: dict[str, str] | None = None,
    warn=None,
) -> list[Problem]:
    """Problems from the HF dataset (splits level_1..level_4; columns code, level, name, problem_id).

    `dataset` may be a hub id or a local path saved with `save_to_disk`/parquet files, which is how
    the tests exercise this offline.
    """
    import datasets  # heavy import, only when used

    levels = list(levels) if levels is not None else None
    wanted = [lv for lv in (levels or SUPPORTED_LEVELS) if lv in SUPPORTED_LEVELS]
    path = Path(dataset)
    try:
        if path.is_dir() and (path / "dataset_dict.json").exists():
            dsd = datasets.load_from_disk(str(path))
        else:
            from kernelbench_rl.hub import offline_unless_reachable

            with offline_unless_reachable():  # an unreachable hub fails now, not after ~24 s of retries
                dsd = datasets.load_dataset(dataset, revision=revision, data_files=data_files)
    except Exception as exc:
        raise UserError(
            f"Could not load the dataset {dataset} ({type(exc).__name__}); check the name or path, "
            "or go online (HF_HUB_OFFLINE=0) to download it once."
        ) from None
    if "level_4" in dsd and (levels is None or 4 in levels) and warn is not None:
        warn(LEVEL4_SKIPPED)
    problems: list[Problem] = []
    for level in wanted:
        split = f"level_{level}"
        if split not in dsd:
            continue
        for row in dsd[split]:
            source = row["code"]
            name = str(row["name"]).removesuffix(".py")
            validate_source(source, f"{dataset} {split} row {name}")
            problems.append(
                Problem(
                    level=int(row["level"]), number=int(row["problem_id"]), name=name, source=source,
                    origin="hf", path=None, small_sizes=declared_small_sizes(source) or infer_small_sizes(source),
                )
            )
    problems.sort(key=lambda p: (p.level, p.number))
    return problems


def load_solution(problem: Problem) -> str | None:
    """Our known-correct Triton solution for a problem, if one exists: a bundled problem's, or the bundled one's of the
    same level, file name and suite wherever the problem was loaded from (kernrl's L10_5_ChaCha20 from kernrl's
    folder gets ours for the bundled L10/5). KernelBench's L1/23 and kernrl's L1_23_Softmax share a file name but not
    the problem, so neither gets the other's solution."""
    path = SOLUTIONS_ROOT / f"level{problem.level}" / f"{problem.name}.py"
    if not path.exists():
        return None
    if problem.origin != "bundled" and (problem.suite != _bundled_suite(problem.level)
                                        or not (BUNDLED_ROOT / f"level{problem.level}" / f"{problem.name}.py").is_file()):
        return None
    return path.read_text()


def list_solutions() -> list[tuple[str, Path]]:
    """(problem id, path) for every bundled solution."""
    found = []
    for path in sorted(SOLUTIONS_ROOT.glob("level*/*.py")):
        match = _FILE_RE.match(path.name)
        if match:
            level = int(path.parent.name.removeprefix("level"))
            found.append((f"L{level}/{int(match.group(1))}", path))
    return found
