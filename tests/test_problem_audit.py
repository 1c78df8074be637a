"""Audit of the bundled problem set: every problem must be a fair, non-degenerate task.

Each bundled problem runs at its small sizes on the CPU (the reference model in eager PyTorch).
A problem fails the audit when its reference is not deterministic under a seed, when an
all-zeros or constant tensor would pass the fp32 tolerance (a published reward hack: KernelBench's
L1/23 and L1/37 accept zeros), when dropout is active in training mode (KernelBench's L2/66
fails against itself), when integer inputs are cast to float, or when its real-size inputs
would need more than 16 GiB.

The size rule catches an absurd problem (a typo that multiplies a size by 1000 would need terabytes
and fail on any GPU), not a large one: the bundled problems use KernelBench's own real sizes, and
those go up to exactly 16 GiB of inputs (L1/45, average pooling over 16 x 64 x 2048 x 2048 fp32;
L1/19-L1/32 take 6 GiB each), which fits with the output in an 80 GB H100.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn as nn

from kernelbench_rl.problems import Problem, load_problems
from kernelbench_rl.problems.model import declared_small_sizes

ATOL = RTOL = 1e-4  # KernelBench's fp32 tolerance
MAX_REAL_INPUT_BYTES = 16 * 2**30  # inclusive: KernelBench's largest level-1 inputs are exactly this
# A kernel that writes zeros would be "right" on every element whose magnitude is below the
# tolerance; at least this share of the output must be above it.
MIN_SHARE_ABOVE_TOL = 0.05
SEEDS = (0, 1)
MIN_COUNTS = {1: 24, 2: 12, 3: 6}

_DROPOUT_FUNCS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"}
_FLOAT_CASTS = {"float", "double", "half", "bfloat16", "to", "type"}
_counter = itertools.count()
# Problems with no sizes to shrink, and the module constants they do have (none of them a size).
_UNSIZED_CONSTANTS = {"5_ChaCha20": {"MASK32"}}


@dataclass
class AuditReport:
    problem_id: str
    findings: list[str] = field(default_factory=list)


def exec_problem(source: str, label: str) -> dict:
    """Run a problem's source in a fresh module namespace."""
    namespace: dict = {"__name__": f"kbrl_audit_{next(_counter)}"}
    exec(compile(source, f"<problem {label}>", "exec"), namespace)
    return namespace


