"""How much device memory one evaluation child's CUDA context really takes (GPU machine only).

Starts N processes in stages and reads the device's free memory (`cudaMemGetInfo` in this parent)
after each: CUDA initialised (what a pre-started child holds), then after one fp32 matmul (cuBLAS
handle and workspace), then after one conv2d (cuDNN). The worker budgets WARM_CONTEXT_BYTES per pre-started child and LOADED_CONTEXT_BYTES per one in use;
this says whether that holds on the machine at hand.

    python3 bench/context_probe.py --children 8
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time


def _child(stage_q, go_q) -> None:
    import torch

    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    stage_q.put("init")
    go_q.get()
    a = torch.randn(1024, 1024, device="cuda")
    (a @ a).sum().item()
    del a
    torch.cuda.empty_cache()
    stage_q.put("cublas")
    go_q.get()
    x = torch.randn(8, 16, 64, 64, device="cuda")
    w = torch.randn(32, 16, 3, 3, device="cuda")
    torch.nn.functional.conv2d(x, w).sum().item()
    del x, w
    torch.cuda.empty_cache()
    stage_q.put("cudnn")
    go_q.get()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--children", type=int, default=8, help="processes started at once (default 8)")
    parser.add_argument("--out", default="", help="write the figures as JSON here")
    args = parser.parse_args()
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")
    ctx = mp.get_context("spawn")
    base = torch.cuda.mem_get_info()[0]
    stage_q, go_q = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(stage_q, go_q)) for _ in range(args.children)]
    for p in procs:
        p.start()
    figures = {"device": torch.cuda.get_device_name(), "children": args.children, "torch": torch.__version__}
    for stage in ("init", "cublas", "cudnn"):
        for _ in procs:
            assert stage_q.get(timeout=120) == stage
        time.sleep(0.5)
        free = torch.cuda.mem_get_info()[0]
        figures[f"{stage}_mib_per_child"] = round((base - free) / args.children / 2**20, 1)
        for _ in procs:
            go_q.put(1)
    for p in procs:
        p.join(timeout=30)
    print(json.dumps(figures))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(figures, handle, indent=1)


if __name__ == "__main__":
    main()
