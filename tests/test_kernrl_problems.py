"""kernrl's problems as a problem source: loading by layout, its id forms, CPU sizes, and every reference judged
as its own candidate through the evaluator at CPU size.

Reads kernrl's snapshot at run time (KBRL_KERNRL_ROOT, else ../shared/kernrl beside the repository); the tests
skip where it is absent. The KernelBench snapshot (KERNELBENCH_ROOT, else ../shared/kernelbench) checks that a
KernelBench root still gives its own levels.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelbench_rl.cli import app
from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation import Evaluator
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings
from kernelbench_rl.problems import get_problem, load_problems, resolve_problems_root
from kernelbench_rl.problems.audit import audit_problems

REPO = Path(__file__).resolve().parents[1]
KERNRL = Path(os.environ.get("KBRL_KERNRL_ROOT") or REPO.parent / "shared" / "kernrl")
KERNELBENCH = Path(os.environ.get("KERNELBENCH_ROOT") or REPO.parent / "shared" / "kernelbench")

needs_kernrl = pytest.mark.skipif(not (KERNRL / "problems" / "level1").is_dir() and not (KERNRL / "level1").is_dir(),
                                  reason=f"no kernrl snapshot at {KERNRL} (set KBRL_KERNRL_ROOT)")

# References that fail on their own, whatever the harness: F.pad(mode="reflect") of a 2D tensor, which PyTorch
# does not support (the padding needs a batch or channel dim).
REFLECT_PAD_2D = {"L6/4", "L7/5", "L8/2"}
# DeepSeek MLA broadcasts its rotary (seq_len, 1, dim) tables against (batch, heads, seq_len, dim) queries: it runs
# only where heads == seq_len, at no size of the problem's own (16 heads, 2048 positions) or ours.
ROTARY_BROADCAST = {"L4/1"}
# They import `fla` (flash-linear-attention), which is not installed here: unavailable, never judged.
NEEDS_FLA = {"L4/7", "L4/8"}


@pytest.fixture(scope="module")
def kernrl_problems():
    return load_problems(KERNRL)


@needs_kernrl
def test_the_layout_tells_kernrl_from_kernelbench(tmp_path):
    for given in (KERNRL, KERNRL / "problems" if (KERNRL / "problems").is_dir() else KERNRL):
        source = resolve_problems_root(given)
        assert source is not None and source.suite == "kernrl" and (source.path / "level10").is_dir()
    # A folder of level1..3 alone is KernelBench's; the same with a level past 4 is kernrl's.
    for level in (1, 2):
        (tmp_path / "kb" / f"level{level}").mkdir(parents=True)
    assert resolve_problems_root(tmp_path / "kb").suite == "kernelbench"
    (tmp_path / "kb" / "level7").mkdir()
    assert resolve_problems_root(tmp_path / "kb").suite == "kernrl"
    with pytest.raises(UserError, match="no level1/"):
        resolve_problems_root(tmp_path / "kb" / "level7")


@needs_kernrl
def test_problems_list_gives_89_in_10_levels():
    result = CliRunner().invoke(app, ["problems", "list", "--problems-root", str(KERNRL), "--ids"])
    assert result.exit_code == 0, result.output
    ids = result.output.split()  # in kernrl's own form, as kernrl names its files
    kernrl_files = {f"L{path.parent.name.removeprefix('level')}_{path.stem}" for path in (KERNRL / "problems").glob("level*/[0-9]*.py")}
    assert len(ids) == 89 and set(ids) == kernrl_files
    assert sorted({int(i.split("_")[0][1:]) for i in ids}) == list(range(1, 11))
    problems = load_problems(KERNRL)
    assert {p.suite for p in problems} == {"kernrl"} and {p.origin for p in problems} == {"kernrl_root"}
    assert [p.id for p in load_problems(KERNRL, levels=[10])][:2] == ["L10/1", "L10/2"]


@needs_kernrl
@pytest.mark.parametrize("given", ["L1/23", "L1_23", "L1_23_Soft", "L1_23_Softmax", " L1_23_Softmax "])
def test_id_forms_resolve(given):
    problem = get_problem(given, KERNRL)
    assert (problem.id, problem.kernrl_id) == ("L1/23", "L1_23_Softmax")


@needs_kernrl
def test_a_prefix_of_several_ids_names_them_and_a_wrong_name_is_unknown():
    with pytest.raises(UserError, match=r"start of 8 problem ids \(L10_1_SHA256_Single, .*L10_8_ModularExpon"):
        get_problem("L10_", KERNRL)
    with pytest.raises(UserError, match=r"No kernrl problem L1_23_Relu is among those loaded \(kernrl's problems, levels 1-10 \(89\)\)"):
        get_problem("L1_23_Relu", KERNRL)
    # L1_4 is level 1's problem 4, not a prefix of L1_40 and L1_42 as well.
    assert get_problem("L1_4", KERNRL).name == "4_Matrix_vector_multiplication_"
    result = CliRunner().invoke(app, ["problems", "show", "L1_4_", "--problems-root", str(KERNRL)])
    assert result.exit_code == 0 and "4_Matrix_vector_multiplication_" in result.output
    # Through the real entry point: one sentence and exit code 2, no traceback.
    done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "problems", "show", "L1", "--problems-root",
                           str(KERNRL)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and "is the start of 23 problem ids" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


@needs_kernrl
def test_bundled_solutions_are_found_for_kernrl_problems_of_the_same_suite():
    """Ours for the bundled L10/5 solves kernrl's L10_5_ChaCha20 (the bundled problem restates it); KernelBench's L1/23
    and kernrl's L1_23_Softmax share a file name, not the problem, so kernrl's gets no solution of KernelBench's."""
    shown = CliRunner().invoke(app, ["problems", "show", "L10_5", "--solution", "--problems-root", str(KERNRL)])
    assert shown.exit_code == 0, shown.output
    assert "# L10_5_ChaCha20 " in shown.output and "our known-correct solution (ModelNew) for L10_5_ChaCha20" in shown.output
    assert "class ModelNew" in shown.output
    other = CliRunner().invoke(app, ["problems", "show", "L1_23", "--solution", "--problems-root", str(KERNRL)])
    assert other.exit_code == 0 and "# no bundled solution for this problem" in other.output
    listed = CliRunner().invoke(app, ["problems", "list", "--problems-root", str(KERNRL), "--level", "10"])
    row = next(line for line in listed.output.splitlines() if "5_ChaCha20" in line)
    assert "yes" in row


