"""How long each problem's own reference takes at real size: the first call and a warm one, each problem in a
process of its own under a time limit, several at once.

Which references a real-size evaluation can afford at all (kernrl's levels 5-10 hold references written as
Python loops), before any evaluator runs them. torch only, so it runs on a bare GPU image:

    python3 bench/reference_times.py --problems-root ../shared/kernrl --limit-s 60 --jobs 6 --out ref_times.json
    python3 bench/reference_times.py --problems-root ../shared/kernelbench --levels 1 --device cuda

A line per problem: status (ok, timeout, error), the first and the warm call in ms, the error's last line.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

_FILE = re.compile(r"^(\d+)_(.+)\.py$")

# Runs in the child: the problem's module, its model in eval mode, one first call and one warm call.
_CHILD = r"""
import importlib.util, json, random, sys, time
import torch
path, device = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("problem", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
torch.manual_seed(0); random.seed(0)
model = module.Model(*module.get_init_inputs()).to(device).eval()
inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
def call():
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        model(*inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3
first = call()
print(json.dumps({"first_ms": first, "warm_ms": call()}))
"""


def problem_files(root: Path, levels: list[int] | None) -> list[tuple[int, int, Path]]:
    base = root / "problems" if (root / "problems").is_dir() else root / "KernelBench" if (root / "KernelBench").is_dir() else root
    found = []
    for level_dir in sorted(base.glob("level*")):
        level = int(level_dir.name.removeprefix("level")) if level_dir.name.removeprefix("level").isdigit() else None
        if level is None or (levels and level not in levels):
            continue
        for path in level_dir.glob("*.py"):
            match = _FILE.match(path.name)
            if match:
                found.append((level, int(match.group(1)), path))
    return sorted(found)


def time_one(level: int, number: int, path: Path, device: str, limit_s: float) -> dict:
    row = {"id": f"L{level}/{number}", "name": path.stem}
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, str(path), device], capture_output=True, text=True,
                              timeout=limit_s)
    except subprocess.TimeoutExpired:
        return {**row, "status": "timeout", "limit_s": limit_s}
    row["wall_s"] = round(time.monotonic() - start, 2)
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return {**row, "status": "error", "error": lines[-1][:300] if lines else f"exit {done.returncode}"}
    return {**row, "status": "ok", **json.loads(done.stdout.strip().splitlines()[-1])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems-root", required=True, help="a KernelBench checkout or kernrl's folder")
    parser.add_argument("--levels", default="", help="comma-separated levels (default: every level there)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--limit-s", type=float, default=60.0, help="seconds per problem (import, build, two calls)")
    parser.add_argument("--jobs", type=int, default=4, help="problems at once")
    parser.add_argument("--out", default=None, help="JSON output path")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    files = problem_files(Path(args.problems_root), levels)
    if not files:
        print(f"no problems under {args.problems_root}", file=sys.stderr)
        return 2
    start = time.monotonic()
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda f: time_one(*f, args.device, args.limit_s), files))
    for row in rows:
        figures = (f"first {row['first_ms']:10.1f} ms  warm {row['warm_ms']:10.1f} ms" if row["status"] == "ok"
                   else row.get("error", f"over {args.limit_s:.0f} s"))
        print(f"{row['id']:7s} {row['name'][:34]:34s} {row['status']:8s} {figures}")
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "timeout", "error")}
    print(f"{len(rows)} problems: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + f" in {time.monotonic() - start:.0f} s")
    if args.out:
        import torch

        gpu = torch.cuda.get_device_name(0) if args.device == "cuda" and torch.cuda.is_available() else "cpu"
        Path(args.out).write_text(json.dumps({
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "device": gpu, "torch": torch.__version__,
            "problems_root": args.problems_root, "limit_s": args.limit_s, "jobs": args.jobs, "counts": counts,
            "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
