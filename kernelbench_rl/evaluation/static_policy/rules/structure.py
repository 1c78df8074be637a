"""The module's shape: ModelNew must exist and have a forward."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelbench_rl.evaluation.static_policy.rule import Finding, Rule, line_of

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis


def _structure(a: Analysis) -> list[Finding]:
    if a.model_new is None:
        return [(0, "class ModelNew is not defined")]
    if a.find_method(a.model_new.node.name, "forward") is None and a.find_method(a.model_new.node.name, "__call__") is None:
        inherits_forward = a.torch_layer_base(a.model_new) is not None  # reported by torch_compute
        if not inherits_forward and not any(base.split(".")[-1] in a.reference_names for base in a.model_new.base_names):
            return [(line_of(a.model_new.node), "ModelNew has no forward method")]
    return []


STRUCTURE = Rule(
    "structure", "error",
    "ModelNew must be defined and have a forward method.",
    _structure,
)
