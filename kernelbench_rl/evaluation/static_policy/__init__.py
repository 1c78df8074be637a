"""AST-based static policy for candidate kernels.

Every rule exists because a published reward hack beat a weaker, regex-based harness (REFERENCE.md):
torch compute instead of a kernel, try/except fallbacks, `ModelNew(Model)`, decoy kernels, timer and
`torch.allclose` patching, side streams and threads, frame snooping, `torch.compile`, cuBLAS hidden
in CUDA source, code hidden behind `exec`.

The analysis is done once per candidate (`Analysis`): imports and aliases are resolved (so
`import torch.nn.functional as F`, `from torch import nn`, `mm = torch.mm` cannot evade a rule),
the forward path is computed (ModelNew.forward plus every function, self method and helper module
reachable from it), and each call in that path is classified. Rules are small functions over the
analysis. Regexes are used only inside CUDA/C++ source strings.

Layout: vocabulary.py (which library paths do what), names.py (imports and name resolution),
function_scan.py and analysis.py (the analysis; scan_context.py says what a function's scan asks of
it, so the scan never imports the analysis), rule.py (what a rule is), rules/ (one module per family
of rules, registered in rules/__init__.py), check.py (the driver, `check_static`) and candidate_class.py (which
class is the candidate, shared with extraction and the worker). It imports nothing of source/ (source/extract.py
imports it for its backend check).
"""

from kernelbench_rl.evaluation.static_policy.analysis import Analysis
from kernelbench_rl.evaluation.static_policy.check import (
    MAX_MESSAGES_PER_RULE,
    MAX_SOURCE_CHARS,
    check_static,
    fired_rules,
    is_hack,
)
from kernelbench_rl.evaluation.static_policy.names import (
    Resolver,
    collect_imports,
    cuda_source_strings,
    extension_load_calls,
    is_triton_jit,
)
from kernelbench_rl.evaluation.static_policy.rule import Finding, Rule, Severity
from kernelbench_rl.evaluation.static_policy.rules import HACK_RULES, RULES, RULES_BY_NAME

__all__ = [
    "HACK_RULES",
    "MAX_MESSAGES_PER_RULE",
    "MAX_SOURCE_CHARS",
    "RULES",
    "RULES_BY_NAME",
    "Analysis",
    "Finding",
    "Resolver",
    "Rule",
    "Severity",
    "check_static",
    "collect_imports",
    "cuda_source_strings",
    "extension_load_calls",
    "fired_rules",
    "is_hack",
    "is_triton_jit",
]
