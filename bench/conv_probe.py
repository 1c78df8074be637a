"""Why does identical conv-transpose code time slower in a sandboxed child than in the worker? (GPU only)

KernelBench L1/57 and L1/78 (ConvTranspose2d) read 0.71-0.75x and 0.56-0.75x as their own candidates
on an H100. This times the reference forward, each condition in a fresh process, and names the
kernels it launched:

- plain: a bare process (what the worker's baseline sees);
- fraction: the caching allocator capped as the child is (set_per_process_memory_fraction);
- confined: the evaluation child's own confinement (`child._confine`: cleared environment, Landlock,
  limits), then the forward;
- confined_fraction: both;
- tight_first_call: the first forward under a cap that leaves no room for a workspace, the timed ones
  under the child's cap (does cuDNN keep the algorithm it fell back to?).

    python3 bench/conv_probe.py .kb/KernelBench/level1/57_*.py .kb/KernelBench/level1/78_*.py
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CONDITIONS = ("plain", "fraction", "tight_first_call", "confined", "confined_fraction")


def _measure(problem_path: str, condition: str, fraction: float, workdir: str) -> dict:
    import torch

    from kernelbench_rl.evaluation import numerics, runtime, sandbox, timing
    from kernelbench_rl.evaluation import child as child_module

    torch.empty(1, device="cuda")
    if condition.startswith("confined"):
        env = sandbox.scrubbed_env(HOME=workdir, TMPDIR=workdir, TRITON_CACHE_DIR=os.path.join(workdir, ".triton"))
        child_module._confine({"workdir": workdir, "env": env, "device": "cuda", "drop_uid": False, "landlock": True,
                               "file_size_mb": 8192,
                               "readable": [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]})
    if condition.endswith("fraction"):
        torch.cuda.set_per_process_memory_fraction(fraction)
    numerics.apply()
    module = runtime.load_module_from_file(problem_path, "probe_problem", register=False)
    model = runtime.build_model(module.Model, module, 1, "cuda", "fp32")
    if condition == "tight_first_call":
        # The first forward with room for little beyond its inputs and output (as when many children warm
        # up at once), the rest with room to spare: does the library keep the algorithm it fell back to?
        inputs = runtime.make_inputs(module, 0, "cuda", "fp32")
        with torch.device("meta"):  # the output's size without a real forward (which would cache a plan)
            meta_model = runtime.build_model(module.Model, module, 1, "meta", "fp32")
            meta_out = meta_model(*[x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs])
        need = torch.cuda.memory_reserved() + meta_out.numel() * meta_out.element_size() + (64 << 20)
        total = torch.cuda.mem_get_info()[1]
        torch.cuda.set_per_process_memory_fraction(need / total)
        with torch.no_grad():
            model(*inputs)
        torch.cuda.synchronize()
        del inputs
        torch.cuda.set_per_process_memory_fraction(fraction)
    record = timing.time_forward(model, lambda s: runtime.make_inputs(module, s, "cuda", "fp32"), list(range(20)), 3,
                                 "cuda", timing.Clock.capture(), fresh_buffers=False)
    inputs = runtime.make_inputs(module, 0, "cuda", "fp32")
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        model(*inputs)
        torch.cuda.synchronize()
    kernels = sorted(((e.key, round(e.device_time_total / 1000, 2)) for e in prof.key_averages() if e.device_time_total > 0),
                     key=lambda kv: -kv[1])[:3]
    return {"condition": condition, "median_ms": round(record.median_ms, 3), "kernels": kernels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="*", help="KernelBench problem files")
    parser.add_argument("--fraction", type=float, default=0.26, help="allocator cap as a share of the device (0.26)")
    parser.add_argument("--out", default="", help="write all figures as JSON here")
    parser.add_argument("--one", nargs=2, metavar=("PROBLEM", "CONDITION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        workdir = tempfile.mkdtemp(prefix="conv-probe-")
        os.chmod(workdir, 0o777)
        try:
            figures = _measure(args.one[0], args.one[1], args.fraction, workdir)
        except Exception:  # noqa: BLE001 - a probe reports what broke
            import traceback

            figures = {"error": traceback.format_exc()[-800:]}
        with open(os.path.join(workdir, "result.json"), "w") as handle:
            json.dump(figures, handle)
        print("RESULT", os.path.join(workdir, "result.json"), flush=True)
        return
    rows = []
    for problem in args.problems:
        for condition in CONDITIONS:
            proc = subprocess.run([sys.executable, __file__, "--one", problem, condition, "--fraction", str(args.fraction)],
                                  capture_output=True, text=True, timeout=300)
            row = {"problem": os.path.basename(problem), "condition": condition}
            # A confined child's stdout goes to a file in its workdir: find the result there.
            for path in sorted(glob_results()):
                try:
                    row.update(json.load(open(path)))
                finally:
                    os.unlink(path)
            if "median_ms" not in row:
                row["error"] = (proc.stderr or proc.stdout)[-500:]
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(rows, handle, indent=1)


def glob_results() -> list[str]:
    import glob

    return glob.glob(os.path.join(tempfile.gettempdir(), "conv-probe-*", "result.json"))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
