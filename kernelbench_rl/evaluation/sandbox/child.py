"""The sandboxed child: the only process that ever runs candidate code.

Forked from the worker's zygote (a forkserver that imported torch and triton but never touched
CUDA), it optionally initialises CUDA while idle, then receives one job, confines itself
(new session, private cwd, scrubbed env, rlimits, Landlock, unprivileged uid), imports the
candidate and obeys the worker's commands: build, check <seed>, time <plan>, host_time, profile,
exit. It never compares anything: outputs and inputs-after-run go back to the worker.
Worker side only: torch, triton, stdlib.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import signal
import sys
import tempfile
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import torch

from kernelbench_rl.evaluation.sandbox import compute_account, interpreter, launch_record, numerics, runtime, sandbox, wire
from kernelbench_rl.evaluation.sandbox import timer
from kernelbench_rl.evaluation.sandbox.outputs import ForeignOutput, input_aliases, plain_outputs
from kernelbench_rl.evaluation.trace import ChildSpans

_COMPILE_EXCEPTIONS = {
    "CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct", "OutOfResources",
    "PTXASError", "SyntaxError", "IndentationError", "TabError",
}
_COMPILE_MARKERS = ("Error building extension", "ninja: build stopped", "nvcc fatal", "error: identifier")
_NOISE_PREFIXES = (
    "CUDA kernel errors might", "For debugging consider", "Compile with `TORCH_USE_CUDA_DSA`",
    "Search for `cuda", "Device-side assertions", "Exception raised from", "frame #",
)
MAX_MESSAGE_CHARS = 700


class CandidateFault(Exception):
    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category
        self.message = message


def short_error(exc: BaseException, candidate_path: str | None = None) -> str:
    """The key lines of an exception, fit for a model to read: no traceback noise."""
    lines = [ln.rstrip() for ln in str(exc).splitlines()]
    kept = [ln for ln in lines if ln.strip() and not ln.strip().startswith(_NOISE_PREFIXES)][:10]
    text = f"{type(exc).__name__}: " + "\n".join(kept) if kept else type(exc).__name__
    if candidate_path:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == candidate_path]
        if frames:
            text += f" (kernel line {frames[-1].lineno})"
        elif isinstance(exc, SyntaxError) and exc.lineno:
            text += f" (kernel line {exc.lineno})"
    return text[:MAX_MESSAGE_CHARS]


def classify(exc: BaseException, during_import: bool) -> str:
    name = type(exc).__name__
    text = str(exc)
    if during_import or name in _COMPILE_EXCEPTIONS or any(marker in text for marker in _COMPILE_MARKERS):
        return "compile"
    return "runtime"


READY_EVENT = "ready"  # a pre-started child's first message: its start (CUDA's context included) is over


def child_main(conn: Connection, device: str) -> None:
    """Entry point of a forked child: warm up, then serve exactly one job."""
    _PARENT[0] = os.getppid()
    sandbox.die_with_parent(_PARENT[0])
    t0 = time.perf_counter()
    cuda_init_s = 0.0
    init_error = ""
    if device == "cuda":
        try:
            torch.cuda.init()
            torch.empty(1, device="cuda")
        except Exception as exc:  # noqa: BLE001 - e.g. no memory left for a context on a crowded device
            init_error = f"CUDA could not start in the sandbox: {short_error(exc)}"
        cuda_init_s = time.perf_counter() - t0
        if not init_error and not conn.poll(0):
            _warm_profiler()  # only in the "teardown" and "attached" modes
    try:
        # The worker paces its pre-starts by this (CUDA contexts start one after another in the driver): it is
        # read and skipped wherever the worker waits for this child's answers.
        wire.send_json(conn, {"event": READY_EVENT, "cuda_init_s": round(cuda_init_s, 4),
                              "spans": [["cuda_start", t0, t0 + cuda_init_s]]})
        job = wire.recv_json(conn)
    except (EOFError, OSError):
        return
    if job.get("cmd") == "ipc_selftest":
        _ipc_selftest(conn, job)
        os._exit(0)
    if job.get("cmd") != "job":
        return
    if init_error:  # ours, not the candidate's: its code has not even been read
        try:
            _send_error(conn, "infra", init_error)
        finally:
            os._exit(0)
    try:
        _serve(conn, job, cuda_init_s)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass
    finally:
        os._exit(0)  # skip interpreter teardown: a broken candidate can hang it


def _reuse_restored_builds() -> None:
    """The worker copied in the build of this very source from an earlier evaluation (its cache is keyed by
    the source's hash). torch would still run ninja, and ninja rebuilds everything because the recorded
    commands name the earlier child's directory: skip the build when its library is already there."""
    try:
        from torch.utils import cpp_extension
    except ImportError:
        return
    build = getattr(cpp_extension, "_write_ninja_file_and_build_library", None)
    if build is None:
        return

    def build_unless_built(*args: Any, **kwargs: Any) -> None:
        name, directory = kwargs.get("name"), kwargs.get("build_directory")
        standalone = kwargs.get("is_standalone", False)
        if isinstance(name, str) and isinstance(directory, str) and not standalone:
            if os.path.isfile(os.path.join(directory, name + cpp_extension.LIB_EXT)):
                return
        build(*args, **kwargs)

    cpp_extension._write_ninja_file_and_build_library = build_unless_built


_PROFILER_WARM = [False]
_PARENT = [0]  # the forkserver that forked this child (0 outside child_main: the current parent)

# CUPTI stays attached to a process after a profiler session unless Kineto tears it down (TEARDOWN_CUPTI=1),
# and while attached it slows every launch: launch-bound KernelBench models (level 3, L1/78) timed up to
# 1.5x slower in children that had warmed the profiler than in the worker, which never profiles, and
# identical code read 0.57-0.80 (H100, bench/RESULTS.md). Modes: "off" (default: no warm-up; the one
# profile, after the timed trials, starts CUPTI: 0.03-0.46 s there, as much as after a warm-up),
# "teardown" (warm while idle, then detach before the candidate runs), "attached" (the old way, kept for
# timing studies).
PROFILER_WARMUP_ENV = "KBRL_EVAL_PROFILER_WARMUP"
PROFILER_WARMUP_MODES = ("off", "teardown", "attached")
_TEARDOWN_WAIT_S = 0.5


def profiler_warmup_mode() -> str:
    mode = os.environ.get(PROFILER_WARMUP_ENV, "off").strip().lower()
    return mode if mode in PROFILER_WARMUP_MODES else "off"


def _cupti_env(mode: str) -> None:
    """Kineto reads TEARDOWN_CUPTI when a session stops and when the next one starts (its lazy re-init):
    set before the warm-up and again after the sandbox replaces the environment."""
    if mode == "teardown":
        os.environ["TEARDOWN_CUPTI"] = "1"
        os.environ.pop("DISABLE_CUPTI_LAZY_REINIT", None)


def _warm_profiler() -> None:
    mode = profiler_warmup_mode()
    if _PROFILER_WARM[0] or mode == "off":
        return
    _PROFILER_WARM[0] = True
    _cupti_env(mode)
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]):
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
        if mode == "teardown":
            # Kineto detaches on a background thread, in the exit callback of the next CUDA call after it
            # subscribed: make those calls now, while idle, not during the candidate's first trials.
            until = time.monotonic() + _TEARDOWN_WAIT_S
            while time.monotonic() < until:
                time.sleep(0.01)
                torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - profiling is optional; the worker handles its absence
        pass


