"""Integrity of the RL data path: nothing the loss needs is ever made up."""

from __future__ import annotations

import numpy as np
import pytest
from tinker import types

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.compose import run_settings
from kernelbench_rl.envs import EnvSpec
from kernelbench_rl.envs.kernel_env import EnvGroupBuilder
from kernelbench_rl.policy.tiny import load_tokenizer
from kernelbench_rl.problems import get_problem
from kernelbench_rl.training.grpo import SampleTurn, sample_to_datum
from kernelbench_rl.training.rollouts import MissingLogprobsError, PromptRenderer, RolloutRunner


def _sequence(tokens: list[int], logprobs: list[float] | None) -> types.SampledSequence:
    return types.SampledSequence(
        stop_reason="stop", sequence_id="s0", tokens_np=np.asarray(tokens, dtype=np.int32),
        logprobs_np=None if logprobs is None else np.asarray(logprobs, dtype=np.float32))


@pytest.mark.parametrize("logprobs", [None, [-0.5], []])
def test_missing_or_short_sampler_logprobs_raise(logprobs: list[float] | None) -> None:
    runner = RolloutRunner(sampling_client=None, renderer=PromptRenderer(load_tokenizer("local:tiny")),
                           evaluate=lambda ids, responses: [])
    (env,) = EnvGroupBuilder(get_problem("L1/19"), 1, EnvSpec())()
    with pytest.raises(MissingLogprobsError, match="logprob"):
        runner._record(env, "p", [1, 2], _sequence([5, 6, 7], logprobs))
    assert env.turns == []  # nothing half-recorded


def test_a_sample_with_short_logprobs_never_becomes_a_datum() -> None:
    sample = SampleTurn(problem_id="L1/19", level=1, sample_index=0, turn=0, prompt_tokens=[1, 2, 3],
                        completion_tokens=[4, 5, 6], logprobs=[-0.1, -0.2], reward=1.0, advantage=0.5,
                        trainable=True)
    with pytest.raises(MissingLogprobsError, match="2 sampler logprobs for 3 completion tokens"):
        sample_to_datum(sample)


# -- truncated completions -------------------------------------------------------------------------
def _group_with_cut(verdicts: list[dict], cut: list[bool]):
    from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
    from kernelbench_rl.training.rollouts import GroupRollout

    builder = EnvGroupBuilder(get_problem("L1/19"), len(verdicts), EnvSpec())
    envs = builder()
    for env, verdict, was_cut in zip(envs, verdicts, cut, strict=True):
        env.add_completion("p", [1, 2, 3], "c", [4, 5], [-0.5, -0.25], "length" if was_cut else "stop")
        env.add_result(EvalResult(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32",
                                  device_kind="cuda", **verdict))
    return GroupRollout(0, builder, envs)


def _verdicts():
    from kernelbench_rl.evaluation.result import ErrorCategory

    correct = dict(error_category=ErrorCategory.OK, format_ok=True, compiled=True, correct=True, speedup=1.0)
    compiled = dict(error_category=ErrorCategory.MISMATCH, format_ok=True, compiled=True)
    return [correct, correct, compiled]  # sample 0 is correct but was cut at max_tokens


def _score(policy: str):
    from kernelbench_rl.training.grpo import score_group

    group = _group_with_cut(_verdicts(), [True, False, False])
    return score_group(group, "correctness", gamma=0.4, baseline="loo", speedup_cap=8.0, truncated=policy)


def test_a_truncated_turn_earns_no_credit_by_default() -> None:
    from kernelbench_rl.training.grpo import score_group

    assert score_group.__kwdefaults__["truncated"] == "clamp"
    cut, correct, compiled = _score("clamp")  # graded correct, clamped to the preset's floor
    assert cut.truncated and cut.reward == 0.0 and correct.reward == pytest.approx(1.0)
    assert cut.trainable and cut.advantage < 0  # pushed away from running out of tokens
    flat, _, _ = _score("reward")  # the flat reward, 0.0 by default
    assert flat.reward == 0.0


