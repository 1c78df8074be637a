"""The end-of-run summary and the training-curve plot read their figures from DuckDB, and only from there."""

from __future__ import annotations

import json

from kernelbench_rl.store import Store
from kernelbench_rl.training.report import run_facts, run_summary, training_curves_plot


def _store(tmp_path) -> Store:
    store = Store(tmp_path / "db.duckdb")
    store.upsert("sft_steps", [{"run_id": "r", "step": s, "loss": loss, "loss_sum": loss * 100, "tokens": 100,
                                "examples": 4, "learning_rate": 5e-3, "epoch": s + 1.0}
                               for s, loss in enumerate([7.31, 2.5, 0.031])])
    store.upsert("train_steps", [
        {"run_id": "r", "step": 0, "stage": "format", "level": 1, "format_rate": 0.25, "compile_rate": 0.25,
         "correct_rate": 0.125, "reward_mean": 0.25, "num_samples": 16, "num_trained": 16},
        {"run_id": "r", "step": 1, "stage": "compile", "level": 1, "format_rate": 0.75, "compile_rate": 0.5,
         "correct_rate": 0.25, "reward_mean": 0.5, "num_samples": 16, "num_trained": 8},
    ])
    store.upsert("curriculum_events", [{"run_id": "r", "step": 0, "kind": "stage", "from_value": "format",
                                        "to_value": "compile", "reason": "format_rate > 0.5 for 1 steps"}])
    store.upsert("eval_reports", [
        {"report_id": f"r|{label}|holdout|all", "run_id": "r", "checkpoint": label, "split": "holdout", "level": None,
         "num_problems": 4, "samples_per_problem": 2,
         "metrics_json": json.dumps({"compile_rate": 0.0, "correct_rate": 0.0, "pass_at_k": {"pass@1": 0.0}})}
        for label in ("base", "step_000001")])
    return store


def test_summary_tells_the_tables_story(tmp_path):
    store = _store(tmp_path)
    text = run_summary(store, "r")
    assert "3 steps, loss per completion token 7.310 -> 0.031" in text
    lines = text.splitlines()
    step_lines = [line.split() for line in lines if line.strip()[:1].isdigit()]
    assert step_lines == [["0", "format", "0.25", "0.25", "0.12", "0.250"],
                          ["1", "compile", "0.75", "0.50", "0.25", "0.500"]]
    assert any("promotion at step 0: stage format -> compile" in line for line in lines)
    holdout = {line.split()[0]: line for line in lines if "pass@1" in line}
    assert set(holdout) == {"base", "step_000001"} and all("pass@1 0.00" in line for line in holdout.values())
    assert "honest" in text  # the one line that says why holdout stays at zero
    facts = run_facts(store, "r")
    assert facts["sft_steps"] == 3 and len(facts["rl_steps"]) == 2 and facts["correct_train_samples"] == 0


def test_training_curves_plot_is_a_png(tmp_path):
    path = training_curves_plot(_store(tmp_path), "r", tmp_path / "curves.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_empty_run_still_summarises(tmp_path):
    text = run_summary(Store(tmp_path / "db.duckdb"), "nothing")
    assert "SFT warm start: none" in text and "promotions: none" in text


def test_a_resumed_run_shows_each_checkpoints_newest_evaluation_once_with_its_date(tmp_path):
    """`make run` again evaluates again: the summary shows the newest evaluation of each checkpoint, dated, newest
    last, and counts the earlier ones instead of repeating them."""
    from datetime import datetime

    store = _store(tmp_path)  # base and step_000001, evaluated once (now)
    store.upsert("eval_reports", [
        {"report_id": f"r|{label}|holdout|all|{when:%H}", "run_id": "r", "checkpoint": label, "split": "holdout",
         "level": None, "num_problems": 4, "samples_per_problem": 2, "created_at": when,
         "metrics_json": json.dumps({"compile_rate": rate, "correct_rate": rate, "pass_at_k": {"pass@1": rate}})}
        for label, when, rate in (("base", datetime(2026, 1, 2, 3, 4), 0.5),
                                  ("step_000001", datetime(2026, 1, 2, 3, 5), 0.25),
                                  ("step_000001", datetime(2099, 1, 1, 0, 0), 0.75))])
    lines = run_summary(store, "r").splitlines()
    holdout = [line.split() for line in lines if "pass@1" in line]
    assert [(row[0], row[1]) for row in holdout][-1] == ("step_000001", "2099-01-01")
    assert [row[0] for row in holdout] == ["base", "step_000001"]  # each once: base's newest is today's
    assert holdout[-1][4] == "0.75,"  # pass@1 of the newest evaluation
    assert any("3 earlier holdout evaluation(s) of this run" in line for line in lines)
    assert len(run_facts(store, "r")["holdout"]) == 2
