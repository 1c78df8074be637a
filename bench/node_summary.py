"""The figures of `bash bench/device_suite.sh node` side by side, per GPU, against the bars a node must meet.

Reads the identity run with the pool on all GPUs, the same ids on GPU 0 alone (bench/kernelbench_sweep.py identity)
and the throughput configurations (bench/eval_scaling.py's scaling.json); prints one table and writes the JSON.

    python bench/node_summary.py --identity-all $OUT/node_identity_all.json --identity-one $OUT/node_identity_gpu0.json \
        --scaling $OUT/scaling.json --out $OUT/node_summary.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# The bars: identical code within [0.95, 1.05] for at least this share and none outside [0.8, 1.25]; throughput
# ratios to 1 GPU of at least these.
BAND_SHARE = 0.95
RATIO_BARS = {2: 1.9, 4: 3.6}


def _load(path: str | None) -> dict[str, Any] | None:
    if not path or not Path(path).is_file():
        return None
    try:
        return json.loads(Path(path).read_text())
    except ValueError:
        return None


def identity_figures(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """One identity run: verdicts, the band over all timed and per card, and whether it meets the bar."""
    if data is None:
        return None
    summary = data.get("summary", {})
    speedup = summary.get("speedup", {})
    cards = {card: {"verdicts": d.get("verdicts"), "timed": d.get("count"), "within": d.get("share_within_0.95_1.05"),
                    "outside": [r["label"] for r in d.get("outside_0.8_1.25", [])],
                    "baseline_elsewhere": d.get("baseline_elsewhere", [])}
             for card, d in summary.get("speedup_by_gpu", {}).items()}
    within = speedup.get("share_within_0.95_1.05")
    outside = [r["label"] for r in speedup.get("outside_0.8_1.25", [])]
    return {
        "planned": summary.get("planned"), "finished": summary.get("finished"), "correct": summary.get("correct"),
        "budget_cut": summary.get("budget_cut"), "wall_s": summary.get("wall_s"), "timed": speedup.get("count", 0),
        "within": within, "outside": outside, "per_gpu": cards,
        "meets_bar": bool(speedup.get("count")) and within is not None and within >= BAND_SHARE and not outside,
    }


def side_by_side(all_gpus: dict[str, Any] | None, one_gpu: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The problems timed in both runs whose identical-code speedup left [0.95, 1.05] in either: both readings."""
    if all_gpus is None or one_gpu is None:
        return []
    alone = {r["label"]: r for r in one_gpu.get("per_candidate", []) if r.get("speedup")}
    rows = []
    for r in all_gpus.get("per_candidate", []):
        other = alone.get(r["label"])
        if not r.get("speedup") or other is None:
            continue
        if not (0.95 <= r["speedup"] <= 1.05 and 0.95 <= other["speedup"] <= 1.05):
            rows.append({"label": r["label"], "all_gpus": round(r["speedup"], 3), "gpu": r.get("versions", {}).get("gpu"),
                         "gpu0_alone": round(other["speedup"], 3)})
    return rows


def scaling_figures(data: dict[str, Any] | None) -> dict[str, Any] | None:
    if data is None:
        return None
    out: dict[str, Any] = {}
    for engine, runs in data.get("runs", {}).items():
        rows = {}
        for key, run in runs.items():
            ratio = data.get("ratios", {}).get(engine, {}).get(key)
            bar = RATIO_BARS.get(int(key))
            rows[key] = {"per_minute": run.get("per_minute"), "verdicts": run.get("candidates"), "ratio": ratio,
                         "bar": bar, "meets_bar": None if bar is None or ratio is None else ratio >= bar,
                         "per_gpu": run.get("per_gpu"), "error": run.get("error"),
                         "readings": data.get("where_the_time_goes", {}).get(engine, {}).get(key, {}).get("readings")}
        out[engine] = rows
    return out


def summarise(identity_all: dict | None, identity_one: dict | None, scaling: dict | None) -> dict[str, Any]:
    return {"identity_all_gpus": identity_figures(identity_all), "identity_gpu0": identity_figures(identity_one),
            "outside_the_band_in_either": side_by_side(identity_all, identity_one),
            "scaling": scaling_figures(scaling)}


def print_summary(report: dict[str, Any]) -> None:
    print("== node summary")
    for name, title in (("identity_all_gpus", "identity, pool on all GPUs"), ("identity_gpu0", "identity, GPU 0 alone")):
        run = report[name]
        if run is None:
            print(f"{title}: not run (no JSON)")
            continue
        print(f"{title}: {run['finished']}/{run['planned']} finished{' (budget cut)' if run['budget_cut'] else ''}, "
              f"{run['correct']} correct, {run['timed']} timed; within [0.95, 1.05] {run['within']}, outside [0.8, 1.25] "
              f"{len(run['outside'])} {run['outside'][:8]}; bar (>= {BAND_SHARE:.0%}, none outside): "
              f"{'met' if run['meets_bar'] else 'NOT met'}")
        for card, d in run["per_gpu"].items():
            print(f"    GPU {card}: {d['verdicts']} verdicts, {d['timed']} timed, within {d['within']}, outside "
                  f"{len(d['outside'])}, baselines from another card {len(d['baseline_elsewhere'])}")
    for row in report["outside_the_band_in_either"]:
        print(f"    {row['label']:20s} all GPUs {row['all_gpus']} (GPU {row['gpu']}), GPU 0 alone {row['gpu0_alone']}")
    if report["scaling"] is None:
        print("scaling: not run (no scaling.json)")
        return
    for engine, rows in report["scaling"].items():
        for key, row in rows.items():
            if row.get("error"):
                print(f"scaling {engine} {key} GPU(s): failed: {row['error']}")
                continue
            bar = "" if row["bar"] is None else f" (bar {row['bar']}x: {'met' if row['meets_bar'] else 'NOT met'})"
            print(f"scaling {engine} {key} GPU(s): {row['per_minute']} verdicts/min, "
                  f"{'ratio ' + str(row['ratio']) + 'x' if row['ratio'] else 'the base'}{bar}; per GPU "
                  + ", ".join(f"{c}: {g['verdicts']} ({g['device_busy']:.0%} busy)" for c, g in (row["per_gpu"] or {}).items()))
            if row.get("readings"):
                print(f"    {'; '.join(row['readings'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--identity-all", default=None)
    parser.add_argument("--identity-one", default=None)
    parser.add_argument("--scaling", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    report = summarise(_load(args.identity_all), _load(args.identity_one), _load(args.scaling))
    print_summary(report)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
