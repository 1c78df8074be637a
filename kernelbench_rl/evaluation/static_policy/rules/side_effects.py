"""Side effects outside the kernel: processes and network, writing or reading files, printing."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from kernelbench_rl.evaluation.static_policy.names import unwrap_callee
from kernelbench_rl.evaluation.static_policy.rule import Finding, Rule, line_of
from kernelbench_rl.evaluation.static_policy.vocabulary import (
    FILE_READ_METHODS,
    FILE_READ_NAMES,
    FILE_WRITE_METHODS,
    FILE_WRITE_NAMES,
    PROCESS_MODULES,
    PROCESS_NAMES,
    STDOUT_NAMES,
    under_any,
)

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis


def _process_control(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node, qn in a.references():
        if under_any(qn, PROCESS_MODULES) or under_any(qn, PROCESS_NAMES):
            found.append((line_of(node), f"{qn}: subprocesses, network and process control are not allowed"))
    for node in a.all_nodes:
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("exit", "quit")
                and node.func.id not in a.defined_names):
            found.append((line_of(node), f"{node.func.id}(): ending the process is not allowed"))
    for text in a.cuda_sources:
        if re.search(r"\b(system|popen|execv\w*|fork)\s*\(", text):
            found.append((0, "process control in the CUDA source is not allowed"))
    return found


def _open_mode(call: ast.Call) -> str | None:
    index = 0 if isinstance(call.func, ast.Attribute) and call.func.attr == "open" and isinstance(call.func.value, ast.Call) else 1
    mode: ast.AST | None = call.args[index] if len(call.args) > index else None
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return "r"
    return mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "?"


def _is_open_call(a: Analysis, call: ast.Call) -> bool:
    func = unwrap_callee(call.func)
    if isinstance(func, ast.Name) and func.id == "open" and "open" not in a.defined_names:
        return True
    qn = a.resolver.qualname(call.func)
    return qn in ("io.open", "os.open", "codecs.open") or (isinstance(call.func, ast.Attribute) and call.func.attr == "open" and qn is None
                                                           and isinstance(call.func.value, ast.Call))


def _file_write(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node, qn in a.references():
        if under_any(qn, FILE_WRITE_NAMES):
            found.append((line_of(node), f"{qn}: writing files is not allowed"))
    for node in a.all_nodes:
        if not isinstance(node, ast.Call):
            continue
        if _is_open_call(a, node):
            mode = _open_mode(node) or "r"
            if any(c in mode for c in "wax+?"):
                found.append((line_of(node), "open(..., write mode): writing files is not allowed"))
        elif isinstance(func := unwrap_callee(node.func), ast.Attribute) and func.attr in FILE_WRITE_METHODS and a.resolver.qualname(func) is None:
            if func.attr in ("write_text", "write_bytes", "tofile") or isinstance(func.value, ast.Call):
                found.append((line_of(node), f".{func.attr}(): writing files is not allowed"))
    for text in a.cuda_sources:
        if re.search(r"\bfopen\s*\([^)]*\"[wa+]|\bofstream\b", text):
            found.append((0, "writing files from the CUDA source is not allowed"))
    return found


def _file_access(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node, qn in a.used_references():
        if under_any(qn, FILE_READ_NAMES):
            found.append((line_of(node), f"{qn}: the kernel should not need the filesystem"))
    for node in a.all_nodes:
        if isinstance(node, ast.Call):
            if _is_open_call(a, node) and not any(c in (_open_mode(node) or "r") for c in "wax+?"):
                found.append((line_of(node), "open(): the kernel should not read files"))
            elif isinstance(node.func, ast.Attribute) and node.func.attr in FILE_READ_METHODS and isinstance(node.func.value, ast.Call):
                found.append((line_of(node), f".{node.func.attr}(): the kernel should not read files"))
    return found


def _stdout_output(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node in a.all_nodes:
        if id(node) in a.main_guard_ids:
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print" and "print" not in a.defined_names:
            found.append((line_of(node), "print(): the kernel must not write to stdout"))
    for node, qn in a.used_references():
        if id(node) not in a.main_guard_ids and under_any(qn, STDOUT_NAMES):
            found.append((line_of(node), f"{qn}: the kernel must not write to stdout/stderr or logs"))
    for text in a.cuda_sources:
        if re.search(r"\bprintf\s*\(", text):
            found.append((0, "printf in the CUDA source slows the kernel and pollutes stdout"))
    return found


PROCESS_CONTROL = Rule(
    "process_control", "error",
    "No subprocesses, network, signals or process exit.",
    _process_control, hack=True,
)
FILE_WRITE = Rule(
    "file_write", "error",
    "No writing, moving or deleting files.",
    _file_write, hack=True,
)
FILE_ACCESS = Rule(
    "file_access", "warning",
    "The kernel should not read files or list directories.",
    _file_access,
)
STDOUT_OUTPUT = Rule(
    "stdout_output", "warning",
    "No printing or logging (fake results on stdout).",
    _stdout_output,
)
