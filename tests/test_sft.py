"""The SFT warm start: masked cross-entropy, leak rules, resume, Tinker's interface, RL starting from it."""

from __future__ import annotations

import math

import pytest
import tinker

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.errors import UserError
from kernelbench_rl.policy import PolicyConfig, make_service_client
from kernelbench_rl.problems import holdout_ids, load_problems
from kernelbench_rl.rag.corpus import ingest_docs, load_source
from kernelbench_rl.store import Store
from kernelbench_rl.training.sft import (
    SftExample,
    SftRun,
    batch_indices,
    build_sft_examples,
    completion_text,
    last_sft_checkpoint,
    run_sft,
)

try:
    from tests.tinker_standin import StandinServiceClient
except ImportError:  # pragma: no cover - tests run from the repository root or tests/
    from tinker_standin import StandinServiceClient

ELEMENTWISE = ["L1/19", "L1/21"]


def _config(tmp_path, *extra: str):
    return load_config("default", [
        "run_id=sft-test", f"db_path={tmp_path / 'db.duckdb'}", f"log_dir={tmp_path / 'logs'}",
        "policy.backend=local", "policy.base_model=local:tiny", "policy.device=cpu", "policy.lora_rank=8",
        "problems.levels=[1]", f"problems.ids=[{','.join(ELEMENTWISE)}]", "sampling.max_tokens=400",
        "sft.max_examples=2", "sft.batch_size=2", "sft.learning_rate=0.01", "rag.enabled=false", *extra,
    ])


def _store_with_solutions(config) -> Store:
    store = Store(config.db_path)
    ingest_docs(store, load_source("solutions", None, None))
    return store


def _no_leak(doc):  # the holdout *ids* rule alone (the embedding rules have their own test below)
    return None


def _short_example(tokenizer) -> SftExample:
    prompt = list(tokenizer.encode("<|im_start|>user\nwrite relu<|im_end|>\n<|im_start|>assistant\n",
                                   add_special_tokens=False))
    completion = list(tokenizer.encode(completion_text("import triton\nclass ModelNew: pass"),
                                       add_special_tokens=False)) + [tokenizer.eos_token_id]
    return SftExample("L1/19", "sha", "solutions", prompt, completion)


def test_masked_loss_counts_completion_tokens_only(tmp_path):
    service = make_service_client(PolicyConfig(backend="local", lora_rank=4, device="cpu", log_dir=str(tmp_path)))
    client = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
    example = _short_example(client.get_tokenizer())
    datum = example.datum()
    output = client.forward([datum], "cross_entropy").result()
    logp = output.loss_fn_outputs[0]["logprobs"].to_torch()
    n_prompt_targets = len(example.prompt_tokens) - 1
    completion_only = float(-logp[n_prompt_targets:].sum())
    assert output.metrics["loss:sum"] == pytest.approx(completion_only, rel=1e-5)
    assert output.metrics["loss:sum"] < float(-logp.sum()) - 1.0  # the prompt's tokens would add to it
    # Changing what the prompt "should" have said changes nothing: those targets carry weight 0.
    targets = datum.loss_fn_inputs["target_tokens"].to_torch().clone()
    targets[:n_prompt_targets] = (targets[:n_prompt_targets] + 7) % 100
    altered = tinker.Datum(model_input=datum.model_input, loss_fn_inputs={
        "target_tokens": tinker.TensorData.from_torch(targets), "weights": datum.loss_fn_inputs["weights"]})
    again = client.forward([altered], "cross_entropy").result()
    assert again.metrics["loss:sum"] == pytest.approx(output.metrics["loss:sum"], rel=1e-5)
    service.close()


def test_sft_lowers_the_loss_on_a_fixed_batch(tmp_path):
    config = _config(tmp_path, "sft.steps=12")
    store = _store_with_solutions(config)
    summary = run_sft(build_run_parts(config), store=store, leak_reason=_no_leak)
    assert summary.num_examples == 2 and summary.steps_run == 12
    rows = store.query("SELECT step, loss, tokens, examples FROM sft_steps WHERE run_id = 'sft-test' ORDER BY step").to_dicts()
    assert [r["step"] for r in rows] == list(range(12))
    assert all(r["examples"] == 2 and r["tokens"] > 100 for r in rows)
    assert rows[-1]["loss"] < 0.6 * rows[0]["loss"]
    assert summary.final_state_path is not None
    assert list((tmp_path / "logs" / "sft-test" / "tensorboard" / "sft").glob("events.out.tfevents.*"))


