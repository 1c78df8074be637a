"""Work that escapes the timer: threads, processes, asyncio, side CUDA streams and CUDA graph replay."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from kernelbench_rl.evaluation.static_policy.rule import Finding, Rule, line_of
from kernelbench_rl.evaluation.static_policy.vocabulary import CONCURRENCY_MODULES, under_any

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis


def _concurrency(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node, qn in a.references():
        if under_any(qn, CONCURRENCY_MODULES):
            found.append((line_of(node), f"{qn}: threads/processes/async are not allowed"))
    for text in a.cuda_sources:
        if re.search(r"\bstd::thread\b|\bpthread_create\b|\bstd::async\b", text):
            found.append((0, "host threads in the CUDA source are not allowed"))
    return found


def _cuda_streams(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node, qn in a.references():
        if a.classify_torch(qn) == "stream":
            found.append((line_of(node), f"{qn}: side streams escape the timer; use the current stream"))
    for node in a.all_nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("record_stream", "wait_stream"):
            found.append((line_of(node), f".{node.func.attr}(): side streams are not allowed"))
    for text in a.cuda_sources:
        if re.search(r"\bcudaStreamCreate\w*\s*\(", text):
            found.append((0, "cudaStreamCreate in the CUDA source: use the current stream (at::cuda::getCurrentCUDAStream())"))
    return found


def _cuda_graphs(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node, qn in a.references():
        if a.classify_torch(qn) == "graph":
            found.append((line_of(node), f"{qn}: CUDA graph replay must still recompute from the fresh inputs"))
    for text in a.cuda_sources:
        if re.search(r"\bcudaGraph\w*\s*\(|\bcudaStreamBeginCapture\b", text):
            found.append((0, "CUDA graphs in the CUDA source"))
    return found


CONCURRENCY = Rule(
    "concurrency", "error",
    "No threads, processes or asyncio.",
    _concurrency, hack=True,
)
CUDA_STREAMS = Rule(
    "cuda_streams", "error",
    "No side CUDA streams (work there escapes the timer).",
    _cuda_streams, hack=True,
)
CUDA_GRAPHS = Rule(
    "cuda_graphs", "warning",
    "CUDA graph replay: allowed only if it recomputes from the fresh inputs.",
    _cuda_graphs,
)
