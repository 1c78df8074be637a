"""The physical floor of a problem: no kernel can run one forward faster than its bytes and FLOPs allow.

bytes: every input read once, every parameter and buffer (weights) read once, every output written once, at
the problem's precision. FLOPs: one forward counted by PyTorch's `FlopCounterMode` (matrix products,
convolutions, attention); every other op (elementwise, reductions, norms) counts zero, so the compute floor stays
a floor, and those ops are named. Both come from the meta device: nothing is allocated, so a 16 GiB problem
costs nothing to measure.

floor time = max(DRAM bytes / bandwidth, FLOPs / dense peak). DRAM bytes leave out the part of the outputs that
fits the L2 cache (the evaluator flushes L2 before each trial, so inputs come from DRAM, but a write may stay in
L2 until after the end event). The peak is the fastest arithmetic that can pass the problem's tolerance: an fp32
problem is held to the TF32 tensor-core peak (a Triton `tl.dot` uses TF32 by default and meets fp32's 1e-4 on
KernelBench's matmuls), fp16 and bf16 problems to their own.

Worker side: torch and the standard library only.
"""

from __future__ import annotations

import types
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelbench_rl.evaluation.result import Flag
from kernelbench_rl.evaluation.sandbox import runtime, wire

TB = 1e12


@dataclass(frozen=True)
class GpuPeaks:
    """Datasheet figures of one GPU: DRAM bandwidth, L2 size and dense (no sparsity) tensor/vector throughput."""

    name: str
    dram_bytes_per_s: float
    l2_bytes: int
    flops_per_s: dict[str, float]  # fp32 (vector), tf32, bf16, fp16, fp8 (tensor cores, dense)
    source: str

    def compute_peak(self, precision: str) -> tuple[str, float]:
        """(the arithmetic, its peak) an output of `precision` can be computed with and still pass."""
        arithmetic = {"fp32": "tf32", "fp16": "fp16", "bf16": "bf16"}.get(precision, precision)
        return arithmetic, self.flops_per_s.get(arithmetic) or self.flops_per_s["fp32"]


# Dense figures: NVIDIA's datasheets give tensor-core throughput with 2:4 sparsity; these are half of those.
GPU_PEAKS: dict[str, GpuPeaks] = {peaks.name: peaks for peaks in (
    GpuPeaks("H100 SXM", 3.35 * TB, 50 << 20,
             {"fp32": 67 * TB, "tf32": 494.7 * TB, "bf16": 989.4 * TB, "fp16": 989.4 * TB, "fp8": 1978.9 * TB},
             "NVIDIA H100 Tensor Core GPU datasheet (SXM5 80GB: HBM3 3.35 TB/s; FP32 67 TFLOPS; TF32/BF16/FP16/FP8 "
             "989/1979/1979/3958 TFLOPS with sparsity); L2 50 MB (Hopper architecture whitepaper)"),
    GpuPeaks("H100 PCIe", 2.0 * TB, 50 << 20,
             {"fp32": 51 * TB, "tf32": 378 * TB, "bf16": 756 * TB, "fp16": 756 * TB, "fp8": 1513 * TB},
             "NVIDIA H100 Tensor Core GPU datasheet (PCIe 80GB: HBM2e 2.0 TB/s; FP32 51 TFLOPS; TF32/BF16/FP16/FP8 "
             "756/1513/1513/3026 TFLOPS with sparsity)"),
    GpuPeaks("H200", 4.8 * TB, 50 << 20,
             {"fp32": 67 * TB, "tf32": 494.7 * TB, "bf16": 989.4 * TB, "fp16": 989.4 * TB, "fp8": 1978.9 * TB},
             "NVIDIA H200 Tensor Core GPU datasheet (SXM 141GB: HBM3e 4.8 TB/s; compute as H100 SXM)"),
    GpuPeaks("A100", 2.039 * TB, 40 << 20,
             {"fp32": 19.5 * TB, "tf32": 156 * TB, "bf16": 312 * TB, "fp16": 312 * TB},
             "NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB: HBM2e 2,039 GB/s; FP32 19.5 TFLOPS; TF32/BF16/FP16 "
             "312/624/624 TFLOPS with sparsity); L2 40 MB"),
    GpuPeaks("L40S", 0.864 * TB, 96 << 20,
             {"fp32": 91.6 * TB, "tf32": 183 * TB, "bf16": 362.05 * TB, "fp16": 362.05 * TB, "fp8": 733 * TB},
             "NVIDIA L40S datasheet (GDDR6 864 GB/s; FP32 91.6 TFLOPS; TF32/BF16/FP16/FP8 366/733/733/1466 TFLOPS "
             "with sparsity); L2 96 MB"),
    GpuPeaks("B200", 8.0 * TB, 126 << 20,
             {"fp32": 80 * TB, "tf32": 1100 * TB, "bf16": 2250 * TB, "fp16": 2250 * TB, "fp8": 4500 * TB},
             "NVIDIA HGX B200 datasheet, per GPU (HBM3e 8 TB/s; TF32/BF16/FP16/FP8 2.2/4.5/4.5/9 PFLOPS with "
             "sparsity); FP32 vector 80 TFLOPS and L2 126 MB are estimates from the Blackwell whitepaper"),
)}


