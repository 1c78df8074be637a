"""Hugging Face Hub access without a long wait when the machine is offline.

Without HF_HUB_OFFLINE set, huggingface_hub retries an unreachable hub five times with back-off
(about 24 s) before the error. One quick connection attempt first tells us whether the hub can be
reached at all; when it cannot, the load runs in offline mode, so a cached copy still loads and a
missing one fails at once.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

HUB_HOST = "huggingface.co"
PROBE_TIMEOUT_S = 3.0


def hub_reachable(host: str = HUB_HOST, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@contextmanager
def offline_unless_reachable() -> Iterator[bool]:
    """Yields whether the load runs offline (set by the user, or because the hub cannot be reached)."""
    if _truthy("HF_HUB_OFFLINE") or _truthy("HF_DATASETS_OFFLINE"):
        yield True
        return
    # Behind a proxy the direct probe says nothing; leave the decision to the libraries.
    proxied = any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"))
    if proxied or hub_reachable():
        yield False
        return
    import datasets.config
    import huggingface_hub.constants

    saved = (huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE)
    huggingface_hub.constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield True
    finally:
        huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved
