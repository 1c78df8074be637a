"""The Problem model: one KernelBench-format problem, wherever it was loaded from."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from kernelbench_rl.errors import UserError

SizeMode = Literal["real", "small"]
SUITES = ("kernelbench", "kernrl")

_ID_RE = re.compile(r"^L(\d+)/(\d+)$")
# kernrl's form, `L{level}_{file stem}` (L1_23_Softmax), and its `L{level}_{number}` head (L1_23, L1_23_Soft).
_KERNRL_ID_RE = re.compile(r"^L(\d+)_(\d+)(?:_.*)?$")
_KERNRL_NUMBER_RE = re.compile(r"^L(\d+)_(\d+)$")
# Anything written kernrl's way, prefixes included (L10, L1_, L1_2).
_KERNRL_HEAD_RE = re.compile(r"^L\d+(?:_.*)?$")
# No id is longer (kernrl's longest is under 60): a bound checked before any digits are read as a number, which
# Python refuses past 4,300 digits.
MAX_PROBLEM_ID_CHARS = 100


class ProblemIdTooLongError(UserError, ValueError):
    """A problem id past MAX_PROBLEM_ID_CHARS: bad input (a ValueError too, for callers that parse ids)."""


def bounded_problem_id(problem_id: str) -> str:
    """The id stripped, or ProblemIdTooLongError (one sentence) for one longer than any problem id."""
    text = problem_id.strip()
    if len(text) > MAX_PROBLEM_ID_CHARS:
        raise ProblemIdTooLongError(f"Problem id {text[:16]!r}... is {len(text)} characters long; problem ids are at "
                                    f"most {MAX_PROBLEM_ID_CHARS} (e.g. L1/19 or L1_19_ReLU).")
    return text


def parse_problem_id(problem_id: str) -> tuple[int, int]:
    """'L1/19', 'L1_19' or 'L1_19_ReLU' -> (1, 19). Raises ValueError on anything else (ProblemIdTooLongError, also
    a UserError, past MAX_PROBLEM_ID_CHARS).

    Syntax only: whether the name part fits the problem is `resolve_problem`'s to say."""
    text = bounded_problem_id(problem_id)
    match = _ID_RE.match(text) or _KERNRL_ID_RE.match(text)
    if not match:
        raise ValueError(f"problem id {problem_id!r} is not of the form L<level>/<number> (e.g. L1/19) "
                         "or L<level>_<number>_<name> (e.g. L1_19_ReLU)")
    return int(match.group(1)), int(match.group(2))


def is_kernrl_form(problem_id: str) -> bool:
    """Whether an id is written kernrl's way (`L1_23_Softmax`, `L1_23`, a prefix such as `L10_1` or `L10`), not ours
    (`L1/23`). Such an id names a problem of kernrl's suite and nothing else."""
    text = problem_id.strip()
    return not _ID_RE.match(text) and bool(_KERNRL_HEAD_RE.match(text))


def resolve_problem(problem_id: str, problems: Iterable[Problem]) -> Problem | None:
    """The problem an id names among `problems`, in any accepted form; None when none fits.

    Accepted: ours, `L1/23` (a problem of any suite); kernrl's, `L1_23_Softmax`; `L1_23` (level and number); and a
    unique prefix of a kernrl id (`L1_23_Soft`, `L10_1`). An id in kernrl's form names kernrl's problems only: it
    never resolves to KernelBench's problem of the same level and number, which is another problem (other sizes,
    inputs and tolerance). A prefix that fits several problems is one sentence naming them (UserError), and so is an
    id longer than any (ProblemIdTooLongError).
    """
    text = bounded_problem_id(problem_id)
    pool = list(problems)
    ours = _ID_RE.match(text)
    if ours:
        level, number = int(ours.group(1)), int(ours.group(2))
        return next((p for p in pool if p.level == level and p.number == number), None)
    pool = [p for p in pool if p.suite == "kernrl"]
    match = _KERNRL_NUMBER_RE.match(text)
    if match:
        level, number = int(match.group(1)), int(match.group(2))
        return next((p for p in pool if p.level == level and p.number == number), None)
    exact = [p for p in pool if p.kernrl_id == text]
    if exact:
        return exact[0]
    found = [p for p in pool if p.kernrl_id.startswith(text)] if text else []
    if len(found) > 1:
        shown = ", ".join(p.kernrl_id for p in found[:8]) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
        raise UserError(f"Problem id {problem_id!r} is the start of {len(found)} problem ids ({shown}); "
                        "give one of them, or more of it.")
    return found[0] if found else None


