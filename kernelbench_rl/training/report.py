"""What a run did, read back from DuckDB: the end-of-run summary table and the training-curve plot.

Both read only the store, so the printed story is the tables' story: `make run` prints
`run_summary(store, run_id)` and the pipeline publishes `training_curves_plot` as a Prefect artifact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernelbench_rl.store import Store


def _fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"


def run_facts(store: Store, run_id: str) -> dict[str, Any]:
    """The figures the summary prints, as data (tests compare them with the tables)."""
    sft = store.query("SELECT step, loss FROM sft_steps WHERE run_id = ? ORDER BY step",
                      [run_id]).to_dicts()
    steps = store.query(
        "SELECT step, stage, level, format_rate, compile_rate, correct_rate, reward_mean, num_samples "
        "FROM train_steps WHERE run_id = ? ORDER BY step", [run_id]).to_dicts()
    events = store.query(
        "SELECT step, kind, from_value, to_value, reason FROM curriculum_events WHERE run_id = ? ORDER BY step, kind",
        [run_id]).to_dicts()
    # Each evaluation has one overall row (level NULL). A resumed run evaluates again, so the summary keeps the
    # newest evaluation of each checkpoint (what this invocation just measured) and counts the earlier ones.
    reports = store.query(
        "SELECT checkpoint, created_at, metrics_json FROM eval_reports WHERE run_id = ? AND level IS NULL "
        "AND split = 'holdout' ORDER BY created_at", [run_id]).to_dicts()
    newest = {r["checkpoint"]: (position, r) for position, r in enumerate(reports)}
    # Sampled kernels the evaluator judged correct on training problems (RL rollouts of this run).
    correct_train = store.fetchall(
        "SELECT count(*), count(DISTINCT r.problem_id) FROM rollouts r JOIN evaluations e USING (eval_key) "
        "WHERE r.run_id = ? AND e.correct", [run_id])[0]
    evaluated = store.fetchall("SELECT count(*) FROM rollouts WHERE run_id = ? AND eval_key IS NOT NULL",
                               [run_id])[0][0]
    return {
        "sft_steps": len(sft),
        "sft_first_loss": sft[0]["loss"] if sft else None,
        "sft_last_loss": sft[-1]["loss"] if sft else None,
        "sft_losses": [(r["step"], r["loss"]) for r in sft],
        "rl_steps": steps,
        "promotions": events,
        "holdout": [(r["checkpoint"], r["created_at"], json.loads(r["metrics_json"] or "{}"))
                    for _, r in sorted(newest.values(), key=lambda pair: pair[0])],
        "earlier_holdout_evaluations": len(reports) - len(newest),
        "correct_train_samples": int(correct_train[0]),
        "correct_train_problems": int(correct_train[1]),
        "evaluated_rollouts": int(evaluated),
    }


def run_summary(store: Store, run_id: str) -> str:
    """A short plain-text table: SFT loss first -> last, RL rates per step, promotions, holdout base vs final."""
    facts = run_facts(store, run_id)
    lines = [f"Run {run_id}"]
    if facts["sft_steps"]:
        lines.append(f"  SFT warm start: {facts['sft_steps']} steps, loss per completion token "
                     f"{_fmt(facts['sft_first_loss'])} -> {_fmt(facts['sft_last_loss'])}")
    else:
        lines.append("  SFT warm start: none (sft.enabled=false or not run)")
    lines.append("  RL step  stage        format  compile  correct  reward")
    for row in facts["rl_steps"]:
        lines.append(f"  {row['step']:>7}  {row['stage']:<11}  {_fmt(row['format_rate'], 2):>6}  "
                     f"{_fmt(row['compile_rate'], 2):>7}  {_fmt(row['correct_rate'], 2):>7}  {_fmt(row['reward_mean']):>6}")
    if facts["rl_steps"]:
        lines.append("  (format: the answer's code block parses and defines ModelNew with a Triton kernel)")
    promotions = facts["promotions"]
    if promotions:
        for event in promotions:
            lines.append(f"  promotion at step {event['step']}: {event['kind']} {event['from_value']} -> "
                         f"{event['to_value']} ({event['reason']})")
    else:
        lines.append("  promotions: none")
    lines.append(f"  sampled kernels judged correct on training problems: {facts['correct_train_samples']} "
                 f"(on {facts['correct_train_problems']} problem(s)), of {facts['evaluated_rollouts']} evaluated")
    if facts["holdout"]:
        lines.append("  holdout (the newest evaluation of each checkpoint, newest last):")
        width = max(len(label) for label, _, _ in facts["holdout"])
        for label, created_at, metrics in facts["holdout"]:
            when = created_at.strftime("%Y-%m-%d %H:%M") if created_at is not None else "-"
            lines.append(f"    {label:<{width}}  {when}  pass@1 {_fmt((metrics.get('pass_at_k') or {}).get('pass@1'), 2)}, "
                         f"compile {_fmt(metrics.get('compile_rate'), 2)}, correct {_fmt(metrics.get('correct_rate'), 2)}")
        if facts["earlier_holdout_evaluations"]:
            lines.append(f"  ({facts['earlier_holdout_evaluations']} earlier holdout evaluation(s) of this run: "
                         f"SELECT created_at, checkpoint, metrics_json FROM eval_reports WHERE run_id = '{run_id}' "
                         "AND level IS NULL ORDER BY created_at)")
        if all(not metrics.get("correct_rate") for _, _, metrics in facts["holdout"]):
            lines.append("  (a model this small memorises the training kernels; unseen holdout problems staying at "
                         "zero is the honest result)")
    return "\n".join(lines)


def training_curves_plot(store: Store, run_id: str, path: str | Path) -> Path:
    """Two panels: SFT loss per step, and RL mean reward with format/compile/correct rates per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    facts = run_facts(store, run_id)
    sft = facts["sft_losses"]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    if sft:
        left.plot([step for step, _ in sft], [loss for _, loss in sft], color="tab:blue")
        left.set_yscale("log")
        left.set_xlabel("SFT step")
        left.set_ylabel("cross-entropy per completion token")
    else:
        left.text(0.5, 0.5, "no SFT steps", ha="center", va="center", transform=left.transAxes)
    left.set_title("SFT loss")
    steps = facts["rl_steps"]
    if steps:
        xs = [r["step"] for r in steps]
        for key, label in (("reward_mean", "mean reward"), ("format_rate", "format"), ("compile_rate", "compile"),
                           ("correct_rate", "correct")):
            right.plot(xs, [r[key] if r[key] is not None else float("nan") for r in steps], marker="o", label=label)
        for event in facts["promotions"]:
            right.axvline(event["step"], color="grey", linestyle=":", linewidth=1)
        right.set_xlabel("RL step (dotted: promotion)")
        right.set_ylim(-0.05, 1.05)
        right.legend(fontsize=8)
    else:
        right.text(0.5, 0.5, "no RL steps", ha="center", va="center", transform=right.transAxes)
    right.set_title("RL reward and rates")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
