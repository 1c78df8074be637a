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
A passing probe is remembered (`probe_cache_key`) in root's private cache, for this boot of this host
and exactly these kernel, driver, Landlock, Python, torch, Triton and sandbox sources: the next start
skips the probe's seconds. Only a pass is kept; a failure is probed again next time.

Imports torch only inside the probe, so the worker's entry point (boot.py) can decide before torch loads.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import multiprocessing
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from kernelbench_rl.evaluation.sandbox import sandbox
from kernelbench_rl import private_cache
from kernelbench_rl.evaluation.worker import startup

# Children may read our package (they run its code): the same folder as children.PACKAGE_DIR.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# What the probe exercises: a change to any of them means probing again.
_PROBED_SOURCES = ("worker/same_uid.py", "sandbox/sandbox.py", "sandbox/child.py", "sandbox/wire.py", "sandbox/runtime.py")
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
    import torch

    from kernelbench_rl.evaluation.sandbox import child as child_module
    from kernelbench_rl.evaluation.sandbox import runtime, wire

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
            "workdir": workdir, "env": env, "device": "cuda", "drop_uid": False, "landlock": landlock, "transport": "ipc",
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
    import torch  # (already imported by the worker before it forked this probe)

    from kernelbench_rl.evaluation.sandbox import wire

    if not sandbox.drop_privileges(processes=SAME_UID_NPROC):
        return "cannot become the unprivileged user"
    if not sandbox.set_non_dumpable():
        return "cannot make the worker non-dumpable"
    sandbox.die_with_parent()  # the change of uid cleared it: the probe must not outlive who asked for it
    workdir = tempfile.mkdtemp(prefix="kbrl-probe-")
    ctx = multiprocessing.get_context("fork")  # this process has not initialised CUDA: forking is safe
    conn, child_conn = ctx.Pipe(duplex=True)
    process = ctx.Process(target=_probe_child, args=(child_conn, workdir, landlock), daemon=True)
    process.start()
    child_conn.close()
    try:
        # Forked already: this process may now start CUDA, beside its child's start, compile and run.
        torch.empty(1, device="cuda")
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


def _forked_probe(landlock: bool) -> str:
    try:
        return same_uid_probe(landlock)
    except Exception as exc:  # noqa: BLE001 - no probe, no same-uid mode
        return f"probe failed: {type(exc).__name__}: {exc}"


