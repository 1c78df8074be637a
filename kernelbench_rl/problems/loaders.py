"""Problem loaders: the bundled set, an external KernelBench checkout, the HF dataset."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable
from pathlib import Path

from kernelbench_rl.errors import UserError
from kernelbench_rl.problems.model import Problem, declared_small_sizes, parse_problem_id
from kernelbench_rl.problems.sizing import infer_small_sizes

REPO_ROOT = Path(__file__).resolve().parents[2]
BUNDLED_ROOT = REPO_ROOT / "KernelBench"
SOLUTIONS_ROOT = BUNDLED_ROOT / "solutions"
HF_DATASET = "ScalingIntelligence/KernelBench"
SUPPORTED_LEVELS = (1, 2, 3)

_FILE_RE = re.compile(r"^(\d+)_(.+)\.py$")
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


def _problem_from_file(path: Path, level: int, origin: str) -> Problem:
    match = _FILE_RE.match(path.name)
    if not match:
        raise ProblemFileError(f"{path} is not named <number>_<Name>.py as KernelBench problem files are.")
    source = path.read_text()
    validate_source(source, str(path))
    small = declared_small_sizes(source) or infer_small_sizes(source)
    return Problem(
        level=level, number=int(match.group(1)), name=path.stem, source=source,
        origin=origin, path=str(path), small_sizes=small,
    )


def _load_tree(root: Path, origin: str, levels: Iterable[int] | None) -> list[Problem]:
    # `levels=[]` means none (e.g. only level 4 was asked for), not "all levels".
    wanted = set(SUPPORTED_LEVELS) if levels is None else set(levels) & set(SUPPORTED_LEVELS)
    problems: list[Problem] = []
    for level in sorted(wanted):
        level_dir = root / f"level{level}"
        if not level_dir.is_dir():
            continue
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
        problems.extend(_problem_from_file(path, level, origin) for path in by_number.values())
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


def resolve_kernelbench_root(root: str | os.PathLike[str] | None) -> Path | None:
    """The external checkout given on the command line or in KERNELBENCH_ROOT, if any."""
    value = root if root is not None else os.environ.get("KERNELBENCH_ROOT")
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise UserError(f"KernelBench root {path} does not exist; pass a checkout's path (or its KernelBench/ folder).")
    # Accept the repo root (which contains KernelBench/) or the KernelBench/ folder itself.
    if (path / "KernelBench").is_dir() and not (path / "level1").is_dir():
        path = path / "KernelBench"
    if not any((path / f"level{level}").is_dir() for level in SUPPORTED_LEVELS):
        raise UserError(f"{path} has no level1/ level2/ level3/ folders; point --kernelbench-root at a KernelBench checkout.")
    return path


def load_problems(
    kernelbench_root: str | os.PathLike[str] | None = None,
    levels: Iterable[int] | None = None,
    *,
    warn=None,
) -> list[Problem]:
    """The bundled set, or every problem of levels 1-3 of an external checkout.

    Level 4 needs model downloads and is skipped with one sentence through `warn`.
    """
    levels = list(levels) if levels else None
    root = resolve_kernelbench_root(kernelbench_root)
    if root is None:
        return _load_tree(BUNDLED_ROOT, "bundled", levels)
    if (levels is not None and 4 in levels) or (levels is None and (root / "level4").is_dir()):
        if warn is not None:
            warn(LEVEL4_SKIPPED)
    levels = [lv for lv in levels if lv in SUPPORTED_LEVELS] if levels is not None else None
    return _load_tree(root, "kernelbench_root", levels)


def get_problem(problem_id: str, kernelbench_root: str | os.PathLike[str] | None = None) -> Problem:
    try:
        level, number = parse_problem_id(problem_id)
    except ValueError as exc:
        raise UserError(str(exc) + ".") from None
    for problem in load_problems(kernelbench_root, levels=[level]) if level in SUPPORTED_LEVELS else []:
        if problem.number == number:
            return problem
    raise UserError(f"No problem {problem_id} exists; `kernelbench-rl problems list` shows the available ids.")


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
    """Our known-correct Triton solution for a bundled problem, if one exists."""
    path = SOLUTIONS_ROOT / f"level{problem.level}" / f"{problem.name}.py"
    return path.read_text() if path.exists() else None


def list_solutions() -> list[tuple[str, Path]]:
    """(problem id, path) for every bundled solution."""
    found = []
    for path in sorted(SOLUTIONS_ROOT.glob("level*/*.py")):
        match = _FILE_RE.match(path.name)
        if match:
            level = int(path.parent.name.removeprefix("level"))
            found.append((f"L{level}/{int(match.group(1))}", path))
    return found
