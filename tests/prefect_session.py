"""One Prefect test server for the whole pytest session, shared by every test module that asks.

Starting Prefect's API is the fixed cost of a flow test (tens of seconds on a loaded 2-core
machine), so modules share one: each declares a session fixture that enters `shared_prefect_api()`;
the first entry starts `prefect_test_harness`, the last exit (at session end) stops it.
Subprocesses reach the same server through the returned API URL.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")

SERVER_STARTUP_TIMEOUT_S = 180


@dataclass
class _SharedHarness:
    users: int = 0
    api_url: str = ""
    stack: ExitStack = field(default_factory=ExitStack)


_HARNESS = _SharedHarness()


@contextmanager
def shared_prefect_api() -> Iterator[str]:
    """Yield the API URL of the session's Prefect test server (started on first use)."""
    if _HARNESS.users == 0:
        from prefect.settings import PREFECT_API_URL
        from prefect.testing.utilities import prefect_test_harness

        _HARNESS.stack = ExitStack()
        _HARNESS.stack.enter_context(prefect_test_harness(server_startup_timeout=SERVER_STARTUP_TIMEOUT_S))
        _HARNESS.api_url = str(PREFECT_API_URL.value())
    _HARNESS.users += 1
    try:
        yield _HARNESS.api_url
    finally:
        _HARNESS.users -= 1
        if _HARNESS.users == 0:
            _HARNESS.stack.close()
