"""Process confinement for untrusted candidates: environment, resource limits, Landlock, uid.

Standard library only: the orchestrator uses `scrubbed_env` to start workers and the worker's
children confine themselves (child._confine) before the candidate module is imported.
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import signal
from dataclasses import dataclass, field

from kernelbench_rl.evaluation import host_share

# Variables a sandboxed process may keep; anything else is dropped.
_KEEP_EXACT = {
    "PATH", "LANG", "LC_ALL", "TERM", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
    "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHASHSEED", "TORCH_CUDA_ARCH_LIST", "NVIDIA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TMPDIR", "VIRTUAL_ENV", "PYTHONUNBUFFERED", "CC", "CXX",
}
_KEEP_PREFIXES = ("TRITON_", "CUDA_", "NCCL_", "NVSHMEM_", "KBRL_EVAL_", "CUBLAS_", "CUDNN_", "PYTORCH_", "TORCH_")
# Secrets never travel, whatever their prefix.
_SECRET_RE = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|^AWS_|^HF_|^TINKER_|^GOOGLE_|^AZURE_")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_RE.search(name.upper()))


def scrubbed_env(base: dict[str, str] | None = None, **overrides: str) -> dict[str, str]:
    """A copy of `base` (default os.environ) with only harmless, needed variables, plus overrides."""
    source = dict(os.environ if base is None else base)
    env = {
        k: v for k, v in source.items()
        if (k in _KEEP_EXACT or k.startswith(_KEEP_PREFIXES)) and not is_secret_name(k)
    }
    env.update({k: v for k, v in overrides.items() if v is not None})
    return env


# -- Landlock (Linux >= 5.13), through raw syscalls: unprivileged and inherited by children ------
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on x86-64 and arm64
_LANDLOCK_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_ACCESS_WRITE_FILE = 1 << 1
_ACCESS_REMOVE_DIR = 1 << 4
_ACCESS_REMOVE_FILE = 1 << 5
_ACCESS_MAKE_CHAR = 1 << 6
_ACCESS_MAKE_DIR = 1 << 7
_ACCESS_MAKE_REG = 1 << 8
_ACCESS_MAKE_SOCK = 1 << 9
_ACCESS_MAKE_FIFO = 1 << 10
_ACCESS_MAKE_BLOCK = 1 << 11
_ACCESS_MAKE_SYM = 1 << 12
_ACCESS_REFER = 1 << 13  # ABI 2
_ACCESS_TRUNCATE = 1 << 14  # ABI 3


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _RulesetAttrNet(ctypes.Structure):  # ABI >= 4: TCP bind/connect become handled (denied: no rules)
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64)]


class _RulesetAttrScoped(ctypes.Structure):  # ABI >= 6: no signals to processes outside the sandbox
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


_ACCESS_NET_BIND_TCP = 1 << 0
_ACCESS_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # no connecting to abstract sockets bound outside the sandbox (the forkserver's)
_SCOPE_SIGNAL = 1 << 1


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _write_rights(abi: int) -> int:
    rights = (
        _ACCESS_WRITE_FILE | _ACCESS_REMOVE_DIR | _ACCESS_REMOVE_FILE | _ACCESS_MAKE_CHAR | _ACCESS_MAKE_DIR
        | _ACCESS_MAKE_REG | _ACCESS_MAKE_SOCK | _ACCESS_MAKE_FIFO | _ACCESS_MAKE_BLOCK | _ACCESS_MAKE_SYM
    )
    if abi >= 2:
        rights |= _ACCESS_REFER
    if abi >= 3:
        rights |= _ACCESS_TRUNCATE
    return rights


def landlock_abi() -> int:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return max(0, int(libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _LANDLOCK_CREATE_RULESET_VERSION)))
    except Exception:
        return 0


_ACCESS_EXECUTE = 1 << 0
_ACCESS_READ_FILE = 1 << 2
_ACCESS_READ_DIR = 1 << 3
_READ_RIGHTS = _ACCESS_EXECUTE | _ACCESS_READ_FILE | _ACCESS_READ_DIR
_FILE_RIGHTS = _ACCESS_EXECUTE | _ACCESS_READ_FILE | _ACCESS_WRITE_FILE | _ACCESS_TRUNCATE

# Read allow-list for a child that keeps root (no other user can read the Python installation):
# system directories and the Python/torch/triton trees, its own /proc entry, never /root, /home,
# /run, other processes' /proc entries (their environ holds the orchestrator's keys) or /etc/shadow.
_SYSTEM_READ_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/opt", "/sys", "/dev")
_ETC_READ = (
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/passwd", "/etc/group",
    "/etc/nsswitch.conf", "/etc/hosts", "/etc/os-release", "/etc/alternatives",
)
_PROC_READ = ("/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys", "/proc/filesystems", "/proc/driver")


def child_readable_paths(extra: list[str]) -> list[str]:
    """What a root child may read: system dirs, Python's trees, `extra`, its own /proc entry."""
    import sys
    import sysconfig

    paths = list(_SYSTEM_READ_DIRS) + list(_ETC_READ) + list(_PROC_READ) + [f"/proc/{os.getpid()}"]
    config = sysconfig.get_paths()
    paths += [config[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if config.get(k)]
    paths += [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))]
    # sys.path entries only where they are part of the Python installation: a source checkout on
    # sys.path (the cwd, PYTHONPATH) would open the whole repository, its runs/ database (other
    # candidates' kernels and verdicts) and KernelBench/solutions/ to the candidate.
    installation = [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, *config.values()) if p]
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        if real and os.path.isdir(real) and any(real == root or real.startswith(root + os.sep) for root in installation):
            paths.append(real)
    paths += extra
    return sorted({os.path.realpath(p) for p in paths if os.path.exists(p)} | {p for p in paths if p.startswith("/proc/")})


