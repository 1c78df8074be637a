"""Problem loaders: the bundled set, an external KernelBench checkout, the HF dataset, the split."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from kernelbench_rl.errors import UserError
from kernelbench_rl.problems import (
    BUNDLED_ROOT,
    Problem,
    get_problem,
    holdout_ids,
    list_solutions,
    load_hf_problems,
    load_problems,
    load_solution,
    split_problems,
)
from kernelbench_rl.problems.model import declared_small_sizes
from kernelbench_rl.problems.sizing import infer_small_sizes

ELEMENTWISE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.{op}(x)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

ATTENTION_LIKE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        assert n_embd % n_head == 0
        self.proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.shape
        return self.proj(x).view(B, T, self.n_head, C // self.n_head).sum(-1)


batch_size = 128
seq_len = 512
n_embd = 768
n_head = 12


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, n_head]
'''


def _run(source: str) -> torch.Tensor:
    namespace: dict = {"__name__": "loaded_problem"}
    exec(source, namespace)
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    return model(*namespace["get_inputs"]())


# ---- bundled set ----------------------------------------------------------------------------


def test_bundled_set_loads_levels_1_to_10_with_unique_ids():
    problems = load_problems()
    ids = [p.id for p in problems]
    assert len(ids) == len(set(ids))
    assert {p.level for p in problems} == set(range(1, 11))
    # KernelBench's ids and semantics for levels 1-3, kernrl's for 4-10 (its tolerance, its ids).
    assert {p.suite for p in problems if p.level <= 3} == {"kernelbench"}
    assert {p.suite for p in problems if p.level >= 4} == {"kernrl"}
    # Every bundled problem says its CPU sizes; ChaCha20's say it is small as written (no constant to shrink).
    assert all(p.origin == "bundled" and (p.small_sizes or p.id == "L10/5") for p in problems)
    assert ids == sorted(ids, key=lambda i: tuple(int(x) for x in re.findall(r"\d+", i)))


def test_bundled_problem_keeps_kernelbench_name_and_small_source():
    relu = get_problem("L1/19")
    assert relu.name == "19_ReLU" and relu.number == 19 and relu.level == 1
    assert Path(relu.path) == BUNDLED_ROOT / "level1" / "19_ReLU.py"
    small = relu.source_for("small")
    assert "batch_size = 16\n" in small and "dim = 1000\n" in small
    assert relu.source_for("real") == relu.source
    assert _run(small).shape == (16, 1000)


def test_level_filter_gives_no_other_levels():
    assert {p.level for p in load_problems(levels=[2])} == {2}
    assert {(p.level, p.suite) for p in load_problems(levels=[4])} == {(4, "kernrl")}  # ours, on kernrl's ids


def test_every_solution_belongs_to_a_bundled_problem():
    bundled = {p.id: p for p in load_problems()}
    solutions = list_solutions()
    assert solutions
    for problem_id, path in solutions:
        assert problem_id in bundled, f"{path} has no problem"
        assert path.stem == bundled[problem_id].name
        assert load_solution(bundled[problem_id]) == path.read_text()
    assert load_solution(get_problem("L3/1")) is None


# ---- external checkout ----------------------------------------------------------------------


@pytest.fixture
def fake_checkout(tmp_path: Path) -> Path:
    """A KernelBench-shaped repository: KernelBench/level1..level4 with a few problem files."""
    root = tmp_path / "KernelBench-repo"
    kb = root / "KernelBench"
    for level in (1, 2, 3, 4):
        (kb / f"level{level}").mkdir(parents=True)
    (kb / "level1" / "19_ReLU.py").write_text(ELEMENTWISE.format(op="relu"))
    (kb / "level1" / "21_Sigmoid.py").write_text(ELEMENTWISE.format(op="sigmoid"))
    (kb / "level1" / "notes.py").write_text("# not a problem file: no <number>_ prefix\n")
    (kb / "level2" / "3_Tanh_Chain.py").write_text(ELEMENTWISE.format(op="tanh"))
    (kb / "level3" / "43_AttentionLike.py").write_text(ATTENTION_LIKE)
    (kb / "level4" / "1_SomeHFModel.py").write_text(ELEMENTWISE.format(op="relu"))
    return root


def test_external_checkout_loads_levels_1_to_3_and_skips_level_4_with_one_sentence(fake_checkout: Path):
    warnings: list[str] = []
    problems = load_problems(fake_checkout, warn=warnings.append)
    assert [p.id for p in problems] == ["L1/19", "L1/21", "L2/3", "L3/43"]
    assert all(p.origin == "kernelbench_root" for p in problems)
    assert len(warnings) == 1 and "Level 4" in warnings[0] and warnings[0].count(". ") == 0


def test_external_checkout_accepts_the_kernelbench_folder_and_the_env_var(fake_checkout, monkeypatch):
    direct = load_problems(fake_checkout / "KernelBench", levels=[1])
    assert [p.id for p in direct] == ["L1/19", "L1/21"]
    monkeypatch.setenv("KERNELBENCH_ROOT", str(fake_checkout))
    assert get_problem("L3/43").name == "43_AttentionLike"
    asked_for_4: list[str] = []
    assert load_problems(levels=[4], warn=asked_for_4.append) == []
    assert len(asked_for_4) == 1


def test_external_problems_get_inferred_small_sizes_that_run(fake_checkout: Path):
    problems = {p.id: p for p in load_problems(fake_checkout)}
    relu = problems["L1/19"]
    assert relu.small_sizes == {"dim": 32}  # batch_size = 16 is already small
    assert _run(relu.source_for("small")).shape == (16, 32)
    attention = problems["L3/43"]
    # n_embd shrinks to a multiple of n_head = 12, so the model's assert still holds.
    assert attention.small_sizes["n_embd"] % 12 == 0
    assert _run(attention.source_for("small")).shape[0] == attention.small_sizes["batch_size"]


def test_a_file_read_again_is_remembered_until_it_changes(fake_checkout: Path):
    first = get_problem("L1/19", fake_checkout)
    first.small_sizes["dim"] = 1  # one caller's change reaches no other
    again = get_problem("L1/19", fake_checkout)
    assert again == first and again.small_sizes == {"dim": 32}
    path = fake_checkout / "KernelBench" / "level1" / "19_ReLU.py"
    path.write_text(ELEMENTWISE.format(op="gelu") + "\n# edited\n")
    edited = get_problem("L1/19", fake_checkout)
    assert "gelu" in edited.source and "# edited" in edited.source
    path.unlink()
    with pytest.raises(UserError):
        get_problem("L1/19", fake_checkout)


def test_inferred_sizes_shrink_lists_and_keep_small_constants():
    sizes = infer_small_sizes("batch_size = 7\nkernel_size = 3\nlayer_sizes = [400, 800, 3]\nsize = 256\n")
    assert sizes == {"layer_sizes": [16, 16, 3], "size": 16}
    assert infer_small_sizes("this is not python(") == {}


def test_missing_or_empty_root_is_a_user_error(tmp_path: Path):
    with pytest.raises(UserError, match="does not exist"):
        load_problems(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="level1"):
        load_problems(tmp_path / "empty")


@pytest.mark.parametrize(
    "text,message",
    [
        ("def broken(:\n    pass\n", "not valid Python"),
        ("import torch\n\nclass Model:\n    pass\n\ndef get_init_inputs():\n    return []\n", "get_inputs"),
    ],
)
def test_malformed_problem_file_is_a_user_error(fake_checkout: Path, text: str, message: str):
    (fake_checkout / "KernelBench" / "level1" / "99_Broken.py").write_text(text)
    with pytest.raises(UserError, match=message) as info:
        load_problems(fake_checkout)
    assert "99_Broken.py" in str(info.value)


@pytest.mark.parametrize("problem_id", ["L1/9999", "L4/1", "L0/1", "relu", "L1-19"])
def test_unknown_or_malformed_id_is_a_user_error(problem_id: str):
    with pytest.raises(UserError):
        get_problem(problem_id)


# ---- HF dataset (built locally, saved with save_to_disk) --------------------------------------


@pytest.fixture
def hf_dataset_dir(tmp_path: Path) -> Path:
    datasets = pytest.importorskip("datasets")

    def split(rows: list[tuple[int, str, str]], level: int):
        return datasets.Dataset.from_dict({
            "code": [code for _, _, code in rows], "level": [level] * len(rows),
            "name": [name for _, name, _ in rows], "problem_id": [number for number, _, _ in rows],
        })

    dsd = datasets.DatasetDict({
        "level_1": split([(19, "19_ReLU.py", ELEMENTWISE.format(op="relu")),
                          (22, "22_Tanh", ELEMENTWISE.format(op="tanh"))], 1),
        "level_2": split([(5, "5_Sigmoid_Chain.py", ELEMENTWISE.format(op="sigmoid"))], 2),
        "level_3": split([(43, "43_AttentionLike.py", ATTENTION_LIKE)], 3),
        "level_4": split([(1, "1_SomeHFModel.py", ELEMENTWISE.format(op="relu"))], 4),
    })
    path = tmp_path / "kernelbench_hf"
    dsd.save_to_disk(str(path))
    return path


def test_hf_loader_reads_a_saved_dataset_dict(hf_dataset_dir: Path):
    warnings: list[str] = []
    problems = load_hf_problems(str(hf_dataset_dir), warn=warnings.append)
    assert [(p.id, p.name) for p in problems] == [
        ("L1/19", "19_ReLU"), ("L1/22", "22_Tanh"), ("L2/5", "5_Sigmoid_Chain"), ("L3/43", "43_AttentionLike"),
    ]
    assert all(p.origin == "hf" and p.path is None and p.small_sizes for p in problems)
    assert len(warnings) == 1 and "Level 4" in warnings[0]
    assert [p.id for p in load_hf_problems(str(hf_dataset_dir), levels=[2])] == ["L2/5"]
    assert _run(problems[0].source_for("small")).shape == (16, 32)


def test_hf_loader_rejects_malformed_rows_and_missing_datasets(tmp_path: Path):
    datasets = pytest.importorskip("datasets")
    bad = datasets.DatasetDict({"level_1": datasets.Dataset.from_dict({
        "code": ["class Model:\n    pass\n"], "level": [1], "name": ["7_NoInputs.py"], "problem_id": [7],
    })})
    bad.save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(UserError, match="7_NoInputs"):
        load_hf_problems(str(tmp_path / "bad"))
    with pytest.raises(UserError, match="Could not load the dataset"):
        load_hf_problems(str(tmp_path / "no-such-dataset"))


# ---- train / holdout split -------------------------------------------------------------------


def _synthetic(n: int, level: int = 1) -> list[Problem]:
    return [Problem(level=level, number=i, name=f"{i}_P", source="", origin="inline") for i in range(1, n + 1)]


def test_split_is_deterministic_disjoint_and_complete():
    problems = load_problems() + _synthetic(200, level=2)
    train, holdout = split_problems(problems)
    again_train, again_holdout = split_problems(list(reversed(problems)))
    assert {p.id for p in train} == {p.id for p in again_train}
    assert {p.id for p in holdout} == {p.id for p in again_holdout}
    train_ids, holdout_ids_ = {p.id for p in train}, {p.id for p in holdout}
    assert not train_ids & holdout_ids_
    assert train_ids | holdout_ids_ == {p.id for p in problems}
    assert 0.1 < len(holdout) / len(problems) < 0.3


def test_split_depends_on_seed_and_fraction_but_not_on_other_problems():
    problems = _synthetic(300)
    held = holdout_ids(problems, 0.2, seed=0)
    assert held != holdout_ids(problems, 0.2, seed=1)
    assert holdout_ids(problems, 0.0) == set()
    assert held <= holdout_ids(problems, 0.5, seed=0)  # a larger fraction only adds problems
    # Adding problems never moves an existing one across the split.
    assert holdout_ids(problems + _synthetic(50, level=3), 0.2, seed=0) & {p.id for p in problems} == held
    with pytest.raises(ValueError):
        holdout_ids(problems, 1.0)


def test_declared_small_sizes_are_read_from_the_dict_literal():
    source = "x = 1\nKBRL_SMALL_SIZES = {'x': 2, 'sizes': [1, 2]}\n"
    assert declared_small_sizes(source) == {"x": 2, "sizes": [1, 2]}
    assert declared_small_sizes("KBRL_SMALL_SIZES = dict(x=2)\n") == {}


def test_the_one_shot_example_problem_is_never_held_out():
    from kernelbench_rl.problems import holdout_ids, load_problems
    from kernelbench_rl.problems.split import ONE_SHOT_PROBLEM_ID

    problems = load_problems()
    for seed in range(20):
        for fraction in (0.2, 0.5, 0.9):
            assert ONE_SHOT_PROBLEM_ID not in holdout_ids(problems, fraction, seed)


def test_every_level_with_two_or_more_problems_has_a_holdout_problem():
    from kernelbench_rl.problems import holdout_ids, load_problems

    problems = load_problems()
    for seed in range(10):
        held = holdout_ids(problems, 0.05, seed)
        for level in {p.level for p in problems}:
            if sum(p.level == level for p in problems) < 2:
                continue  # a level of one problem keeps it for training
            assert any(pid.startswith(f"L{level}/") for pid in held), (seed, level)
    assert holdout_ids(problems, 0.0, 0) == set()