def _warm_libraries() -> None:
    """cuBLAS's (plain and Lt) and cuDNN's handles, made while the candidate compiles (beside other candidates'
    device sections, holding nothing) rather than in its first forward (KBRL_EVAL_WARM_LIBRARIES=on).

    That first forward is a warm-up which timed work waits for; in a fresh process the handles made it 180-340 ms
    against a 2.5-11 ms KernelBench level-2 forward. On an H200 (2026-11-26, grpo_ab_KBRL_EVAL_WARM_LIBRARIES_*)
    this halved the level-2 warm-ups (median 233 to 116 ms) but not the batch's wall (51.0 s against 52.0 s), and
    level 1 read 63.9-73.7 s in three runs with it against 61.6-65.8 s without: off by default. A failure here is
    left to the candidate's own first call to meet."""
    if os.environ.get("KBRL_EVAL_WARM_LIBRARIES", "off").strip().lower() not in ("1", "on", "yes"):
        return
    try:
        runtime.make_library_handles()
    except Exception:  # noqa: BLE001
        pass


def _nvidia_device_nodes() -> list[str]:
    """/dev/nvidia* (nvidiactl, nvidia-uvm, nvidia0...): a CUDA process must be able to write them."""
    return [os.path.join("/dev", name) for name in os.listdir("/dev") if name.startswith("nvidia")]