def restrict_writes_to(writable: list[str], readable: list[str] | None = None) -> str:
    """Confine this process (and its children) so it can write only beneath `writable` paths.

    Reads stay allowed (Python, torch and CUDA must load). From Landlock ABI 4 on, TCP bind and
    connect are refused (no exfiltration over TCP); from ABI 6, signals to processes outside the
    sandbox and connections to abstract Unix sockets bound outside it (the worker's forkserver listens on
    one) too. With `readable`, reads are confined to those paths too (for a child that keeps
    root). Returns a label for the result: "landlock-v<N>[+reads]", or "" without Landlock.
    """
    abi = landlock_abi()
    if abi <= 0:
        return ""
    libc = ctypes.CDLL(None, use_errno=True)
    rights = _write_rights(abi) | (_READ_RIGHTS if readable is not None else 0)
    net = _ACCESS_NET_BIND_TCP | _ACCESS_NET_CONNECT_TCP
    if abi >= 6:
        attr = _RulesetAttrScoped(handled_access_fs=rights, handled_access_net=net,
                                  scoped=_SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX_SOCKET)
    elif abi >= 4:
        attr = _RulesetAttrNet(handled_access_fs=rights, handled_access_net=net)
    else:
        attr = _RulesetAttr(handled_access_fs=rights)
    ruleset_fd = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0)
    if ruleset_fd < 0:
        return ""
    try:
        rules = [(p, True) for p in writable] + [(p, False) for p in (readable or [])]
        for path, write in rules:
            if not os.path.exists(path):
                continue
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                if os.path.isdir(path):
                    allowed = rights if write else (rights & _READ_RIGHTS)
                else:
                    allowed = rights & _FILE_RIGHTS & (~0 if write else ~(_ACCESS_WRITE_FILE | _ACCESS_TRUNCATE))
                if not allowed:
                    continue
                rule = _PathBeneathAttr(allowed_access=allowed, parent_fd=fd)
                if libc.syscall(_SYS_ADD_RULE, ruleset_fd, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                    return ""
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return ""
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset_fd, 0) != 0:
            return ""
    finally:
        os.close(ruleset_fd)
    return f"landlock-v{abi}" + ("+reads" if readable is not None else "")


# -- limits and identity -----------------------------------------------------------------------
UNPRIVILEGED_UID = 65534  # "nobody"


