"""Each preset's reward for the answers that matter, as a markdown table (docs/training.md shows it).

    python -m kernelbench_rl.rewards.table [--cap 8]

Rows: an answer that does not compile, a wrong one, a flagged hack, an `unsupported` one (the CPU interpreter
lacks what it used), a truncated answer (graded correct at 2x, then clamped by rewards.truncated=clamp), a correct
one in doubt (timed 2x but flagged below the speed of light), correct kernels at 0.5x, 1x, 1.01x, 2x and 8x, and
correct kernels of problems whose floor leaves a known headroom over the reference ("1.4x, floor 1.5x": the
reference runs at two thirds of the speed of light; `speed_of_light` caps the speed term there).

    python -m kernelbench_rl.rewards.table --flags

Every flag the evaluator sets, on a verdict that is otherwise correct at 2x on a GPU, and what it earns under
each preset (docs/evaluator.md shows it).
"""

from __future__ import annotations

import argparse

from kernelbench_rl.evaluation.result import DOUBT_FLAGS, ErrorCategory, EvalResult, Flag
from kernelbench_rl.rewards.shaping import PRESETS, clamp_truncated, score

SPEEDUPS = (0.5, 1.0, 1.01, 2.0, 8.0)
# (speedup, the headroom the problem's floor leaves over its reference): what the floor-capped preset changes
FLOOR_CASES = ((1.4, 1.5), (2.0, 4.0))


def _result(**kw) -> EvalResult:
    return EvalResult(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32",
                      device_kind="cuda", **kw)


def rows(cap: float = 8.0) -> dict[str, dict[str, float]]:
    """preset -> column -> reward."""
    answers = {
        "no compile": _result(format_ok=True, error_category=ErrorCategory.COMPILE),
        "wrong": _result(format_ok=True, compiled=True, error_category=ErrorCategory.MISMATCH),
        "hack": _result(format_ok=True, compiled=True, correct=True, speedup=3.0, flags=[Flag.HACK.value]),
        "unsupported": _result(format_ok=True, error_category=ErrorCategory.UNSUPPORTED),
    }
    table: dict[str, dict[str, float]] = {}
    for preset in PRESETS:
        row = {name: score(r, preset, speedup_cap=cap).reward for name, r in answers.items()}
        graded = score(_result(format_ok=True, compiled=True, correct=True, speedup=2.0), preset, speedup_cap=cap).reward
        row["truncated"] = clamp_truncated(graded, preset)
        row["in doubt"] = score(_result(format_ok=True, compiled=True, correct=True, speedup=2.0,
                                        flags=[Flag.BELOW_SPEED_OF_LIGHT.value]), preset, speedup_cap=cap).reward
        for s in SPEEDUPS:
            row[f"correct {s:g}x"] = score(_result(format_ok=True, compiled=True, correct=True, speedup=s), preset,
                                          speedup_cap=cap).reward
        for s, headroom in FLOOR_CASES:  # a problem whose reference runs at 1/headroom of its physical floor
            near_floor = _result(format_ok=True, compiled=True, correct=True, speedup=s,
                                 speed_of_light={"reference_sol_fraction": 1.0 / headroom})
            row[f"{s:g}x, floor {headroom:g}x"] = score(near_floor, preset, speedup_cap=cap).reward
        table[preset] = row
    return table


