"""`kernelbench-rl corpus ingest|verify`, `kernelbench-rl index build`, `kernelbench-rl retrieve`.

Defaults work offline: ingest reads our own solutions, the index uses the bundled MiniLM model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from kernelbench_rl.commands.options import ProblemsRootOption
from kernelbench_rl.errors import UserError

corpus_app = typer.Typer(help="Retrieval corpus: ingest PyTorch -> kernel pairs, re-verify them.", no_args_is_help=True)
index_app = typer.Typer(help="Embedding index over the retrieval corpus.", no_args_is_help=True)

DbOption = Annotated[
    Optional[Path],
    typer.Option("--db", help="The DuckDB file; defaults to $KBRL_DB, else runs/kernelbench_rl.duckdb.", show_default=False),
]
ModelOption = Annotated[
    Optional[str],
    typer.Option("--model", help="sentence-transformers id or local folder; default: the bundled all-MiniLM-L6-v2.",
                 show_default=False),
]
IndexOption = Annotated[
    Optional[Path],
    typer.Option("--index", help="Index folder; defaults to $KBRL_RAG_INDEX, else rag_index/ beside the database.",
                 show_default=False),
]


def _store(db: Path | None, *, writes: bool = True):
    """The store; one a command writes is checked first (an unwritable place is one sentence, code 6)."""
    from kernelbench_rl.store import Store

    store = Store(db)
    if writes:
        from kernelbench_rl.writable import check_writable_file

        check_writable_file(store.path, "the database")
    return store


@corpus_app.command("ingest")
def ingest(
    source: Annotated[list[str], typer.Option("--source", "-s", help="solutions, kernelbook, sakana or trajectories (a folder `export` wrote; repeatable).")] = ["solutions"],  # noqa: B006
    path: Annotated[Optional[Path], typer.Option("--path", help="Local copy (save_to_disk folder or parquet) of the one hub source given, or the folder of --source trajectories.", show_default=False)] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Keep at most this many documents per source.", show_default=False)] = None,
    levels: Annotated[str, typer.Option("--levels", help="Sakana level splits, comma-separated.")] = "1,2,3",
    include_incorrect: Annotated[bool, typer.Option("--include-incorrect", help="Keep Sakana rows labelled Correct=False.")] = False,
    outliers: Annotated[str, typer.Option("--outliers", help="Sakana speedups above the cap: cap or drop.")] = "cap",
    revision: Annotated[Optional[str], typer.Option("--revision", help="Hub revision of a hub source (KernelBook is pinned by default).", show_default=False)] = None,
    verify: Annotated[bool, typer.Option("--verify", help="Re-verify ingested kernels with our evaluator afterwards.")] = False,
    db: DbOption = None,
) -> None:
    """Load corpora, skip and count bad rows, store documents once each (sha256 of normalised code)."""
    from kernelbench_rl.rag.corpus import SOURCES, ingest_docs, load_source

    unknown = [s for s in source if s not in SOURCES]
    if unknown:
        raise UserError(f"Unknown corpus source {unknown[0]!r}; choose from {', '.join(SOURCES)}.")
    hub_sources = [s for s in source if s != "solutions"]
    if path is not None and len(hub_sources) != 1:
        raise UserError("--path names a local copy of one source, so give exactly one of --source kernelbook / sakana with it.")
    store = _store(db)
    console = Console()
    table = Table(title=f"corpus ingest -> {store.path}")
    for column in ("source", "rows", "kept", "inserted", "already stored", "skipped (reason: count)", "notes"):
        table.add_column(column)
    for name in source:
        options: dict = {}
        if name == "sakana":
            try:
                options["levels"] = [int(x) for x in levels.split(",") if x.strip()]
            except ValueError:
                raise UserError(f"--levels takes comma-separated numbers such as 1,2, not {levels!r}.") from None
            options.update(correct_only=not include_incorrect, outliers=outliers)
        if revision is not None and name != "solutions":
            options["revision"] = revision
        with console.status(f"loading {name} ..."):
            loaded = load_source(name, path if name != "solutions" else None, limit, **options)
            report = ingest_docs(store, loaded)
        stats = loaded.stats
        table.add_row(name, str(stats.rows), str(stats.kept), str(report.inserted), str(report.already_stored),
                      ", ".join(f"{k}: {v}" for k, v in sorted(stats.skipped.items())) or "-",
                      ", ".join(f"{k}: {v}" for k, v in sorted(stats.notes.items())) or "-")
    console.print(table)
    if verify:
        _run_verify(store, console, limit=None)


def _run_verify(store, console: Console, limit: int | None, redo: bool = False) -> None:
    from kernelbench_rl.rag.verify import reverify_corpus

    with console.status("re-verifying corpus kernels with the evaluator ..."):
        report = reverify_corpus(store, limit=limit, redo=redo)
    skipped = ", ".join(f"{k}: {v}" for k, v in sorted(report.skipped.items())) or "none"
    console.print(f"verified {report.checked}: passed {report.passed}, failed {report.failed}, "
                  f"infra errors {report.infra_errors} (left for a retry); skipped {skipped}")


@corpus_app.command("verify")
def verify_command(
    limit: Annotated[Optional[int], typer.Option("--limit", help="Evaluate at most this many kernels.", show_default=False)] = None,
    redo: Annotated[bool, typer.Option("--redo", help="Also re-check documents verified before.")] = False,
    db: DbOption = None,
) -> None:
    """Send stored kernels whose PyTorch side is one of our problems through our evaluator; record the verdicts."""
    _run_verify(_store(db), Console(), limit, redo)


@index_app.command("build")
def build(
    model: ModelOption = None,
    kind: Annotated[str, typer.Option("--kind", help="auto (flat when small, HNSW when large), flat, hnsw or ivf.")] = "auto",
    verified_only: Annotated[bool, typer.Option("--verified-only", help="Index only documents our evaluator re-verified.")] = False,
    ef_search: Annotated[int, typer.Option("--ef-search", help="HNSW search breadth (recall vs latency).")] = 64,
    hnsw_m: Annotated[int, typer.Option("--hnsw-m", help="HNSW graph degree.")] = 32,
    device: Annotated[str, typer.Option("--device", help="Where to embed: cpu, or cuda for large corpora.")] = "cpu",
    index: IndexOption = None,
    db: DbOption = None,
) -> None:
    """Embed what is new (cached per document and model), build the FAISS index, record the build."""
    from kernelbench_rl.rag.build import build_corpus_index
    from kernelbench_rl.rag.embed import Embedder
    from kernelbench_rl.rag.index import IndexParams

    if kind not in ("auto", "flat", "hnsw", "ivf"):
        raise UserError(f"Unknown index kind {kind!r}; choose auto, flat, hnsw or ivf.")
    store = _store(db)
    from kernelbench_rl.rag.build import default_index_dir
    from kernelbench_rl.writable import check_writable_folder

    check_writable_folder(index or default_index_dir(store), "the index folder")
    console = Console()
    with console.status("loading the embedding model ..."):
        embedder = Embedder(model, device=device)
    report = build_corpus_index(store, embedder, index, kind=kind, verified_only=verified_only,  # type: ignore[arg-type]
                                params=IndexParams(hnsw_m=hnsw_m, ef_search=ef_search), show_progress=True)
    meta = report.index.meta
    console.print(
        f"index {report.build_id}: {report.index.size} documents, {meta.index_kind}, dimension {meta.dimension}, "
        f"model {meta.model_id}\n  embedded {report.embed.embedded} new, {report.embed.cached} from cache; "
        f"built in {meta.build_seconds:.3f} s; saved to {report.path}"
    )


def retrieve(
    problem: Annotated[str, typer.Option("--problem", "-p", help="Problem id, e.g. L1/19.")],
    k: Annotated[int, typer.Option("--top-k", "-k", "--examples", "-n",
                                   help="How many examples to retrieve (top-k), at least 1.")] = 3,
    backend: Annotated[str, typer.Option("--backend", help="triton or cuda.")] = "triton",
    char_budget: Annotated[int, typer.Option("--char-budget", help="Characters allowed per example.")] = 6000,
    show_code: Annotated[bool, typer.Option("--code/--no-code", help="Print the examples' code.")] = True,
    problems_root: ProblemsRootOption = None,
    model: ModelOption = None,
    index: IndexOption = None,
    db: DbOption = None,
) -> None:
    """Print the k leak-free examples a prompt for this problem would get, with their scores."""
    from kernelbench_rl.problems import get_problem
    from kernelbench_rl.rag.build import default_index_dir
    from kernelbench_rl.rag.embed import Embedder
    from kernelbench_rl.rag.retrieve import RetrievalTrace, Retriever

    if backend not in ("triton", "cuda"):
        raise UserError(f"Unknown backend {backend!r}; choose triton or cuda.")
    if k < 1:
        raise UserError(f"--top-k must be at least 1, not {k}.")
    target = get_problem(problem, problems_root)
    store = _store(db, writes=False)  # it only reads
    console = Console()
    with console.status("loading the model and the index ..."):
        embedder = Embedder(model)
        retriever = Retriever.open(store, index or default_index_dir(store), embedder,
                                   kernelbench_root=str(problems_root) if problems_root else None)
    trace = RetrievalTrace()
    examples = retriever.retrieve(target, backend, k, char_budget=char_budget, trace=trace)
    table = Table(title=f"{len(examples)} example(s) for {target.id} {target.name} ({backend})")
    for column in ("#", "score", "cosine", "source", "title", "origin", "KernelBench task", "verified"):
        table.add_column(column)
    for rank, ex in enumerate(examples, 1):
        task = f"L{ex.kb_level}/{ex.kb_task}" if ex.kb_level is not None else "-"
        verified = "-" if ex.verified is None else ("yes" if ex.verified else "no")
        table.add_row(str(rank), f"{ex.score:.3f}", f"{ex.cosine:.3f}", ex.source, ex.title, ex.origin_id, task, verified)
    console.print(table)
    if trace.excluded:
        console.print("excluded: " + ", ".join(f"{k_}: {v}" for k_, v in sorted(trace.excluded.items())))
    if show_code:
        for rank, ex in enumerate(examples, 1):
            console.rule(f"#{rank} {ex.title} ({ex.score:.3f})")
            console.print(Syntax(ex.kernel_code, "python" if "class " in ex.kernel_code else "cpp", line_numbers=False))


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    app.add_typer(corpus_app, name="corpus")
    app.add_typer(index_app, name="index")
    app.command("retrieve")(retrieve)