def unprivileged_uid() -> int:
    """The uid a root worker's children (and, in same-uid mode, the worker itself) run as: nobody (65534) less the
    worker's GPU (the first entry of its CUDA_VISIBLE_DEVICES; else its place among the host's workers, host_share.py).
    Workers of different GPUs never share a uid, even from two evaluators on one host, so RLIMIT_NPROC's uid-wide
    count, signals and /proc stay within one GPU's children: with every worker of a four-GPU host as nobody, their
    children's threads together passed the limit and torch aborted in pthread_create, and a candidate could signal a
    neighbour's processes. Two evaluators on one GPU, or two CPU evaluators that each think they have the host, do
    share a uid: a thread flood in one starves the other's children. A uid that names an account of this machine is
    never taken (nobody then)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    slot = int(first) if first.isdigit() else host_share.host_share()[0]
    uid = UNPRIVILEGED_UID - min(slot, 1023)
    if uid != UNPRIVILEGED_UID and _names_an_account(uid):
        return UNPRIVILEGED_UID
    return uid


def _names_an_account(uid: int) -> bool:
    import pwd

    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


@dataclass
class Limits:
    address_space_mb: int | None  # None on GPUs: CUDA reserves huge virtual ranges
    file_size_mb: int = 512
    open_files: int = 1024


def apply_limits(limits: Limits) -> list[str]:
    applied = []

    def _set(kind: int, value: int, label: str) -> None:
        try:
            soft, hard = resource.getrlimit(kind)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(kind, (value, value))
            applied.append(label)
        except (ValueError, OSError):
            pass

    _set(resource.RLIMIT_CORE, 0, "core=0")
    _set(resource.RLIMIT_FSIZE, limits.file_size_mb << 20, f"fsize={limits.file_size_mb}MB")
    _set(resource.RLIMIT_NOFILE, limits.open_files, f"nofile={limits.open_files}")
    if limits.address_space_mb:
        _set(resource.RLIMIT_AS, limits.address_space_mb << 20, f"as={limits.address_space_mb}MB")
    return applied


def readable_by_others(path: str) -> bool:
    """Whether a user with no special rights can reach and read `path` (every parent dir o+x, path o+r)."""
    import stat

    current = os.path.abspath(path)
    try:
        if not os.stat(current).st_mode & stat.S_IROTH:
            return False
        while True:
            parent = os.path.dirname(current)
            if parent == current:
                return True
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
            current = parent
    except OSError:
        return False


def python_readable_by_others() -> bool:
    """An unprivileged child must still import stdlib/site modules lazily (Python under /root is not)."""
    import sys
    import sysconfig

    paths = sysconfig.get_paths()
    wanted = {paths.get("stdlib"), paths.get("platstdlib"), paths.get("purelib"), paths.get("platlib")}
    wanted |= {p for p in sys.path if p and os.path.isdir(p)}
    return all(readable_by_others(p) for p in wanted if p)


CHILD_NPROC = 512  # processes and threads a child may add (RLIMIT_NPROC; a uid-wide count, never applied to root)


def processes_of_uid(uid: int) -> int:
    """Tasks (processes and threads, as RLIMIT_NPROC counts them) whose real uid is `uid`, from /proc."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                real_uid, threads = -1, 1
                for line in handle:
                    if line.startswith("Uid:"):
                        real_uid = int(line.split()[1])
                    elif line.startswith("Threads:"):
                        threads = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if real_uid == uid:
            total += threads
    return total


def seccomp_expected() -> bool:
    """Whether this machine can take the child's seccomp filter (Linux on x86-64 or arm64)."""
    import platform
    import sys

    return sys.platform.startswith("linux") and platform.machine() in _AUDIT_ARCH


