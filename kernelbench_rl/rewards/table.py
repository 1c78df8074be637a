"""Each preset's reward for the answers that matter, as a markdown table (docs/training.md shows it).

    python -m kernelbench_rl.rewards.table [--cap 8]

Rows: an answer that does not compile, a wrong one, a flagged hack, a truncated answer (graded correct at 2x,
then clamped by rewards.truncated=clamp), and correct kernels at 0.5x, 1x, 1.01x, 2x and 8x.
"""

from __future__ import annotations

import argparse

from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult, Flag
from kernelbench_rl.rewards.shaping import PRESETS, clamp_truncated, score

SPEEDUPS = (0.5, 1.0, 1.01, 2.0, 8.0)


def _result(**kw) -> EvalResult:
    return EvalResult(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32",
                      device_kind="cuda", **kw)


def rows(cap: float = 8.0) -> dict[str, dict[str, float]]:
    """preset -> column -> reward."""
    answers = {
        "no compile": _result(format_ok=True, error_category=ErrorCategory.COMPILE),
        "wrong": _result(format_ok=True, compiled=True, error_category=ErrorCategory.MISMATCH),
        "hack": _result(format_ok=True, compiled=True, correct=True, speedup=3.0, flags=[Flag.HACK.value]),
    }
    table: dict[str, dict[str, float]] = {}
    for preset in PRESETS:
        row = {name: score(r, preset, speedup_cap=cap).reward for name, r in answers.items()}
        graded = score(_result(format_ok=True, compiled=True, correct=True, speedup=2.0), preset, speedup_cap=cap).reward
        row["truncated"] = clamp_truncated(graded, preset)
        for s in SPEEDUPS:
            row[f"correct {s:g}x"] = score(_result(format_ok=True, compiled=True, correct=True, speedup=s), preset,
                                          speedup_cap=cap).reward
        table[preset] = row
    return table


def markdown(cap: float = 8.0) -> str:
    table = rows(cap)
    columns = list(next(iter(table.values())))
    lines = ["| preset | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for preset, row in table.items():
        lines.append(f"| `{preset}` | " + " | ".join(f"{row[c]:.3f}" for c in columns) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cap", type=float, default=8.0, help="rewards.speedup_cap")
    print(markdown(parser.parse_args().cap))


if __name__ == "__main__":
    main()
