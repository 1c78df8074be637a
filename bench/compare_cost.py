"""What one correctness comparison costs on the GPU: the fused one-pass kernel against the torch path,
both against the floor of reading the two tensors once (a device copy of one, the same bytes moved).

Also checks, before any timing, that both paths give the same figures on adversarial outputs (NaN,
Inf, values at the tolerance's edge, fp16/bf16), so a fast path that judges differently is caught here.

    python bench/compare_cost.py [--out compare_cost.json]        # needs CUDA; ~1 min on an H100
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernelbench_rl.evaluation import checks, fused_compare  # noqa: E402

# (label, shape, dtype): KernelBench's L1/19 output (4096 x 393216 fp32, 6 GiB), a level-2-sized one, half types.
SIZES = [("L1/19 output, 4096x393216 fp32", (4096, 393216), torch.float32),
         ("128x64x254x254 fp32 (L2/1-like)", (128, 64, 254, 254), torch.float32),
         ("64M bf16", (1 << 26,), torch.bfloat16),
         ("64M fp16", (1 << 26,), torch.float16)]


def adversarial_pairs(device: str, size: int = 1 << 20) -> list[tuple[str, torch.Tensor, torch.Tensor, float, float]]:
    """(case, reference, candidate, atol, rtol); the CPU tests run them at a small size on Triton's interpreter."""
    gen = torch.Generator(device=device).manual_seed(0)
    base = torch.randn(size, generator=gen, device=device)
    cases = []
    cases.append(("equal", base, base.clone(), 1e-4, 1e-4))
    cases.append(("small noise", base, base + 1e-6 * torch.randn(base.shape, generator=gen, device=device), 1e-4, 1e-4))
    off = base.clone()
    off[::100] += 1e-3
    cases.append(("1 in 100 off", base, off, 1e-4, 1e-4))
    edge = base.clone()
    edge += (1e-4 + 1e-4 * base.abs()) * 0.999
    cases.append(("just inside the tolerance", base, edge, 1e-4, 1e-4))
    edge2 = base.clone()
    edge2 += (1e-4 + 1e-4 * base.abs()) * 1.01
    cases.append(("just outside the tolerance", base, edge2, 1e-4, 1e-4))
    ref_nan = base.clone()
    ref_nan[5::77] = float("nan")
    ref_nan[7::99] = float("inf")
    got_same = ref_nan.clone()
    cases.append(("NaN/Inf where the reference has them", ref_nan, got_same, 1e-4, 1e-4))
    got_nan = base.clone()
    got_nan[size // 3] = float("nan")
    cases.append(("NaN where the reference is finite", base, got_nan, 1e-4, 1e-4))
    got_inf = base.clone()
    got_inf[size // 2] = float("-inf")
    cases.append(("-Inf where the reference is finite", base, got_inf, 1e-4, 1e-4))
    got_fin = ref_nan.clone()
    got_fin[7] = 0.0
    cases.append(("finite where the reference is Inf", ref_nan, got_fin, 1e-4, 1e-4))
    cases.append(("zeros", base, torch.zeros_like(base), 1e-4, 1e-4))
    odd = torch.randn(size + 3, generator=gen, device=device)
    cases.append(("odd length", odd, odd + 2e-4, 1e-4, 1e-4))
    for dtype in (torch.float16, torch.bfloat16):
        b = base.to(dtype)
        noisy = (base + 3e-3 * torch.randn(base.shape, generator=gen, device=device)).to(dtype)
        cases.append((f"{str(dtype)[6:]} noise", b, noisy, 1e-2, 1e-2))
    return cases


def judged_alike(fused: tuple, plain: tuple) -> bool:
    """Same count outside tolerance and same non-finite verdict; where finite, the same max error and scale
    (the torch path stops at the first non-finite chunk, so its figures there are partial)."""
    if fused[0] != plain[0] or fused[3] != plain[3]:
        return False
    return bool(fused[3]) or (abs(fused[1] - plain[1]) <= 1e-7 * max(1.0, plain[1]) and fused[2] == plain[2])


def time_call(fn, repeats: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="compare_cost.json")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("compare_cost needs a CUDA GPU.")
        return 2
    device = "cuda"
    agreement = []
    for name, ref, got, atol, rtol in adversarial_pairs(device):
        fused = checks._compare_floating(ref, got, atol, rtol)
        plain = checks._compare_floating_torch(ref, got, atol, rtol)
        same = judged_alike(fused, plain)
        agreement.append({"case": name, "fused": list(fused), "torch": list(plain), "same": bool(same)})
        print(f"{'same' if same else 'DIFFERENT':9s} {name:40s} fused {fused}  torch {plain}", flush=True)
    rows = []
    for label, shape, dtype in SIZES:
        ref = torch.randn(shape, device=device, dtype=dtype)
        got = ref + (1e-6 if dtype == torch.float32 else 1e-3) * torch.randn(shape, device=device, dtype=dtype)
        atol = 1e-4 if dtype == torch.float32 else 1e-2
        copy_buf = torch.empty_like(ref)
        floor = time_call(lambda: copy_buf.copy_(ref), args.repeats)
        fused = time_call(lambda: checks._compare_floating(ref, got, atol, atol), args.repeats)
        plain = time_call(lambda: checks._compare_floating_torch(ref, got, atol, atol), args.repeats)
        row = {"output": label, "bytes_each": ref.numel() * ref.element_size(), "floor_ms": round(floor, 3),
               "fused_ms": round(fused, 3), "torch_ms": round(plain, 3),
               "fused_over_floor": round(fused / floor, 2), "torch_over_floor": round(plain / floor, 2),
               "torch_over_fused": round(plain / fused, 1)}
        rows.append(row)
        print(f"{label:34s} floor {floor:8.3f} ms  fused {fused:8.3f} ms ({fused / floor:.2f}x floor)  "
              f"torch {plain:8.3f} ms ({plain / floor:.2f}x floor)", flush=True)
        del ref, got, copy_buf
        torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                          "agreement": agreement, "timings": rows,
                                          "floor": "one device copy of the reference (reads one tensor, writes one: "
                                                   "the bytes of reading both once)"}, indent=1))
    print(f"wrote {args.out}")
    return 0 if all(a["same"] for a in agreement) else 1


if __name__ == "__main__":
    raise SystemExit(main())