def test_examples_are_rl_prompts_with_the_run_problems_first(tmp_path):
    from kernelbench_rl.compose import run_settings
    from kernelbench_rl.envs.kernel_env import make_group_builders
    from kernelbench_rl.policy.tiny import load_tokenizer
    from kernelbench_rl.problems import get_problem, load_solution
    from kernelbench_rl.training.rollouts import PromptRenderer

    config = _config(tmp_path, "sft.max_examples=3")
    store = _store_with_solutions(config)
    tokenizer = load_tokenizer("local:tiny")
    dataset = build_sft_examples(build_run_parts(config), store, tokenizer, training_ids=ELEMENTWISE, leak_reason=_no_leak)
    assert [e.problem_id for e in dataset.examples[:2]] == ELEMENTWISE
    assert dataset.excluded["over_max_examples"] > 0
    first = dataset.examples[0]
    (builder,) = make_group_builders([get_problem("L1/19")], 1, run_settings(config).env)
    assert first.prompt_tokens == PromptRenderer(tokenizer).encode_messages(builder()[0].next_messages())
    assert tokenizer.decode(first.completion_tokens[:-1]) == completion_text(load_solution(get_problem("L1/19")))
    assert first.completion_tokens[-1] == tokenizer.eos_token_id


def test_no_holdout_problem_solution_is_ever_in_the_sft_set(tmp_path):
    """The real leak rules (retrieval's HoldoutGuard, with embeddings): ids and near-duplicates of holdout references."""
    from kernelbench_rl.policy.tiny import load_tokenizer
    from kernelbench_rl.rag.normalize import code_sha256

    config = _config(tmp_path, "sft.max_examples=1000", "sampling.max_tokens=4096")
    problems = load_problems(None)
    held = holdout_ids(problems, config.problems.holdout_fraction, config.problems.split_seed)
    held_problem = next(p for p in problems if p.id in held and p.level == 1)
    # A few of our solutions (embedding all of them costs minutes on 2 cores): two training problems' and a holdout one's.
    store = Store(config.db_path)
    loaded = load_source("solutions", None, None)
    wanted = {*ELEMENTWISE, held_problem.id}
    loaded.docs = [d for d in loaded.docs if f"L{d.kb_level}/{d.kb_task}" in wanted]
    assert len(loaded.docs) == 3
    ingest_docs(store, loaded)
    # A copy of a holdout reference under a training problem's label: only the near-duplicate rule catches it.
    kernel = "import triton\n# " + code_sha256(held_problem.source)
    store.upsert("corpus_docs", [{"sha256": code_sha256(kernel), "source": "kernelbook", "backend": "triton",
                                  "origin_id": "copy", "title": "copy", "pytorch_code": held_problem.source,
                                  "kernel_code": kernel, "verified": True}])
    dataset = build_sft_examples(build_run_parts(config), store, load_tokenizer("local:tiny"))
    trained = {e.problem_id for e in dataset.examples}
    assert trained and not trained & held
    assert trained == set(ELEMENTWISE)
    assert dataset.excluded["holdout_problem"] == 1
    assert dataset.excluded["near_duplicate_of_holdout"] == 1
    stored = {d["sha256"]: d for d in store.query("SELECT sha256, pytorch_code FROM corpus_docs").to_dicts()}
    assert all(stored[e.doc_sha256]["pytorch_code"] != held_problem.source for e in dataset.examples)