def test_a_truncated_turn_is_clamped_below_an_honest_failure_under_kernrl_server() -> None:
    """kernrl_server pays -0.25 for a wrong answer and -0.5 for one that does not compile: a truncated one is
    graded and clamped to -0.5, where a flat 0.0 made running out of tokens the best answer of its group."""
    from kernelbench_rl.training.grpo import score_group

    group = _group_with_cut(_verdicts(), [True, False, False])
    cut, correct, compiled = score_group(group, "kernrl_server", gamma=0.4, baseline="loo", speedup_cap=8.0)
    assert (cut.reward, correct.reward, compiled.reward) == (-0.5, 0.0, -0.25)
    assert cut.advantage < compiled.advantage < correct.advantage


def test_drop_leaves_a_truncated_turn_out_of_the_loss_and_the_baseline() -> None:
    cut, correct, compiled = _score("drop")
    assert cut.dropped_truncated and not cut.trainable and cut.advantage == 0.0
    # leave-one-out over the two that finished: the cut sample is not in anyone's baseline
    assert correct.advantage == pytest.approx(correct.reward - compiled.reward)


def test_zero_advantage_keeps_a_truncated_turn_in_the_baseline_only() -> None:
    cut, correct, compiled = _score("zero_advantage")
    assert not cut.trainable and cut.advantage == 0.0 and not cut.dropped_truncated
    assert correct.advantage == pytest.approx(correct.reward - (cut.reward + compiled.reward) / 2)


def test_keep_scores_a_truncated_turn_by_its_verdict() -> None:
    cut, correct, _ = _score("keep")
    assert cut.reward == pytest.approx(correct.reward) and cut.trainable


# -- chat format: renderer, stop sequences, thinking, max_tokens ----------------------------------
def _qwen_config(*overrides: str):
    from kernelbench_rl.config import load_config

    return load_config("default", ["policy.backend=tinker", "policy.base_model=Qwen/Qwen3-8B", *overrides])


def _renderer_for(config, tokenizer) -> PromptRenderer:
    """The renderer a run of `config` uses (as the loop builds it from its parts)."""
    return PromptRenderer.for_model(tokenizer, config.resolved_base_model(), config.policy.renderer,
                                    config.sampling.thinking)


def test_qwen3_prompts_and_stops_come_from_the_cookbook_renderer() -> None:
    tokenizer = load_tokenizer("local:tiny")  # ChatML tokens like Qwen's; the real tokenizer is not offline
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    plain = _renderer_for(_qwen_config(), tokenizer)
    assert type(plain.chat_renderer).__name__ == "Qwen3DisableThinkingRenderer"
    assert plain.stop_sequences == [im_end] and plain.end_of_answer_tokens() == [im_end]
    assert tokenizer.decode(plain.encode_messages(messages)).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    thinking = _renderer_for(_qwen_config("sampling.thinking=true"), tokenizer)
    assert type(thinking.chat_renderer).__name__ == "Qwen3Renderer"
    assert tokenizer.decode(thinking.encode_messages(messages)).endswith("<|im_start|>assistant\n")
    # A model the cookbook does not know keeps the tokenizer's template and stops at EOS.
    from kernelbench_rl.config import load_config

    tiny = _renderer_for(load_config("default", ["policy.backend=local"]), tokenizer)
    assert tiny.chat_renderer is None and tiny.stop_sequences is None
    assert tiny.end_of_answer_tokens() == [tokenizer.eos_token_id]