def _ipc_selftest(conn: Connection, job: dict[str, Any]) -> None:
    """Share a known tensor over CUDA IPC under the same confinement a job gets."""
    if job.get("drop_uid"):
        sandbox.drop_privileges(uid=job.get("uid"))
    if job.get("landlock", True):  # (/dev/shm: torch's CUDA IPC keeps its reference counts there)
        sandbox.restrict_writes_to(["/dev/shm", "/dev/null", job.get("workdir", "/tmp")] + _nvidia_device_nodes())
    sandbox.block_sockets()
    tensor = torch.arange(1024, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    keep = wire.send_tensors(conn, "selftest", {"t": [tensor]}, use_ipc=True)
    try:
        wire.recv_json(conn)
    except (EOFError, OSError):
        pass
    del keep


def _close_multiprocessing_fds() -> None:
    """Close what the forkserver handed every child besides our pipe: its 'alive' pipe and the resource
    tracker's. A candidate writing into the alive pipe kills the forkserver (it asserts EOF there), and
    with it every later evaluation of this worker; the child needs neither."""
    from multiprocessing import forkserver, resource_tracker

    server = forkserver._forkserver
    # (Not `_inherited_fds`: our own pipe to the worker is among them.)
    fds = [getattr(server, "_forkserver_alive_fd", None), getattr(resource_tracker._resource_tracker, "_fd", None)]
    for fd in fds:
        if isinstance(fd, int) and fd > 2:
            try:
                os.close(fd)
            except OSError:
                pass
    server._forkserver_alive_fd = None
    resource_tracker._resource_tracker._fd = None
    # Nothing of the worker's addresses stays in the child's memory: the forkserver's socket name and pid
    # (the seccomp filter refuses sockets anyway), and the process's authentication key.
    for name in ("_forkserver_address", "_forkserver_pid"):
        if hasattr(server, name):
            setattr(server, name, None)
    try:
        multiprocessing.current_process().authkey = os.urandom(32)
    except (AttributeError, TypeError, ValueError):
        pass


def _confine(job: dict[str, Any]) -> sandbox.Confinement:
    confinement = sandbox.Confinement()
    _close_multiprocessing_fds()
    try:
        os.setsid()
        confinement.session = True
    except OSError:
        pass
    workdir = job["workdir"]
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(job["env"])
    _cupti_env(profiler_warmup_mode())  # (the mode variable travels: KBRL_EVAL_ is kept)
    # tempfile caches its directory on first use (the zygote or the profiler warm-up may have used it).
    tempfile.tempdir = workdir
    # Our own stdout/stderr go to files in the private dir, capped by RLIMIT_FSIZE.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
        target = os.open(os.path.join(workdir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    faulthandler.enable(file=sys.stderr)
    confinement.limits = sandbox.apply_limits(sandbox.Limits(
        address_space_mb=job.get("address_space_mb"), file_size_mb=int(job.get("file_size_mb", 512)),
    ))
    # Writable: its own directory (removed with it) and device nodes. /dev/shm only where tensors cross over CUDA IPC:
    # torch's IPC keeps its reference counts in a shared-memory object the child creates (torch_<pid>_...), and without
    # it the same-uid probe and the IPC self-test fail and every tensor crosses through files (an H200's red team and
    # warm batches slowed several-fold). It is shared by every candidate and outlives them, so the worker removes what
    # a child left there when it retires it (leftovers.sweep_shared_memory).
    writable = [workdir, "/dev/null"]
    if job.get("device") == "cuda":
        writable += _nvidia_device_nodes()
        if job.get("transport") == "ipc":
            writable.append("/dev/shm")
    if job.get("drop_uid"):
        read_search = bool(job.get("read_search"))
        confinement.uid_dropped = sandbox.drop_privileges(uid=job.get("uid"), read_search=read_search)
        confinement.read_search = confinement.uid_dropped and read_search
        if not confinement.uid_dropped:
            raise RuntimeError("the sandbox could not become the unprivileged user")
        confinement.limits.append(f"nproc={sandbox.CHILD_NPROC}")  # set by the drop (uid-wide: every child's)
    confinement.dies_with_parent = sandbox.die_with_parent(_PARENT[0])  # (again: a uid change clears it)
    if job.get("landlock", True):
        # A child that keeps root, or the capability to read past permission bits, could read root's files and
        # other processes' /proc/<pid>/environ (the orchestrator's API keys): confine its reads as well.
        confined_reads = not confinement.uid_dropped or confinement.read_search
        readable = sandbox.child_readable_paths(job.get("readable", [])) if confined_reads else None
        confinement.landlock = sandbox.restrict_writes_to(sorted(set(writable)), readable)
    if job.get("block_unix_sockets"):
        # Same-uid mode (the worker runs as the children's uid): a process limit below the worker's, so a fork
        # bomb here leaves the worker room to work.
        confinement.limits += sandbox.apply_process_limit(sandbox.SAME_UID_CHILD_NPROC)
        if not confinement.landlock.endswith("+reads"):
            raise RuntimeError("same-uid mode requires Landlock with a read allow-list")
    elif not confinement.uid_dropped:
        # The child keeps the worker's uid (a worker that is not root): its processes count against that uid's
        # limit, so the limit is what the uid runs now plus the child's allowance.
        confinement.limits += sandbox.apply_process_limit(sandbox.processes_of_uid(os.getuid()) + sandbox.CHILD_NPROC)
    # No socket of any kind, in every mode: the forkserver's socket is reachable by name from any uid.
    confinement.seccomp = sandbox.block_sockets()
    if not confinement.seccomp and sandbox.seccomp_expected():
        raise RuntimeError("the sandbox's seccomp filter could not be installed")
    return confinement


def _send_error(conn: Connection, category: str, message: str, device_oom: dict[str, int] | None = None,
                hack: bool = False) -> None:
    payload: dict[str, Any] = {"event": "error", "category": category, "message": message}
    if hack:
        payload["hack"] = True
    if device_oom is not None:
        payload["device_oom"] = device_oom
    wire.send_json(conn, payload)


def _start(job: dict[str, Any]) -> tuple[sandbox.Confinement, Any, Any, int]:
    """Confinement, the problem's inputs module, the device-memory budget: everything before the
    candidate is read. A failure here is the sandbox's, never the candidate's."""
    confinement = _confine(job)
    device = job["device"]
    # The problem (inputs only: the worker stripped the reference Model) is loaded unregistered under
    # a random name and its file removed, so the candidate cannot simply import it.
    problem = runtime.load_module_from_file(job["problem_path"], f"_p{os.urandom(6).hex()}", register=False)
    os.unlink(job["problem_path"])
    cap = int(job.get("device_memory_cap") or 0)
    total = int(job.get("device_memory_total") or 0)
    if device == "cuda" and cap > 0 and total > 0:
        # The caching allocator refuses past the budget: a hoarder fails at its own limit, and its OOM
        # says so, before it can starve the evaluations beside it.
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))
    # The worker's numerics (exact fp32, no cuDNN autotuning), set before the candidate is imported;
    # whether the candidate changed them is reported with every result.
    numerics.apply()
    return confinement, problem, _clock(device), cap


def _clock(device: str) -> timer.Clock | None:
    return timer.Clock.capture() if device == "cuda" else None


def _device_oom(exc: BaseException, device: str, cap: int) -> dict[str, int] | None:
    """What the worker needs to tell whose out-of-memory this is (None if it is no device OOM)."""
    if device != "cuda" or not (isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc)):
        return None
    try:
        reserved = int(torch.cuda.memory_reserved())
    except Exception:  # noqa: BLE001 - a broken context: no figure
        reserved = 0
    return {"reserved": reserved, "cap": cap}


