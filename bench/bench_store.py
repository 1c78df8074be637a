"""Store figures: bulk upsert throughput, per-call overhead, and how fast a reader gets in during a run.

Run: .venv/bin/python bench/bench_store.py [--rows 5000] [--row-kb 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernelbench_rl.store import Store, db as store_db

WRITER = """
import sys
from pathlib import Path
from kernelbench_rl.store import Store
store, stop = Store(sys.argv[1]), Path(sys.argv[2])
rows = [{"run_id": "w", "step": i, "problem_id": "p" * 1000, "sample_index": 0, "turn": 0} for i in range(int(sys.argv[3]))]
store.upsert("rollouts", rows)
print("writing", flush=True)
batches = 0
while not stop.exists():
    store.upsert("rollouts", rows)
    batches += 1
print(batches, flush=True)
"""


def bulk(path: Path, rows: int, row_kb: int, arrow: bool) -> float:
    store = Store(path)
    store.init()
    payload = "x" * (row_kb * 1024)
    batch = [{"sha256": f"{arrow}-{i}", "kind": "bench", "text": payload} for i in range(rows)]
    store_db.ARROW_BATCH_MIN_ROWS = 16 if arrow else 10**9
    start = time.perf_counter()
    store.upsert("blobs", batch)
    seconds = time.perf_counter() - start
    store_db.ARROW_BATCH_MIN_ROWS = 16
    return rows / seconds


def small_calls(path: Path, calls: int) -> float:
    store = Store(path)
    start = time.perf_counter()
    for k in range(calls):
        store.upsert("runs", [{"run_id": f"r{k}", "status": "running"}])
    return (time.perf_counter() - start) / calls * 1000


def reader_during_run(path: Path, reads: int, writer_batch: int) -> tuple[list[float], str]:
    stop = path.with_suffix(".stop")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(stop), str(writer_batch)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout.readline().strip() == "writing"
    reader = Store(path, busy_timeout_s=30)
    latencies = []
    for _ in range(reads):
        start = time.perf_counter()
        reader.query("SELECT count(*) FROM rollouts", read_only=True)
        latencies.append((time.perf_counter() - start) * 1000)
        time.sleep(0.05)
    stop.touch()
    batches = writer.stdout.readline().strip()
    writer.wait()
    return latencies, batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--row-kb", type=int, default=5)
    parser.add_argument("--reads", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        arrow_rate = bulk(tmp_path / "arrow.duckdb", args.rows, args.row_kb, arrow=True)
        row_rate = bulk(tmp_path / "rows.duckdb", min(args.rows, 2000), args.row_kb, arrow=False)
        print(f"bulk upsert of {args.row_kb} KB rows: arrow path {arrow_rate:,.0f} rows/s, executemany path {row_rate:,.0f} rows/s")
        print(f"one-row upsert (open, migrate check, write, close): {small_calls(tmp_path / 'small.duckdb', 100):.1f} ms per call")
        for batch in (10, 1000):
            latencies, batches = reader_during_run(tmp_path / f"run{batch}.duckdb", args.reads, batch)
            print(
                f"read-only query while another process upserts {batch}-row batches back to back: "
                f"median {statistics.median(latencies):.1f} ms, max {max(latencies):.1f} ms over {len(latencies)} reads "
                f"(writer did {batches} batches meanwhile)"
            )


if __name__ == "__main__":
    main()
