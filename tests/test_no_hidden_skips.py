"""A regression of the project's own code fails a test; it never turns into a skip or an expected failure.

`pytest.importorskip("kernelbench_rl...")`, or a `try: import kernelbench_rl...` whose `except ImportError`
skips, marks xfail or returns a flag, would report a broken module as "skipped" and the run as green. Only
third-party packages may be optional.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
OWN_PACKAGES = ("kernelbench_rl", "tasks", "flows", "deployments")


def _own(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] in OWN_PACKAGES


def _imports_own(nodes: list[ast.stmt]) -> bool:
    for node in nodes:
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and _own(inner.module):
                return True
            if isinstance(inner, ast.Import) and any(_own(alias.name) for alias in inner.names):
                return True
    return False


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = [handler.type] if not isinstance(handler.type, ast.Tuple) else handler.type.elts
    return handler.type is None or any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError",
                                                                            "Exception", "BaseException")
                                       for n in names)


def hidden_skips(source: str, filename: str) -> list[str]:
    """Where `source` would turn a broken import of the project's own code into something other than a failure."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "importorskip":
            target = node.args[0] if node.args else None
            name = target.value if isinstance(target, ast.Constant) and isinstance(target.value, str) else None
            if name is None or _own(name):
                found.append(f"{filename}:{node.lineno}: importorskip({name or ast.unparse(target) if target else ''})")
        if isinstance(node, ast.Try) and _imports_own(node.body):
            for handler in node.handlers:
                # A fallback that imports again (tests/ on sys.path instead of the root) still fails if broken.
                if _catches_import_error(handler) and not all(isinstance(s, (ast.Import, ast.ImportFrom))
                                                              for s in handler.body):
                    found.append(f"{filename}:{handler.lineno}: a failed import of the project's code is caught")
    return found


def test_no_test_skips_or_xfails_when_the_projects_own_modules_fail_to_import():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if "candidates" in path.parts:  # red-team candidate kernels, not tests
            continue
        found += hidden_skips(path.read_text(), str(path.relative_to(TESTS.parent)))
    assert not found, "\n".join(found)


def test_the_check_finds_each_form():
    skip_own = 'import pytest\napi = pytest.importorskip("kernelbench_rl.evaluation.front.api")\n'
    skip_computed = 'import pytest\nname = "kernelbench_rl.x"\nm = pytest.importorskip(name)\n'
    flag = ("def available():\n    try:\n        from kernelbench_rl.evaluation import Evaluator\n"
            "    except ImportError:\n        return False\n    return True\n")
    skip_in_handler = ("import pytest\ntry:\n    import flows.pipeline\nexcept ModuleNotFoundError:\n"
                       "    pytest.skip('no flows', allow_module_level=True)\n")
    for source in (skip_own, skip_computed, flag, skip_in_handler):
        assert hidden_skips(source, "t.py"), source
    allowed = ('import pytest\nnp = pytest.importorskip("numpy")\n'
               "try:\n    from tests.tinker_standin import X\nexcept ImportError:\n    from tinker_standin import X\n"
               "try:\n    from kernelbench_rl.store import Store\nexcept ImportError:\n"
               "    from kernelbench_rl.store.db import Store\n")
    assert hidden_skips(allowed, "t.py") == []