class PendingProbe:
    """The probe in a process of its own, started by the worker's entry point before the worker imports torch: its
    own imports and CUDA start then run beside the worker's (about 1.9 s that the first start of a machine
    otherwise spent after them). The process starts as root, becomes the unprivileged user and runs
    `_probe_body`, as the forked probe does; it dies with its parent."""

    def __init__(self, landlock: bool) -> None:
        self.started = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": startup.package_pythonpath()}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kernelbench_rl.evaluation.worker.same_uid", "--probe",
             "--landlock" if landlock else "--no-landlock", "--parent", str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)

    def answer(self, timeout_s: float = SAME_UID_PROBE_TIMEOUT_S) -> str:
        """'ok' or why not; the process is gone when this returns."""
        try:
            out, _ = self.process.communicate(timeout=max(0.0, timeout_s - (time.perf_counter() - self.started)))
            answer = out.decode(errors="replace").strip().splitlines()[-1:] or [""]
            return answer[0][:400] or f"the probe died (exit code {self.process.returncode})"
        except subprocess.TimeoutExpired:
            return "the probe timed out"
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()

    def cancel(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def _probe_main(argv: list[str]) -> None:
    """`python -m kernelbench_rl.evaluation.worker.same_uid --probe`: run the probe in this process, print its answer."""
    landlock = "--no-landlock" not in argv
    parent = int(argv[argv.index("--parent") + 1]) if "--parent" in argv else 0
    sandbox.die_with_parent(parent)
    try:
        # What the worker has imported by the time it forks its probe, imported here while still root, so the
        # unprivileged probe reads no more of the installation than the forked one does.
        import torch  # noqa: F401

        from kernelbench_rl.evaluation.sandbox import child, runtime, wire  # noqa: F401

        answer = _probe_body(landlock)
    except BaseException as exc:  # noqa: BLE001 - the answer says why
        answer = f"{type(exc).__name__}: {exc}"
    print(answer.replace("\n", " ")[:400], flush=True)
    os._exit(0)  # no interpreter teardown: the probe's CUDA context and child are done with


def become_same_uid_worker() -> None:
    """The irreversible step, after a passing probe: unprivileged, non-dumpable, its own HOME."""
    if not sandbox.drop_privileges(processes=SAME_UID_NPROC) or not sandbox.set_non_dumpable():
        raise RuntimeError("could not become the unprivileged, non-dumpable worker")
    home = tempfile.mkdtemp(prefix="kbrl-worker-home-")
    os.environ["HOME"] = home  # the pool's HOME belongs to root; inductor and Triton caches go here
    os.environ["TRITON_CACHE_DIR"] = os.path.join(home, ".triton")


def _read_text(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read(4096).strip()
    except OSError:
        return ""


def _package_stamp(name: str) -> str:
    """Version and installed file of a package, found without importing it."""
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    try:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None and spec.origin else ""
        stamp = os.stat(origin).st_mtime_ns if origin else 0
    except (ImportError, ValueError, OSError):
        origin, stamp = "", 0
    return f"{version} {origin} {stamp}"


def probe_cache_key(landlock: bool) -> dict[str, Any]:
    """Everything a passing probe's answer depends on: this boot of this host, this uid, the kernel and the NVIDIA
    driver, Landlock, the interpreter, torch, Triton and our sandbox's sources."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # evaluation/
    return {
        "host": socket.gethostname(), "boot_id": _read_text("/proc/sys/kernel/random/boot_id"),
        "uid": os.geteuid(), "kernel": f"{platform.release()} {platform.version()}",
        "driver": _read_text("/sys/module/nvidia/version") or _read_text("/proc/driver/nvidia/version"),
        "landlock_abi": sandbox.landlock_abi(), "landlock": bool(landlock), "nproc": SAME_UID_NPROC,
        "python": f"{sys.version} {sys.executable}", "torch": _package_stamp("torch"), "triton": _package_stamp("triton"),
        "sources": private_cache.source_digest([os.path.join(here, name) for name in _PROBED_SOURCES]),
    }


PROBE_CACHE_ENTRY = "same-uid-probe"


def remembered_pass(landlock: bool, cache: private_cache.PrivateCache | None = None) -> str:
    """'' if no passing probe is remembered for exactly this machine and software, else when it passed."""
    if os.environ.get("KBRL_EVAL_PROBE_CACHE", "on").lower() in ("0", "off", "no", "false"):
        return ""
    cache = cache or private_cache.PrivateCache()
    entry = cache.get(PROBE_CACHE_ENTRY, probe_cache_key(landlock))
    if entry is None or entry.get("answer") != "ok":
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["written"]))


def remember_pass(landlock: bool, seconds: float, cache: private_cache.PrivateCache | None = None) -> bool:
    if os.environ.get("KBRL_EVAL_PROBE_CACHE", "on").lower() in ("0", "off", "no", "false"):
        return False
    cache = cache or private_cache.PrivateCache()
    return cache.put(PROBE_CACHE_ENTRY, probe_cache_key(landlock), {"answer": "ok", "seconds": round(seconds, 2)})


def settle(device: str, transport: str, landlock: bool, drop_uid: bool, phases: startup.Phases,
           may_probe: bool, pending: PendingProbe | None = None) -> tuple[bool, bool, str]:
    """(decided, same_uid, note): whether this worker becomes its children's uid, decided before CUDA is touched
    (the probe forks this process). A remembered pass switches at once; without one, the answer of `pending` (a
    probe the entry point started in a process of its own) is taken, or else the probe runs only when
    `may_probe` (torch imported: the probe's fork must not import it twice), else the decision is left open.

    Raises only where the switch went half-way for a worker that is no longer root: it must not run weaker."""
    if device != "cuda" or transport not in ("auto", "ipc"):
        if pending is not None:
            pending.cancel()
        return True, False, ""
    with phases.timed("same_uid_check"):
        note = same_uid_possible(landlock, drop_uid)
        remembered = "" if note else remembered_pass(landlock)
    if (note or remembered) and pending is not None:
        pending.cancel()
    if note:
        return True, False, note
    if remembered:
        note = f"ok (remembered from {remembered})"
    elif pending is not None:
        note = pending.answer()
        seconds = time.perf_counter() - pending.started
        phases.add("same_uid_probe", pending.started, time.perf_counter())
        if note != "ok" and may_probe:
            # Once more in a fork of this process, as before: how the separate process was started must never
            # be what costs the worker its IPC transport.
            with phases.timed("same_uid_probe_forked"):
                again = _forked_probe(landlock)
            note = "ok" if again == "ok" else f"{note}; forked: {again}"
            seconds = time.perf_counter() - pending.started
    elif not may_probe:
        return False, False, ""
    else:
        with phases.timed("same_uid_probe"):
            t_probe = time.perf_counter()
            note = _forked_probe(landlock)
            seconds = time.perf_counter() - t_probe
    if not remembered:
        if note != "ok":
            return True, False, f"{note} ({seconds:.1f} s)"
        remember_pass(landlock, seconds)  # as root, before the switch: the entry is root's
        note = f"ok ({seconds:.1f} s)"
    try:
        with phases.timed("same_uid_switch"):
            become_same_uid_worker()
    except Exception as exc:  # noqa: BLE001
        if os.geteuid() != 0:  # half-switched: refuse to run rather than run weaker
            raise
        return True, False, f"could not switch after the probe: {exc}"
    return True, True, note


if __name__ == "__main__":
    if "--probe" in sys.argv[1:]:
        _probe_main(sys.argv[1:])
    print("usage: python -m kernelbench_rl.evaluation.worker.same_uid --probe [--no-landlock] [--parent PID]", file=sys.stderr)
    raise SystemExit(2)