@needs_kernrl
def test_show_small_prints_cpu_sizes():
    result = CliRunner().invoke(app, ["problems", "show", "L10/1", "--small", "--problems-root", str(KERNRL)])
    assert result.exit_code == 0, result.output
    assert "# small sizes: as written" in result.output and "KBRL_EVAL_MODE = True" in result.output
    result = CliRunner().invoke(app, ["problems", "show", "L10_6", "--small", "--kernelbench-root", str(KERNRL)])
    assert result.exit_code == 0 and "def get_init_inputs():\n    return [3, 32]" in result.output


def test_a_kernelbench_root_still_gives_its_250_of_levels_1_to_3():
    if not (KERNELBENCH / "KernelBench" / "level1").is_dir():
        pytest.skip(f"no KernelBench snapshot at {KERNELBENCH}")
    problems = load_problems(KERNELBENCH)
    assert len(problems) == 250 and {p.level for p in problems} == {1, 2, 3}
    assert {p.suite for p in problems} == {"kernelbench"}
    assert get_problem("L1/19", KERNELBENCH).id == "L1/19"
    # kernrl's form names kernrl's problem, which a KernelBench root does not hold: refused, saying how to load kernrl's.
    with pytest.raises(UserError, match=r"L1_19 is a kernrl id, .*L1/19 here is KernelBench's 19_ReLU, another problem.*--problems-root"):
        get_problem("L1_19", KERNELBENCH)


def test_bundled_problems_are_kernelbench_up_to_level_3():
    problems = load_problems()
    assert problems and all(p.suite == ("kernelbench" if p.level <= 3 else "kernrl") for p in problems)


@needs_kernrl
def test_a_problem_needing_a_missing_module_is_unavailable_and_never_judged(kernrl_problems):
    unavailable = {p.id: p.unavailable_reason for p in kernrl_problems if p.unavailable_reason}
    assert set(unavailable) == NEEDS_FLA and "imports fla, which is not installed here" in unavailable["L4/7"]
    shown = CliRunner().invoke(app, ["problems", "show", "L4_7", "--problems-root", str(KERNRL)])
    assert shown.exit_code == 0 and "# unavailable: L4_7_GatedDeltaNet imports fla" in shown.output
    problem = get_problem("L4/7", KERNRL)
    with Evaluator(EvalSettings(device="cpu", size="small"), problems={problem.id: problem}) as evaluator:
        result = evaluator.evaluate([EvalRequest("L4_7", problem.source + "\nModelNew = Model\n",
                                                 EvalSettings(device="cpu", size="small"))])[0]
        assert evaluator._pool is None  # answered without starting a worker
    assert result.error_category is ErrorCategory.UNAVAILABLE and "fla" in result.error_message
    assert result.problem_id == "L4/7"


@needs_kernrl
def test_kernrl_problems_run_in_eval_mode(kernrl_problems):
    moe = next(p for p in kernrl_problems if p.kernrl_id == "L4_2_DeepSeek_MoE")
    assert moe.eval_mode and "assert not self.training" in moe.source


@needs_kernrl
@pytest.mark.slow
def test_small_sizes_keep_every_reference_fast_on_the_cpu(kernrl_problems):
    audits = {a.problem_id: a for a in audit_problems(kernrl_problems, siblings=False)}
    unavailable = {pid for pid, a in audits.items() if a.status == "unavailable"}
    assert unavailable == NEEDS_FLA | REFLECT_PAD_2D | ROTARY_BROADCAST, {pid: audits[pid].detail for pid in unavailable}
    assert "reflect" in audits["L6/4"].detail.lower() or "padding" in audits["L6/4"].detail.lower()