def test_the_sampler_is_asked_to_stop_at_the_renderer_stop_sequence() -> None:
    try:
        from tests.tinker_standin import StandinServiceClient
    except ImportError:
        from tinker_standin import StandinServiceClient

    service = StandinServiceClient()
    training = service.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=4).result()
    sampling = training.save_weights_and_get_sampling_client().result()
    renderer = _renderer_for(_qwen_config("sampling.max_tokens=6"), training.get_tokenizer())
    runner = RolloutRunner(sampling, renderer, lambda ids, responses: [_failed(pid) for pid in ids])
    runner.run(make_builders(_qwen_config("sampling.max_tokens=6")))
    (request,) = sampling.requests
    assert request["params"].stop == renderer.stop_sequences == [training.get_tokenizer().convert_tokens_to_ids("<|im_end|>")]
    assert request["params"].max_tokens == 6


def _failed(problem_id: str):
    from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult

    return EvalResult(problem_id=problem_id, candidate_sha256="x", backend="triton", precision="fp32",
                      device_kind="cpu", error_category=ErrorCategory.FORMAT)


def make_builders(config):
    from kernelbench_rl.envs.kernel_env import make_group_builders

    return make_group_builders([get_problem("L1/19")], 2, run_settings(config).env)


def test_max_tokens_defaults_fit_the_model_and_thinking() -> None:
    from kernelbench_rl.config import load_config

    assert _qwen_config().max_completion_tokens() == 4096
    assert _qwen_config("sampling.thinking=true").max_completion_tokens() == 16384
    assert _qwen_config().turn_token_budget() == 32768
    assert _qwen_config("sampling.max_tokens=123").max_completion_tokens() == 123
    tiny = load_config("default", ["policy.backend=local"])
    # local:tiny has 4096 positions: the completion leaves room for the prompt, the turn fits the context
    assert tiny.max_completion_tokens() == 3072 and tiny.turn_token_budget() == 4096
    assert run_settings(tiny).env.max_tokens == 3072 and run_settings(tiny).env.token_budget == 4096


# -- the Tinker session, checkpoints and the optimizer ---------------------------------------------
def _standin_service():
    try:
        from tests.tinker_standin import StandinServiceClient
    except ImportError:
        from tinker_standin import StandinServiceClient
    from kernelbench_rl.policy import PolicyConfig, make_service_client

    return make_service_client(PolicyConfig(backend="tinker", base_model="Qwen/Qwen3-8B"),
                               client_factory=StandinServiceClient)


def _tinker_config(tmp_path, *overrides: str):
    from kernelbench_rl.config import load_config

    return load_config("default", [
        f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "policy.backend=tinker",
        "policy.base_model=Qwen/Qwen3-8B", "policy.renderer=chat_template", "training.batch_problems=2",
        "sampling.group_size=2", "sampling.max_tokens=8", "training.checkpoint_every=1", "problems.ids=L1/19,L1/20",
        "problems.levels=[1]", "problems.holdout_fraction=0", "run_id=tinker-run", "rewards.truncated=keep",
        "curriculum.enabled=false", "sft.enabled=false", *overrides])


def _judge(problem_ids, responses):
    from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult

    return [EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32", device_kind="cpu",
                       error_category=ErrorCategory.FORMAT, format_ok=len(r) % 2 == 0)
            for pid, r in zip(problem_ids, responses)]


