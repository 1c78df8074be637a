"""Inferred small sizes run every KernelBench problem, and run it small.

External problems (no `KBRL_SMALL_SIZES`) get their CPU sizes from `sizing.infer_small_sizes`.
For every problem of levels 1-3 of a KernelBench checkout, the reference Model is built from
get_init_inputs() after a seed at those sizes and run on get_inputs() under no_grad on the CPU:
it must run, give the same kind of output as at its real sizes (where the real size can be run
on the meta device: tensors of the same rank and dtype), and stay small: at most
`MAX_INPUT_ELEMENTS` input and `MAX_OUTPUT_ELEMENTS` output elements. The largest are the
problems that write 224x224 images into get_inputs (VGG, AlexNet, EfficientNet, L3/8's block),
which constants cannot shrink.

The checkout: KERNELBENCH_ROOT, else shared/kernelbench beside the repository.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from pathlib import Path

import pytest
import torch

from kernelbench_rl.problems import Problem, load_problems

REPO = Path(__file__).resolve().parents[1]
ROOT = Path(os.environ.get("KERNELBENCH_ROOT") or REPO.parent / "shared" / "kernelbench")
MAX_INPUT_ELEMENTS = 2**19
MAX_OUTPUT_ELEMENTS = 2**19
META_SECONDS = 3.0

# Problems that constant rewriting cannot make valid, with the reason (none so far).
CANNOT_SHRINK: dict[str, str] = {}

PROBLEMS: list[Problem] = load_problems(ROOT) if ROOT.is_dir() else []
pytestmark = pytest.mark.skipif(not PROBLEMS, reason=f"no KernelBench checkout at {ROOT} (set KERNELBENCH_ROOT)")


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def _kind(value) -> object:
    """What the output is, sizes aside: nesting, and each tensor's rank and dtype."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dim(), value.dtype)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_kind(v) for v in value))
    return type(value).__name__


def _exec(source: str, label: str) -> dict:
    namespace: dict = {"__name__": f"kbrl_small_{label.replace('/', '_')}"}
    exec(compile(source, f"<{label}>", "exec"), namespace)
    return namespace


def _run(namespace: dict, device: str | None = None):
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if device is None:
            torch.manual_seed(0)
            inputs = namespace["get_inputs"]()
            torch.manual_seed(0)
            model = namespace["Model"](*namespace["get_init_inputs"]())
            return inputs, model(*inputs)
        with torch.device(device):
            inputs = namespace["get_inputs"]()
            model = namespace["Model"](*namespace["get_init_inputs"]())
            return inputs, model(*inputs)


class _MetaTooSlow(Exception):
    pass


_warm: list[bool] = []


def _warm_meta() -> None:
    """The first op on the meta device takes seconds of one-off set-up; not on a problem's clock."""
    if not _warm:
        x = torch.empty(2, 2, device="meta")
        (x @ x) * 2
        _warm.append(True)


def _real_kind(problem: Problem):
    """The output's kind at real size on the meta device (no memory, no compute), or None.

    None where an op has no meta kernel, or where the meta run takes over `META_SECONDS` (an
    LSTM's meta decomposition steps through all 512 time steps in Python): then only the
    small run is checked.
    """
    def give_up(signum, frame):
        raise _MetaTooSlow

    _warm_meta()
    previous = signal.signal(signal.SIGALRM, give_up)
    signal.setitimer(signal.ITIMER_REAL, META_SECONDS)
    try:
        _, output = _run(_exec(problem.source, problem.id), device="meta")
        return _kind(output)
    except (Exception, _MetaTooSlow):  # noqa: BLE001
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.id for p in PROBLEMS])
def test_problem_runs_small_at_inferred_sizes(problem: Problem):
    if problem.id in CANNOT_SHRINK:
        pytest.xfail(CANNOT_SHRINK[problem.id])
    assert problem.origin == "kernelbench_root" and problem.small_sizes, problem.id
    start = time.monotonic()
    try:
        namespace = _exec(problem.source_for("small"), problem.id)
        inputs, output = _run(namespace)
    except ModuleNotFoundError as exc:  # the problem imports a package this environment lacks
        pytest.skip(f"{problem.id} imports {exc.name}, which is not installed")
    seconds = time.monotonic() - start
    input_elements = sum(t.numel() for t in _tensors(inputs))
    output_elements = sum(t.numel() for t in _tensors(output))
    where = f"{problem.id} at {problem.small_sizes}"
    assert _tensors(output), f"{where}: forward returned {type(output).__name__}, no tensor"
    assert input_elements <= MAX_INPUT_ELEMENTS, f"{where}: {input_elements} input elements"
    assert output_elements <= MAX_OUTPUT_ELEMENTS, f"{where}: {output_elements} output elements"
    real = _real_kind(problem)
    if real is not None:
        assert _kind(output) == real, f"{where}: output {_kind(output)}, at real size {real}"
    print(f"{problem.id}: {input_elements} in, {output_elements} out, {seconds:.2f} s")


def test_inference_fixes_the_size_relations_that_broke_references():
    """Tuple constants shrink with the scalar they equal; floors keep convolutions valid."""
    from kernelbench_rl.problems.model import rewrite_module_constants
    from kernelbench_rl.problems.sizing import infer_small_sizes

    hinge = next(p for p in PROBLEMS if p.id == "L1/100")
    assert hinge.small_sizes["input_shape"] == (hinge.small_sizes["batch_size"],)
    dilated = infer_small_sizes(
        "batch_size = 8\nin_channels = 32\nkernel_size = (5, 9)\nwidth = 512\nheight = 512\n"
        "dilation = (2, 3)\n\ndef get_inputs():\n    return [torch.rand(batch_size, in_channels, height, width)]\n"
    )
    assert dilated["height"] >= (9 - 1) * 3 + 1 and dilated["width"] == dilated["height"]
    source = "batch_size = 128\nheight = width = 128\nD, H, W = 16, 32, 32\n"
    chained = infer_small_sizes(source)
    assert chained == {"batch_size": 16, "height": 16, "width": 16, "H": 16, "W": 16}
    namespace: dict = {}
    exec(rewrite_module_constants(source, chained), namespace)
    assert (namespace["height"], namespace["width"], namespace["D"], namespace["H"]) == (16, 16, 16, 16)