def _serve(conn: Connection, job: dict[str, Any], cuda_init_s: float) -> None:
    device = job["device"]
    precision = job["precision"]
    try:
        confinement, problem, clock, cap = _start(job)
    except Exception as exc:  # noqa: BLE001
        _send_error(conn, "infra", short_error(exc))
        return
    spans = ChildSpans(bool(job.get("trace")))  # steps for the worker's timeline (trace.py), when it keeps one
    launches = _count_interpreter_launches() if device == "cpu" else None
    if device == "cuda":
        launch_record.install()  # the candidate's own launches, by provenance (launch_record.py)
    if device == "cpu":
        interpreter.install()
    settings_before = numerics.snapshot()
    if device == "cuda":
        t = time.perf_counter()
        _warm_libraries()
        spans.add("warm_libraries", t)
    wire.send_json(conn, {"event": "started", "sandbox": confinement.label(), "cuda_init_s": cuda_init_s,
                          "numerics": settings_before, "profiler_warmup": profiler_warmup_mode()})

    candidate_path = job["candidate_path"]
    t_compile = time.perf_counter()
    if job.get("nvcc_only"):
        from kernelbench_rl.evaluation.sandbox.cuda_check import nvcc_check

        ok, message = nvcc_check(open(candidate_path).read(), job["workdir"], job.get("nvcc", "nvcc"))
        wire.send_json(conn, {"event": "nvcc", "ok": ok, "message": message, "compile_s": time.perf_counter() - t_compile})
        return
    if job.get("build_restored"):
        _reuse_restored_builds()
    try:
        module = runtime.load_module_from_file(candidate_path, "kbrl_candidate")
        model_cls = getattr(module, "ModelNew", None)
        if not isinstance(model_cls, type):
            raise CandidateFault("compile", "the kernel module defines no class ModelNew (or Model)")
    except CandidateFault as fault:
        _send_error(conn, fault.category, fault.message)
        return
    except BaseException as exc:  # noqa: BLE001 - any failure to import is the candidate's (or the interpreter's)
        unsupported = interpreter.unsupported_reason(exc) if device == "cpu" else ""
        _send_error(conn, "unsupported" if unsupported else "compile", unsupported or short_error(exc, candidate_path))
        return
    wire.send_json(conn, {"event": "loaded", "compile_s": time.perf_counter() - t_compile})

    model = None
    use_ipc = job.get("transport") == "ipc" and device == "cuda"
    spill_dir = job["workdir"] if job.get("transport") == "file" else None
    keep_alive: list[torch.Tensor] = []

    def inputs_for_seed(seed: int, variant: dict[str, Any] | None = None) -> list[Any]:
        return runtime.make_inputs(problem, seed, device, precision, variant)  # (generators reseeded after: runtime.py)

    # Each command that runs forwards is a generator: it yields the inputs of each forward it wants, is sent the output
    # (timer.drive), answers the worker and returns what must stay alive until the worker has read its tensors. Every
    # forward is made by timer.drive from the one line below, so the stack a forward sees is the same whatever the call
    # is for: the same functions, files and lines, and frames holding the same kinds of object (one kind of generator;
    # the command itself is not in them). What differs (inputs made, poisoning, the CPU's account, timing events, kept
    # outputs) happens before or after that line, in the generators.
    def warm(command: dict[str, Any]) -> timer.Calls:
        # Out of memory here is an error like any other: the worker runs such a candidate again with the device to
        # itself and only then blames the kernel.
        t = time.perf_counter()
        (yield inputs_for_seed(int(command["seed"]))).pop()
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # hand the warm-up's buffers back while others compile
        spans.add("warm", t)
        wire.send_json(conn, {"event": "warmed", **spans.take()})
        return []

    def check(command: dict[str, Any]) -> timer.Calls:
        begun = time.perf_counter()
        inputs = inputs_for_seed(int(command["seed"]), command.get("variant"))
        made = time.perf_counter()
        if device == "cuda":
            _poison_allocator(int(command.get("poison_bytes", 64 << 20)))
        t = time.perf_counter()
        # Where the round trip goes besides the forward (the worker times the rest).
        host_s = {"inputs": round(made - begun, 5), "poison": round(t - made, 5)}
        # On the CPU, an account of who computed the outputs (the GPU profiles instead): compute_account.py.
        account = compute_account.forward(model, inputs, module) if launches is not None else None
        with account or contextlib.nullcontext() as accounted:
            output = (yield inputs).pop()
            if accounted is not None:
                accounted.outputs_done(plain_outputs(output))
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t
        spans.add("check_inputs", begun, made)
        spans.add("check_poison", made, t)
        spans.add("check_forward", t)
        outputs = plain_outputs(output)  # the raw object first: nothing has read it yet
        sharing = time.perf_counter()
        keep = wire.send_tensors(
            conn, "checked",
            {"outputs": outputs, "inputs": runtime.tensor_inputs(inputs) if command.get("return_inputs") else []},
            use_ipc, {"seconds": seconds, "host_s": host_s,
                      "launches": dict(launches) if launches is not None else None,
                      "account": accounted.report() if accounted is not None else None,
                      "numerics_changed": numerics.changed(settings_before),
                      "aliases": input_aliases(outputs, inputs), **spans.take()}, spill_dir,
        )
        spans.add("check_share", sharing)  # (reported with the next answer)
        return keep

    def timed(command: dict[str, Any]) -> timer.Calls:
        t = time.perf_counter()
        seeds, warmup = [int(s) for s in command["seeds"]], int(command.get("warmup", 3))
        launch_record.reset()  # the own launches of these forwards alone, set against a profiled one's by the worker
        record = yield from timer.timed_calls(
            inputs_for_seed, seeds, warmup, device, clock,
            {int(i) for i in command.get("verify", [])}, fresh_buffers=bool(command.get("fresh_buffers", True)))
        launched = launch_record.snapshot()
        tampered = clock.tampered()
        spans.add("timed_calls", t)
        indices = sorted(record.kept_outputs)
        groups = {f"trial_{i}": record.kept_outputs[i] for i in indices}
        return wire.send_tensors(conn, "timed", groups, use_ipc, {
            "times_ms": record.times_ms, "tampered": tampered, "seconds": time.perf_counter() - t,
            "launches": launched, "forwards": warmup + len(seeds),
            "numerics_changed": numerics.changed(settings_before), "diagnostics": record.diagnostics(),
            "aliases": record.alias_patterns, **spans.take(),
        }, spill_dir)

    def host_timed(command: dict[str, Any]) -> timer.Calls:
        ms = yield from timer.host_timed_calls(inputs_for_seed, [int(s) for s in command["seeds"]], device, clock,
                                                fresh_buffers=bool(command.get("fresh_buffers", True)))
        wire.send_json(conn, {"event": "host_timed", "median_ms": ms, "tampered": clock.tampered()})
        return []

    def profiled(command: dict[str, Any]) -> timer.Calls:
        # A checked call under the profiler: its outputs go back and are compared like any seed's, so the forward the
        # work share is read from must itself be right (sandbox/launch_record.py counts the candidate's launches).
        t = time.perf_counter()
        inputs = inputs_for_seed(int(command["seed"]), command.get("variant"))
        if device == "cuda":
            _poison_allocator(int(command.get("poison_bytes", 64 << 20)))
        rows, output, problem_text = yield from profiled_calls(inputs)
        spans.add("profile", t)
        outputs = plain_outputs(output)
        return wire.send_tensors(conn, "profiled", {"outputs": outputs}, use_ipc, {
            "kernels": rows, "error": problem_text, "launches": launch_record.snapshot(),
            "numerics_changed": numerics.changed(settings_before), "aliases": input_aliases(outputs, inputs),
            **spans.take()}, spill_dir)

    forwards = {"warm": warm, "check": check, "time": timed, "host_time": host_timed, "profile": profiled}

    def forwards_of(command: dict[str, Any]) -> timer.Calls:
        """A command's forwards, as the one kind of generator every command gives timer.drive."""
        return (yield from forwards[command["cmd"]](command))

    while True:
        command = wire.recv_json(conn)
        keep_alive.clear()
        if use_ipc:
            # What the worker has let go of since the last answer leaves torch's IPC limbo for the allocator now, not
            # only when an allocation fails: every seed returns its inputs and outputs, GiBs each at real size.
            torch.cuda.ipc_collect()
        cmd = command.get("cmd")
        try:
            if cmd in forwards:
                calls = forwards_of(command)
                command = cmd = None  # this frame holds nothing that tells what the forward below is for
                keep_alive = timer.drive(model, calls)  # every forward made for the worker, from this line
                del calls
            elif cmd == "build":
                t = time.perf_counter()
                model = runtime.build_model(model_cls, problem, int(command["seed"]), device, precision)
                if device == "cuda":
                    _warm_profiler()  # (as above; a no-op if it warmed while idle)
                spans.add("build", t)
                wire.send_json(conn, {"event": "built", "seconds": time.perf_counter() - t, **spans.take()})
                if launches is not None:
                    launches.clear()  # count only what forward launches
            elif cmd == "exit":
                return
            else:
                _send_error(conn, "infra", f"unknown command {cmd!r}")
                return
        except (EOFError, BrokenPipeError):
            raise
        except CandidateFault as fault:
            _send_error(conn, fault.category, fault.message)
            return
        except ForeignOutput as fault:
            _send_error(conn, "runtime", fault.message, hack=fault.hack)
            return
        except BaseException as exc:  # noqa: BLE001 - the candidate's fault, reported as a result
            unsupported = interpreter.unsupported_reason(exc) if device == "cpu" else ""
            if unsupported:  # a limit of the CPU interpreter, not the kernel's fault
                _send_error(conn, "unsupported", unsupported[:MAX_MESSAGE_CHARS])
                return
            category = classify(exc, during_import=False)
            if isinstance(exc, MemoryError) or "out of memory" in str(exc):
                category = "runtime"
            _send_error(conn, category, short_error(exc, candidate_path), _device_oom(exc, device, cap))
            return


