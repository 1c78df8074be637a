"""Same-uid mode: where it is safe, the worker becomes the unprivileged uid its children use.

CUDA IPC works only between processes of one uid (the driver refuses to map another user's
buffer: "mapping of buffer object failed"), and without it every output and input crosses
child -> worker through files (GiBs per candidate at real sizes). So where it is safe, the worker
itself becomes the unprivileged uid its children use, instead of the children dropping from root:
 - the worker turns non-dumpable (no same-uid ptrace, no /proc/<worker>/mem, environ or fds);
 - each child still gets Landlock with a READ allow-list (so it cannot read the worker's directory,
   other candidates' directories or other processes' /proc entries) plus a seccomp filter refusing
   new AF_UNIX sockets (so it cannot reach the worker's forkserver and get an unconfined process);
   Landlock also stops a child from ptracing anything outside its own domain;
 - reference outputs still live in the worker, and comparison still happens there: the child only
   exports IPC handles to its own output buffers, which the worker copies at once.
Before committing to it (an irreversible setuid), a forked probe does exactly that and runs a
child confined like a real job that compiles a Triton kernel and shares its output over IPC.
If anything fails the worker stays root and the children drop to nobody (the old path, files).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import tempfile
from typing import Any

import torch

from kernelbench_rl.evaluation import runtime, sandbox, wire
from kernelbench_rl.evaluation.children import PACKAGE_DIR

SAME_UID_NPROC = sandbox.SAME_UID_WORKER_NPROC
SAME_UID_PROBE_TIMEOUT_S = 75.0
_PROBE_KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)


def run():
    x = torch.arange(1024, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    _double[(4,)](x, y, 1024, BLOCK=256)
    torch.cuda.synchronize()
    return y
"""


def same_uid_possible(config_landlock: bool, drop_uid: bool) -> str:
    """'' when same-uid mode may be tried here, else why not."""
    if os.environ.get("KBRL_EVAL_SAME_UID", "auto").lower() in ("0", "off", "no", "false"):
        return "disabled by KBRL_EVAL_SAME_UID"
    if os.geteuid() != 0:
        return "the worker is not root (children keep its uid already)"
    if not (config_landlock and drop_uid):
        return "Landlock or the uid drop is turned off"
    if sandbox.landlock_abi() <= 0:
        return "no Landlock"
    if not sandbox.python_readable_by_others():
        return "the Python installation is not readable by the unprivileged user"
    return ""


def _probe_child(conn: Any, workdir: str, landlock: bool) -> None:
    """A job-like child under the same-uid confinement: Triton kernel, output over CUDA IPC."""
    from kernelbench_rl.evaluation import child as child_module

    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: never outlive the probe
        torch.cuda.init()
        torch.empty(1, device="cuda")
        kernel_path = os.path.join(workdir, "kernel.py")
        with open(kernel_path, "w") as handle:
            handle.write(_PROBE_KERNEL)
        env = sandbox.scrubbed_env(HOME=workdir, TMPDIR=workdir, TRITON_CACHE_DIR=os.path.join(workdir, ".triton"),
                                   TRITON_INTERPRET="0", PYTHONDONTWRITEBYTECODE="1")
        confinement = child_module._confine({
            "workdir": workdir, "env": env, "device": "cuda", "drop_uid": False, "landlock": landlock,
            "block_unix_sockets": True, "readable": [PACKAGE_DIR, "/usr/bin"],
        })
        module = runtime.load_module_from_file(kernel_path, "kbrl_probe_kernel")
        output = module.run()
        keep = wire.send_tensors(conn, "probe", {"t": [output]}, True, {"sandbox": confinement.label()})
        wire.recv_json(conn)
        del keep
    except BaseException as exc:  # noqa: BLE001 - reported to the probe
        try:
            wire.send_json(conn, {"event": "error", "message": f"{type(exc).__name__}: {exc}"[:300]})
        except Exception:  # noqa: BLE001
            pass
    finally:
        os._exit(0)


def _probe_body(landlock: bool) -> str:
    if not sandbox.drop_privileges(processes=SAME_UID_NPROC):
        return "cannot become the unprivileged user"
    if not sandbox.set_non_dumpable():
        return "cannot make the worker non-dumpable"
    workdir = tempfile.mkdtemp(prefix="kbrl-probe-")
    ctx = multiprocessing.get_context("fork")  # this process has not initialised CUDA: forking is safe
    conn, child_conn = ctx.Pipe(duplex=True)
    process = ctx.Process(target=_probe_child, args=(child_conn, workdir, landlock), daemon=True)
    process.start()
    child_conn.close()
    try:
        if not conn.poll(SAME_UID_PROBE_TIMEOUT_S - 10):
            return "the probe child did not answer"
        header = wire.recv_json(conn)
        if header.get("event") != "probe":
            return f"probe child: {header.get('message', header.get('event'))}"
        if "seccomp" not in str(header.get("sandbox", "")) or "+reads" not in str(header.get("sandbox", "")):
            return f"probe child confinement incomplete: {header.get('sandbox')}"
        received = wire.receive_tensors(conn, header, 1 << 20)["t"][0]
        expected = torch.arange(1024, dtype=torch.float32, device="cuda") * 2.0
        ok = torch.equal(received, expected)
        del received
        wire.send_json(conn, {"cmd": "exit"})
        return "ok" if ok else "wrong values over IPC"
    finally:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def same_uid_probe(landlock: bool) -> str:
    """Run `_probe_body` in a forked copy of this (root, CUDA-free) worker; 'ok' or why not."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            answer = _probe_body(landlock)
        except BaseException as exc:  # noqa: BLE001
            answer = f"{type(exc).__name__}: {exc}"
        try:
            os.write(write_fd, answer.encode(errors="replace")[:400])
        finally:
            os._exit(0)
    os.close(write_fd)
    import select

    try:
        ready, _, _ = select.select([read_fd], [], [], SAME_UID_PROBE_TIMEOUT_S)
        answer = os.read(read_fd, 400).decode(errors="replace") if ready else "the probe timed out"
    finally:
        os.close(read_fd)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    return answer or "the probe died"


def become_same_uid_worker() -> None:
    """The irreversible step, after a passing probe: unprivileged, non-dumpable, its own HOME."""
    if not sandbox.drop_privileges(processes=SAME_UID_NPROC) or not sandbox.set_non_dumpable():
        raise RuntimeError("could not become the unprivileged, non-dumpable worker")
    home = tempfile.mkdtemp(prefix="kbrl-worker-home-")
    os.environ["HOME"] = home  # the pool's HOME belongs to root; inductor and Triton caches go here
    os.environ["TRITON_CACHE_DIR"] = os.path.join(home, ".triton")
