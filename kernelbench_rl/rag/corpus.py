"""Corpus loaders: PyTorch -> kernel pairs from KernelBook, the Sakana archive and our own solutions.

Each loader reads through `datasets` (the hub id by default, or a local `save_to_disk` folder or
parquet files, which is how tests and air-gapped machines use it), turns rows into `CorpusDoc`s and
counts every row it skips, by reason, in a `LoadStats`. A bad row is never an exception.

Documents are keyed by the sha256 of their normalised kernel code, so one kernel found in two
sources is stored once (`ingest_docs` keeps whichever copy was stored first).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from kernelbench_rl.errors import UserError
from kernelbench_rl.rag.normalize import code_sha256, normalise_code

KERNELBOOK_HUB_ID = "GPUMODE/KernelBook"
# Pinned because KernelBook's licence changed across revisions: this is the 2026-02-05 revision,
# published under MIT (later revisions moved to a "Researcher Reciprocity" licence). Other public
# projects pin the same commit for the same reason.
KERNELBOOK_REVISION = "1576375bc92745b490e1cdf2fce01eba76d9f847"
SAKANA_HUB_ID = "SakanaAI/AI-CUDA-Engineer-Archive"
SAKANA_REVISION: str | None = None  # the archive has kept one revision; None asks the hub for main
SAKANA_LICENCE = "CC-BY-4.0"
SOLUTIONS_LICENCE = "Apache-2.0"

KERNELBOOK_COLUMNS = ("python_code", "triton_code")
SAKANA_COLUMNS = ("Level_ID", "Task_ID", "CUDA_Code", "PyTorch_Code_Module", "Correct")

DEFAULT_MAX_CODE_CHARS = 40_000
DEFAULT_SPEEDUP_CAP = 10.0  # the evaluator's excessive-speedup threshold

SourceName = Literal["solutions", "kernelbook", "sakana", "trajectories"]
SOURCES: tuple[str, ...] = ("solutions", "kernelbook", "sakana", "trajectories")


@dataclass
class CorpusDoc:
    """One PyTorch -> kernel pair, ready for the `corpus_docs` table."""

    sha256: str  # of the normalised kernel code
    source: str  # kernelbook | sakana | solutions
    revision: str | None
    backend: str  # triton | cuda
    licence: str | None
    origin_id: str
    pytorch_code: str
    kernel_code: str
    title: str = ""
    kb_level: int | None = None
    kb_task: int | None = None
    speedup: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["meta_json"] = json.dumps(row.pop("meta"), sort_keys=True, default=str)
        return row


@dataclass
class LoadStats:
    """What a loader saw: rows read, documents kept, and rows skipped per reason."""

    source: str
    rows: int = 0
    kept: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)  # kept rows that were altered (e.g. speedup_capped)

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "rows": self.rows, "kept": self.kept,
                "skipped": dict(self.skipped), "notes": dict(self.notes)}


@dataclass
class LoadedCorpus:
    docs: list[CorpusDoc]
    stats: LoadStats


# -- datasets access ------------------------------------------------------------------------------
def _open_splits(
    hub_id: str, path: str | Path | None, revision: str | None, wanted: Sequence[str]
) -> dict[str, Any]:
    """{split name: datasets.Dataset} for the wanted splits that exist, from the hub or a local path.

    A local path may be a `save_to_disk` folder (a DatasetDict or a single Dataset), one parquet
    file, or a folder of parquet files whose names start with the split name (the hub's
    `data/<split>-00000-of-00001.parquet` layout included).
    """
    import datasets  # heavy import, only when a corpus is actually loaded

    where = str(path) if path is not None else hub_id
    try:
        if path is None:
            from kernelbench_rl.hub import offline_unless_reachable

            loaded = {}
            with offline_unless_reachable():  # an unreachable hub fails now, not after ~24 s of retries
                for split in wanted:
                    try:
                        loaded[split] = datasets.load_dataset(hub_id, revision=revision, split=split)
                    except ValueError as exc:  # unknown split name
                        if "split" in str(exc).lower():
                            continue
                        raise
            return loaded
        local = Path(path).expanduser()
        if not local.exists():
            raise UserError(f"The corpus path {local} does not exist; pass a save_to_disk folder or parquet files.")
        if local.is_dir() and (local / "dataset_dict.json").exists():
            dsd = datasets.load_from_disk(str(local))
            return {s: dsd[s] for s in wanted if s in dsd}
        if local.is_dir() and (local / "state.json").exists():
            return {wanted[0]: datasets.load_from_disk(str(local))}
        if local.is_file() and local.suffix == ".parquet":
            return {wanted[0]: datasets.load_dataset("parquet", data_files=str(local), split="train")}
        if local.is_dir():
            files = sorted(local.rglob("*.parquet"))
            if not files:
                raise UserError(f"{local} holds neither a save_to_disk dataset nor parquet files.")
            found: dict[str, Any] = {}
            for split in wanted:
                mine = [str(f) for f in files if f.name.startswith(split)]
                if not mine and len(wanted) == 1:
                    mine = [str(f) for f in files]
                if mine:
                    found[split] = datasets.load_dataset("parquet", data_files=mine, split="train")
            return found
        raise UserError(f"{local} is not a save_to_disk folder or a parquet file.")
    except UserError:
        raise
    except Exception as exc:
        raise UserError(
            f"Could not load {where} ({type(exc).__name__}); check the path, or go online once "
            "(HF_HUB_OFFLINE=0) so the dataset is downloaded into the cache."
        ) from None


def _require_columns(dataset: Any, required: Sequence[str], where: str) -> None:
    missing = [c for c in required if c not in dataset.column_names]
    if missing:
        raise UserError(f"{where} lacks the column(s) {', '.join(missing)}, so it is not in the expected schema.")


def _text(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    return value if value.strip() else None


def _dedupe_and_limit(
    rows: Iterable[CorpusDoc | None], stats: LoadStats, limit: int | None
) -> list[CorpusDoc]:
    seen: set[str] = set()
    docs: list[CorpusDoc] = []
    for doc in rows:
        if doc is None:
            continue
        if doc.sha256 in seen:
            stats.skip("duplicate")
            continue
        seen.add(doc.sha256)
        docs.append(doc)
        if limit is not None and len(docs) >= limit:
            break
    stats.kept = len(docs)
    return docs


def _check_lengths(pytorch_code: str, kernel_code: str, max_code_chars: int, stats: LoadStats) -> bool:
    if len(kernel_code) > max_code_chars or len(pytorch_code) > max_code_chars:
        stats.skip("too_long")
        return False
    if not normalise_code(kernel_code):
        stats.skip("empty_code")
        return False
    return True


# -- KernelBook -----------------------------------------------------------------------------------
def load_kernelbook(
    path: str | Path | None = None,
    *,
    revision: str = KERNELBOOK_REVISION,
    limit: int | None = None,
    max_code_chars: int = DEFAULT_MAX_CODE_CHARS,
) -> LoadedCorpus:
    """GPUMODE/KernelBook (split `train`): PyTorch modules with inductor-generated Triton."""
    stats = LoadStats("kernelbook")
    splits = _open_splits(KERNELBOOK_HUB_ID, path, revision, ["train"])
    dataset = splits.get("train")
    if dataset is None:
        raise UserError(f"{path or KERNELBOOK_HUB_ID} has no 'train' split.")
    _require_columns(dataset, KERNELBOOK_COLUMNS, str(path or KERNELBOOK_HUB_ID))
    rev = revision if path is None else f"local:{Path(path).name}"

    def docs() -> Iterator[CorpusDoc | None]:
        for row in dataset:
            stats.rows += 1
            yield _kernelbook_doc(row, rev, max_code_chars, stats)

    return LoadedCorpus(_dedupe_and_limit(docs(), stats, limit), stats)


def _kernelbook_doc(row: Mapping[str, Any], revision: str, max_code_chars: int, stats: LoadStats) -> CorpusDoc | None:
    pytorch_code = _text(row.get("python_code"))
    kernel_code = _text(row.get("triton_code"))
    if pytorch_code is None or kernel_code is None:
        stats.skip("missing_field" if row.get("python_code") is None or row.get("triton_code") is None else "empty_code")
        return None
    if not _check_lengths(pytorch_code, kernel_code, max_code_chars, stats):
        return None
    licences = row.get("licenses")
    if isinstance(licences, (list, tuple)):
        licence = ", ".join(str(x) for x in licences if x) or None
    else:
        licence = str(licences) if licences else None
    uuid = row.get("uuid")
    title = str(row.get("entry_point") or row.get("module_name") or "")
    meta = {k: row.get(k) for k in ("repo_name", "module_name", "synthetic", "stars", "sha", "repo_link") if row.get(k) is not None}
    return CorpusDoc(
        sha256=code_sha256(kernel_code), source="kernelbook", revision=revision, backend="triton",
        licence=licence, origin_id=f"kernelbook:{uuid}", pytorch_code=pytorch_code, kernel_code=kernel_code,
        title=title, meta=meta,
    )


# -- Sakana AI CUDA Engineer archive --------------------------------------------------------------
def load_sakana(
    path: str | Path | None = None,
    *,
    levels: Sequence[int] = (1, 2, 3),
    correct_only: bool = True,
    speedup_cap: float = DEFAULT_SPEEDUP_CAP,
    outliers: Literal["cap", "drop"] = "cap",
    revision: str | None = SAKANA_REVISION,
    limit: int | None = None,
    max_code_chars: int = DEFAULT_MAX_CODE_CHARS,
) -> LoadedCorpus:
    """SakanaAI/AI-CUDA-Engineer-Archive, splits `level_<L>`: KernelBench tasks solved in CUDA.

    Its `Correct` labels and speedups came from a harness that was exploited, so incorrect rows are
    dropped by default and speedups above `speedup_cap` are capped (raw value kept in meta) or the
    row dropped (`outliers="drop"`). Every row carries its KernelBench level/task for the leak filter.
    """
    if outliers not in ("cap", "drop"):
        raise UserError(f"outliers must be 'cap' or 'drop', not {outliers!r}.")
    bad = [lv for lv in levels if lv not in (1, 2, 3)]
    if bad:
        raise UserError(f"The Sakana archive has levels 1, 2 and 3 only, not {bad}.")
    stats = LoadStats("sakana")
    wanted = [f"level_{lv}" for lv in levels]
    splits = _open_splits(SAKANA_HUB_ID, path, revision, wanted)
    if not splits:
        raise UserError(f"{path or SAKANA_HUB_ID} has none of the splits {', '.join(wanted)}.")
    rev = (revision or "main") if path is None else f"local:{Path(path).name}"

    def docs() -> Iterator[CorpusDoc | None]:
        for split, dataset in splits.items():
            _require_columns(dataset, SAKANA_COLUMNS, f"{path or SAKANA_HUB_ID} split {split}")
            for row in dataset:
                stats.rows += 1
                yield _sakana_doc(row, rev, correct_only, speedup_cap, outliers, max_code_chars, stats)

    return LoadedCorpus(_dedupe_and_limit(docs(), stats, limit), stats)


def _as_int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _sakana_doc(
    row: Mapping[str, Any], revision: str, correct_only: bool, speedup_cap: float,
    outliers: str, max_code_chars: int, stats: LoadStats,
) -> CorpusDoc | None:
    level, task = _as_int(row.get("Level_ID")), _as_int(row.get("Task_ID"))
    correct = row.get("Correct")
    if level is None or task is None or correct is None or row.get("CUDA_Code") is None or row.get("PyTorch_Code_Module") is None:
        stats.skip("missing_field")
        return None
    if correct_only and not bool(correct):
        stats.skip("not_correct")
        return None
    pytorch_code, kernel_code = _text(row.get("PyTorch_Code_Module")), _text(row.get("CUDA_Code"))
    if pytorch_code is None or kernel_code is None:
        stats.skip("empty_code")
        return None
    if not _check_lengths(pytorch_code, kernel_code, max_code_chars, stats):
        return None
    meta: dict[str, Any] = {k: row.get(k) for k in ("Op_Name", "Kernel_Name", "Correct", "Max_Diff", "CUDA_Runtime",
                                                    "PyTorch_Native_Runtime", "CUDA_Speedup_Compile")
                            if row.get(k) is not None}
    speedup = row.get("CUDA_Speedup_Native")
    if speedup is not None:
        try:
            speedup = float(speedup)
        except (TypeError, ValueError):
            speedup = float("nan")
        if not math.isfinite(speedup) or speedup <= 0:
            stats.skip("invalid_speedup")
            return None
        if speedup > speedup_cap:
            if outliers == "drop":
                stats.skip("speedup_outlier")
                return None
            meta["speedup_raw"] = speedup
            speedup = speedup_cap
            stats.notes["speedup_capped"] += 1
    kernel_name = row.get("Kernel_Name") or ""
    index = row.get("__index_level_0__")
    return CorpusDoc(
        sha256=code_sha256(kernel_code), source="sakana", revision=revision, backend="cuda", licence=SAKANA_LICENCE,
        origin_id=f"sakana:L{level}/{task}:{kernel_name}:{index}", pytorch_code=pytorch_code, kernel_code=kernel_code,
        title=str(row.get("Op_Name") or kernel_name), kb_level=level, kb_task=task, speedup=speedup, meta=meta,
    )


# -- our own solutions ----------------------------------------------------------------------------
def load_own_solutions(
    limit: int | None = None,
    *,
    solutions: Sequence[tuple[str, Path]] | None = None,
    problem_lookup: Callable[[str], Any] | None = None,
) -> LoadedCorpus:
    """KernelBench/solutions/: our known-correct Triton kernels; the PyTorch side is the bundled problem."""
    from kernelbench_rl.problems import get_problem, list_solutions, parse_problem_id

    stats = LoadStats("solutions")
    lookup = problem_lookup or get_problem
    entries = list(solutions) if solutions is not None else list_solutions()

    def docs() -> Iterator[CorpusDoc | None]:
        for problem_id, path in entries:
            stats.rows += 1
            try:
                problem = lookup(problem_id)
            except UserError:
                stats.skip("no_bundled_problem")
                yield None
                continue
            kernel_code = _text(Path(path).read_text())
            if kernel_code is None or not normalise_code(kernel_code):
                stats.skip("empty_code")
                yield None
                continue
            level, number = parse_problem_id(problem_id)
            yield CorpusDoc(
                sha256=code_sha256(kernel_code), source="solutions", revision=None, backend="triton",
                licence=SOLUTIONS_LICENCE, origin_id=f"solutions:{problem_id}", pytorch_code=problem.source,
                kernel_code=kernel_code, title=problem.name, kb_level=level, kb_task=number,
                meta={"path": str(Path(path).name), "problem_id": problem_id},
            )

    return LoadedCorpus(_dedupe_and_limit(docs(), stats, limit), stats)


# -- exported trajectories (kernelbench-rl export) -------------------------------------------------
def load_trajectories(path: str | Path | None, limit: int | None = None, *, revision: str | None = None,
                      max_code_chars: int = DEFAULT_MAX_CODE_CHARS) -> LoadedCorpus:
    """The right kernels of an exported trajectories folder (ours or a peer's): one PyTorch -> kernel pair each.

    Verdicts travel as labels only: the documents stay unverified until `corpus verify` re-judges them with our
    evaluator, as for every corpus that is not our own solutions. A kernrl problem's pair keeps no KernelBench task
    number (kernrl's L1/23 is not KernelBench's), so its reference is matched by its source."""
    from kernelbench_rl.trajectories import read_trajectories

    if path is None:
        raise UserError("The trajectories source reads a folder that `kernelbench-rl export` wrote; give it with --path.")
    if revision is not None:
        raise UserError("The trajectories source is a local folder and takes no --revision.")
    stats = LoadStats("trajectories")
    rows = read_trajectories(path)

    def docs() -> Iterator[CorpusDoc | None]:
        for row in rows:
            stats.rows += 1
            yield _trajectory_doc(row, max_code_chars, stats)

    return LoadedCorpus(_dedupe_and_limit(docs(), stats, limit), stats)


def _trajectory_doc(row: Mapping[str, Any], max_code_chars: int, stats: LoadStats) -> CorpusDoc | None:
    kernel, reference = _text(row.get("kernel")), _text(row.get("reference"))
    if not row.get("correct"):
        stats.skip("not_correct")
        return None
    if kernel is None:
        stats.skip("no_kernel")
        return None
    if reference is None:
        stats.skip("no_reference")
        return None
    if not _check_lengths(reference, kernel, max_code_chars, stats):
        return None
    level = number = None
    if row.get("suite") == "kernelbench" and isinstance(row.get("problem_id"), str) and "/" in row["problem_id"]:
        level, number = (_as_int(part) for part in row["problem_id"][1:].split("/", 1))
    return CorpusDoc(
        sha256=code_sha256(kernel), source="trajectories", revision=None, backend=row.get("backend") or "triton",
        licence=None, pytorch_code=reference, kernel_code=kernel, title=str(row.get("problem_name") or ""),
        origin_id=f"{row.get('run_id')}:{row.get('step')}:{row.get('problem')}:{row.get('sample_index')}:{row.get('turn')}",
        kb_level=level, kb_task=number, speedup=row.get("speedup"),
        meta={"suite": row.get("suite"), "problem": row.get("problem"), "verdict": row.get("verdict"),
              "hardware": row.get("hardware"), "run_id": row.get("run_id")},
    )


def load_source(source: str, path: str | Path | None = None, limit: int | None = None, **options: Any) -> LoadedCorpus:
    """Dispatch by source name (the CLI's `--source`)."""
    if source == "solutions":
        if path is not None:
            raise UserError("The solutions source reads KernelBench/solutions/ and takes no --path.")
        return load_own_solutions(limit=limit)
    if source == "kernelbook":
        return load_kernelbook(path, limit=limit, **options)
    if source == "sakana":
        return load_sakana(path, limit=limit, **options)
    if source == "trajectories":
        return load_trajectories(path, limit=limit, **options)
    raise UserError(f"Unknown corpus source {source!r}; choose one of {', '.join(SOURCES)}.")


# -- storage ---------------------------------------------------------------------------------------
@dataclass
class IngestReport:
    stats: LoadStats
    inserted: int
    already_stored: int


def ingest_docs(store: Any, loaded: LoadedCorpus, batch_size: int = 2000) -> IngestReport:
    """Write documents to `corpus_docs`; a kernel already stored (from any source) is kept as it is."""
    shas = [d.sha256 for d in loaded.docs]
    existing: set[str] = set()
    for start in range(0, len(shas), batch_size):
        chunk = shas[start : start + batch_size]
        existing |= {r[0] for r in store.fetchall("SELECT sha256 FROM corpus_docs WHERE list_contains(?, sha256)", [chunk])}
    fresh = [d for d in loaded.docs if d.sha256 not in existing]
    for start in range(0, len(fresh), batch_size):
        store.insert_ignore("corpus_docs", [d.to_row() for d in fresh[start : start + batch_size]])
    if existing:
        loaded.stats.notes["already_stored"] += len(existing)
    return IngestReport(stats=loaded.stats, inserted=len(fresh), already_stored=len(existing))


def read_corpus(store: Any, *, verified_only: bool = False, backend: str | None = None) -> list[dict[str, Any]]:
    """Stored documents (as dicts), ordered by sha256 so a corpus hashes the same every time."""
    clauses, params = [], []
    if verified_only:
        clauses.append("verified")
    if backend is not None:
        clauses.append("backend = ?")
        params.append(backend)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    frame = store.query(
        "SELECT sha256, source, revision, backend, licence, origin_id, kb_level, kb_task, title, pytorch_code, "
        f"kernel_code, speedup, meta_json, verified, verdict FROM corpus_docs {where} ORDER BY sha256",
        params or None,
    )
    return frame.to_dicts()
