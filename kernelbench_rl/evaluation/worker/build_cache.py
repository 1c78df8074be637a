"""CUDA extensions the worker built before, copied into a new candidate's directory so load_inline finds them built.

The cache lives in the worker's own directory (not writable by candidates); a child only ever gets a copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading

import torch

from kernelbench_rl.evaluation.sandbox import sandbox
from kernelbench_rl.evaluation.result import EvalSettings


class BuildCache:
    """Built extensions by candidate source, torch version and GPU architecture."""

    def __init__(self, root: str, arch: str, drop_uid: bool) -> None:
        self.root = root
        self.arch = arch
        self.drop_uid = drop_uid  # copies go to the unprivileged uid the children run as

    def restore(self, workdir: str, source: str, settings: EvalSettings, device: str) -> str:
        """CUDA extensions built before from the same source are copied in, so load_inline finds them built.

        The cache lives in the worker's own dir (not writable by candidates); a child only ever gets
        a copy. Returns the cache key ('' when not a CUDA build).
        """
        if settings.backend != "cuda" or device != "cuda":
            return ""
        key = hashlib.sha256(f"{source}|{torch.__version__}|{self.arch}".encode()).hexdigest()[:32]
        cached = os.path.join(self.root, key)
        target = os.path.join(workdir, "torch_extensions")
        if os.path.isdir(cached) and not os.path.exists(target):
            try:
                shutil.copytree(cached, target, symlinks=True)
                if self.drop_uid:
                    uid = sandbox.unprivileged_uid()
                    for root, dirs, files in os.walk(target):
                        for name in [root] + [os.path.join(root, n) for n in dirs + files]:
                            os.lchown(name, uid, uid)
            except OSError:
                shutil.rmtree(target, ignore_errors=True)
        return key

    def save(self, workdir: str, key: str) -> str:
        """Keep what the child built under `key`: 'hit' when kept already, 'miss' when kept now, 'none' if nothing was built."""
        cached = os.path.join(self.root, key)
        if os.path.isdir(cached):
            return "hit"
        built = os.path.join(workdir, "torch_extensions")
        if not os.path.isdir(built):
            return "none"
        staging = cached + f".tmp{os.getpid()}{threading.get_ident()}"
        try:
            shutil.copytree(built, staging, symlinks=True)
            os.rename(staging, cached)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
        return "miss"