def gpu_peaks(name: str) -> GpuPeaks:
    """The table's entry for a device name as torch reports it ('NVIDIA H100 80GB HBM3') or a short one ('H100')."""
    text = name.upper()
    if "H100" in text:
        return GPU_PEAKS["H100 PCIe" if "PCIE" in text else "H100 SXM"]
    for key in ("H200", "A100", "L40S", "B200"):
        if key in text:
            return GPU_PEAKS[key]
    raise KeyError(f"no peak figures for GPU {name!r}; known: {', '.join(GPU_PEAKS)}")


# Ops that move no data of their own (views and metadata) are not "uncounted compute".
_METADATA_OPS = {
    "view", "_unsafe_view", "reshape", "permute", "expand", "t", "transpose", "unsqueeze", "squeeze", "slice",
    "select", "as_strided", "detach", "alias", "empty", "empty_like", "empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "clone", "contiguous", "_to_copy", "copy_", "lift_fresh", "split",
    "split_with_sizes", "chunk", "unbind", "flatten", "unflatten", "view_as", "expand_as", "new_empty", "new_zeros",
    "new_ones", "new_full", "arange", "scalar_tensor", "_reshape_alias", "rand", "randn", "randint", "normal_",
    "uniform_", "random_", "bernoulli_", "fill_", "zero_", "t_", "diagonal", "narrow", "index_select",
}


class _OpNames(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's signature
        name = func.overloadpacket.__name__
        self.names[name] = self.names.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


@dataclass
class Floor:
    gpu: str
    precision: str
    bytes_read: int  # inputs and weights
    bytes_written: int  # outputs
    weight_bytes: int
    flops: int
    uncounted_ops: list[str] = field(default_factory=list)  # compute ops FlopCounterMode does not count
    dram_bytes: int = 0  # what must cross DRAM: all reads, the writes beyond L2
    memory_ms: float = 0.0
    compute_ms: float = 0.0
    arithmetic: str = ""  # the peak the compute floor uses (tf32 for fp32 problems)
    source: str = ""

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def floor_ms(self) -> float:
        return max(self.memory_ms, self.compute_ms)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_ms > self.memory_ms else "memory"

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved (the roofline's x axis)."""
        return self.flops / self.bytes if self.bytes else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bytes": self.bytes, "floor_ms": self.floor_ms, "bound": self.bound,
                "arithmetic_intensity": self.arithmetic_intensity}


def _tensor_bytes(values: Any) -> int:
    return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))


def problem_floor(module: types.ModuleType, precision: str, gpu: str) -> Floor:
    """The floor of one forward of a loaded problem module (its `Model`, `get_inputs`, `get_init_inputs`) at the sizes
    its source declares, on the meta device. Raises if the problem cannot run on the meta device."""
    peaks = gpu_peaks(gpu)
    dtype = runtime.PRECISION_DTYPES[precision]
    with torch.device("meta"):
        init_inputs = list(module.get_init_inputs()) if hasattr(module, "get_init_inputs") else []
        model = module.Model(*init_inputs)
        inputs = [runtime.cast_floating(x, dtype) for x in module.get_inputs()]
    if isinstance(model, torch.nn.Module) and dtype != torch.float32:
        model = model.to(dtype)
    weights = (list(model.parameters()) + list(model.buffers())) if isinstance(model, torch.nn.Module) else []
    # Imported here: it pulls in Triton and torch's decompositions (0.3-0.5 s), which a worker whose floors come from
    # the helper process (floor_service.py) never needs.
    from torch.utils.flop_counter import FlopCounterMode

    counter, names = FlopCounterMode(display=False), _OpNames()
    with torch.no_grad(), counter, names:
        outputs = wire.flatten_outputs(model(*inputs))
    counted = {packet.__name__ for packet in counter.flop_registry if hasattr(packet, "__name__")}
    uncounted = sorted(n for n in names.names if n not in counted and n.rstrip("_") not in _METADATA_OPS
                       and n not in _METADATA_OPS)
    weight_bytes = _tensor_bytes(weights)
    read = _tensor_bytes(inputs) + weight_bytes
    written = _tensor_bytes(outputs)
    dram = read + max(0, written - peaks.l2_bytes)
    arithmetic, peak = peaks.compute_peak(precision)
    flops = int(counter.get_total_flops())
    return Floor(gpu=peaks.name, precision=precision, bytes_read=read, bytes_written=written, weight_bytes=weight_bytes,
                 flops=flops, uncounted_ops=uncounted, dram_bytes=dram,
                 memory_ms=dram / peaks.dram_bytes_per_s * 1e3, compute_ms=flops / peak * 1e3,
                 arithmetic=arithmetic, source=peaks.source)


