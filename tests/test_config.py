"""Config loading: packaged YAML files, typed key=value overrides, one-sentence errors."""

from __future__ import annotations

import pytest
from pathlib import Path

from kernelbench_rl.config import load_config
from kernelbench_rl.config.schema import DEFAULT_TINKER_MODEL
from kernelbench_rl.errors import UserError


def test_packaged_configs_load() -> None:
    default, raicl, kevin = (load_config(name) for name in ("default", "raicl", "kevin.yaml"))
    assert default.env.mode == "single" and not default.rag.enabled
    assert raicl.rag.enabled and raicl.rag.k >= 1
    assert kevin.env.mode == "kevin" and kevin.env.turns == 4 and kevin.rewards.gamma == 0.4
    assert not kevin.env.early_stop_on_correct
    assert default.policy.backend == "auto"


def test_overrides_are_typed() -> None:
    cfg = load_config("default", ["training.steps=3", "training.learning_rate=2e-5", "env.mode=kevin",
                                  "problems.ids=L1/19,L1/20", "problems.levels=[1]", "rag.enabled=true",
                                  "policy.base_model=local:tiny", "curriculum.force_stage=compile"])
    assert cfg.training.steps == 3 and isinstance(cfg.training.steps, int)
    assert cfg.training.learning_rate == pytest.approx(2e-5)
    assert cfg.problems.ids == ["L1/19", "L1/20"] and cfg.problems.levels == [1]
    assert cfg.rag.enabled is True and cfg.curriculum.force_stage == "compile"
    assert load_config("default", ["training.learning_rate=1"]).training.learning_rate == 1.0


