"""The Problem model: one KernelBench-format problem, wherever it was loaded from."""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from typing import Literal

SizeMode = Literal["real", "small"]

_ID_RE = re.compile(r"^L(\d+)/(\d+)$")


def parse_problem_id(problem_id: str) -> tuple[int, int]:
    """'L1/19' -> (1, 19). Raises ValueError on anything else."""
    match = _ID_RE.match(problem_id.strip())
    if not match:
        raise ValueError(f"problem id {problem_id!r} is not of the form L<level>/<number>, e.g. L1/19")
    return int(match.group(1)), int(match.group(2))


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
    origin: str  # "bundled" | "kernelbench_root" | "hf" | "inline"
    path: str | None = None
    small_sizes: dict[str, object] = field(default_factory=dict, compare=False, hash=False)

    @property
    def id(self) -> str:
        return make_problem_id(self.level, self.number)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def source_for(self, size: SizeMode = "real") -> str:
        """The source to execute: as written for 'real', constants rewritten for 'small'."""
        if size == "real" or not self.small_sizes:
            return self.source
        return rewrite_module_constants(self.source, self.small_sizes)


def rewrite_module_constants(source: str, values: dict[str, object]) -> str:
    """Replace the right-hand side of top-level `NAME = ...` assignments named in `values`.

    Done on the AST's line spans (not by regex) so comments and formatting elsewhere survive.
    A statement that binds several names (`height = width = 128`, `D, H, W = 16, 32, 32`) is kept
    and followed by one `NAME = value` line per name in `values`.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in tree.body:
        end = node.end_lineno or node.lineno
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
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
