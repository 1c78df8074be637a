"""Curriculum promotion over simulated rate traces: when does each rule reach each stage?

Each step's rates are binomial draws (batch_problems x group_size samples, 64 by default) around
a true rate that follows a trace shaped like a real run's: the format rate climbs within ~15
steps, the compile rate more slowly, the correct rate slowest. Scenarios:

- climbing:   compile 0.3 -> 0.85 over 60 steps, correct 0.2 -> 0.6 over 200 (a run that learns);
- flat_0.6:   compile and correct flat at 0.6 (a plateau a 0.8 threshold never sees);
- stalled:    correct flat at 0.2 (nothing more to learn at this stage: the fallback's case).

Rules: `streak` is the old one (rate >= 0.8 for 5 consecutive steps); `default` is the shipped
Curriculum (kernelbench_rl.training.curriculum) with the shipped config; the `sweep` rows vary
the correctness threshold and the window around it. For each (scenario, rule) over many seeds it
reports the median step at which each stage was reached ("-" when fewer than half got there
within the horizon) and the share of seeds that reached the speed stage. It also counts, per run,
promotions by the fallback (max_steps_per_stage) and early ones: a stage left on its measured
rate while its true rate was still more than 0.1 under the threshold (noise).

    python bench/curriculum_sim.py [--seeds 50] [--steps 200] [--samples 64] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelbench_rl.config import load_config  # noqa: E402
from kernelbench_rl.training.curriculum import Curriculum  # noqa: E402

STAGES = ("format", "compile", "correctness", "speed")
RATE_OF_STAGE = {"format": "format_rate", "compile": "compile_rate", "correctness": "correct_rate"}


def ramp(step: int, start: float, end: float, steps: int) -> float:
    return start + (end - start) * min(step / steps, 1.0)


def true_rates(scenario: str, step: int) -> dict[str, float]:
    fmt = 0.3 + 0.67 * (1 - np.exp(-step / 6))  # ~0.95 by step 15
    if scenario == "climbing":
        return {"format_rate": fmt, "compile_rate": ramp(step, 0.3, 0.85, 60), "correct_rate": ramp(step, 0.2, 0.6, 200)}
    if scenario == "flat_0.6":
        return {"format_rate": fmt, "compile_rate": 0.6, "correct_rate": 0.6}
    if scenario == "stalled":
        return {"format_rate": fmt, "compile_rate": ramp(step, 0.3, 0.7, 100), "correct_rate": 0.2}
    raise ValueError(scenario)


@dataclass
class Outcome:
    reached: dict[str, int | None]  # stage -> first step trained in it
    early: int  # promotions on the measured rate while the true rate was > 0.1 under the threshold
    fallback: int = 0  # promotions by max_steps_per_stage


def run_streak(rates: list[dict[str, float]], truth: list[dict[str, float]], threshold=0.8, window=5) -> Outcome:
    stage, streak, reached, early = 0, 0, {"format": 0}, 0
    for step, observed in enumerate(rates):
        if stage == len(STAGES) - 1:
            break
        name = RATE_OF_STAGE[STAGES[stage]]
        streak = streak + 1 if observed[name] >= threshold else 0
        if streak >= window:
            early += truth[step][name] < threshold - 0.1
            stage, streak = stage + 1, 0
            reached[STAGES[stage]] = step + 1
    return Outcome({s: reached.get(s) for s in STAGES}, early)


def run_curriculum(rates: list[dict[str, float]], truth: list[dict[str, float]], overrides: list[str]) -> Outcome:
    cfg = load_config("default", overrides)
    cur = Curriculum.from_config(cfg.curriculum, [1])
    reached, early, fallback = {"format": 0}, 0, 0
    for step, observed in enumerate(rates):
        if cur.at_last_stage:
            break
        name, threshold = cur.watched_rate()
        for event in cur.observe(step, dict(observed)):
            if event.kind == "stage":
                if "max_steps_per_stage" in event.reason:
                    fallback += 1
                else:
                    early += truth[step][name] < threshold - 0.1
                reached[event.to_value] = step + 1
    return Outcome({s: reached.get(s) for s in STAGES}, early, fallback)


RULES: dict[str, list[str] | None] = {
    "streak (old: 0.8 x 5 in a row)": None,
    "default": [],
    "no fallback": ["curriculum.max_steps_per_stage=0"],
    "correctness 0.3": ["curriculum.correctness_threshold=0.3"],
    "correctness 0.45": ["curriculum.correctness_threshold=0.45"],
    "window 3": ["curriculum.window=3"],
    "window 10": ["curriculum.window=10"],
    "fallback 80": ["curriculum.max_steps_per_stage=80"],
}


def simulate(seeds: int, steps: int, samples: int) -> dict:
    results: dict = {}
    for scenario in ("climbing", "flat_0.6", "stalled"):
        truth = [true_rates(scenario, step) for step in range(steps)]
        for rule, overrides in RULES.items():
            outcomes = []
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                rates = [{k: rng.binomial(samples, p) / samples for k, p in t.items()} for t in truth]
                outcomes.append(run_streak(rates, truth) if overrides is None else run_curriculum(rates, truth, overrides))
            row = {}
            for stage in STAGES:
                steps_reached = [o.reached[stage] for o in outcomes if o.reached[stage] is not None]
                row[stage] = statistics.median(steps_reached) if len(steps_reached) * 2 >= seeds else None
            row["reached_speed"] = sum(o.reached["speed"] is not None for o in outcomes) / seeds
            row["early_promotions_per_run"] = statistics.fmean(o.early for o in outcomes)
            row["fallback_promotions_per_run"] = statistics.fmean(o.fallback for o in outcomes)
            results.setdefault(scenario, {})[rule] = row
    return results


def table(results: dict) -> str:
    lines = ["| scenario | rule | compile at | correctness at | speed at | reached speed | early/run | fallback/run |",
             "|---|---|---|---|---|---|---|---|"]
    for scenario, rules in results.items():
        for rule, row in rules.items():
            def cell(stage: str) -> str:
                return "-" if row[stage] is None else f"{row[stage]:g}"
            lines.append(f"| {scenario} | {rule} | {cell('compile')} | {cell('correctness')} | {cell('speed')} | "
                         f"{row['reached_speed']:.0%} | {row['early_promotions_per_run']:.2f} | "
                         f"{row['fallback_promotions_per_run']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=50, help="Simulated runs per scenario and rule.")
    parser.add_argument("--steps", type=int, default=200, help="Steps per simulated run (the horizon).")
    parser.add_argument("--samples", type=int, default=64, help="Samples a step's rate is measured on.")
    parser.add_argument("--json", type=Path, default=None, help="Also write the results here.")
    args = parser.parse_args()
    results = simulate(args.seeds, args.steps, args.samples)
    payload = {"seeds": args.seeds, "steps": args.steps, "samples": args.samples, "results": results}
    print(json.dumps(payload, indent=2))
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