def run_reference(namespace: dict, seed: int) -> tuple[list, nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    inputs = namespace["get_inputs"]()
    torch.manual_seed(seed)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    with torch.no_grad():
        output = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
    return inputs, model, output


def _dropout_calls(tree: ast.AST) -> list[str]:
    """Functional dropout calls that may be active (not p=0 and not training=False)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in _DROPOUT_FUNCS:
            continue
        kwargs = {kw.arg: kw.value for kw in node.keywords}
        p = kwargs.get("p", node.args[1] if len(node.args) > 1 else None)
        training = kwargs.get("training")
        inactive = (isinstance(p, ast.Constant) and p.value == 0) or (
            isinstance(training, ast.Constant) and training.value is False
        )
        if not inactive:
            found.append(f"line {node.lineno}")
    return found


def _uncast_randint_calls(tree: ast.AST) -> int:
    """torch.randint calls in get_inputs whose result is not deliberately converted to float."""
    get_inputs = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None
    )
    if get_inputs is None:
        return 0
    cast_targets = set()
    for node in ast.walk(get_inputs):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _FLOAT_CASTS:
            cast_targets.add(id(node.func.value))
    count = 0
    for node in ast.walk(get_inputs):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "randint"
            and id(node) not in cast_targets
        ):
            count += 1
    return count


def real_input_bytes(source: str, label: str) -> int:
    """Bytes of get_inputs() at real size, built on the meta device so nothing is allocated."""
    namespace = exec_problem(source, label)
    with torch.device("meta"):
        inputs = namespace["get_inputs"]()
    return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))


def audit_problem(problem: Problem) -> AuditReport:
    report = AuditReport(problem.id)
    add = report.findings.append
    tree = ast.parse(problem.source)

    declared = declared_small_sizes(problem.source)
    constants = {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    # Empty only where there is nothing to shrink (kernrl's L10/5 ChaCha20: one block, no size constants).
    if not declared and (constants - {"KBRL_SMALL_SIZES"} - _UNSIZED_CONSTANTS.get(problem.name, set())
                         or "KBRL_SMALL_SIZES" not in constants):
        add("has no KBRL_SMALL_SIZES dict literal")
    unknown = sorted(set(declared) - constants)
    if unknown:
        add(f"KBRL_SMALL_SIZES names {unknown}, which are not module-level constants")

    for where in _dropout_calls(tree):
        add(f"calls functional dropout that may be active ({where})")

    small = problem.source_for("small")
    first = exec_problem(small, problem.id)
    inputs, model, output = run_reference(first, SEEDS[0])
    _, _, again = run_reference(exec_problem(small, problem.id), SEEDS[0])
    _, _, other_seed = run_reference(first, SEEDS[1])

    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0 and module.training:
            add(f"{type(module).__name__}(p={module.p}) is active in training mode")

    # kernrl's problems (levels 4-10) may return a tuple of tensors, and integer ones (compared exactly).
    outputs, agains, others = (list(o) if isinstance(o, (tuple, list)) else [o] for o in (output, again, other_seed))
    if not all(isinstance(o, torch.Tensor) for o in outputs):
        add(f"forward returns {type(output).__name__}, not tensors")
        return report
    if not all(torch.equal(a, b) for a, b in zip(outputs, agains)):
        add("reference is not deterministic under a fixed seed")
    if sum(o.numel() for o in outputs) > 1 and all(torch.equal(a, b) for a, b in zip(outputs, others)):
        add("output does not depend on the seed (inputs or parameters are not random)")
    for index, out in enumerate(outputs):
        label, suffix = ("output", "") if len(outputs) == 1 else (f"output {index}", f" for output {index}")
        if not out.is_floating_point():
            if problem.level <= 3:
                add(f"{label} dtype {out.dtype} is not floating point")
            elif out.numel() > 1 and bool((out == out.reshape(-1)[0]).all()):
                add(f"{label} is one integer everywhere, so a constant passes")
            continue
        if not torch.isfinite(out).all():
            add(f"{label} has NaN or Inf")
        if torch.allclose(torch.zeros_like(out), out, atol=ATOL, rtol=RTOL):
            add(f"an all-zeros tensor passes the tolerance{suffix}")
        if out.numel() > 1:
            constant = torch.full_like(out, out.mean().item())
            if torch.allclose(constant, out, atol=ATOL, rtol=RTOL):
                add(f"a constant tensor (the output's mean) passes the tolerance{suffix}")
            share = (out.abs() > ATOL).float().mean().item()
            if share < MIN_SHARE_ABOVE_TOL:
                add(f"only {share:.1%} of the {label} is above the tolerance, so zeros are nearly right")

    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    int_inputs = [x for x in tensors if not x.is_floating_point()]
    expected_ints = _uncast_randint_calls(tree)
    if len(int_inputs) < expected_ints:
        add(f"get_inputs draws {expected_ints} integer tensor(s) with randint but returns {len(int_inputs)}")
    for x in tensors:
        if x.is_floating_point() and x.dtype != torch.float32:
            add(f"input of dtype {x.dtype}; fp32 problems take fp32 inputs")
        if x.device.type != "cpu":
            add("get_inputs returns a tensor that is not on the CPU")

    total = real_input_bytes(problem.source, problem.id)
    if total > MAX_REAL_INPUT_BYTES:
        add(f"real-size inputs need {total / 2**30:.1f} GiB, over {MAX_REAL_INPUT_BYTES / 2**30:.0f} GiB")
    return report


BUNDLED = load_problems()


def test_bundled_set_has_enough_problems_per_level():
    counts = {level: sum(p.level == level for p in BUNDLED) for level in MIN_COUNTS}
    for level, minimum in MIN_COUNTS.items():
        assert counts[level] >= minimum, f"level {level} has {counts[level]} problems, want >= {minimum}"


def test_every_bundled_file_declares_small_sizes():
    missing = [p.id for p in BUNDLED if "KBRL_SMALL_SIZES" not in p.source
               or not (declared_small_sizes(p.source) or p.name in _UNSIZED_CONSTANTS)]
    assert missing == []


@pytest.mark.parametrize("problem", BUNDLED, ids=[p.name for p in BUNDLED])
def test_problem_passes_audit(problem: Problem):
    report = audit_problem(problem)
    assert report.findings == [], f"{problem.id} ({problem.name}): " + "; ".join(report.findings)


# ---- the audit must be able to fail ----------------------------------------------------------

_TEMPLATE = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}
    def forward(self, x):
        return {expr}


batch_size = 4096
dim = 4096

KBRL_SMALL_SIZES = {{"batch_size": 8, "dim": 64}}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''


def _inline_problem(expr: str, init: str = "", inputs: str = "torch.randn(batch_size, dim)") -> Problem:
    source = _TEMPLATE.format(expr=expr, init=init, inputs=inputs)
    return Problem(
        level=1, number=999, name="999_Bad", source=source, origin="inline",
        small_sizes=declared_small_sizes(source),
    )


def test_audit_catches_output_below_tolerance():
    findings = audit_problem(_inline_problem("x * 1e-6")).findings
    assert "an all-zeros tensor passes the tolerance" in findings


def test_audit_catches_mostly_tiny_output():
    # Softmax over a wide row: almost every value is below 1e-4, a few are not.
    findings = audit_problem(_inline_problem("torch.softmax(x * 3, dim=1)", inputs="torch.randn(batch_size, 200000)")).findings
    assert any("above the tolerance" in f for f in findings), findings


def test_audit_catches_constant_output():
    findings = audit_problem(_inline_problem("x * 0 + 3.0")).findings
    assert "a constant tensor (the output's mean) passes the tolerance" in findings


def test_audit_catches_training_mode_dropout():
    module_findings = audit_problem(
        _inline_problem("self.drop(x)", init="        self.drop = nn.Dropout(p=0.2)\n")
    ).findings
    assert any("active in training mode" in f for f in module_findings)
    functional_findings = audit_problem(_inline_problem("F.dropout(x, p=0.2)")).findings
    assert any("functional dropout" in f for f in functional_findings)


def test_audit_catches_nondeterministic_reference():
    # Draws from the global generator in forward, so two seeded builds see different states only
    # if the model itself is not reseeded: an unseeded Generator is the tell.
    findings = audit_problem(_inline_problem("x + torch.rand(x.shape, generator=torch.Generator().manual_seed(torch.seed()))")).findings
    assert "reference is not deterministic under a fixed seed" in findings


def test_audit_catches_integer_inputs_cast_to_float():
    bad = _inline_problem(
        "x[0].float() + 1.0", inputs="torch.randint(0, 10, (batch_size, dim)).to(torch.float32)"
    )
    good_findings = audit_problem(bad).findings
    assert not any("randint" in f for f in good_findings)  # an explicit cast is a deliberate choice
    sneaky = _inline_problem("x.float() + 1.0", inputs="torch.randint(0, 10, (batch_size, dim)) * 1.0")
    assert any("randint" in f for f in audit_problem(sneaky).findings)


def test_audit_catches_oversized_real_inputs():
    # 4096 x 4096 x 1024 fp32 is 64 GiB: four times KernelBench's largest problem.
    findings = audit_problem(_inline_problem("x + 1.0", inputs="torch.randn(batch_size, dim, 1024)")).findings
    assert any("real-size inputs need" in f for f in findings), findings
