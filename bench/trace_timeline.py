"""Where the device sections of a traced run go: sums per step, the device's idle gaps, and a timeline picture.

Run an evaluation with KBRL_EVAL_TRACE=DIR (a folder the worker can write; the worker may run as an unprivileged
user, so make it world-writable), then:

    python bench/trace_timeline.py DIR --out bench/results/trace_summary.json --png bench/results/trace.png

The summary says, over all device sections: their total and the wall between the first and the last (the rest
is time the device held no section); per step, the time it covered inside the sections (the worker's steps and
the children's, each on its own process); how much of the sections no worker step covered and the gaps between a
section's steps; and per problem, its sections' seconds and the reference child's timed blocks inside them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above

SECTION = "device_section"


def load(folder: Path) -> tuple[list[dict[str, Any]], int]:
    """Every well-formed row of the folder's trace files, and how many rows were skipped."""
    rows, skipped = [], 0
    for path in sorted(folder.glob("trace-*.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
                row["t0"], row["t1"] = float(row["t0"]), float(row["t1"])
                if row["t1"] >= row["t0"] and isinstance(row.get("step"), str):
                    rows.append(row)
                    continue
            except (ValueError, KeyError, TypeError):
                pass
            skipped += 1
    return rows, skipped


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _union_length(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for t0, t1 in sorted(spans):
        if t1 <= end:
            continue
        total += t1 - max(t0, end)
        end = t1
    return total


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    sections = sorted((r for r in rows if r["step"] == SECTION), key=lambda r: r["t0"])
    if not sections:
        return {"sections": 0, "note": "no device section in the trace"}
    first, last = sections[0]["t0"], max(r["t1"] for r in sections)
    in_sections = sum(r["t1"] - r["t0"] for r in sections)
    per_step: dict[str, float] = defaultdict(float)
    covered = 0.0
    by_who: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_who[row.get("who", "")].append(row)
    for section in sections:
        s0, s1 = section["t0"], section["t1"]
        own = [r for r in by_who[section.get("who", "")] if r["step"] != SECTION]
        worker_steps = []
        for row in own:
            share = _overlap(s0, s1, row["t0"], row["t1"])
            if share > 0:
                per_step[row["step"]] += share
                if not row["step"].startswith("child_"):
                    worker_steps.append((max(s0, row["t0"]), min(s1, row["t1"])))
        covered += _union_length(worker_steps)
        # Steps of other evaluations inside this section: what ran beside it (their builds and warm-ups).
        for who, others in by_who.items():
            if who == section.get("who", ""):
                continue
            for row in others:
                if row["step"] in ("build", "warm", "child_build", "child_warm"):
                    share = _overlap(s0, s1, row["t0"], row["t1"])
                    if share > 0:
                        per_step["beside: " + row["step"]] += share
    gaps = _gaps(sections, by_who)
    return {
        "sections": len(sections),
        "first_to_last_s": round(last - first, 3),
        "in_sections_s": round(in_sections, 3),
        "between_sections_s": round((last - first) - in_sections, 3),
        "covered_by_worker_steps_s": round(covered, 3),
        "not_covered_s": round(in_sections - covered, 3),
        "per_step_in_sections_s": {k: round(v, 3) for k, v in sorted(per_step.items(), key=lambda kv: -kv[1])},
        "gaps_in_sections_s": gaps,
        "per_problem": _per_problem(sections, rows),
    }


def _per_problem(sections: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per problem (the evaluation's name up to its first '#'): its sections, their seconds, and the seconds of the
    reference child's timed blocks inside them (a baseline timed there, and side-by-side timing), longest first."""
    blocks = [r for r in rows if r["step"] == "reference_block"]
    totals: dict[str, dict[str, float]] = defaultdict(lambda: {"sections": 0, "seconds": 0.0, "reference_blocks_s": 0.0})
    for section in sections:
        entry = totals[str(section.get("who", "")).split("#")[0]]
        entry["sections"] += 1
        entry["seconds"] += section["t1"] - section["t0"]
        entry["reference_blocks_s"] += sum(_overlap(section["t0"], section["t1"], b["t0"], b["t1"]) for b in blocks)
    ordered = sorted(totals.items(), key=lambda kv: -kv[1]["seconds"])
    return {name: {"sections": int(v["sections"]), "seconds": round(v["seconds"], 3),
                   "reference_blocks_s": round(v["reference_blocks_s"], 3)} for name, v in ordered}


def _gaps(sections: list[dict[str, Any]], by_who: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Section time between consecutive worker steps of its evaluation, summed per (step before, step after):
    where the uncovered part of the sections lies."""
    totals: dict[str, float] = defaultdict(float)
    for section in sections:
        s0, s1 = section["t0"], section["t1"]
        steps = sorted((r for r in by_who[section.get("who", "")]
                        if r["step"] != SECTION and not r["step"].startswith("child_")
                        and r["step"] not in ("build", "warm", "device_wait") and _overlap(s0, s1, r["t0"], r["t1"]) > 0),
                       key=lambda r: r["t0"])
        before, end = "section start", s0
        for row in steps:
            if row["t0"] > end:
                totals[f"{before} -> {row['step']}"] += row["t0"] - end
            if row["t1"] > end:
                before, end = row["step"], row["t1"]
        if s1 > end:
            totals[f"{before} -> section end"] += s1 - end
    return {k: round(v, 3) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])[:25]}


def draw(rows: list[dict[str, Any]], png: Path, start_s: float, span_s: float) -> int:
    """A timeline of `span_s` seconds from `start_s` after the first section: one lane per evaluation (its
    worker steps above, its child's below), coloured by step. Returns the number of lanes drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = [r for r in rows if r["step"] == SECTION]
    origin = min(r["t0"] for r in sections) if sections else min(r["t0"] for r in rows)
    lo, hi = origin + start_s, origin + start_s + span_s
    shown = [r for r in rows if r["t1"] > lo and r["t0"] < hi]
    lanes = sorted({r.get("who", "") for r in shown}, key=lambda w: min(r["t0"] for r in shown if r.get("who", "") == w))
    steps = sorted({r["step"] for r in shown} - {SECTION})
    palette = plt.get_cmap("tab20")
    colour = {step: palette((7 * i) % 20) for i, step in enumerate(steps)}  # neighbours in the list far apart
    fig, ax = plt.subplots(figsize=(14, max(3.0, 0.45 * len(lanes) + 1.5)))
    for lane, who in enumerate(lanes):
        for row in (r for r in shown if r.get("who", "") == who):
            span = [(row["t0"] - origin, row["t1"] - row["t0"])]
            if row["step"] == SECTION:  # an outline around its lane: the steps inside stay readable
                ax.broken_barh(span, (lane, 0.8), facecolors="none", edgecolor="black", linewidth=1.2)
            else:  # the worker's steps above, the child's below
                y = lane + (0.0 if row["step"].startswith("child_") else 0.42)
                ax.broken_barh(span, (y, 0.38), facecolors=colour[row["step"]], edgecolor="none")
    ax.set_xlim(start_s, start_s + span_s)
    ax.set_yticks([i + 0.4 for i in range(len(lanes))])
    ax.set_yticklabels([w.split("#")[0] for w in lanes], fontsize=7)
    ax.set_xlabel("seconds after the first device section")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colour[s]) for s in steps], labels=steps, fontsize=7,
              ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    ax.set_title("device sections (outlined) and their steps: the worker's above, the child's below in each lane")
    fig.tight_layout()
    fig.savefig(png, dpi=130)
    plt.close(fig)
    return len(lanes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="the KBRL_EVAL_TRACE folder of a run")
    parser.add_argument("--out", default=None, help="write the summary to this JSON file too")
    parser.add_argument("--png", default=None, help="draw the timeline into this PNG")
    parser.add_argument("--start-s", type=float, default=10.0,
                        help="where the picture starts, seconds after the first device section (default 10)")
    parser.add_argument("--span-s", type=float, default=3.0, help="seconds the picture shows (default 3)")
    args = parser.parse_args()
    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"trace_timeline: {folder} is not a folder (set KBRL_EVAL_TRACE to one for the run)", file=sys.stderr)
        return 2
    rows, skipped = load(folder)
    if not rows:
        print(f"trace_timeline: no trace rows in {folder}", file=sys.stderr)
        return 2
    summary = {"rows": len(rows), "skipped_rows": skipped, **summarise(rows)}
    if args.png:
        summary["picture_lanes"] = draw(rows, Path(args.png), args.start_s, args.span_s)
    harness.show(summary, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
