"""Messages between a worker and its sandboxed child, without pickle.

The child is untrusted, so nothing it sends is unpickled: every message is a JSON header, and
tensors follow either as raw bytes (CPU, or GPU outputs copied to the host) or as CUDA IPC
handles (base64 in the header) that the worker opens with torch's own IPC rebuild. Worker side
only (torch, stdlib).
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import time
from multiprocessing.connection import Connection
from typing import Any

import torch

from kernelbench_rl.evaluation import trace

DTYPES: dict[str, torch.dtype] = {
    str(dt).removeprefix("torch."): dt
    for dt in (
        torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
        torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128,
    )
}
MAX_HEADER_BYTES = 1 << 20
MAX_TENSORS = 64


class ProtocolError(Exception):
    """The child sent something the protocol does not allow."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def send_json(conn: Connection, message: dict[str, Any]) -> None:
    conn.send_bytes(json.dumps(message).encode())


def recv_json(conn: Connection) -> dict[str, Any]:
    raw = conn.recv_bytes(MAX_HEADER_BYTES)
    try:
        message = json.loads(raw)
    except ValueError as exc:
        raise ProtocolError(f"malformed message ({exc})") from None
    if not isinstance(message, dict):
        raise ProtocolError("message is not an object")
    return message


def _as_tensor_list(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        out: list[torch.Tensor] = []
        for item in value:
            out.extend(_as_tensor_list(item))
        return out
    if isinstance(value, (int, float, bool)):
        return [torch.tensor(value)]
    raise TypeError(f"forward returned {type(value).__name__}, expected a tensor or a tuple of tensors")


def flatten_outputs(value: Any) -> list[torch.Tensor]:
    return _as_tensor_list(value)


_SPILL_NAME = re.compile(r"^t_\d{1,6}\.bin$")
_spill_counter = [0]


def _spill(tensor: torch.Tensor, spill_dir: str) -> str:
    """Copy a tensor's bytes into a file of the private dir (page cache: no pipe, no pickle)."""
    _spill_counter[0] += 1
    name = f"t_{_spill_counter[0]}.bin"
    path = os.path.join(spill_dir, name)
    nbytes = tensor.numel() * tensor.element_size()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, nbytes)
    finally:
        os.close(fd)
    target = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
    target.copy_(tensor.detach().contiguous().reshape(-1).view(torch.uint8))
    return name


def send_tensors(conn: Connection, event: str, groups: dict[str, list[torch.Tensor]], use_ipc: bool,
                 extra: dict[str, Any] | None = None, spill_dir: str | None = None) -> list[torch.Tensor]:
    """Send named groups of tensors: CUDA IPC handles, else files in `spill_dir`, else pipe bytes.

    Returns what must stay alive until the worker acknowledges.
    """
    header: dict[str, Any] = {"event": event, "groups": {}, **(extra or {})}
    payloads: list[bytes] = []
    keep_alive: list[torch.Tensor] = []
    for name, tensors in groups.items():
        metas = []
        for tensor in tensors:
            meta: dict[str, Any] = {
                "dtype": dtype_name(tensor.dtype), "shape": list(tensor.shape), "device": tensor.device.type,
            }
            if use_ipc and tensor.is_cuda and tensor.numel() > 0:
                dense = tensor if tensor.is_contiguous() else tensor.contiguous()
                keep_alive.append(dense)
                storage = dense.untyped_storage()
                (device, handle, size_bytes, offset_bytes, ref_handle, ref_offset, event_handle,
                 event_sync) = storage._share_cuda_()
                meta["ipc"] = {
                    "device": int(device), "handle": base64.b64encode(handle).decode(),
                    "size_bytes": int(size_bytes), "offset_bytes": int(offset_bytes),
                    "ref_handle": base64.b64encode(ref_handle).decode(), "ref_offset": int(ref_offset),
                    "event_handle": base64.b64encode(event_handle).decode() if event_handle else None,
                    "event_sync": bool(event_sync), "tensor_offset": int(dense.storage_offset()),
                    "stride": list(dense.stride()),
                }
            elif spill_dir is not None and tensor.numel() > 0:
                meta["nbytes"] = tensor.numel() * tensor.element_size()
                meta["file"] = _spill(tensor, spill_dir)
            else:
                host = tensor.detach().to("cpu").contiguous()
                meta["nbytes"] = host.numel() * host.element_size()
                payloads.append(host.reshape(-1).view(torch.uint8).numpy().tobytes() if host.numel() else b"")
            metas.append(meta)
        header["groups"][name] = metas
    send_json(conn, header)
    for payload in payloads:
        conn.send_bytes(payload)
    return keep_alive


