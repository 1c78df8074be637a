"""Trajectories as a dataset: a run's (or a filter's) rollouts as a Hugging Face `datasets` folder or parquet files.

    rows = trajectory_rows(store, TrajectoryFilter(run_ids=["smoke"]))
    write_dataset(rows, Path("smoke-trajectories"), fmt="datasets", description=...)   # + README.md, the card

One row per turn: the prompt and the model's whole completion, the kernel extracted from it, the verdict (error
category and message, compiled, correct), the reward and return, the counted speedup, the problem in both id forms
with its suite and reference, and what judged it (the hardware, the evaluator's versions). Holdout problems are left
out unless asked for: the split is the run's own (its stored config), or the one the environment server recorded.

The same folder reads back as a corpus (`kernelbench-rl corpus ingest --source trajectories --path DIR`): each right
kernel becomes a PyTorch -> kernel pair that `sft` trains on once our evaluator has re-verified it.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation.result import EVALUATOR_VERSION, EvalResult
from kernelbench_rl.problems import Problem, holdout_ids, load_problems, resolve_problem
from kernelbench_rl.rewards.shaping import counts_as_correct
from kernelbench_rl.store import Store

Format = Literal["datasets", "parquet"]
FORMATS: tuple[str, ...] = ("datasets", "parquet")
PARQUET_FILE = "data/train-00000-of-00001.parquet"  # the hub's layout: `datasets.load_dataset(DIR)` reads it

# Every column, in order, with what it holds (the dataset card lists them from here).
COLUMNS: dict[str, str] = {
    "run_id": "the run that produced the turn",
    "step": "its training step (the environment server: its episode number)",
    "sample_index": "its sample within the step's group for the problem",
    "turn": "its turn in a multi-turn episode (0 for single-turn)",
    "stage": "the reward stage or preset it was scored under",
    "problem": "the problem's id in its suite's own form (kernrl's L1_23_Softmax, KernelBench's L1/23)",
    "problem_id": "the problem's id in kernelbench-rl's form (L1/23); with `suite` it names one problem",
    "suite": "whose problem it is: kernelbench or kernrl",
    "level": "the problem's level",
    "problem_name": "the problem's file stem (23_Softmax)",
    "reference": "the problem's PyTorch reference module (None where its source was not at hand)",
    "prompt": "the prompt as the model read it",
    "completion": "the model's whole answer",
    "kernel": "the kernel module extracted from the answer (None: nothing could be extracted)",
    "backend": "the kernel's backend (triton or cuda)",
    "stop_reason": "why sampling stopped: stop, or length (cut at the token limit)",
    "format_ok": "the answer had the required form (a code block defining ModelNew that uses the backend)",
    "verdict": "the evaluator's error category: ok, format, static, compile, runtime, mismatch, ...",
    "error_message": "the verdict's one-line message",
    "compiled": "the kernel imported and built (None: never evaluated)",
    "correct": "the kernel was judged correct (None: never evaluated)",
    "speedup": "eager time / kernel time where it was timed on a GPU (None on the CPU or when not timed)",
    "reward": "the turn's own reward under its stage's preset (None: no verdict was possible)",
    "return": "the discounted return trained on (multi-turn), else None",
    "hardware": "what judged it: the GPU's name (its card) or the CPU",
    "versions": "JSON: the evaluator's record of versions and settings for this verdict",
    "holdout": "whether the problem is held out of training (only with --include-holdout)",
}


@dataclass
class TrajectoryFilter:
    """Which rollouts to export; every field left empty matches all."""

    run_ids: Sequence[str] = ()
    problems: Sequence[str] = ()  # any accepted id form
    levels: Sequence[int] = ()
    suite: str | None = None
    stage: str | None = None
    correct_only: bool = False
    include_holdout: bool = False
    limit: int | None = None

    def describe(self) -> str:
        parts = [f"runs {', '.join(self.run_ids)}" if self.run_ids else "every run"]
        parts += [f"problems {', '.join(self.problems)}"] if self.problems else []
        parts += [f"levels {', '.join(map(str, self.levels))}"] if self.levels else []
        parts += [f"suite {self.suite}"] if self.suite else []
        parts += [f"stage {self.stage}"] if self.stage else []
        parts += ["correct kernels only"] if self.correct_only else []
        parts += ["holdout problems included" if self.include_holdout else "holdout problems left out"]
        parts += [f"at most {self.limit} rows"] if self.limit else []
        return "; ".join(parts)


@dataclass
class Export:
    rows: list[dict[str, Any]]
    left_out: Counter[str] = field(default_factory=Counter)  # reason -> rows


_QUERY = """
SELECT r.run_id, r.step, r.sample_index, r.turn, r.stage, r.problem_id, r.suite, r.level, r.stop_reason,
       r.format_ok, r.error_category, r.error_message,
       bp.text AS prompt, bc.text AS completion, k.source AS kernel, k.backend,
       w.reward, w.return_value, w.components_json,
       e.compiled, e.correct, e.speedup, e.flags, e.hardware, e.result_json,
       runs.config_json