def _count_interpreter_launches() -> dict[str, int] | None:
    """Count launches per kernel under Triton's CPU interpreter (the GPU path profiles instead), and tell the
    compute account (compute_account.py) where each launch begins and ends.

    Installed before the candidate is imported; a candidate that undoes it is caught by the static
    policy's monkey-patching rule (and its launches then leave no accounted bytes).
    """
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return None
    compute_account.install_interpreter_hooks()
    counts: dict[str, int] = {}
    original = InterpretedFunction.run

    def counting_run(self, *args, **kwargs):
        if kwargs.get("warmup"):
            return original(self, *args, **kwargs)
        name = getattr(self.fn, "__name__", "?")
        counts[name] = counts.get(name, 0) + 1
        with compute_account.launch(name, args, kwargs):
            return original(self, *args, **kwargs)

    InterpretedFunction.run = counting_run
    return counts


def _poison_allocator(nbytes: int) -> None:
    """Fill freed cache blocks with NaN bytes, so `torch.empty` outputs cannot hold stale results."""
    nbytes = max(16 << 20, min(nbytes, 8 << 30))
    try:
        big = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(0xFF)
        small = [torch.empty(256 << 10, dtype=torch.uint8, device="cuda").fill_(0xFF) for _ in range(16)]
        torch.cuda.synchronize()
        del big, small
    except RuntimeError:
        torch.cuda.empty_cache()