def receive_tensors(conn: Connection, header: dict[str, Any], max_bytes: int,
                    spill_dir: str | None = None, snapshot_ipc_max_bytes: int | None = None) -> dict[str, list[torch.Tensor]]:
    """The worker's side of `send_tensors`: validates every field before touching torch.

    CUDA IPC tensors are copied into a private snapshot, except those larger than
    `snapshot_ipc_max_bytes`, which are read in place (mapped from the child's memory)."""
    groups = header.get("groups")
    if not isinstance(groups, dict):
        raise ProtocolError("tensor message without groups")
    out: dict[str, list[torch.Tensor]] = {}
    count = 0
    for name, metas in groups.items():
        if not isinstance(metas, list):
            raise ProtocolError("bad group")
        tensors = []
        for meta in metas:
            count += 1
            if count > MAX_TENSORS:
                raise ProtocolError("too many tensors")
            tensors.append(_receive_one(conn, meta, max_bytes, spill_dir, snapshot_ipc_max_bytes))
        out[str(name)] = tensors
    return out


def _ints(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise ProtocolError(f"bad {what}")
    return value


def _receive_one(conn: Connection, meta: Any, max_bytes: int, spill_dir: str | None,
                 snapshot_ipc_max_bytes: int | None = None) -> torch.Tensor:
    if not isinstance(meta, dict) or meta.get("dtype") not in DTYPES:
        raise ProtocolError("bad tensor header")
    dtype = DTYPES[meta["dtype"]]
    shape = _ints(meta.get("shape"), "shape")
    numel = 1
    for dim in shape:
        numel *= dim
    if "ipc" in meta:
        return _open_ipc(meta["ipc"], dtype, shape, snapshot_ipc_max_bytes)
    nbytes = meta.get("nbytes")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if not isinstance(nbytes, int) or nbytes != numel * itemsize or nbytes > max_bytes:
        raise ProtocolError("tensor size does not match its header")
    if "file" in meta:
        return _read_spill(meta["file"], spill_dir, nbytes, dtype, shape)
    raw = conn.recv_bytes(max(nbytes, 1) + 16)
    if len(raw) != nbytes:
        raise ProtocolError("tensor payload has the wrong length")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


def _read_spill(name: Any, spill_dir: str | None, nbytes: int, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    # The name comes from the child: only a plain file of our pattern, directly in its private dir.
    if spill_dir is None or not isinstance(name, str) or not _SPILL_NAME.match(name):
        raise ProtocolError("bad spill file name")
    path = os.path.join(spill_dir, name)
    try:
        info = os.lstat(path)
    except OSError:
        raise ProtocolError("spill file missing") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size != nbytes:
        raise ProtocolError("spill file is not a regular file of the announced size")
    data = torch.from_file(path, shared=False, size=nbytes, dtype=torch.uint8)
    os.unlink(path)
    return data.view(dtype).reshape(shape)


def _open_ipc(ipc: Any, dtype: torch.dtype, shape: list[int], snapshot_max_bytes: int | None = None) -> torch.Tensor:
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    if not isinstance(ipc, dict):
        raise ProtocolError("bad ipc header")
    try:
        handle = base64.b64decode(ipc["handle"], validate=True)
        ref_handle = base64.b64decode(ipc["ref_handle"], validate=True)
        event_handle = base64.b64decode(ipc["event_handle"], validate=True) if ipc.get("event_handle") else None
        device, size_bytes, offset_bytes, ref_offset, tensor_offset = (
            int(ipc["device"]), int(ipc["size_bytes"]), int(ipc["offset_bytes"]), int(ipc["ref_offset"]),
            int(ipc["tensor_offset"]),
        )
        stride = _ints(ipc["stride"], "stride")
        event_sync = bool(ipc["event_sync"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"bad ipc header ({exc})") from None
    if len(stride) != len(shape) or min(device, size_bytes, offset_bytes, ref_offset, tensor_offset) < 0:
        raise ProtocolError("bad ipc geometry")
    # A tensor view must fit its storage; torch checks this too, but say it clearly.
    itemsize = torch.empty((), dtype=dtype).element_size()
    extent = tensor_offset + sum((s - 1) * st for s, st in zip(shape, stride) if s > 0) + 1
    if any(s == 0 for s in shape):
        extent = 0
    if extent * itemsize > size_bytes:
        raise ProtocolError("ipc tensor exceeds its storage")
    opening = time.perf_counter()
    shared = rebuild_cuda_tensor(
        torch.Tensor, torch.Size(shape), tuple(stride), tensor_offset, torch.UntypedStorage, dtype, device,
        handle, size_bytes, offset_bytes, False, ref_handle, ref_offset, event_handle, event_sync,
    )
    trace.here("ipc_open", opening)
    # A private snapshot: what is compared is what the child had when it answered (its process may
    # still write its own buffer), and the child's memory is released as soon as this returns. At
    # KernelBench's level-1 sizes (6-8 GiB outputs) the copy is what runs the device out of memory: such
    # tensors are compared in place while the child waits for its next command (a candidate thread
    # rewriting its own output meanwhile could only put the right answer there, which it must compute).
    if snapshot_max_bytes is not None and size_bytes > snapshot_max_bytes:
        return shared
    copying = time.perf_counter()
    copy = shared.clone()
    del shared
    trace.here("ipc_snapshot", copying)
    return copy
