"""Every rule of the static policy, registered here in report order.

A rule is a `Rule` (rule.py) next to its check function in the module of its family; a new rule is a
new module here (or a Rule in a family's module) plus one line in RULES. Errors come first, then
warnings; within each, the order below is the order of a report's lines.
"""

from __future__ import annotations

from kernelbench_rl.evaluation.static_policy.rules import backend
from kernelbench_rl.evaluation.static_policy.rules import concurrency
from kernelbench_rl.evaluation.static_policy.rules import fallbacks
from kernelbench_rl.evaluation.static_policy.rules import kernel_code
from kernelbench_rl.evaluation.static_policy.rules import memoisation
from kernelbench_rl.evaluation.static_policy.rules import precision
from kernelbench_rl.evaluation.static_policy.rules import pytorch_compute
from kernelbench_rl.evaluation.static_policy.rules import reference
from kernelbench_rl.evaluation.static_policy.rules import side_effects
from kernelbench_rl.evaluation.static_policy.rules import structure
from kernelbench_rl.evaluation.static_policy.rules import tampering
from kernelbench_rl.evaluation.static_policy.rules import tensor_subclass
from kernelbench_rl.evaluation.static_policy.rule import Rule

RULES: list[Rule] = [
    structure.STRUCTURE,
    pytorch_compute.TORCH_COMPUTE,
    pytorch_compute.TENSOR_OPERATORS,
    fallbacks.TRY_FALLBACK,
    reference.REFERENCE_REUSE,
    reference.FOREIGN_IMPORT,
    concurrency.CONCURRENCY,
    concurrency.CUDA_STREAMS,
    tampering.MONKEY_PATCHING,
    tampering.INTROSPECTION,
    side_effects.PROCESS_CONTROL,
    side_effects.FILE_WRITE,
    backend.TORCH_COMPILE,
    backend.BACKEND_NOT_USED,
    backend.LIBRARY_CALL,
    kernel_code.NATIVE_CODE,
    kernel_code.KERNEL_PYTHON,
    tampering.DYNAMIC_CODE,
    tensor_subclass.TENSOR_SUBCLASS,
    tensor_subclass.TORCH_FUNCTION_OVERRIDE,
    concurrency.CUDA_GRAPHS,
    backend.UNUSED_KERNEL,
    memoisation.MEMOISATION,
    precision.PRECISION_DOWNGRADE,
    side_effects.STDOUT_OUTPUT,
    tampering.TIMER_USE,
    side_effects.FILE_ACCESS,
    pytorch_compute.TORCH_DATA_MOVEMENT,
]
RULES_BY_NAME: dict[str, Rule] = {rule.name: rule for rule in RULES}

# Rules whose firing means a reward hack (the evaluator sets Flag.HACK; the reward is zero).
HACK_RULES: frozenset[str] = frozenset(rule.name for rule in RULES if rule.hack)