def test_yaml_file_then_overrides(tmp_path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("sampling:\n  group_size: 3\ntraining:\n  steps: 7\n")
    cfg = load_config(path, ["training.steps=9"])
    assert cfg.sampling.group_size == 3 and cfg.training.steps == 9


@pytest.mark.parametrize("override, needle", [
    ("trainig.steps=3", "trainig"),
    ("training.stepz=3", "training.stepz"),
    ("training.steps=abc", "training.steps"),
    ("env.mode=chat", "env.mode"),
    ("rewards.gamma=2", "rewards.gamma"),
    ("curriculum.start_stage=expert", "curriculum.start_stage"),
    ("sampling.group_size=0", "sampling.group_size"),
    ("rag.enabled=maybe", "rag.enabled"),
    ("notakeyvalue", "key=value"),
])
def test_bad_overrides_name_the_key(override: str, needle: str) -> None:
    with pytest.raises(UserError, match=needle.replace(".", r"\.")):
        load_config("default", [override])


def test_missing_file_is_a_user_error(tmp_path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_run_id_is_stable_and_follows_the_config() -> None:
    a = load_config("default", ["training.steps=3"]).resolved_run_id()
    assert a == load_config("default", ["training.steps=3"]).resolved_run_id()
    assert a != load_config("default", ["training.steps=4"]).resolved_run_id()
    assert load_config("default", ["run_id=mine"]).resolved_run_id() == "mine"


def test_precision_policy_reaches_the_evaluator_and_a_bad_value_is_one_sentence() -> None:
    from kernelbench_rl.compose import run_settings

    default = load_config("default")
    assert default.eval.precision_policy == "warn" and run_settings(default).eval.precision_policy == "warn"
    strict = load_config("default", ["eval.precision_policy=reject"])
    assert run_settings(strict).eval.precision_policy == "reject"
    assert strict.resolved_run_id() != default.resolved_run_id()
    with pytest.raises(UserError, match=r"^Config key eval\.precision_policy must be one of warn, reject; got 'strict'\.$"):
        load_config("default", ["eval.precision_policy=strict"])


def test_default_model_by_backend(monkeypatch) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    assert load_config("default").resolved_base_model() == "local:tiny"
    assert load_config("default", ["policy.backend=tinker"]).resolved_base_model() == DEFAULT_TINKER_MODEL
    monkeypatch.setenv("TINKER_API_KEY", "tml-test")
    assert load_config("default").resolved_base_model() == DEFAULT_TINKER_MODEL
    assert load_config("default", ["policy.base_model=local:tiny"]).resolved_base_model() == "local:tiny"


def test_train_cli_reports_a_bad_key_in_one_sentence(tmp_path) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "train", "--config", "kevin",
                           "training.stepz=3", f"db_path={tmp_path / 'x.duckdb'}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Unknown config key training.stepz" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_eval_device_and_size_auto() -> None:
    import torch

    from kernelbench_rl.compose import resolve_eval_device

    assert resolve_eval_device("cuda", "auto") == ("cuda", "real")
    assert resolve_eval_device("cpu", "auto") == ("cpu", "small")
    assert resolve_eval_device("cpu", "real") == ("cpu", "real")
    expected = ("cuda", "real") if torch.cuda.is_available() else ("cpu", "small")
    assert resolve_eval_device("auto", "auto") == expected
    assert load_config("default").eval.device == "auto"


def test_training_and_checkpoint_evaluation_share_resolved_eval_settings() -> None:
    """`auto` never reaches the evaluator (its workers accept only cpu or cuda), from either caller."""
    from kernelbench_rl.compose import resolve_eval_device, run_settings

    cfg = load_config("default", ["eval.timeout_s=7", "eval.correctness_trials=2"])
    settings = run_settings(cfg).eval
    assert (settings.device, settings.size) == resolve_eval_device("auto", "auto")
    assert settings.timeout_s == 7 and settings.correctness_trials == 2
    assert settings.backend == cfg.env.kernel_backend


def test_first_training_ids_are_train_split_ids_in_order_and_ignore_named_ids() -> None:
    from kernelbench_rl.problems import load_problems, split_problems
    from kernelbench_rl.compose import first_training_ids, load_split

    cfg = load_config("default", ["problems.levels=[1]"])
    split = load_split(cfg.problems)
    problems, train, holdout = list(split.all), list(split.train), list(split.holdout)
    assert (train, holdout) == split_problems(load_problems(levels=[1]), 0.2, 0)
    assert len(problems) == len(train) + len(holdout) and holdout
    assert first_training_ids(cfg, 2) == [p.id for p in train][:2]
    named = load_config("default", ["problems.levels=[1]", f"problems.ids=[{train[-1].id}]"])
    assert first_training_ids(named, 2) == [p.id for p in train][:2]


@pytest.mark.parametrize("override, needle", [
    ("problems.holdout_fraction=1.5", "problems.holdout_fraction should be less than 1"),
    ("training.learning_rate=-1e-5", "training.learning_rate should be greater than 0"),
    ("sampling.temperature=-0.5", "sampling.temperature should be greater than or equal to 0"),
    ("eval.timeout_s=0", "eval.timeout_s should be greater than 0"),
    ("eval.num_workers=0", "eval.num_workers"),
    ("problems.levels=[0]", "problems.levels"),
    ("sampling.top_p=1.5", "sampling.top_p"),
    ("curriculum.threshold=2", "curriculum.threshold"),
    ("env.idle_timeout_s=0", "env.idle_timeout_s should be greater than 0"),
])
def test_out_of_range_values_are_one_sentence(override: str, needle: str) -> None:
    with pytest.raises(UserError) as err:
        load_config("default", [override])
    message = str(err.value)
    assert needle in message and "\n" not in message and message.endswith(".")


def test_every_range_is_declared_in_the_schema() -> None:
    """Ranges come from the dataclasses' annotations, so a section added later is checked the same way."""
    import dataclasses
    import typing

    from kernelbench_rl.config.schema import TrainConfig, _check_ranges

    @dataclasses.dataclass
    class Extra:
        rate: typing.Annotated[float, __import__("annotated_types").Gt(0)] = 1.0

    @dataclasses.dataclass
    class Extended(TrainConfig):
        extra: Extra = dataclasses.field(default_factory=Extra)

    import kernelbench_rl.config.schema as schema

    saved = schema._ADAPTER
    try:
        schema._ADAPTER = __import__("pydantic").TypeAdapter(Extended)
        with pytest.raises(UserError, match=r"extra\.rate should be greater than 0"):
            _check_ranges(Extended(extra=Extra(rate=-1.0)))
    finally:
        schema._ADAPTER = saved


def _cli(*args: str, cwd) -> "subprocess.CompletedProcess":
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


@pytest.mark.parametrize("args, needle", [
    (["--run-id", "x", "training.stepz=1"], "Unknown config key training.stepz"),
    (["--eval-samples", "0"], "--eval-samples must be at least 1"),
    (["problems.holdout_fraction=1.5"], "problems.holdout_fraction should be less than 1"),
    (["--levels", "one"], "--levels must be comma-separated"),
])
def test_pipeline_checks_its_inputs_before_any_stage(tmp_path, args, needle) -> None:
    proc = _cli("pipeline", "--db-path", str(tmp_path / "x.duckdb"), *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.duckdb").exists()  # no stage ran


@pytest.mark.parametrize("override, key", [("sft.learning_rate=-0.1", "sft.learning_rate"),
                                           ("sft.batch_size=0", "sft.batch_size"),
                                           ("sft.checkpoint_every=0", "sft.checkpoint_every")])
def test_the_warm_starts_ranges_are_checked_like_every_section(override: str, key: str) -> None:
    from kernelbench_rl.config import load_config

    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        load_config("default", [override])


def test_the_env_servers_idle_timeout_is_not_part_of_the_run_id() -> None:
    """A setting of `env serve`, not of training: changing it names no new training run."""
    from kernelbench_rl.config import load_config

    assert load_config("default", []).env.idle_timeout_s == 1800
    assert (load_config("default", ["env.idle_timeout_s=60"]).resolved_run_id()
            == load_config("default", []).resolved_run_id())
