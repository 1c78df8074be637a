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

Replay (`--replay`): the shipped schedule over per-problem pass rates, step by step as the loop runs
it: each step draws `training.batch_problems` problems of the current level (earlier levels at
`previous_levels_share`), `sampling.group_size` samples of each from that problem's own rates,
and feeds the curriculum the per-level metrics the loop computes, one step late (asynchronous
training: a step is sampled before the previous one's promotion). Per-problem rates come from
`--replay-db` (the `rollouts` rows of a recorded GPU run, by problem) or, without one, from
published figures (PUBLISHED below: each model's correct rate on KernelBench, its source named),
spread over the problems of a level by a Beta distribution with that mean. It reports the step at
which each stage and level 2 were reached, within the default `training.steps`.

    python bench/curriculum_sim.py --replay [--replay-db runs/kernelbench_rl.duckdb --run-id RUN]

Settling (`--settle`): the last stage at level 1 with flat true correct rates per level (binomial draws of
`--samples` a step), the shipped schedule with one step of asynchronous lag, `--steps` steps (100). It counts
the level changes of each run: a level-1 rate above `level_threshold` and a level-2 rate under the demotion
line is the case that used to swap levels every two windows (20 changes in 100 steps without a back-off).

    python bench/curriculum_sim.py --settle [--seeds 50] [--steps 100] [--json out.json]
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
        name = name.split("/", 1)[-1]  # level_<L>/<rate>: these traces have one level
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


# Published correct rates on KernelBench (per sample, one-shot unless said), with their sources. Format and
# compile rates are not published beside them: a model that writes a correct kernel 17% of the time is taken
# to answer in the right format 90% of the time and to compile 20 points above its correct rate (assumption).
PUBLISHED: dict[str, dict] = {
    "QwQ-32B -> Kevin-32B (learns)": {
        "source": "Kevin (arXiv 2507.11948): correctness 56% -> 82% on KernelBench L1-2 after multi-turn RL",
        "correct": (0.56, 0.82)},
    "Claude Sonnet 4.6 (flat)": {
        "source": "Infatoshi/kernelbench-v3-runs README, H100 column: 19/54 problems correct",
        "correct": (19 / 54, 19 / 54)},
    "MiniMax M2.5 (flat, weak)": {
        "source": "Infatoshi/kernelbench-v3-runs README, H100 column: 9/54 problems correct",
        "correct": (9 / 54, 9 / 54)},
}
# How unevenly a level's problems are solved: Beta(mean * K, (1 - mean) * K) per problem (K = 1: most problems
# near 0 or 1, as a model that solves some problems and never others).
PROBLEM_SPREAD_K = 1.0


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return float(np.log(p / (1 - p)))


def published_problems(model: str, levels: dict[int, int], rng: np.random.Generator) -> dict[int, list[dict]]:
    """Per-problem rates for each level (levels: level -> problems), drawn around the model's published rate."""
    start, _ = PUBLISHED[model]["correct"]
    problems = {}
    for level, count in levels.items():
        correct = rng.beta(start * PROBLEM_SPREAD_K, (1 - start) * PROBLEM_SPREAD_K, size=count)
        problems[level] = [{"format": 0.9, "compile": min(1.0, c + 0.2), "correct": float(c)} for c in correct]
    return problems


def recorded_problems(db: Path, run_id: str | None) -> dict[int, list[dict]]:
    """Per-problem format / compile / correct rates from a recorded run's `rollouts` (infra and other no-verdict
    categories left out)."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    where = "WHERE error_category IS NOT NULL AND error_category NOT IN ('infra', 'too_large', 'unknown_problem', " \
            "'undiscriminating', 'unsupported')" + (" AND run_id = ?" if run_id else "")
    rows = con.execute(
        "SELECT level, problem_id, avg(CASE WHEN format_ok THEN 1 ELSE 0 END), "
        "avg(CASE WHEN error_category NOT IN ('format', 'static', 'compile') THEN 1 ELSE 0 END), "
        f"avg(CASE WHEN error_category = 'ok' THEN 1 ELSE 0 END) FROM rollouts {where} GROUP BY level, problem_id",
        [run_id] if run_id else []).fetchall()
    con.close()
    problems: dict[int, list[dict]] = {}
    for level, _, fmt, compiled, correct in rows:
        problems.setdefault(int(level), []).append({"format": fmt, "compile": compiled, "correct": correct})
    return problems


def replay_run(problems: dict[int, list[dict]], lift: float, steps: int, rng: np.random.Generator,
               overrides: list[str]) -> dict[str, int | None]:
    """One run of the shipped schedule over per-problem rates; `lift`: logit gained by every problem's rates
    over `steps` (0: a model that learns nothing)."""
    cfg = load_config("default", overrides)
    cur = Curriculum.from_config(cfg.curriculum, sorted(problems))
    reached: dict[str, int | None] = {"compile": None, "correctness": None, "speed": None, "level 2": None}
    pending: list[tuple[str, int]] = []  # the step queued ahead (max_steps_off_policy = 1)
    lag = cfg.training.max_steps_off_policy
    for step in range(steps):
        pending.append((cur.stage, cur.level))
        if len(pending) <= lag:
            continue
        stage, level = pending.pop(0)
        shift = lift * step / steps
        previous = [lv for lv in problems if lv < level]
        n_prev, n_cur = cur.problem_counts(cfg.training.batch_problems, bool(previous))
        batch = [(level, p) for p in rng.choice(len(problems[level]), size=n_cur)]
        if previous:
            batch += [(int(rng.choice(previous)), None) for _ in range(n_prev)]
        counts: dict[int, dict[str, list[float]]] = {}
        for lv, index in batch:
            problem = problems[lv][int(rng.integers(len(problems[lv]))) if index is None else int(index)]
            per = counts.setdefault(lv, {"format_rate": [], "compile_rate": [], "correct_rate": []})
            for name, key in (("format_rate", "format"), ("compile_rate", "compile"), ("correct_rate", "correct")):
                p = 1 / (1 + np.exp(-(_logit(problem[key]) + shift)))
                per[name].append(rng.binomial(cfg.sampling.group_size, p) / cfg.sampling.group_size)
        metrics = {f"level_{lv}/{name}": float(np.mean(values)) for lv, per in counts.items()
                   for name, values in per.items()}
        for event in cur.observe(step, metrics, stage=stage, level=level):
            key = event.to_value if event.kind == "stage" else f"level {event.to_value}"
            if key in reached and reached[key] is None:
                reached[key] = step + 1
    return reached


REPLAY_RULES: dict[str, list[str]] = {
    "default": [],
    "before (40 steps per stage, no level limit or demotion)": [
        "curriculum.max_steps_per_stage=40", "curriculum.max_steps_per_level=0", "curriculum.demote_threshold=null"],
}


def replay(seeds: int, db: Path | None, run_id: str | None) -> dict:
    cfg = load_config("default")
    steps = cfg.training.steps
    results: dict = {"steps": steps, "models": {}}
    sources = {"recorded run": None} if db is not None else PUBLISHED
    for model, (rule, overrides) in [(m, r) for m in sources for r in REPLAY_RULES.items()]:
        outcomes = []
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            if db is not None:
                problems, lift = recorded_problems(db, run_id), 0.0
            else:
                problems = published_problems(model, {1: 100, 2: 100}, rng)
                start, end = PUBLISHED[model]["correct"]
                lift = _logit(end) - _logit(start)
            outcomes.append(replay_run(problems, lift, steps, rng, overrides))
        row: dict = {"source": str(db) if db is not None else PUBLISHED[model]["source"], "rule": rule}
        for key in ("compile", "correctness", "speed", "level 2"):
            got = [o[key] for o in outcomes if o[key] is not None]
            row[key] = statistics.median(got) if len(got) * 2 >= seeds else None
            row[f"{key} share"] = len(got) / seeds
        results["models"][f"{model} | {rule}"] = row
    return results


def replay_table(results: dict) -> str:
    lines = [f"| model (source) | rule | compile at | correctness at | speed at | level 2 at | speed within {results['steps']} | "
             f"level 2 within {results['steps']} |", "|---|---|---|---|---|---|---|---|"]
    for name, row in results["models"].items():
        model = name.split(" | ")[0]
        def cell(key: str) -> str:
            return "-" if row[key] is None else f"{row[key]:g}"
        lines.append(f"| {model} ({row['source']}) | {row['rule']} | {cell('compile')} | {cell('correctness')} | {cell('speed')} | "
                     f"{cell('level 2')} | {row['speed share']:.0%} | {row['level 2 share']:.0%} |")
    return "\n".join(lines)


# Flat per-level correct rates: (level 1, level 2).
SETTLE_CASES: dict[str, tuple[float, float]] = {
    "level 1 at 0.6, level 2 at 0.03": (0.6, 0.03),
    "level 1 at 0.6, level 2 at 0.0": (0.6, 0.0),
    "level 1 at 0.9, level 2 at 0.04": (0.9, 0.04),
    "level 1 at 0.6, level 2 at 0.3 (level 2 holds)": (0.6, 0.3),
}
SETTLE_RULES: dict[str, list[str]] = {
    "default": [],
    "no back-off (before)": ["curriculum.demotion_backoff=0"],
    "no demotion": ["curriculum.demote_threshold=null"],
}


def settle_run(rates: tuple[float, float], steps: int, samples: int, rng: np.random.Generator,
               overrides: list[str]) -> dict:
    """One run in the last stage at level 1: the level changes and the steps trained at each level."""
    cfg = load_config("default", ["curriculum.start_stage=speed", *overrides])
    cur = Curriculum.from_config(cfg.curriculum, [1, 2])
    lag = cfg.training.max_steps_off_policy
    # Step s is decided (its level) when queued, after step s - 1 - lag was observed, as the loop queues it.
    queued = [cur.level] * (lag + 1)
    changes, at_level = [], {1: 0, 2: 0}
    for step in range(steps):
        level = queued.pop(0)
        at_level[level] += 1
        rate = rng.binomial(samples, rates[level - 1]) / samples
        metrics = {f"level_{level}/correct_rate": rate}
        for event in cur.observe(step, metrics, stage="speed", level=level):
            changes.append((step, event.from_value, event.to_value))
        queued.append(cur.level)
    return {"changes": changes, "steps_at_level": at_level}


def settle(seeds: int, steps: int, samples: int) -> dict:
    results: dict = {"steps": steps, "samples": samples, "seeds": seeds, "cases": {}}
    for case, rates in SETTLE_CASES.items():
        for rule, overrides in SETTLE_RULES.items():
            runs = [settle_run(rates, steps, samples, np.random.default_rng(seed), overrides) for seed in range(seeds)]
            counts = [len(r["changes"]) for r in runs]
            results["cases"][f"{case} | {rule}"] = {
                "rates": list(rates), "rule": rule, "overrides": overrides,
                "level_changes_median": statistics.median(counts), "level_changes_max": max(counts),
                "steps_at_level_2_median": statistics.median(r["steps_at_level"][2] for r in runs),
                "example_changes": runs[0]["changes"],
            }
    return results


def settle_table(results: dict) -> str:
    lines = [f"| true correct rates | rule | level changes in {results['steps']} steps (median, max) | "
             "steps at level 2 (median) | seed 0: steps of the changes |", "|---|---|---|---|---|"]
    for name, row in results["cases"].items():
        case = name.split(" | ")[0]
        example = ", ".join(f"{step} ({a}->{b})" for step, a, b in row["example_changes"]) or "-"
        lines.append(f"| {case} | {row['rule']} | {row['level_changes_median']:g}, {row['level_changes_max']} | "
                     f"{row['steps_at_level_2_median']:g} | {example} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=50, help="Simulated runs per scenario and rule.")
    parser.add_argument("--steps", type=int, default=200, help="Steps per simulated run (the horizon).")
    parser.add_argument("--samples", type=int, default=64, help="Samples a step's rate is measured on.")
    parser.add_argument("--json", type=Path, default=None, help="Also write the results here.")
    parser.add_argument("--replay", action="store_true", help="Replay per-problem pass rates through the shipped schedule.")
    parser.add_argument("--replay-db", type=Path, default=None, help="A recorded run's DuckDB file (its rollouts).")
    parser.add_argument("--run-id", default=None, help="The recorded run to replay (default: every run in the file).")
    parser.add_argument("--settle", action="store_true", help="Count level changes over flat per-level rates.")
    args = parser.parse_args()
    if args.settle:
        steps = 100 if args.steps == 200 else args.steps  # the default horizon here is training.steps
        results = settle(args.seeds, steps, args.samples)
        print(json.dumps(results, indent=2))
        print(settle_table(results))
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
        return
    if args.replay:
        results = replay(args.seeds, args.replay_db, args.run_id)
        print(json.dumps(results, indent=2))
        print(replay_table(results))
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
        return
    results = simulate(args.seeds, args.steps, args.samples)
    payload = {"seeds": args.seeds, "steps": args.steps, "samples": args.samples, "results": results}
    print(json.dumps(payload, indent=2))
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