def markdown(cap: float = 8.0) -> str:
    table = rows(cap)
    columns = list(next(iter(table.values())))
    lines = ["| preset | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for preset, row in table.items():
        lines.append(f"| `{preset}` | " + " | ".join(f"{row[c]:.3f}" for c in columns) + " |")
    return "\n".join(lines)


# What each flag says, for the flag table.
FLAG_MEANING: dict[str, str] = {
    Flag.EXCESSIVE_SPEEDUP.value: "speedup past the threshold (10x), not yet confirmed by the host clock",
    Flag.NEEDS_REVERIFICATION.value: "set with excessive_speedup; a re-timing is asked for",
    Flag.REVERIFIED.value: "the host clock confirmed an excessive speedup (set with the two above)",
    Flag.INPUT_MUTATED.value: "the kernel wrote into its inputs (the verdict is a mismatch)",
    Flag.BACKEND_NOT_USED.value: "no kernel of the candidate's own ran (set with hack)",
    Flag.LOW_KERNEL_SHARE.value: "the candidate's own kernels did under half of the work",
    Flag.HACK.value: "a detected reward hack",
    Flag.NO_SPEEDUP_ON_CPU.value: "judged on the CPU: nothing timed",
    Flag.BELOW_SPEED_OF_LIGHT.value: "timed faster than the problem's physical floor allows",
    Flag.CLOCK_DISAGREES.value: "the reported times disagree with the worker's own clock (set with hack)",
    Flag.PROFILE_DISAGREES.value: "the profiled forwards did more GPU work than the timed calls took",
    Flag.LAUNCHES_DISAGREE.value: "the timed calls launched fewer of the candidate's own kernels than a profiled "
                                  "forward (set with hack)",
}

# The flags a verdict carries together (the evaluator never sets the first without the others).
_FLAG_SETS: dict[str, list[str]] = {
    Flag.EXCESSIVE_SPEEDUP.value: [Flag.EXCESSIVE_SPEEDUP.value, Flag.NEEDS_REVERIFICATION.value],
    Flag.NEEDS_REVERIFICATION.value: [Flag.EXCESSIVE_SPEEDUP.value, Flag.NEEDS_REVERIFICATION.value],
    Flag.REVERIFIED.value: [Flag.EXCESSIVE_SPEEDUP.value, Flag.NEEDS_REVERIFICATION.value, Flag.REVERIFIED.value],
    Flag.BACKEND_NOT_USED.value: [Flag.BACKEND_NOT_USED.value, Flag.HACK.value],
    Flag.CLOCK_DISAGREES.value: [Flag.CLOCK_DISAGREES.value, Flag.HACK.value],
    Flag.LAUNCHES_DISAGREE.value: [Flag.LAUNCHES_DISAGREE.value, Flag.HACK.value],
}


def flag_rows(cap: float = 8.0) -> dict[str, dict[str, float]]:
    """flag -> preset -> reward of a verdict otherwise correct at 2x on a GPU (12x for the excessive-speedup flags; a
    mismatch for input_mutated, which never comes with a correct verdict)."""
    table: dict[str, dict[str, float]] = {"(none)": {}}
    for preset in PRESETS:
        table["(none)"][preset] = score(_result(format_ok=True, compiled=True, correct=True, speedup=2.0), preset,
                                        speedup_cap=cap).reward
    for flag in Flag:
        flags = _FLAG_SETS.get(flag.value, [flag.value])
        speedup = 12.0 if Flag.EXCESSIVE_SPEEDUP.value in flags else 2.0
        device = "cpu" if flag == Flag.NO_SPEEDUP_ON_CPU else "cuda"
        mutated = flag == Flag.INPUT_MUTATED  # always a mismatch: the evaluator never sets it on a correct verdict
        verdict = EvalResult(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32",
                             device_kind=device, format_ok=True, compiled=True, correct=not mutated,
                             speedup=None if device == "cpu" or mutated else speedup, flags=flags,
                             error_category=ErrorCategory.MISMATCH if mutated else ErrorCategory.OK)
        table[flag.value] = {preset: score(verdict, preset, speedup_cap=cap).reward for preset in PRESETS}
    return table


def flags_markdown(cap: float = 8.0) -> str:
    table = flag_rows(cap)
    presets = list(PRESETS)
    lines = ["| flag | what it says | doubt | " + " | ".join(f"`{p}`" for p in presets) + " |",
             "|---" * (len(presets) + 3) + "|"]
    for flag, row in table.items():
        meaning = FLAG_MEANING.get(flag, "a correct verdict at 2x with no flag")
        doubt = "yes" if flag in DOUBT_FLAGS else ""
        name = f"`{flag}`" if flag != "(none)" else flag
        lines.append(f"| {name} | {meaning} | {doubt} | " + " | ".join(f"{row[p]:.3f}" for p in presets) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cap", type=float, default=8.0, help="rewards.speedup_cap")
    parser.add_argument("--flags", action="store_true", help="the table of flags and what each earns per preset")
    args = parser.parse_args()
    print(flags_markdown(args.cap) if args.flags else markdown(args.cap))


if __name__ == "__main__":
    main()
