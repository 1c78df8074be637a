"""Which part of the sandbox makes a KernelBench reference run slower in our child than in the worker?

Level-3 identity candidates (the reference itself as `ModelNew`) read speedups of 0.57-0.80 on the H100:
the same forward runs 1.2-3.7 ms (launch-bound conv nets) to 17 ms (LSTMs) slower in the sandboxed child
than in the worker that times the baseline. This times one reference forward in this process (as the
worker times a baseline) and in children forked from a forkserver preloaded like the worker's, each child
with one part of the real child's set-up left out, so the part that costs the time shows itself.

    python bench/child_speed_probe.py --kernelbench-root .kb --problems L3/19,L3/35 --out probe.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Parts of the real child's set-up (kernelbench_rl.evaluation.child: child_main, _start, _confine).
PARTS = ("cuda_first", "profiler", "confine", "landlock", "seccomp", "fraction")
CONDITIONS = {
    "bare": set(),
    "real": set(PARTS),
    "real-no-seccomp": set(PARTS) - {"seccomp"},
    "real-no-landlock": set(PARTS) - {"landlock"},
    "real-no-profiler": set(PARTS) - {"profiler"},
    "real-no-fraction": set(PARTS) - {"fraction"},
    "real-no-confine": set(PARTS) - {"confine", "landlock", "seccomp"},
    "profiler-only": {"cuda_first", "profiler"},
}


def _load(root: str, problem_id: str):
    from kernelbench_rl.evaluation import runtime
    from kernelbench_rl.problems import get_problem

    problem = get_problem(problem_id, root)
    path = Path(tempfile.mkdtemp(prefix="probe-")) / "problem.py"
    path.write_text(problem.source)
    return runtime.load_module_from_file(str(path), f"probe_{problem.level}_{problem.number}", register=False)


def _time(module, trials: int) -> dict:
    import torch

    from kernelbench_rl.evaluation import runtime, timing

    model = runtime.build_model(module.Model, module, 1, "cuda", "fp32")
    record = timing.time_forward(model, lambda s: runtime.make_inputs(module, s, "cuda", "fp32"), list(range(trials)),
                                 3, "cuda", timing.Clock.capture())
    del model
    torch.cuda.empty_cache()
    return {"median_ms": record.median_ms, "iqr_ms": record.iqr_ms}


def probe_child(conn, root: str, problem_id: str, parts: list[str], trials: int) -> None:
    import torch

    from kernelbench_rl.evaluation import child, numerics, sandbox

    try:
        parts = set(parts)
        if "cuda_first" in parts:
            torch.cuda.init()
            torch.empty(1, device="cuda")
        if "profiler" in parts:
            os.environ[child.PROFILER_WARMUP_ENV] = "attached"  # the warm-up as children ran it before the fix
            child._warm_profiler()
        module = _load(root, problem_id)  # before Landlock: the snapshot is outside the workdir
        label = ""
        if "confine" in parts:
            workdir = tempfile.mkdtemp(prefix="probe-c-")
            env = sandbox.scrubbed_env(HOME=workdir, TMPDIR=workdir, TRITON_CACHE_DIR=os.path.join(workdir, ".triton"),
                                       TRITON_INTERPRET="0", PYTHONDONTWRITEBYTECODE="1")
            job = {"workdir": workdir, "env": env, "device": "cuda", "drop_uid": False, "landlock": "landlock" in parts,
                   "block_unix_sockets": "seccomp" in parts, "file_size_mb": 512,
                   "readable": [str(REPO / "kernelbench_rl"), "/usr/bin"]}
            try:
                label = child._confine(job).label()
            except RuntimeError as exc:  # same-uid mode insists on both; the probe wants one without the other
                label = f"partial ({exc})"
        if "fraction" in parts:
            torch.cuda.set_per_process_memory_fraction(0.5)
        numerics.apply()
        out = _time(module, trials)
        out["sandbox"] = label
        out["ssb"] = _speculation_state()
        conn.send(out)
    except BaseException as exc:  # noqa: BLE001 - reported, not raised: the probe goes on
        conn.send({"error": f"{type(exc).__name__}: {exc}"[:300]})


def _speculation_state() -> str:
    try:
        with open("/proc/self/status") as handle:
            return ";".join(line.split(":", 1)[1].strip() for line in handle if line.startswith("Speculation"))
    except OSError:
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems-root", "--kernelbench-root", dest="kernelbench_root", required=True,
                        help="a KernelBench checkout (the snapshot: .kb) or kernrl's problems folder")
    parser.add_argument("--problems", default="L3/19,L3/35,L3/10", help="comma-separated ids (default: %(default)s)")
    parser.add_argument("--trials", type=int, default=50, help="timed forwards per measurement (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=2, help="passes over the conditions, order reversed each pass")
    parser.add_argument("--conditions", default=",".join(CONDITIONS), help="subset of: " + ", ".join(CONDITIONS))
    parser.add_argument("--out", default="child_speed_probe.json")
    args = parser.parse_args()
    import torch

    from kernelbench_rl.evaluation import numerics

    if not torch.cuda.is_available():
        sys.exit("child_speed_probe needs a CUDA GPU.")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "triton", "triton.language", "kernelbench_rl.evaluation.child"])
    numerics.apply()
    names = [c for c in args.conditions.split(",") if c]
    rows = []
    for problem_id in [p for p in args.problems.split(",") if p]:
        module = _load(args.kernelbench_root, problem_id)
        for rep in range(args.repeats):
            order = names if rep % 2 == 0 else names[::-1]
            rows.append({"problem": problem_id, "condition": "worker", "repeat": rep, **_time(module, args.trials)})
            print(json.dumps(rows[-1]), flush=True)
            for name in order:
                here, there = ctx.Pipe()
                proc = ctx.Process(target=probe_child, args=(there, args.kernelbench_root, problem_id,
                                                             sorted(CONDITIONS[name]), args.trials))
                proc.start()
                there.close()
                out = here.recv() if here.poll(300) else {"error": "no answer in 300 s"}
                proc.join(30)
                rows.append({"problem": problem_id, "condition": name, "repeat": rep, **out})
                print(json.dumps(rows[-1]), flush=True)
        Path(args.out).write_text(json.dumps(rows, indent=1))
    print("\nproblem  condition            median ms (per repeat)   over the worker's")
    for problem_id in dict.fromkeys(r["problem"] for r in rows):
        mine = [r for r in rows if r["problem"] == problem_id]
        worker = statistics.median(r["median_ms"] for r in mine if r["condition"] == "worker")
        for name in ["worker"] + names:
            values = [r.get("median_ms") for r in mine if r["condition"] == name]
            shown = ", ".join(f"{v:.3f}" if v else "err" for v in values)
            ok = [v for v in values if v]
            ratio = f"{statistics.median(ok) / worker:.3f}" if ok else "n/a"
            print(f"{problem_id:8} {name:20} {shown:24} {ratio}")
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