def drop_privileges(uid: int | None = None, processes: int = CHILD_NPROC, read_search: bool = False) -> bool:
    """Become an unprivileged user when running as root (the machines here run everything as root).

    `read_search`: keep one capability, CAP_DAC_READ_SEARCH (file reads pass the permission bits), for a
    Python installation that only root can read (under /root). The process is still uid `nobody` for
    everything else: writes, signals, and the process limit, which the kernel never applies to root. Its
    reads must then be confined by Landlock's read allow-list, as a root child's were. The capability is
    ambient too, so compilers it runs (nvcc, gcc) can read the Python headers."""
    if os.geteuid() != 0:
        return False
    uid = unprivileged_uid() if uid is None else uid
    try:
        if read_search and not _keep_capabilities_across_setuid():
            return False
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if not _names_an_account(uid):
            # getpass.getuser() asks these before the password database, which has no entry for this uid (torch's
            # inductor names its cache folder so: a worker of GPU 1 died importing torch._dynamo without them).
            os.environ["LOGNAME"] = os.environ["USER"] = f"kbrl-sandbox-{uid}"
        if read_search and not _only_read_search():
            return False
    except OSError:
        return False
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    except (ValueError, OSError):
        pass
    return True


_PR_SET_KEEPCAPS = 8
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE = 47, 2
_CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _keep_capabilities_across_setuid() -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001
        return False


def _only_read_search() -> bool:
    """After setuid: every capability gone but CAP_DAC_READ_SEARCH (effective, permitted, inheritable, ambient)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        bit = 1 << _CAP_DAC_READ_SEARCH
        data = (_CapData * 2)(_CapData(bit, bit, bit), _CapData(0, 0, 0))
        if libc.capset(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), data) != 0:
            return False
        libc.prctl(_PR_SET_KEEPCAPS, 0, 0, 0, 0)
        return libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH, 0, 0) == 0
    except Exception:  # noqa: BLE001
        return False


def capabilities() -> str:
    """This process's effective capability mask as the kernel reports it (hex; '' where unknown)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


@dataclass
class Confinement:
    """What was applied to one child; recorded in the result's versions['sandbox']."""

    session: bool = False
    landlock: str = ""
    uid_dropped: bool = False
    read_search: bool = False  # kept CAP_DAC_READ_SEARCH after the drop (drop_privileges)
    limits: list[str] = field(default_factory=list)
    seccomp: bool | str = False  # how the filter went in (block_sockets), falsy if it did not
    dies_with_parent: bool = False

    def label(self) -> str:
        parts = ["setsid" if self.session else "no-setsid"]
        if self.dies_with_parent:
            parts.append("pdeathsig")
        parts.append(self.landlock or "no-landlock")
        if self.uid_dropped:  # nobody, or nobody-K for GPU K's children (unprivileged_uid)
            below = UNPRIVILEGED_UID - os.getuid()
            parts.append("uid=nobody" + (f"-{below}" if 0 < below < 1024 else "") + ("+read-search" if self.read_search else ""))
        else:
            parts.append("uid=same")
        if self.seccomp:
            parts.append("seccomp-no-sockets" + ("+spec-allow" if self.seccomp == "spec-allow" else ""))
        ssb = speculation_store_bypass()
        if ssb:
            parts.append(f"ssb={ssb}")
        parts.extend(self.limits)
        return ",".join(parts)


# -- same-uid mode: worker and children share the unprivileged uid (CUDA IPC needs equal uids) ----
SAME_UID_WORKER_NPROC = 4096  # processes + threads of the shared uid, worker included
SAME_UID_CHILD_NPROC = 2048  # a child stops forking at half of it: the worker keeps headroom


def apply_process_limit(processes: int) -> list[str]:
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        return [f"nproc={processes}"]
    except (ValueError, OSError):
        return []

_PR_SET_DUMPABLE = 4
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# seccomp(2) itself, so the filter can carry SECCOMP_FILTER_FLAG_SPEC_ALLOW: on kernels whose speculative
# store bypass mitigation is "seccomp" (the default before Linux 5.16), installing any filter through
# prctl also turns that mitigation on for the process, and CPU-bound work (a launch-bound forward's
# Python and dispatch) can run slower in the child than the same code in the worker. The child holds no
# secret worth that cost (its environment is scrubbed); the filter is for the forkserver socket.
_SECCOMP_NR = {"x86_64": 317, "aarch64": 277}
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_SPEC_ALLOW = 1 << 2
_SOCKET_NR = {"x86_64": 41, "aarch64": 198}
_IO_URING_SETUP_NR = 425  # same number on both
_OPEN_BY_HANDLE_AT_NR = {"x86_64": 304, "aarch64": 265}
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_EACCES = 0x00050000 | 13


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> bool:
    """SIGKILL this process when its parent exits (PR_SET_PDEATHSIG).

    A child sits in its own session, so killing the worker's process group misses it; if the worker
    dies anyway (killed by the pool's watchdog, say), its forkserver exits and this takes the child
    with it instead of leaving a hang spinning forever. A change of uid clears the setting: call
    again after dropping privileges. Exits at once if the parent is already gone. parent_pid: the
    process that must outlive this one, when known (None or 0: whatever the parent is now)."""
    if not parent_pid:
        parent_pid = os.getppid()
    try:
        ok = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001
        return False
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(0)
    return ok


