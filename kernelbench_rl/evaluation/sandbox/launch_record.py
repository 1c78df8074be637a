"""Launches of the candidate's own Triton kernels, counted where they are made (child side, the GPU).

A profile names kernels, and a name proves nothing: a `@triton.jit` function called `vectorized_elementwise_kernel`
made PyTorch's kernel of that name count as the candidate's own. So the child counts, per kernel name, the launches
that went through a Triton function the candidate's module defined (`JITFunction.run`, installed before the
candidate is imported), and the worker credits a profile's kernel events to the candidate by that count, never by
the name alone (`source/kernels.py: attributed_share`): of the events carrying an own kernel's name, at most as
many as the candidate launched, and the shortest of them.

What it does not see is not credited: a launch that bypasses `JITFunction.run` (a compiled kernel called directly)
counts as foreign work. Undoing the hook is monkey-patching, which the static policy rejects.
"""

from __future__ import annotations

import threading
from typing import Any

# The module name the child loads the candidate as (child.py: runtime.load_module_from_file).
CANDIDATE_MODULE = "kbrl_candidate"

_counts: dict[str, int] = {}
_lock = threading.Lock()
_installed = False


def _is_candidates(jit_function: Any) -> bool:
    fn = getattr(jit_function, "fn", None)
    module = getattr(fn, "__module__", "") or ""
    return module == CANDIDATE_MODULE or module.startswith(CANDIDATE_MODULE + ".")


def install() -> bool:
    """Count the candidate's Triton launches from now on (idempotent); False where Triton's JIT is not importable."""
    global _installed
    if _installed:
        return True
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return False
    original = JITFunction.run

    def counted_run(self, *args, **kwargs):
        if not kwargs.get("warmup") and _is_candidates(self):
            name = getattr(self.fn, "__name__", "?")
            with _lock:
                _counts[name] = _counts.get(name, 0) + 1
        return original(self, *args, **kwargs)

    counted_run.__wrapped__ = original  # type: ignore[attr-defined]
    JITFunction.run = counted_run
    _installed = True
    return True


def reset() -> None:
    with _lock:
        _counts.clear()


def snapshot() -> dict[str, int] | None:
    """Launches per own kernel name since the last reset; None where the hook could not be installed."""
    if not _installed:
        return None
    with _lock:
        return dict(_counts)
