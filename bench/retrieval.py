"""Retrieval benchmark: embedding throughput, index build time, query latency and recall.

    .venv/bin/python bench/retrieval.py                  # defaults: 50k x 384 clustered vectors
    .venv/bin/python bench/retrieval.py --vectors 20000 --embed-docs 16 --json-out runs/bench_retrieval.json

Embedding throughput is measured with the bundled MiniLM on real PyTorch sources (bundled problems
and solutions). Index figures use synthetic *clustered* unit vectors of the model's dimension:
HNSW recall on uniform noise is poor (0.1-0.4) and says nothing about embeddings, which cluster.
Latency is per single query (how retrieval runs: one problem at a time), timed with perf_counter.
Recall@10 is measured against exact inner-product search over the same vectors.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelbench_rl.rag.index import IndexParams, build_faiss, normalise_rows  # noqa: E402


def clustered(num: int, queries: int, dim: int, clusters: int, spread: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Corpus and query vectors around the same random centres."""
    rng = np.random.default_rng(seed)
    centres = normalise_rows(rng.standard_normal((clusters, dim)).astype(np.float32))
    members = rng.integers(0, clusters, size=num + queries)
    noise = rng.standard_normal((num + queries, dim)).astype(np.float32) * (spread / np.sqrt(dim))
    data = normalise_rows(centres[members] + noise)
    return data[:num], data[num:]


def bench_embedding(num_docs: int) -> dict:
    from kernelbench_rl.problems import list_solutions, load_problems
    from kernelbench_rl.rag.embed import Embedder, embedding_text

    sources = [p.source for p in load_problems()] + [path.read_text() for _, path in list_solutions()]
    texts = [embedding_text(s) for s in (sources * (num_docs // max(len(sources), 1) + 1))[:num_docs]]
    started = time.perf_counter()
    embedder = Embedder()
    load_s = time.perf_counter() - started
    embedder.embed(texts[:4])  # warm-up
    started = time.perf_counter()
    embedder.embed(texts)
    seconds = time.perf_counter() - started
    return {"model_id": embedder.model_id, "docs": len(texts), "mean_chars": float(np.mean([len(t) for t in texts])),
            "seconds": seconds, "docs_per_s": len(texts) / seconds, "model_load_s": load_s,
            "max_seq_length": embedder.max_seq_length}


def latency_and_recall(index, queries: np.ndarray, truth: np.ndarray | None, k: int) -> dict:
    times = []
    found = []
    for q in queries:
        started = time.perf_counter()
        _, ids = index.search(q[None, :], k)
        times.append((time.perf_counter() - started) * 1000)
        found.append(ids[0])
    out = {"p50_ms": float(np.percentile(times, 50)), "p99_ms": float(np.percentile(times, 99)),
           "mean_ms": float(np.mean(times))}
    if truth is not None:
        out["recall_at_10"] = float(np.mean([len(set(t[:k]) & set(f)) / k for t, f in zip(truth, found)]))
    return out, np.array(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vectors", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--spread", type=float, default=0.6, help="noise norm relative to the centre (clustering looseness)")
    parser.add_argument("--embed-docs", type=int, default=32, help="0 skips the embedding measurement")
    parser.add_argument("--hnsw-m", type=int, default=32)
    parser.add_argument("--ef-construction", type=int, default=100)
    parser.add_argument("--ef-search", type=str, default="16,32,64,128")
    parser.add_argument("--nprobe", type=str, default="8,16,32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="FAISS OpenMP threads; 1 suits single queries (threads add jitter, not speed)")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    k = 10

    import faiss

    faiss.omp_set_num_threads(args.threads)
    report: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "faiss": faiss.__version__,
                                "faiss_threads": faiss.omp_get_max_threads()},
                    "config": {k_: (str(v) if isinstance(v, Path) else v) for k_, v in vars(args).items()}}
    if args.embed_docs:
        report["embedding"] = bench_embedding(args.embed_docs)

    data, queries = clustered(args.vectors, args.queries, args.dim, args.clusters, args.spread, args.seed)
    rows = []

    started = time.perf_counter()
    flat = build_faiss(data, "flat")
    flat_build = time.perf_counter() - started
    flat_stats, truth = latency_and_recall(flat, queries, None, k)
    rows.append({"index": "flat (exact)", "build_s": flat_build, **flat_stats, "recall_at_10": 1.0})

    started = time.perf_counter()
    hnsw = build_faiss(data, "hnsw", IndexParams(hnsw_m=args.hnsw_m, ef_construction=args.ef_construction))
    hnsw_build = time.perf_counter() - started
    for ef in [int(x) for x in args.ef_search.split(",")]:
        hnsw.hnsw.efSearch = ef
        stats, _ = latency_and_recall(hnsw, queries, truth, k)
        rows.append({"index": f"hnsw M={args.hnsw_m} efC={args.ef_construction} efS={ef}", "build_s": hnsw_build, **stats})

    started = time.perf_counter()
    ivf = build_faiss(data, "ivf", IndexParams())
    ivf_build = time.perf_counter() - started
    for nprobe in [int(x) for x in args.nprobe.split(",")]:
        ivf.nprobe = nprobe
        stats, _ = latency_and_recall(ivf, queries, truth, k)
        rows.append({"index": f"ivf nlist={ivf.nlist} nprobe={nprobe}", "build_s": ivf_build, **stats})

    report["indexes"] = rows
    passing = [r for r in rows[1:] if r["p99_ms"] < 5.0 and r["recall_at_10"] >= 0.95]
    report["target"] = {"p99_ms_below": 5.0, "recall_at_10_at_least": 0.95,
                        "met_by": [r["index"] for r in passing]}

    print(json.dumps(report, indent=1))
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(report, indent=1))

    from rich.console import Console
    from rich.table import Table

    console = Console()
    if "embedding" in report:
        e = report["embedding"]
        console.print(f"embedding: {e['docs']} docs ({e['mean_chars']:.0f} chars) in {e['seconds']:.2f} s = "
                      f"{e['docs_per_s']:.1f} docs/s on {os.cpu_count()} CPU(s); model load {e['model_load_s']:.1f} s")
    table = Table(title=f"{args.vectors} x {args.dim} clustered vectors, {args.queries} single queries, k={k}")
    for column in ("index", "build s", "p50 ms", "p99 ms", "recall@10"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["index"], f"{r['build_s']:.2f}", f"{r['p50_ms']:.3f}", f"{r['p99_ms']:.3f}", f"{r['recall_at_10']:.3f}")
    console.print(table)
    console.print("target p99 < 5 ms with recall@10 >= 0.95: " + (", ".join(report["target"]["met_by"]) or "NOT met"))


if __name__ == "__main__":
    main()
