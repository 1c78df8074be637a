"""bench/rl_step_gpu.py as a dry run on the CPU: one whole step of the real loop with the local policy,
a model loaded by path (a tiny Qwen2 with random weights, as bench/make_random_model.py writes one),
the evaluator beside it, and the rows in DuckDB."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("models") / "qwen2-tiny"
    assert _load("make_random_model").main(["--arch", "qwen2-tiny", "--out", str(folder), "--device", "cpu"]) == 0
    return folder


def test_a_random_model_is_written_as_a_downloaded_one_would_be(tiny_qwen: Path):
    from transformers import AutoConfig

    from kernelbench_rl.policy.random_model import architecture
    from kernelbench_rl.policy.tiny import load_base_model

    info = json.loads((tiny_qwen / "kbrl_random_model.json").read_text())
    config = AutoConfig.from_pretrained(str(tiny_qwen))
    assert config.model_type == "qwen2" and config.tie_word_embeddings
    assert info["tokenizer_vocab"] <= config.vocab_size == architecture("qwen2-tiny")["vocab_size"]
    import torch

    loaded = load_base_model(str(tiny_qwen), torch.device("cpu"), seed=0)
    assert loaded.arch == "Qwen2ForCausalLM"
    assert loaded.model.get_input_embeddings().weight.shape[0] == config.vocab_size
    tokenizer = loaded.tokenizer
    assert tokenizer.eos_token == "<|endoftext|>" and config.eos_token_id == tokenizer.eos_token_id
    # Ids past the tokenizer (the embedding is larger, as Qwen's own is) decode to nothing rather than fail.
    assert tokenizer.decode([config.vocab_size - 1]) == ""
    # The same weights from the same seed: a rebuilt folder loads the same model.
    again = _load("make_random_model")
    rebuilt = tiny_qwen.parent / "again"
    assert again.main(["--arch", "qwen2-tiny", "--out", str(rebuilt), "--device", "cpu"]) == 0
    other = load_base_model(str(rebuilt), torch.device("cpu"), seed=0).model
    assert all(torch.equal(a, b) for a, b in zip(loaded.model.state_dict().values(), other.state_dict().values()))


def test_an_unknown_architecture_is_one_sentence(tmp_path: Path, capsys):
    with pytest.raises(SystemExit):
        _load("make_random_model").main(["--arch", "gpt-17", "--out", str(tmp_path / "m")])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("renderer", ["auto", "qwen3_instruct"])
def test_one_rl_step_with_a_model_loaded_by_path_lands_its_rows(tiny_qwen: Path, tmp_path: Path, renderer: str):
    bench = _load("rl_step_gpu")
    out = tmp_path / "rl_step.json"
    code = bench.main(["--device", "cpu", "--model", str(tiny_qwen), "--problems", "2", "--group", "2",
                       "--max-tokens", "8", "--rank", "4", "--renderer", renderer, "--eval-load", "1" if renderer == "auto" else "0",
                       "--workdir", str(tmp_path / "work"), "--out", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    rows = report["duckdb_rows"]
    assert rows["rollouts"] == rows["rewards"] == 4 and rows["train_steps"] == 1 and rows["checkpoints"] == 1
    # Every reward was equal (a random model writes no kernel): the groups trained with +1/-1 advantages.
    assert report["step"]["groups_given_advantages"] == 2 and report["step"]["num_trained"] == 4
    timings = report["time_s"]
    assert any(k.startswith("forward_backward (calls: 1)") for k in timings)
    assert any(k.startswith("optim_step (calls: 1)") for k in timings)
    assert report["verdicts"]["count"] == 4 and report["verdicts"]["blamed_on_candidate_for_memory"] == 0
    if renderer == "auto":
        # A known-correct kernel went through the run's evaluator while the step ran.
        assert report["side_load"]["finished"] and report["side_load"]["correct"] == 1


def test_the_sampling_bench_on_a_qwen2_loaded_by_path_agrees_batched_and_alone(tiny_qwen: Path, tmp_path: Path):
    # Qwen2, as on the GPU: left-padded prompts of different lengths decode to the same greedy tokens batched.
    report = _load("batched_sampling").main(["--base-model", str(tiny_qwen), "--problems", "3", "--samples", "2",
                                             "--tokens", "6", "--repeats", "1", "--out", str(tmp_path / "s.json")])
    assert len(set(report["prompt_tokens"])) > 1
    assert report["greedy_rows_identical"] == "6/6"
    assert json.loads((tmp_path / "s.json").read_text())["rows"] == 6