def test_a_killed_sft_resumes_from_its_checkpoint_without_duplicate_steps(tmp_path):
    class Killed(Exception):
        pass

    def kill_after_step_2(result):
        if result.step == 2:
            raise Killed()

    config = _config(tmp_path, "sft.steps=5", "sft.checkpoint_every=2", "sft.checkpoint_every_s=0")
    store = _store_with_solutions(config)
    with pytest.raises(Killed):  # a failed (or killed) warm start saves nothing on its way out
        run_sft(build_run_parts(config), store=store, leak_reason=_no_leak, on_step=kill_after_step_2)
    assert last_sft_checkpoint(store, "sft-test")["step"] == 1
    second = run_sft(build_run_parts(config), store=store, leak_reason=_no_leak)
    assert second.resumed_from_step == 1  # the last checkpoint; step 2 is re-done
    assert second.steps_run == 3
    steps = [r[0] for r in store.fetchall("SELECT step FROM sft_steps WHERE run_id = 'sft-test' ORDER BY step")]
    assert steps == [0, 1, 2, 3, 4]
    assert second.final_state_path is not None
    # Done means done: a third call trains nothing.
    assert run_sft(build_run_parts(config), store=store, leak_reason=_no_leak).steps_run == 0


def test_batches_are_deterministic_and_cover_each_epoch():
    assert batch_indices(5, 2, 3, seed=0) == batch_indices(5, 2, 3, seed=0)
    epoch = [i for step in range(5) for i in batch_indices(5, 1, step, seed=0)]
    assert sorted(epoch) == [0, 1, 2, 3, 4]