def source_floor(source: str, precision: str, gpu: str, label: str = "problem") -> Floor:
    """`problem_floor` of a problem's source text (executed in a fresh module: problems are trusted code)."""
    module = types.ModuleType(f"kbrl_floor_{abs(hash(source))}")
    exec(compile(source, f"<{label}>", "exec"), module.__dict__)
    return problem_floor(module, precision, gpu)


def sol_fraction(floor_ms: float | None, measured_ms: float | None) -> float | None:
    """Speed of light reached: floor / measured (1.0 is the floor itself; above it is impossible)."""
    if not floor_ms or not measured_ms or measured_ms <= 0:
        return None
    return floor_ms / measured_ms


# A time under the floor by more than this share is impossible: the datasheet peaks are rounded and boost clocks
# vary by a few percent, never by 10% (and a kernel that skips half its work reads 2x under the floor).
BELOW_FLOOR_MARGIN = 0.10


def speed_of_light(floor: Floor, runtime_ms: float | None, reference_ms: float | None) -> dict[str, Any]:
    """What a timed result says against the floor: the fraction of the speed of light reached by the candidate and by
    the reference, the bandwidth and FLOP/s they achieved, and whether the candidate's time is impossible."""
    def achieved(ms: float | None) -> dict[str, float | None]:
        if not ms or ms <= 0:
            return {"sol_fraction": None, "bytes_per_s": None, "flops_per_s": None}
        return {"sol_fraction": sol_fraction(floor.floor_ms, ms), "bytes_per_s": floor.dram_bytes / (ms / 1e3),
                "flops_per_s": floor.flops / (ms / 1e3)}

    candidate, reference = achieved(runtime_ms), achieved(reference_ms)
    below = bool(runtime_ms and runtime_ms > 0 and runtime_ms < floor.floor_ms * (1 - BELOW_FLOOR_MARGIN))
    return {"gpu": floor.gpu, "floor_ms": floor.floor_ms, "bound": floor.bound, "bytes": floor.bytes,
            "dram_bytes": floor.dram_bytes, "flops": floor.flops, "arithmetic": floor.arithmetic,
            "sol_fraction": candidate["sol_fraction"], "achieved_bytes_per_s": candidate["bytes_per_s"],
            "achieved_flops_per_s": candidate["flops_per_s"], "reference_sol_fraction": reference["sol_fraction"],
            "reference_bytes_per_s": reference["bytes_per_s"], "reference_flops_per_s": reference["flops_per_s"],
            "below_floor": below}


def floor_verdict(floor: Floor | str, runtime_ms: float | None,
                  reference_ms: float | None) -> tuple[dict[str, Any] | None, list[str], str | None]:
    """A timed result against the problem's floor (a Floor, or why there is none): (speed_of_light's figures or None,
    the flags, what the verdict records or None). A time under the floor (speed_of_light's `below_floor`) means work
    was skipped: `below_speed_of_light`."""
    if isinstance(floor, str):
        return None, [], f"no floor: {floor}"
    figures = speed_of_light(floor, runtime_ms, reference_ms)
    if not figures["below_floor"]:
        return figures, [], None
    return figures, [Flag.BELOW_SPEED_OF_LIGHT.value], (
        f"timed at {runtime_ms:.4g} ms, under the floor of {floor.floor_ms:.4g} ms on {floor.gpu} "
        f"({floor.bound}-bound: {floor.dram_bytes:.4g} bytes, {floor.flops:.4g} FLOPs): work was skipped")


_WARM_UP_SOURCE = '''
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.linear = torch.nn.Linear(16, 8)

    def forward(self, x):
        return torch.relu(self.linear(self.conv(x).flatten(1)[:, :16])).sum(dim=0)


def get_inputs():
    return [torch.randn(2, 3, 6, 6)]


def get_init_inputs():
    return []
'''


def why_no_floor(exc: BaseException) -> str:
    """One line on a floor that could not be worked out (an unknown GPU, a problem the meta device cannot run)."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]


def warm_up(gpu: str) -> str:
    """torch's meta kernels and FLOP counter loaded and run once on a small model, so that the first problem's floor
    in this process costs milliseconds, not seconds ("ok", or why it failed: warming is optional)."""
    try:
        source_floor(_WARM_UP_SOURCE, "fp32", gpu, "warm-up")
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return why_no_floor(exc)