FROM rollouts r
LEFT JOIN rewards w USING (run_id, step, problem_id, sample_index, turn)
LEFT JOIN evaluations e ON e.eval_key = r.eval_key
LEFT JOIN blobs bp ON bp.sha256 = r.prompt_sha256
LEFT JOIN blobs bc ON bc.sha256 = r.completion_sha256
LEFT JOIN kernels k ON k.sha256 = r.kernel_sha256
LEFT JOIN runs ON runs.run_id = r.run_id
{where}
ORDER BY r.run_id, r.step, r.problem_id, r.sample_index, r.turn
"""


class _Sources:
    """The problems a run used (its config's source and split), else the given source with the default split."""

    def __init__(self, problems_root: str | None) -> None:
        self.problems_root = problems_root
        self._by_config: dict[str, tuple[list[Problem], set[str]]] = {}

    def for_run(self, config_json: str | None) -> tuple[list[Problem], set[str]]:
        key = config_json or ""
        if key not in self._by_config:
            section: dict[str, Any] = {}
            try:
                section = dict(json.loads(config_json).get("problems") or {}) if config_json else {}
            except (ValueError, AttributeError):
                section = {}
            root = section.get("root") or section.get("kernelbench_root") or self.problems_root
            try:
                problems = load_problems(root)
            except UserError:  # the run's source is not on this machine: the one given here
                problems = load_problems(self.problems_root)
            fraction = float(section.get("holdout_fraction", 0.2))
            seed = int(section.get("split_seed", 0))
            self._by_config[key] = (problems, holdout_ids(problems, fraction, seed))
        return self._by_config[key]


def _problem_of(problems: Iterable[Problem], problem_id: str, suite: str | None) -> Problem | None:
    return next((p for p in problems if p.id == problem_id and (suite is None or p.suite == suite)), None)


def trajectory_rows(store: Store, wanted: TrajectoryFilter, problems_root: str | None = None) -> Export:
    """The rollouts `wanted` selects, as dataset rows (see COLUMNS), with what was left out and why."""
    if not store.exists():
        raise UserError(f"There is no database at {store.path}; pass --db or set KBRL_DB to an existing file.")
    store.migrate()  # an older file gains the columns read below (the suite of every row)
    clauses: list[str] = []
    params: list[Any] = []
    if wanted.run_ids:
        clauses.append("list_contains(?, r.run_id)")
        params.append(list(wanted.run_ids))
    if wanted.levels:
        clauses.append("list_contains(?, r.level)")
        params.append(list(wanted.levels))
    if wanted.stage:
        clauses.append("r.stage = ?")
        params.append(wanted.stage)
    if wanted.correct_only:
        clauses.append("e.correct")
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    found = store.dicts(_QUERY.format(where=where), params, read_only=True)
    if wanted.run_ids:
        present = {row["run_id"] for row in found}
        absent = [run for run in wanted.run_ids if run not in present]
        if absent and not (wanted.levels or wanted.stage or wanted.correct_only):
            raise UserError(f"No rollouts of run {absent[0]} in {store.path}; "
                            "`kernelbench-rl sql \"SELECT DISTINCT run_id FROM rollouts\"` lists the runs.")
    sources = _Sources(problems_root)
    export = Export([])
    for row in found:
        problems, held = sources.for_run(row["config_json"])
        problem = _problem_of(problems, row["problem_id"], row["suite"])
        suite = row["suite"] or (problem.suite if problem is not None else None)
        if wanted.suite and suite != wanted.suite:
            continue
        if wanted.problems and not _named(row["problem_id"], suite, problem, wanted.problems):
            continue
        components = _json(row["components_json"])
        holdout = bool(components.get("holdout")) if "holdout" in components else row["problem_id"] in held
        if holdout and not wanted.include_holdout:
            export.left_out["holdout"] += 1
            continue
        exported = _row(row, problem, suite, holdout)
        if wanted.correct_only and not exported["correct"]:  # judged correct, yet a hack or an unconfirmed speedup
            continue
        if wanted.limit is not None and len(export.rows) >= wanted.limit:
            export.left_out["over_limit"] += 1
            continue
        export.rows.append(exported)
    return export


def _named(problem_id: str, suite: str | None, problem: Problem | None, names: Sequence[str]) -> bool:
    candidate = problem or Problem(level=int(problem_id[1:].split("/")[0]), number=int(problem_id.split("/")[1]),
                                   name="", source="", origin="inline", suite=suite or "kernelbench")
    try:
        return any(resolve_problem(name, [candidate]) is not None for name in names)
    except UserError:
        return False


def _json(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _row(row: dict[str, Any], problem: Problem | None, suite: str | None, holdout: bool) -> dict[str, Any]:
    result = _json(row["result_json"])
    # Only a speedup that counts is published as one: a hack's, or a flagged one never confirmed, is none; and only a
    # kernel that counts as correct everywhere else (rewards.shaping.counts_as_correct) is published as correct.
    correct = row["correct"]
    try:
        verdict = EvalResult.from_dict(result) if result else None
        counted = row["speedup"] if verdict is not None and verdict.speedup_counts else None
        if verdict is not None and correct:
            correct = counts_as_correct(verdict)
    except (TypeError, ValueError):
        counted = None
    versions = dict(result.get("versions") or {})
    versions.setdefault("evaluator", EVALUATOR_VERSION)
    level = row["level"] if row["level"] is not None else (problem.level if problem else None)
    return {
        "run_id": row["run_id"], "step": row["step"], "sample_index": row["sample_index"], "turn": row["turn"],
        "stage": row["stage"],
        "problem": problem.display_id if problem is not None else row["problem_id"],
        "problem_id": row["problem_id"], "suite": suite, "level": level,
        "problem_name": problem.name if problem is not None else None,
        "reference": problem.source if problem is not None else None,
        "prompt": row["prompt"], "completion": row["completion"], "kernel": row["kernel"],
        "backend": row["backend"] or result.get("backend"), "stop_reason": row["stop_reason"],
        "format_ok": row["format_ok"], "verdict": row["error_category"], "error_message": row["error_message"],
        "compiled": row["compiled"], "correct": correct, "speedup": counted,
        "reward": row["reward"], "return": row["return_value"], "hardware": row["hardware"],
        "versions": json.dumps(versions, sort_keys=True), "holdout": holdout,
    }


# -- writing ---------------------------------------------------------------------------------------
def _features() -> Any:
    import datasets

    text, integer, flag, real = (datasets.Value("string"), datasets.Value("int64"), datasets.Value("bool"),
                                 datasets.Value("float64"))
    kinds = {"step": integer, "sample_index": integer, "turn": integer, "level": integer, "format_ok": flag,
             "compiled": flag, "correct": flag, "holdout": flag, "speedup": real, "reward": real, "return": real}
    return datasets.Features({name: kinds.get(name, text) for name in COLUMNS})


def prepare_output(out: Path, overwrite: bool) -> None:
    """Refuse to write over something unless asked: an export never loses data it did not make."""
    if out.exists() and (out.is_file() or any(out.iterdir())):
        if not overwrite:
            raise UserError(f"{out} already exists and is not empty; choose another --out or pass --overwrite.")
        if out.is_file():
            out.unlink()
        else:
            shutil.rmtree(out)


def write_dataset(export: Export, out: Path, fmt: Format, *, source: str, wanted: TrajectoryFilter) -> Path:
    """The rows as a `save_to_disk` folder (fmt datasets) or the hub's parquet layout (fmt parquet), with README.md."""
    import datasets

    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}.")
    dataset = datasets.Dataset.from_list(export.rows, features=_features())
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "datasets":
        dataset.save_to_disk(str(out))
    else:
        (out / PARQUET_FILE).parent.mkdir(parents=True, exist_ok=True)
        dataset.to_parquet(str(out / PARQUET_FILE))
    (out / "README.md").write_text(dataset_card(export, fmt, source=source, wanted=wanted))
    return out


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernelbench-rl")
    except PackageNotFoundError:
        return "unknown"


def dataset_card(export: Export, fmt: Format, *, source: str, wanted: TrajectoryFilter) -> str:
    """README.md of the dataset: what it holds, how it was made and judged, its columns, and how to use it."""
    rows = export.rows
    verdicts = Counter(r["verdict"] or "none" for r in rows)
    suites = Counter(r["suite"] or "unknown" for r in rows)
    runs = sorted({r["run_id"] for r in rows})
    hardware = sorted({r["hardware"] for r in rows if r["hardware"]})
    correct = sum(1 for r in rows if r["correct"])
    header = ["---", "pretty_name: kernelbench-rl trajectories", "tags:", "- kernels", "- triton",
              "- reinforcement-learning", "- kernelbench"]
    if fmt == "parquet":
        header += ["configs:", "- config_name: default", "  data_files:", "  - split: train", f"    path: {PARQUET_FILE}"]
    header += ["---", ""]
    load = (f'datasets.load_from_disk("{{folder}}")' if fmt == "datasets" else 'datasets.load_dataset("{folder}")')
    lines = header + [
        "# kernelbench-rl trajectories", "",
        f"{len(rows)} turns of kernel-writing rollouts ({correct} judged correct) exported by kernelbench-rl "
        f"{_version()} from `{source}`: {wanted.describe()}.", "",
        "Every kernel was judged by kernelbench-rl's sandboxed evaluator (evaluator "
        f"{EVALUATOR_VERSION}): compiled, run on hidden seeds against the problem's reference, and timed on a GPU "
        "where one judged it. A speedup appears only where it counts (correct, not flagged as a hack, not an "
        "unconfirmed excessive speedup). Holdout problems "
        + ("are included (column `holdout`)." if wanted.include_holdout else "are left out, so the problems "
           "kernelbench-rl evaluates on never appear here.") + "",
        "",
        "| | |", "|---|---|",
        f"| runs | {', '.join(runs) or '-'} |",
        f"| suites | {', '.join(f'{k} {v}' for k, v in sorted(suites.items())) or '-'} |",
        f"| verdicts | {', '.join(f'{k} {v}' for k, v in sorted(verdicts.items())) or '-'} |",
        f"| judged on | {', '.join(hardware) or '-'} |",
        f"| left out | {', '.join(f'{k} {v}' for k, v in sorted(export.left_out.items())) or 'nothing'} |",
        "",
        "## Columns", "",
        "| column | holds |", "|---|---|",
        *[f"| `{name}` | {text} |" for name, text in COLUMNS.items()],
        "",
        "## Use", "",
        "```python", "import datasets", "", f"rows = {load}", "right = rows.filter(lambda r: r['correct'])", "```", "",
        "As a supervised warm start: `kernelbench-rl corpus ingest --source trajectories --path {folder}`, then "
        "`kernelbench-rl corpus verify` (our evaluator re-judges each right kernel) and `kernelbench-rl sft`.", "",
        "Problems: KernelBench (ScalingIntelligence/KernelBench) and kernrl (OpenEnv's kernel environment); each row "
        "names its suite, since the two share ids such as L1/23 for different problems. Set the licence of your "
        "models' outputs before publishing.", "",
    ]
    return "\n".join(lines).replace("{folder}", "this-folder")


def read_trajectories(path: str | Path) -> list[dict[str, Any]]:
    """The rows of an exported folder (either format), as dicts: what `corpus ingest --source trajectories` reads."""
    import datasets

    local = Path(path).expanduser()
    if not local.exists():
        raise UserError(f"The trajectories path {local} does not exist; pass a folder that `kernelbench-rl export` wrote.")
    try:
        if (local / "state.json").exists():
            dataset = datasets.load_from_disk(str(local))
        elif (local / PARQUET_FILE).exists() or local.suffix == ".parquet":
            files = str(local / PARQUET_FILE) if local.is_dir() else str(local)
            dataset = datasets.load_dataset("parquet", data_files=files, split="train")
        else:
            raise UserError(f"{local} is not a folder that `kernelbench-rl export` wrote (no state.json or {PARQUET_FILE}).")
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged folder: say which, not a traceback
        raise UserError(f"Could not read the trajectories in {local} ({type(exc).__name__}).") from None
    missing = [c for c in ("kernel", "correct", "reference", "problem_id", "suite") if c not in dataset.column_names]
    if missing:
        raise UserError(f"{local} lacks the column(s) {', '.join(missing)}; it was not written by `kernelbench-rl export`.")
    return list(dataset)