# ---------------------------------------------------------------- every reference as its own candidate


def _reference_verdicts(problems, shared_evaluator):
    settings = EvalSettings(device="cpu", size="small", timeout_s=120)
    requests = [EvalRequest(p.kernrl_id, p.source + "\n\nModelNew = Model\n", settings) for p in problems]
    with shared_evaluator(settings, problems={p.id: p for p in problems}, static_checks=False) as evaluator:
        return dict(zip([p.id for p in problems], evaluator.evaluate(requests)))


@pytest.fixture(scope="module")
def reference_verdicts(kernrl_problems, shared_evaluator):
    return _reference_verdicts(kernrl_problems, shared_evaluator)


# Problems whose own inputs cannot tell a right kernel from a wrong one, at their real sizes as at ours: the
# evaluator gives no verdict (a softmax over one column; a wave step and a Merkle root whose output does not depend
# on the seed; an erosion that gives zeros on noise).
# L9/3 is the max of torch.rand: about 1.0 whatever the seed, so ones (or any seed's answer) passes within kernrl's
# atol of 0.05, and no widening of a uniform draw moves its maximum off the top of the range.
UNDISCRIMINATING = {"L2/66", "L5/6", "L6/6", "L9/3", "L10/3"}
# Borderline, so either verdict is right and which one comes depends on the hidden seeds drawn: L1/95's cross-entropy
# over random logits sits near log(classes) whatever the seed, within about kernrl's atol of 0.05 of another seed's
# value (on the H100 at real size it is undiscriminating; at CPU sizes usually, not always, correct). L8/7's deblocking
# filter moves only block edges: at CPU sizes the first input returned sometimes sits within atol 0.05 of its output
# for every seed the audit draws (one evaluator in five here, 2026-11-26). L5/7's Monte Carlo estimate of pi is pi
# within kernrl's tolerance whatever the seed; only widened inputs (a wider square moves the estimate) can tell, and
# at CPU sizes their estimates are noisy enough that a constant sometimes still passes (a full run, 2026-11-26).
# L5/8's BVH traversal misses every box for most seeds at CPU sizes (all inf), so another seed's output passes; some
# seeds' rays hit, and then its inputs tell (1 pool of 5 judged the reference correct, 2026-11-28).
EITHER_CORRECT_OR_UNDISCRIMINATING = {"L1/95", "L5/7", "L5/8", "L8/7"}
# Expected verdicts other than correct: all for reasons of the problems' own.
EXPECTED = {
    **dict.fromkeys(NEEDS_FLA, ErrorCategory.UNAVAILABLE),
    **dict.fromkeys(REFLECT_PAD_2D | ROTARY_BROADCAST, ErrorCategory.INFRA),  # the reference raises
    **dict.fromkeys(UNDISCRIMINATING, ErrorCategory.UNDISCRIMINATING),
}


@needs_kernrl
@pytest.mark.slow
@pytest.mark.parametrize("level", range(1, 11))
def test_every_reference_judged_as_its_own_candidate(reference_verdicts, kernrl_problems, level):
    """Integer, boolean, complex and tuple outputs included (hashes, sorts, FFTs, compaction's values and count)."""
    wrong = {}
    for problem in (p for p in kernrl_problems if p.level == level):
        result = reference_verdicts[problem.id]
        assert result.problem_id == problem.id  # asked for by kernrl's id, recorded under ours
        expected = EXPECTED.get(problem.id, ErrorCategory.OK)
        if problem.id in EITHER_CORRECT_OR_UNDISCRIMINATING and result.error_category is ErrorCategory.UNDISCRIMINATING:
            continue
        if result.error_category is not expected:
            wrong[problem.id] = f"{result.error_category.value}: {result.error_message[:200]}"
    assert not wrong, wrong


@needs_kernrl
def test_eval_dir_maps_files_named_by_kernrl_ids(tmp_path):
    generations = tmp_path / "gens"
    generations.mkdir()
    reference = get_problem("L1_23", KERNRL).source + "\nModelNew = Model\n"  # plain PyTorch: the static policy's
    (generations / "L1_23_Softmax_sample_0_kernel.py").write_text(reference)
    (generations / "L1_23_sample_1_kernel.py").write_text(reference)
    (generations / "L1_99_Nothing_sample_0_kernel.py").write_text(reference)
    (generations / "L10_1_SHA256_Single_sample_0_kernel.py").write_text(reference)  # another level: left alone
    db = tmp_path / "evals.duckdb"
    done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "eval-dir", str(generations), "--level", "1",
                           "--problems-root", str(KERNRL), "--db", str(db)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    import json

    results = json.loads((generations / "eval_results.json").read_text())
    assert list(results) == ["23", "99"]
    assert [e["sample_id"] for e in results["23"]] == [0, 1]
    assert {e["metadata"]["error_category"] for e in results["23"]} == {"static"}  # judged against L1/23
    assert results["99"][0]["metadata"]["error_category"] == "unknown_problem"