SUITE_NAMES = {"kernelbench": "KernelBench's", "kernrl": "kernrl's"}


def _level_ranges(levels: Iterable[int]) -> str:
    """[1, 2, 3, 5] -> '1-3, 5'."""
    ranges: list[list[int]] = []
    for level in sorted(set(levels)):
        if ranges and level == ranges[-1][1] + 1:
            ranges[-1][1] = level
        else:
            ranges.append([level, level])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def describe_problems(problems: Iterable[Problem]) -> str:
    """What a set of problems holds, for a message: "KernelBench's problems, levels 1-3 (270)", one such part per suite
    joined by "and" (the bundled set's restatements of kernrl's problems are "bundled kernrl problems"); "no problems"
    when it is empty."""
    groups: dict[tuple[str, bool], list[Problem]] = {}
    for problem in problems:
        groups.setdefault((problem.suite, problem.suite == "kernrl" and problem.origin == "bundled"), []).append(problem)
    if not groups:
        return "no problems"
    parts = []
    for suite, bundled in sorted(groups, key=lambda g: (SUITES.index(g[0]) if g[0] in SUITES else len(SUITES), g)):
        group = groups[(suite, bundled)]
        levels = {p.level for p in group}
        name = "bundled kernrl problems" if bundled else f"{SUITE_NAMES.get(suite, suite)} problems"
        parts.append(f"{name}, level{'s' if len(levels) > 1 else ''} {_level_ranges(levels)} ({len(group)})")
    return " and ".join(parts)


def unknown_problem_message(problem_id: str, problems: Iterable[Problem], kernrl_hint: str) -> str:
    """One sentence for an id that names none of `problems`: what is loaded, and for a kernrl id where kernrl's own
    problems are not, `kernrl_hint` (how to load them: the option, or the command that serves them)."""
    text = bounded_problem_id(problem_id)
    pool = list(problems)
    loaded = describe_problems(pool)
    if not is_kernrl_form(text):
        return f"No problem {text} is among those loaded ({loaded})."
    if any(p.origin == "kernrl_root" for p in pool):
        return f"No kernrl problem {text} is among those loaded ({loaded})."
    other = ""
    number = _KERNRL_ID_RE.match(text)
    if number:
        level, num = int(number.group(1)), int(number.group(2))
        same = [p for p in pool if p.suite != "kernrl" and p.level == level and p.number == num]
        if same:
            other = f" ({same[0].id} here is {SUITE_NAMES.get(same[0].suite, same[0].suite)} {same[0].name}, another problem)"
    return f"{text} is a kernrl id, and kernrl's own problems are not loaded here{other}: these are {loaded}; {kernrl_hint}"


def make_problem_id(level: int, number: int) -> str:
    return f"L{level}/{number}"


