"""`kernelbench-rl export`: rollouts recorded by a real run of the environment (real evaluator on the CPU, real DuckDB
file) exported through the CLI's entry point as a `datasets` folder and as parquet, loaded back with `datasets`, and
taken by `sft` as a corpus once our evaluator has re-verified its right kernels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import datasets
import pytest

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.envs.kernel_env import EnvSpec
from kernelbench_rl.evaluation.result import EvalSettings
from kernelbench_rl.integrations.openenv_env import KernelAction, KernelEnvService
from kernelbench_rl.problems import SOLUTIONS_ROOT, get_problem
from kernelbench_rl.rag.corpus import ingest_docs, load_source
from kernelbench_rl.store import Store

REPO = Path(__file__).resolve().parents[1]
RELU = (SOLUTIONS_ROOT / "level1" / "19_ReLU.py").read_text()
SIGMOID = (SOLUTIONS_ROOT / "level1" / "21_Sigmoid.py").read_text()
NO_KERNEL = "I am not able to write this kernel."
RUN = "env-run"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, shared_evaluator) -> Path:
    """A small real run: three turns on L1/19 (no kernel, a wrong kernel, a right one), one on the bundled kernrl
    problem L10/5, one on the holdout problem L1/24; every row written by the environment as it writes them."""
    db = tmp_path_factory.mktemp("export") / "runs.duckdb"
    store = Store(db)
    store.init()
    train, holdout = [get_problem("L1/19"), get_problem("L10/5")], [get_problem("L1/24")]
    settings = EvalSettings(device="cpu", correctness_trials=1)
    with shared_evaluator(settings, store=store, problems={p.id: p for p in train + holdout}) as evaluator:
        service = KernelEnvService(evaluator, train, holdout, spec=EnvSpec(turns=3), store=store, run_id=RUN)
        episode = service.reset(problem_id="L1/19").episode_id
        for code in (NO_KERNEL, SIGMOID, RELU):
            service.step(KernelAction(code=code), episode)
        assert service.state(episode).done
        for problem_id, split in (("L10_5", "train"), ("L1/24", "holdout")):
            episode = service.reset(problem_id=problem_id, split=split, max_turns=1).episode_id
            service.step(KernelAction(code=NO_KERNEL), episode)
    return db


def export(db: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "export", "--db", str(db), "--out", str(out),
                           *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_runs_rollouts_load_with_datasets_and_leave_holdout_out(recorded, tmp_path):
    out = tmp_path / "trajectories"
    done = export(recorded, out, "--run-id", RUN)
    assert done.returncode == 0, done.stderr
    assert "wrote 4 rows (1 correct)" in done.stdout and "holdout 1" in done.stdout
    rows = datasets.load_from_disk(str(out))
    assert rows.num_rows == 4
    by_turn = {(r["problem"], r["turn"]): r for r in rows}
    assert set(by_turn) == {("L1/19", 0), ("L1/19", 1), ("L1/19", 2), ("L10_5_ChaCha20", 0)}  # no L1/24: holdout
    none, wrong, right = by_turn[("L1/19", 0)], by_turn[("L1/19", 1)], by_turn[("L1/19", 2)]
    assert (none["verdict"], none["kernel"], none["correct"], none["format_ok"]) == ("format", None, None, False)
    assert none["completion"] == NO_KERNEL and get_problem("L1/19").source.strip().splitlines()[-1] in none["prompt"]
    assert (wrong["verdict"], wrong["correct"], wrong["compiled"]) == ("mismatch", False, True)
    assert (right["verdict"], right["correct"]) == ("ok", True) and right["kernel"].strip() == RELU.strip()
    assert right["reward"] == pytest.approx(1.0) and right["speedup"] is None  # nothing is timed on the CPU
    assert right["hardware"].startswith("cpu:") and json.loads(right["versions"])["suite"] == "kernelbench"
    assert (right["problem_id"], right["suite"], right["level"]) == ("L1/19", "kernelbench", 1)
    assert right["reference"] == get_problem("L1/19").source
    kernrl = by_turn[("L10_5_ChaCha20", 0)]
    assert (kernrl["problem_id"], kernrl["suite"], kernrl["level"]) == ("L10/5", "kernrl", 10)
    assert not any(rows["holdout"])
    card = (out / "README.md").read_text()
    assert "4 turns" in card and "holdout problems left out" in card and "| `verdict` |" in card
    assert "load_from_disk" in card

    with_holdout = tmp_path / "all"
    assert export(recorded, with_holdout, "--run-id", RUN, "--include-holdout").returncode == 0
    held = [r for r in datasets.load_from_disk(str(with_holdout)) if r["holdout"]]
    assert [r["problem"] for r in held] == ["L1/24"]


def test_parquet_loads_as_a_hub_dataset_and_filters_apply(recorded, tmp_path):
    out = tmp_path / "parquet"
    done = export(recorded, out, "--format", "parquet", "--correct-only")
    assert done.returncode == 0, done.stderr
    rows = datasets.load_dataset(str(out), split="train")  # the card's configs name the file
    assert rows.num_rows == 1 and rows[0]["correct"] and rows[0]["problem"] == "L1/19"
    assert "configs:" in (out / "README.md").read_text()
    only_kernrl = export(recorded, tmp_path / "kernrl", "--suite", "kernrl")
    assert only_kernrl.returncode == 0, only_kernrl.stderr
    assert [r["problem"] for r in datasets.load_from_disk(str(tmp_path / "kernrl"))] == ["L10_5_ChaCha20"]
    named = export(recorded, tmp_path / "named", "--problem", "L10_5")  # any id form
    assert named.returncode == 0 and datasets.load_from_disk(str(tmp_path / "named")).num_rows == 1


def test_bad_requests_are_one_sentence_and_write_nothing(recorded, tmp_path):
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "mine.txt").write_text("not an export")
    for args, words in ((["--out", str(kept)], "already exists"),
                        (["--out", str(tmp_path / "a"), "--run-id", "no-such-run"], "No rollouts of run no-such-run"),
                        (["--out", str(tmp_path / "b"), "--format", "csv"], "--format must be one of"),
                        (["--out", str(tmp_path / "c"), "--level", "7"], "No rollouts")):
        done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "export", "--db", str(recorded), *args],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert (kept / "mine.txt").read_text() == "not an export" and not (tmp_path / "a").exists()


def test_exported_rows_feed_sft_as_a_corpus(recorded, tmp_path):
    from kernelbench_rl.policy.tiny import load_tokenizer
    from kernelbench_rl.rag.verify import reverify_corpus
    from kernelbench_rl.training.sft import build_sft_examples, completion_text

    out = tmp_path / "trajectories"
    assert export(recorded, out, "--run-id", RUN).returncode == 0
    config = load_config("default", [
        "run_id=sft-from-trajectories", f"db_path={tmp_path / 'sft.duckdb'}", f"log_dir={tmp_path / 'logs'}",
        "policy.backend=local", "policy.base_model=local:tiny", "policy.device=cpu", "problems.levels=[1]",
        "problems.ids=[L1/19]", "sampling.max_tokens=400", "rag.enabled=false"])
    store = Store(config.db_path)
    loaded = load_source("trajectories", out)
    assert [d.origin_id for d in loaded.docs] == [f"{RUN}:0:L1/19:0:2"]  # the right kernel only
    assert loaded.stats.skipped["not_correct"] == 3
    ingest_docs(store, loaded)
    before = build_sft_examples(build_run_parts(config), store, load_tokenizer("local:tiny"), leak_reason=lambda doc: None)
    assert not before.examples  # a label from elsewhere is not trusted until our evaluator agrees
    report = reverify_corpus(store, settings=EvalSettings(device="cpu", correctness_trials=1))
    assert (report.checked, report.passed) == (1, 1)
    tokenizer = load_tokenizer("local:tiny")
    dataset = build_sft_examples(build_run_parts(config), store, tokenizer, leak_reason=lambda doc: None)
    assert [(e.problem_id, e.source) for e in dataset.examples] == [("L1/19", "trajectories")]
    completion = tokenizer.decode(dataset.examples[0].completion_tokens[:-1])
    assert completion == completion_text(datasets.load_from_disk(str(out)).filter(lambda r: r["correct"])[0]["kernel"])


def test_a_training_runs_holdout_is_its_configs_split(tmp_path):
    """A `train` run's rows carry no holdout flag: its split is the one its stored config makes (fraction and seed)."""
    from kernelbench_rl.config import config_to_dict
    from kernelbench_rl.problems import holdout_ids, load_problems

    config = load_config("default", ["run_id=trained", "problems.levels=[1]", "problems.holdout_fraction=0.2"])
    held = holdout_ids(load_problems(levels=[1]), 0.2, 0)
    assert "L1/24" in held and "L1/19" not in held
    store = Store(tmp_path / "train.duckdb")
    store.upsert("runs", [{"run_id": "trained", "kind": "train", "config_json": json.dumps(config_to_dict(config))}])
    prompt, completion = store.put_texts("prompt", ["p"])[0], store.put_texts("completion", [NO_KERNEL])[0]
    store.upsert("rollouts", [{"run_id": "trained", "step": 0, "problem_id": pid, "suite": "kernelbench", "level": 1,
                               "sample_index": 0, "turn": 0, "stage": "format", "prompt_sha256": prompt,
                               "completion_sha256": completion, "format_ok": False, "error_category": "format"}
                              for pid in ("L1/19", "L1/24")])
    out = tmp_path / "out"
    done = export(store.path, out)
    assert done.returncode == 0 and "holdout 1" in done.stdout, done.stderr
    assert [r["problem"] for r in datasets.load_from_disk(str(out))] == ["L1/19"]
    # The same run exported with another split: a config of fraction 0 holds nothing out.
    store.upsert("runs", [{"run_id": "trained", "config_json": json.dumps(
        config_to_dict(load_config("default", ["problems.holdout_fraction=0.0"])))}])
    assert export(store.path, tmp_path / "all").returncode == 0
    assert datasets.load_from_disk(str(tmp_path / "all")).num_rows == 2