def test_session_closes_with_the_outcome_and_only_periodic_checkpoints_expire(tmp_path, monkeypatch) -> None:
    import json

    try:
        from tests.tinker_standin import CHECKPOINTS
    except ImportError:
        from tinker_standin import CHECKPOINTS
    from kernelbench_rl.store import Store
    from kernelbench_rl.training import run_training

    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    cfg = _tinker_config(tmp_path, "training.steps=3", "training.num_substeps=2", "training.checkpoint_ttl_s=7200")
    first = _standin_service()
    run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=_judge, service_client=first, stop_after_steps=2)
    assert first.sdk.closed_with == "success"
    second = _standin_service()
    run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=_judge, service_client=second)
    assert second.sdk.closed_with == "success"

    store = Store(cfg.db_path)
    rows = store.query("SELECT step, state_path, sampler_path, ttl_s FROM checkpoints ORDER BY step").to_dicts()
    assert [(r["step"], r["ttl_s"]) for r in rows] == [(0, 7200), (1, 7200), (2, None)]
    for row in rows:
        assert CHECKPOINTS[row["state_path"]]["ttl_seconds"] == row["ttl_s"]
        assert CHECKPOINTS[row["sampler_path"]]["ttl_seconds"] == row["ttl_s"]

    training = [r for r in _training_requests(second)]
    optim = [params for kind, params in training if kind == "optim_step"]
    assert optim and all((p["beta1"], p["beta2"], p["eps"]) == (0.9, 0.95, 1e-8) for p in optim)
    steps = store.query("SELECT step, num_trained, metrics_json FROM train_steps ORDER BY step").to_dicts()
    for row in steps:
        metrics = json.loads(row["metrics_json"])
        if row["num_trained"] >= 2:
            assert metrics["optim/num_substeps"] == 2.0
            # on-policy, the first minibatch's trainer logprobs are the sampler's; the second moved a little
            assert abs(metrics["optim/kl_sample_train_v1"]) < 0.05 and metrics["optim/kl_sample_train_v2"] >= 0.0
    assert any(json.loads(r["metrics_json"]).get("optim/num_substeps") == 2.0 for r in steps)


def _training_requests(service):
    return [request for client in service.sdk.training_clients for request in client.requests]


def test_a_failed_run_closes_its_session_as_errored(tmp_path, monkeypatch) -> None:
    from kernelbench_rl.training import run_training

    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")

    def broken(problem_ids, responses):
        raise RuntimeError("evaluator down")

    service = _standin_service()
    with pytest.raises(RuntimeError, match="evaluator down"):
        run_training(build_run_parts(_tinker_config(tmp_path, "training.steps=1"), policy_beside=True), progress=False, evaluate_fn=broken,
                     service_client=service)
    assert service.sdk.closed_with == "errored"


def test_ppo_without_substeps_is_refused_when_every_step_is_on_policy() -> None:
    from kernelbench_rl.config import load_config
    from kernelbench_rl.errors import UserError

    with pytest.raises(UserError, match="num_substeps"):
        load_config("default", ["training.loss_fn=ppo", "training.max_steps_off_policy=0"])
    assert load_config("default", ["training.loss_fn=ppo", "training.num_substeps=2",
                                   "training.max_steps_off_policy=0"]).training.num_substeps == 2
    # Asynchronous steps are trained by a policy that moved since sampling: the clip has work to do.
    assert load_config("default", ["training.loss_fn=ppo"]).training.max_steps_off_policy == 1


def test_an_empty_prompt_is_refused() -> None:
    sample = SampleTurn(problem_id="L1/19", level=1, sample_index=0, turn=0, prompt_tokens=[],
                        completion_tokens=[4], logprobs=[-0.1], reward=1.0, trainable=True)
    with pytest.raises(ValueError, match="empty prompt"):
        sample_to_datum(sample)

    class Blank:
        chat_template = None

        def encode(self, text, add_special_tokens=False):
            return []

    with pytest.raises(ValueError, match="prompt is empty"):
        PromptRenderer(Blank()).encode_messages([{"role": "user", "content": ""}])