def profiled_calls(inputs: list[Any]) -> timer.Calls:
    """One profiled forward on `inputs`, as a generator timer.drive runs (the forward is made from the same line as
    every other, so its stack tells nothing); returns ([name, launches, device microseconds, each launch's
    microseconds] for every GPU activity, its output, the profiler's own failure or "").

    Runs after the timing trials, so the model is warm. The raw Kineto API is tried first: it skips building
    torch.profiler's Python event tree, most of the profiler's cost for a one-forward trace. If that API is missing or
    records no GPU activity at all (a false "no kernel launched" would flag a hack), the full torch.profiler path
    decides. A forward that raises is the kernel's fault like any other (it reaches the caller after the profiler is
    stopped); only the profiler failing is not."""
    session = None
    try:
        session = _RawProfile()
    except Exception:  # noqa: BLE001 - private API: fall back to the public one
        session = None
    if session is not None:
        try:
            output = (yield inputs).pop()
            torch.cuda.synchronize()
        finally:
            rows = session.stop()
        if rows:
            return rows, output, ""
        del output
    from torch.profiler import ProfilerActivity, profile

    (yield inputs).pop()  # warm: keep compilation out of the profile
    torch.cuda.synchronize()
    try:
        prof = profile(activities=[ProfilerActivity.CUDA])
        prof.__enter__()
    except Exception as exc:  # noqa: BLE001 - the profiler itself failing is not the kernel's fault
        output = (yield inputs).pop()
        return None, output, short_error(exc)
    launch_record.reset()
    try:
        output = (yield inputs).pop()
        torch.cuda.synchronize()
    finally:
        prof.__exit__(None, None, None)
    return _full_rows(prof), output, ""