def set_non_dumpable() -> bool:
    """PR_SET_DUMPABLE 0: a process of the same uid can no longer ptrace this one or read its /proc/<pid>/mem,
    environ, maps or fds (the worker, once it shares its uid with the children)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001
        return False


def speculation_store_bypass() -> str:
    """This process's speculative-store-bypass state as the kernel reports it ('thread vulnerable',
    'thread force mitigated', ...; '' where unknown): a mitigated child runs CPU-bound code slower."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("Speculation_Store_Bypass:"):
                    return line.split(":", 1)[1].strip().replace(" ", "-")
    except OSError:
        pass
    return ""


def block_sockets() -> str:
    """Seccomp filter: socket() of every family, io_uring_setup and open_by_handle_at fail with EACCES; any
    non-native syscall ABI (i386 `int 0x80`, x32) is refused outright. Installed in every child, whoever runs it.

    Why: the worker's forkserver listens on a Unix socket (abstract on Linux, its name is listed in
    /proc/net/unix); a child that connects to it can hand it a pickle and get an unconfined process of the
    worker's uid (root where the worker is root), or kill it and deny the pool. Landlock's path rules do not
    govern abstract sockets, and UDP is not covered by its network rules either: no socket, no connection, no
    channel to another candidate. Candidates need none (compilers and Triton use pipes). The child's pipe to
    the worker (made before) and socketpair() are unaffected. open_by_handle_at would open files by handle,
    around path checks, with the one capability a child may keep (CAP_DAC_READ_SEARCH). The filter is
    inherited by every process the child makes and cannot be removed: /proc/<pid>/status shows it
    (`Seccomp: 2`), which is how the worker tells a candidate's orphaned processes from its own (leftovers.py).
    Returns how it was installed: "spec-allow" (seccomp(2), speculation mitigations left as they were),
    "prctl", or "" (not installed).
    """
    import platform

    machine = platform.machine()
    if machine not in _AUDIT_ARCH:
        return ""
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    program = [
        (ld_abs, 0, 0, 4),                                  # 0: arch
        (jeq, 0, 6, _AUDIT_ARCH[machine]),                  # 1: foreign ABI -> deny (8)
        (ld_abs, 0, 0, 0),                                  # 2: syscall number
        (jge, 4, 0, 0x40000000),                            # 3: x32 numbers -> deny
        (jeq, 3, 0, _IO_URING_SETUP_NR),                    # 4: io_uring could create sockets -> deny
        (jeq, 2, 0, _SOCKET_NR[machine]),                   # 5: socket(), any family -> deny
        (jeq, 1, 0, _OPEN_BY_HANDLE_AT_NR[machine]),        # 6: open_by_handle_at -> deny
        (ret, 0, 0, _SECCOMP_RET_ALLOW),                    # 7
        (ret, 0, 0, _SECCOMP_RET_EACCES),                   # 8
    ]
    filters = (_SockFilter * len(program))(*[_SockFilter(*row) for row in program])
    fprog = _SockFprog(len(program), filters)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return ""
        if libc.syscall(_SECCOMP_NR[machine], _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_SPEC_ALLOW,
                        ctypes.byref(fprog)) == 0:
            return "spec-allow"
        # Kernels before 4.17 know no SPEC_ALLOW flag (EINVAL): the filter without it.
        return "prctl" if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0 else ""
    except Exception:  # noqa: BLE001
        return ""