def test_a_kevin_episode_cut_short_by_infra_leaves_training_whole() -> None:
    from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
    from kernelbench_rl.training.grpo import score_group
    from kernelbench_rl.training.rollouts import GroupRollout

    def verdict(**kw):
        return EvalResult(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32",
                          device_kind="cuda", **kw)

    compiled = dict(error_category=ErrorCategory.MISMATCH, format_ok=True, compiled=True)
    correct = dict(error_category=ErrorCategory.OK, format_ok=True, compiled=True, correct=True, speedup=1.0)
    builder = EnvGroupBuilder(get_problem("L1/19"), 3, EnvSpec(turns=2))
    envs = builder()
    episodes = [[compiled, dict(error_category=ErrorCategory.INFRA)],  # the evaluator failed on turn 1
                [compiled, correct], [compiled, compiled]]
    for env, turns in zip(envs, episodes):
        for kw in turns:
            env.add_completion("p", [1, 2], "c", [3], [-0.5], "stop")
            env.add_result(verdict(**kw))
    samples = score_group(GroupRollout(0, builder, envs), "correctness", gamma=0.4, baseline="loo", speedup_cap=8.0)
    by = {(s.sample_index, s.turn): s for s in samples}
    cut = by[0, 0]
    assert cut.dropped_cut_short and not cut.trainable and cut.return_value is None
    # Turn 0's baseline is the two complete episodes only (not a return that counted the missing turn as 0).
    assert by[1, 0].advantage == pytest.approx(by[1, 0].return_value - by[2, 0].return_value)
    assert by[1, 0].trainable and by[2, 0].trainable


def test_temperature_zero_is_refused_for_training_in_one_sentence(tmp_path) -> None:
    """Greedy sampling gives every answer of a group the same text, so no group has a reward spread and nothing
    trains: a run at temperature 0 once went on, step after step, training nothing."""
    from kernelbench_rl.config import load_config
    from kernelbench_rl.errors import UserError
    from kernelbench_rl.training import run_training

    cfg = load_config("default", [f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}",
                                  "policy.backend=local", "policy.base_model=local:tiny", "sampling.temperature=0",
                                  "problems.ids=L1/19", "problems.levels=[1]", "problems.holdout_fraction=0",
                                  "sft.enabled=false", "training.steps=1", "run_id=greedy"])
    with pytest.raises(UserError) as refused:
        run_training(build_run_parts(cfg, policy_beside=True), progress=False,
                     evaluate_fn=lambda ids, responses: pytest.fail("nothing may be sampled"))
    message = str(refused.value)
    assert "sampling.temperature" in message and message.count(". ") == 0 and message.endswith(".")


def test_the_kl_reference_is_the_warm_start_by_default_and_selectable(tmp_path) -> None:
    """training.kl_penalty_coef pulls the policy toward a reference: RL starts from the SFT warm start, so that is
    the reference by default (the base model, which the warm start left far behind, was once the only one)."""
    from kernelbench_rl.config import load_config
    from kernelbench_rl.store import Store
    from kernelbench_rl.training.loop import TrainingRun

    def run_with(*extra: str) -> TrainingRun:
        cfg = load_config("default", [f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}",
                                      "policy.backend=local", "policy.base_model=local:tiny", "problems.ids=L1/19",
                                      "problems.levels=[1]", "run_id=ref", *extra])
        return TrainingRun(build_run_parts(cfg, policy_beside=True))

    store = Store(tmp_path / "kb.duckdb")
    run = run_with()
    assert run._kl_reference_source() == ("base", None)  # no warm start yet
    store.upsert("sft_steps", [{"run_id": "ref", "step": 9, "loss": 0.1, "tokens": 10, "examples": 2,
                                "state_path": "sft_weights/step_9", "sampler_path": "sft_sampler/step_9",
                                "total_steps": 10}])
    store.upsert("checkpoints", [{"run_id": "ref", "name": "step_000004", "step": 4, "backend": "local",
                                  "state_path": "weights/step_000004", "sampler_path": "sampler_weights/step_000004",
                                  "ttl_s": None}])
    run_dir = tmp_path / "logs" / "ref"
    assert run_with()._kl_reference_source() == ("warm_start", str(run_dir / "sft_sampler/step_9"))
    assert run_with("training.kl_reference=base")._kl_reference_source() == ("base", None)
    assert run_with("training.kl_reference=step_000004")._kl_reference_source() == (
        "step_000004", str(run_dir / "sampler_weights/step_000004"))
    assert run_with("training.kl_reference=base", "sft.enabled=false")._kl_reference_source() == ("base", None)