class _RawProfile:
    """The raw Kineto API around one forward: started on construction, `stop()` gives the rows (None if it failed)."""

    def __init__(self) -> None:
        from torch._C._profiler import _ExperimentalConfig
        from torch.autograd import ProfilerActivity, ProfilerConfig, ProfilerState, _enable_profiler, _prepare_profiler

        config = ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig())
        activities = {ProfilerActivity.CUDA}
        _prepare_profiler(config, activities)
        torch.cuda.synchronize()
        launch_record.reset()
        _enable_profiler(config, activities)

    def stop(self) -> list[list[Any]] | None:
        try:
            from torch.autograd import DeviceType, _disable_profiler

            result = _disable_profiler()
            durations: dict[str, list[float]] = {}
            for event in result.events():
                if event.device_type() != DeviceType.CUDA:
                    continue
                durations.setdefault(event.name(), []).append(event.duration_ns() / 1000.0)
            return _profile_rows(durations)
        except Exception:  # noqa: BLE001 - the full profiler decides
            return None


def _profile_rows(durations: dict[str, list[float]]) -> list[list[Any]]:
    """[name, launches, device microseconds, each launch's microseconds (shortest first, at most PROFILE_EVENTS)]: the
    worker credits own kernels launch by launch (source/kernels.py: attributed_share)."""
    return [[name, len(each), sum(each), sorted(each)[:PROFILE_EVENTS]] for name, each in durations.items()]


PROFILE_EVENTS = 4096


def _full_rows(prof: Any) -> list[list[Any]]:
    from torch.autograd import DeviceType

    durations: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type != DeviceType.CUDA:
            continue
        duration = float(getattr(event, "device_time", None) or getattr(event, "cuda_time", 0.0) or 0.0)
        durations.setdefault(event.name, []).append(duration)
    return _profile_rows(durations)
