"""What a function's scan (function_scan.py) asks of the module-wide analysis (analysis.py), as a protocol one floor
below both: the analysis satisfies it, and the scan never imports the analysis."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any, Protocol

from kernelbench_rl.evaluation.static_policy.names import Resolver


class ScanContext(Protocol):
    resolver: Resolver
    defined_names: frozenset[str]
    jit_kernels: dict[str, ast.FunctionDef]
    module_functions: dict[str, ast.FunctionDef]
    classes: dict[str, Any]  # name -> function_scan.ClassInfo
    model_new: Any  # function_scan.ClassInfo | None
    extension_functions: set[str]
    module_kinds: dict[str, set[str]]
    scalar_input_positions: set[int]

    def class_bases(self, name: str) -> list[str]: ...

    def find_method(self, class_name: str, method: str) -> tuple[ast.FunctionDef, Any] | None: ...

    def attr_kinds(self, owner: Any, attr: str) -> set[str]: ...

    def torch_layer_base(self, info: Any) -> str | None: ...

    def classify_torch(self, qn: str) -> str: ...

    def call_result_kinds(self, call: ast.Call, scope: Any) -> set[str]: ...

    def iter_body(self, fn: ast.AST) -> Iterator[ast.AST]: ...