@dataclass(frozen=True)
class Problem:
    """A KernelBench-style problem: `Model`, `get_inputs()`, `get_init_inputs()` in one source.

    `small_sizes` maps module-level constant names to values that make the problem cheap enough
    for Triton's CPU interpreter. Bundled problems declare them in a module-level dict literal
    `KBRL_SMALL_SIZES = {...}`; external problems get them from `sizing.infer_small_sizes`.
    """

    level: int
    number: int
    name: str  # KernelBench's file stem, e.g. "19_ReLU"
    source: str
    origin: str  # "bundled" | "kernelbench_root" | "kernrl_root" | "hf" | "inline"
    path: str | None = None
    small_sizes: dict[str, object] = field(default_factory=dict, compare=False, hash=False)
    # Whose problem it is, which decides how it runs and is judged: "kernelbench" (KernelBench's harness:
    # the model as constructed, in training mode) or "kernrl" (kernrl's harness: the model in eval mode).
    suite: str = "kernelbench"

    @property
    def id(self) -> str:
        return make_problem_id(self.level, self.number)

    @property
    def kernrl_id(self) -> str:
        """kernrl's form of the id, `L{level}_{file stem}` (L1_23_Softmax)."""
        return f"L{self.level}_{self.name}"

    @property
    def display_id(self) -> str:
        """The id in its suite's own form, as listings print it: kernrl's `L1_23_Softmax`, KernelBench's `L1/23`."""
        return self.kernrl_id if self.suite == "kernrl" else self.id

    @property
    def eval_mode(self) -> bool:
        """Whether the reference and the candidate run in eval mode (`model.eval()`): kernrl's harness runs every
        problem so, and a problem that asserts it (`assert not self.training`) needs it in any suite."""
        return self.suite == "kernrl" or bool(_NEEDS_EVAL_MODE.search(self.source))

    @property
    def missing_modules(self) -> list[str]:
        """Top-level modules the source imports that are not installed here (kernrl's delta-rule attention
        imports `fla`): such a problem cannot run here and is never judged."""
        return [name for name in imported_modules(self.source) if not _installed(name)]

    @property
    def unavailable_reason(self) -> str | None:
        missing = self.missing_modules
        if not missing:
            return None
        names = ", ".join(missing)
        return (f"{self.display_id} imports {names}, which {'is' if len(missing) == 1 else 'are'} not installed here; "
                f"install {'it' if len(missing) == 1 else 'them'} to use this problem")

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def source_for(self, size: SizeMode = "real") -> str:
        """The source to execute: as written for 'real', constants rewritten for 'small'.

        A problem that runs in eval mode says so in a module constant (`EVAL_MODE_MARKER`), which the worker, the
        sandboxed child (it keeps the module minus the reference class) and the audit read in `build_model`."""
        source = self.source
        if size != "real" and self.small_sizes:
            source = rewrite_module_constants(source, self.small_sizes)
        if self.eval_mode:
            source = source.rstrip("\n") + f"\n\n{EVAL_MODE_MARKER} = True  # kernelbench-rl: models run in eval mode\n"
        return source


EVAL_MODE_MARKER = "KBRL_EVAL_MODE"
_NEEDS_EVAL_MODE = re.compile(r"not\s+self\.training\b|self\.training\s*(?:==|is)\s*False")


def imported_modules(source: str) -> list[str]:
    """The top-level names of the modules a source imports, anywhere in it (relative imports left out)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return list(dict.fromkeys(names))


@functools.lru_cache(maxsize=256)
def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def rewrite_module_constants(source: str, values: dict[str, object]) -> str:
    """Replace the right-hand side of top-level `NAME = ...` assignments named in `values`.

    Done on the AST's line spans (not by regex) so comments and formatting elsewhere survive.
    A statement that binds several names (`height = width = 128`, `D, H, W = 16, 32, 32`) is kept
    and followed by one `NAME = value` line per name in `values`. A top-level function named in `values`
    (`get_init_inputs`) is replaced by one that returns the value, or by the value where it is that function's
    source (`def get_inputs(): ...`).
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in tree.body:
        end = node.end_lineno or node.lineno
        if isinstance(node, ast.FunctionDef) and node.name in values:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            value = values[node.name]
            if isinstance(value, str) and value.startswith(f"def {node.name}("):
                edits.append((start, end, value if value.endswith("\n") else value + "\n"))
            else:
                edits.append((start, end, f"def {node.name}():\n    return {value!r}\n"))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in values:
                edits.append((node.lineno, end, f"{name} = {values[name]!r}\n"))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in values:
            name = node.target.id
            edits.append((node.lineno, end, f"{name} = {values[name]!r}\n"))
        elif isinstance(node, ast.Assign):
            names = [n.id for target in node.targets for n in ast.walk(target) if isinstance(n, ast.Name)]
            after = "".join(f"{name} = {values[name]!r}\n" for name in dict.fromkeys(names) if name in values)
            if after:
                original = "".join(lines[node.lineno - 1 : end])
                edits.append((node.lineno, end, (original if original.endswith("\n") else original + "\n") + after))
    for start, end, text in sorted(edits, reverse=True):
        lines[start - 1 : end] = [text]
    return "".join(lines)


def declares_small_sizes(source: str) -> bool:
    """Whether the source assigns `KBRL_SMALL_SIZES` at module level: then its sizes, even none, are the word
    (an empty dict says the problem is small enough as written, and no constant may be guessed at)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "KBRL_SMALL_SIZES"
                                                    for t in node.targets) for node in tree.body)


def declared_small_sizes(source: str) -> dict[str, object]:
    """Read a module-level `KBRL_SMALL_SIZES = {...}` dict literal, if the source has one."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "KBRL_SMALL_SIZES"
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return dict(value) if isinstance(value, dict) else {}
    return {}