def test_sft_on_tinker_uses_cross_entropy_through_forward_backward(tmp_path, monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    config = _config(tmp_path, "sft.steps=6", "policy.backend=tinker", "policy.base_model=Qwen/Qwen3-8B",
                     "sft.learning_rate=0.05")
    store = _store_with_solutions(config)
    service = make_service_client(PolicyConfig(backend="tinker", base_model="Qwen/Qwen3-8B"),
                                  client_factory=StandinServiceClient)
    calls = []
    run = SftRun(build_run_parts(config), store=store, service_client=service, leak_reason=_no_leak)
    with run:
        original = run.training_client.forward_backward

        def spy(data, loss_fn, loss_fn_config=None):
            calls.append((loss_fn, sorted(data[0].loss_fn_inputs)))
            return original(data, loss_fn, loss_fn_config)

        run.training_client.forward_backward = spy
        while not run.finished:
            run.step()
        summary = run.summary(6)
    assert calls and all(c == ("cross_entropy", ["target_tokens", "weights"]) for c in calls)
    assert summary.last_loss < summary.first_loss
    assert summary.final_state_path.startswith("tinker://")


def test_rl_starts_from_the_warm_start(tmp_path):
    from kernelbench_rl.training import TrainingRun

    config = _config(tmp_path, "sft.steps=2", "training.steps=1")
    store = _store_with_solutions(config)
    summary = run_sft(build_run_parts(config), store=store, leak_reason=_no_leak)
    run = TrainingRun(build_run_parts(config, policy_beside=True), store=store, evaluate_fn=lambda ids, responses: [])
    run.start()
    try:
        assert run.warm_start_path == summary.final_state_path
    finally:
        run._started = False  # nothing else was built (no evaluator, no step)


def test_no_examples_is_one_clear_sentence(tmp_path):
    config = _config(tmp_path, "sft.steps=2")
    with pytest.raises(UserError, match="corpus ingest"):
        run_sft(build_run_parts(config), store=Store(config.db_path), leak_reason=_no_leak)


def test_loss_per_token_is_finite_and_positive(tmp_path):
    config = _config(tmp_path, "sft.steps=1")
    store = _store_with_solutions(config)
    summary = run_sft(build_run_parts(config), store=store, leak_reason=_no_leak)
    assert math.isfinite(summary.first_loss) and summary.first_loss > 0


def test_a_short_default_run_after_sft_evaluates_sampled_kernels(tmp_path):
    """Default config, one problem: SFT on its verified kernel, then one RL step whose *sampled* kernels
    reach the evaluator (the tiny random model alone never writes a kernel block)."""
    from kernelbench_rl.training import run_training

    config = load_config("default", [
        "run_id=short", f"db_path={tmp_path / 'db.duckdb'}", f"log_dir={tmp_path / 'logs'}", "policy.backend=local",
        "policy.device=cpu", "problems.levels=[1]", "problems.ids=[L1/19]", "sampling.max_tokens=400",
        "sampling.group_size=2", "training.batch_problems=1", "training.steps=1", "rag.enabled=false",
        "sampling.temperature=0.5", "sft.steps=100", "sft.batch_size=1", "sft.max_examples=1", "sft.learning_rate=0.005",
        "eval.device=cpu", "eval.size=small", "eval.num_workers=1",
    ])
    store = _store_with_solutions(config)
    sft = run_sft(build_run_parts(config), store=store, leak_reason=_no_leak)
    assert sft.last_loss < 0.2 * sft.first_loss
    run_training(build_run_parts(config, policy_beside=True), progress=False, store=store)
    rollouts = store.query("SELECT format_ok, eval_key FROM rollouts WHERE run_id = 'short'").to_dicts()
    assert len(rollouts) == 2
    assert any(r["format_ok"] and r["eval_key"] for r in rollouts)
    assert store.count("evaluations") > 0 and store.count("kernels") > 0


def test_rl_refuses_an_unfinished_warm_start(tmp_path):
    from kernelbench_rl.training import TrainingRun

    config = _config(tmp_path, "sft.steps=4", "sft.checkpoint_every=2", "training.steps=1")
    store = _store_with_solutions(config)
    run_sft(build_run_parts(config), store=store, leak_reason=_no_leak, stop_after_steps=2)  # checkpoint at step 1 of 4
    run = TrainingRun(build_run_parts(config, policy_beside=True), store=store, evaluate_fn=lambda ids, responses: [])
    with pytest.raises(UserError, match=r"has not finished \(its last checkpoint is step 1 of 4 steps\)"):
        run.start()
    assert not run._started


def test_rl_says_loudly_that_there_is_no_warm_start(tmp_path):
    from kernelbench_rl.training import TrainingRun

    config = _config(tmp_path, "training.steps=1")
    run = TrainingRun(build_run_parts(config, policy_beside=True), store=Store(config.db_path), evaluate_fn=lambda ids, responses: [])
    with pytest.warns(UserWarning, match="no SFT warm start: RL starts from the base model"):
        run.start()
    run.close()


def test_a_warm_start_of_another_lora_rank_is_refused(tmp_path):
    from kernelbench_rl.training import TrainingRun

    config = _config(tmp_path, "sft.steps=1", "training.steps=1")  # rank 8
    store = _store_with_solutions(config)
    run_sft(build_run_parts(config), store=store, leak_reason=_no_leak)
    other_rank = _config(tmp_path, "sft.steps=1", "training.steps=1", "policy.lora_rank=4")
    run = TrainingRun(build_run_parts(other_rank, policy_beside=True), store=store, evaluate_fn=lambda ids, responses: [])
    with pytest.raises(UserError, match="LoRA rank 8, so policy.lora_rank=4 cannot apply"):
        run.start()


def test_a_stopped_sft_resumes_where_it_stopped(tmp_path):
    config = _config(tmp_path, "sft.steps=5", "sft.checkpoint_every=100", "sft.checkpoint_every_s=0")
    store = _store_with_solutions(config)
    first = run_sft(build_run_parts(config), store=store, leak_reason=_no_leak, stop_after_steps=3)
    assert first.steps_run == 3
    second = run_sft(build_run_parts(config), store=store, leak_reason=_no_leak)
    assert second.resumed_from_step == 2 and second.steps_run == 2 and second.final_state_path is not None


def test_a_killed_sft_loses_at_most_checkpoint_every_s_of_work(tmp_path):
    class Killed(Exception):
        pass

    def kill_after_step_2(result):
        if result.step == 2:
            raise Killed()

    # Steps alone would save only at the end (step 4); any time since the last save is enough here.
    config = _config(tmp_path, "sft.steps=5", "sft.checkpoint_every=100", "sft.checkpoint_every_s=1e-9")
    store = _store_with_solutions(config)
    with pytest.raises(Killed):
        run_sft(build_run_parts(config), store=store, leak_reason=_no_leak, on_step=kill_after_step_2)
    resumed = run_sft(build_run_parts(config), store=store, leak_reason=_no_leak)
    assert resumed.resumed_from_step == 2 and resumed.steps_run == 2
    steps = [r[0] for r in store.fetchall("SELECT step FROM sft_steps WHERE run_id = 'sft-test' ORDER BY step")]
    assert steps == [0, 1, 2, 3, 4]
