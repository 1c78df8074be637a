"""Mutation testing (mutmut) over the code whose mistakes cost most quietly: the verdict's comparison, the
reward, GRPO's credit assignment, what a resumed run removes, and what feeds them from the training and the store:
the curriculum, eval-model's reuse of a served model's answers, the checkpoint a resume or evaluation falls back to,
the migrations (their runner, and the SQL of their back-fills) and what an export publishes.

mutmut (configured in pyproject.toml, [tool.mutmut]) copies the package into ./mutants/, makes one small change
at a time in the functions below (an operator, a constant, a condition, an argument dropped) and runs the
focused tests that reach that function; a change no test notices "survives". The run is bounded to these
functions and their focused test files, so it fits a shared 2-core machine (`make mutation`, tens of minutes).

Each module runs as its own `mutmut run` (mutmut runs the mutants with the cheapest tests first, so in one run for
all, the verdict's comparison, reached by the most tests, came last), each with an optional time budget
(--module-budget-s: past it the module's run is interrupted and its unreached mutants are counted as not checked).
mutmut forks every mutant's test run from a process that has already run torch: with torch's OpenMP thread pool
started, a forked child's first parallel op waits forever, and every mutant that no early test killed was reported as a
time-out after mutmut's wall limit. The runs get one OpenMP thread (OMP_NUM_THREADS=1), so no pool exists to inherit.
polars' thread pool (rayon) hangs a forked child the same way, and it has no such setting: a child's first polars call
(`Store.query`) after the parent made one waits forever for workers that were not forked, so the selection leaves out
the tests that read through polars (pyproject.toml's -k).
Starts afresh (mutants/ removed) unless --resume.

mutmut mutates Python functions only; a migration's back-fill is SQL text in store/schema.py's MIGRATIONS. The
modules of SQL_TARGETS are mutated here instead (`sql_mutants`: a comparison, AND/OR, IS [NOT] NULL, [NOT] IN, a
number, a string literal, one condition of a WHERE dropped, the statement left out), each mutant one pytest process
over the module's test files with that statement replaced in the list.

Prints a table (score per module: (killed + timed out) / (killed + timed out + survived)), each survivor with its
diff, and writes JSON with --out. Exit 0 whatever the score: survivors are read and answered (a test, or a reason),
not gated on.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import fnmatch
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above

REPO = harness.REPO

# Module label -> mutmut's names of the functions mutated (x_<function>, xǁ<Class>ǁ<method>).
TARGETS: dict[str, list[str]] = {
    "verdict (evaluation/verdict/checks.py)": [
        "kernelbench_rl.evaluation.verdict.checks.x_compare_outputs__mutmut_*",
        "kernelbench_rl.evaluation.verdict.checks.x__tie_tolerant_fault__mutmut_*",
        "kernelbench_rl.evaluation.verdict.checks.x_declared_index_outputs__mutmut_*",
        "kernelbench_rl.evaluation.verdict.checks.x_inputs_unmodified__mutmut_*",
    ],
    "reward (rewards/shaping.py, returns.py)": [
        "kernelbench_rl.rewards.shaping.x_score__mutmut_*",
        "kernelbench_rl.rewards.shaping.x_bounded_log_speedup__mutmut_*",
        "kernelbench_rl.rewards.shaping.x_is_hack__mutmut_*",
        "kernelbench_rl.rewards.returns.*",
    ],
    "GRPO advantages (training/grpo.py)": [
        "kernelbench_rl.training.grpo.x_score_group__mutmut_*",
        "kernelbench_rl.training.grpo.x_build_datums__mutmut_*",
    ],
    "resume (store/db.py discard_steps_after)": [
        "kernelbench_rl.store.db.x\u01c1Store\u01c1discard_steps_after__mutmut_*",
    ],
    # The training and store half of what the reward is fed: the curriculum's moves, a served model's answers
    # reused only for the very same request, the checkpoint a resume or evaluation falls back to, the migrations'
    # runner and what an export publishes.
    "curriculum (training/curriculum.py)": [
        "kernelbench_rl.training.curriculum.*",
    ],
    "answers (training/model_answers.py: eval-model's reuse)": [
        "kernelbench_rl.training.model_answers.*",
    ],
    "checkpoints (training/checkpoints.py, store/checkpoints.py: fallback)": [
        "kernelbench_rl.training.checkpoints.x_is_remote__mutmut_*",
        "kernelbench_rl.training.checkpoints.x_stored_path__mutmut_*",
        "kernelbench_rl.training.checkpoints.x_resolved_path__mutmut_*",
        "kernelbench_rl.training.checkpoints.x_damage__mutmut_*",
        "kernelbench_rl.training.checkpoints.x__sha256__mutmut_*",
        "kernelbench_rl.training.checkpoints.x_seal__mutmut_*",
        "kernelbench_rl.training.checkpoints.x_checksum_damage__mutmut_*",
        "kernelbench_rl.training.checkpoints.x_newest_intact__mutmut_*",
        "kernelbench_rl.training.checkpoints.x__write_failed__mutmut_*",
        "kernelbench_rl.training.checkpoints.x_check_run_files__mutmut_*",
        "kernelbench_rl.store.checkpoints.*",
    ],
    "migrations (store/db.py: Store's migration runner)": [
        "kernelbench_rl.store.db.x\u01c1Store\u01c1__init____mutmut_*",
        "kernelbench_rl.store.db.x\u01c1Store\u01c1_migrate__mutmut_*",
        "kernelbench_rl.store.db.x\u01c1Store\u01c1migrate__mutmut_*",
        "kernelbench_rl.store.db.x\u01c1Store\u01c1schema_version__mutmut_*",
    ],
    "export (trajectories.py, commands/export.py)": [
        "kernelbench_rl.trajectories.x_trajectory_rows__mutmut_*",
        "kernelbench_rl.trajectories.x__row__mutmut_*",
        "kernelbench_rl.trajectories.x__named__mutmut_*",
        "kernelbench_rl.trajectories.x__json__mutmut_*",
        "kernelbench_rl.trajectories.x__problem_of__mutmut_*",
        "kernelbench_rl.trajectories.x\u01c1_Sources\u01c1for_run__mutmut_*",
        "kernelbench_rl.commands.export.x_export_command__mutmut_*",
        "kernelbench_rl.rewards.shaping.x_counts_as_correct__mutmut_*",
    ],
    # The evaluation half: the sensitivity seeds' perturbation (which inputs it changes, how, and the audit that picks
    # it; the second shape is not in), the CPU's account of who computed the outputs and the flags it sets, the sweep of what a candidate left
    # running, and the clock, speedup, work-share and floor decisions of a timed result.
    "sensitivity (verdict/sensitivity.py, sandbox/perturbation.py)": [
        "kernelbench_rl.evaluation.sandbox.perturbation.x_perturbable__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.perturbation.x_perturb_inputs__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.perturbation.x__finite_range__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.perturbation.x__symmetric__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.perturbation.x__sorted_last__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.perturbation.x__sites__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.perturbation.x_site_length__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.perturbation.x__perturb__mutmut_*",
        "kernelbench_rl.evaluation.verdict.sensitivity.x_search_runs__mutmut_*",
        "kernelbench_rl.evaluation.verdict.sensitivity.x_audit_budget__mutmut_*",
        "kernelbench_rl.evaluation.verdict.sensitivity.x__top_level__mutmut_*",
        "kernelbench_rl.evaluation.verdict.sensitivity.x__finite__mutmut_*",
        "kernelbench_rl.evaluation.verdict.sensitivity.x__moved__mutmut_*",
        "kernelbench_rl.evaluation.verdict.sensitivity.x_audit__mutmut_*",
        "kernelbench_rl.evaluation.verdict.sensitivity.x__calibrate__mutmut_*",
        "kernelbench_rl.evaluation.verdict.sensitivity.x\u01c1_Clock\u01c1__init____mutmut_*",
        "kernelbench_rl.evaluation.verdict.sensitivity.x\u01c1_Clock\u01c1extend_to__mutmut_*",
        "kernelbench_rl.evaluation.verdict.sensitivity.x\u01c1_Clock\u01c1can_run__mutmut_*",
        "kernelbench_rl.evaluation.verdict.sensitivity.x\u01c1_Clock\u01c1run__mutmut_*",
    ],
    "compute account (sandbox/compute_account.py)": [
        "kernelbench_rl.evaluation.sandbox.compute_account.x_judge__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.compute_account.x_flag_result__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.compute_account.x_still_active__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.compute_account.x\u01c1Account\u01c1__torch_dispatch____mutmut_*",
        "kernelbench_rl.evaluation.sandbox.compute_account.x\u01c1Account\u01c1kernel_memory__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.compute_account.x\u01c1Account\u01c1note__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.compute_account.x\u01c1Account\u01c1outputs_done__mutmut_*",
        "kernelbench_rl.evaluation.sandbox.compute_account.x\u01c1Account\u01c1report__mutmut_*",
    ],
    "leftover sweep (worker/leftovers.py)": [
        "kernelbench_rl.evaluation.worker.leftovers.x_adopt_orphans__mutmut_*",
        "kernelbench_rl.evaluation.worker.leftovers.x__table__mutmut_*",
        "kernelbench_rl.evaluation.worker.leftovers.x_sandboxed__mutmut_*",
        "kernelbench_rl.evaluation.worker.leftovers.x__below__mutmut_*",
        "kernelbench_rl.evaluation.worker.leftovers.x__own__mutmut_*",
        "kernelbench_rl.evaluation.worker.leftovers.x_sweep__mutmut_*",
        "kernelbench_rl.evaluation.worker.leftovers.x__state__mutmut_*",
        "kernelbench_rl.evaluation.worker.leftovers.x__wait_dead__mutmut_*",
        "kernelbench_rl.evaluation.worker.leftovers.x_reap__mutmut_*",
    ],
    "timing decisions (timing/decisions.py, floor.py)": [
        "kernelbench_rl.evaluation.timing.decisions.x_host_clock_check__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x_host_retiming_confirms__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x_judged_share__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x_share_flags__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x_profile_agrees_with_timing__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x_clock_verdict__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x_speedup_of__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x_timed_sides__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x_excessive_speedup_flags__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x_profiled_gpu_ms__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x_profile_verdict__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x\u01c1BlockWall\u01c1add__mutmut_*",
        "kernelbench_rl.evaluation.timing.floor.x_sol_fraction__mutmut_*",
        "kernelbench_rl.evaluation.timing.floor.x_speed_of_light__mutmut_*",
        "kernelbench_rl.evaluation.timing.floor.x_floor_verdict__mutmut_*",
    ],
    "own launches (timing/decisions.py: launches_verdict, LaunchTally)": [
        "kernelbench_rl.evaluation.timing.decisions.x_launches_verdict__mutmut_*",
        "kernelbench_rl.evaluation.timing.decisions.x\u01c1LaunchTally\u01c1add__mutmut_*",
    ],
}
COUNTED = ("killed", "survived", "timeout")  # the score's denominator; "no tests" is listed apart

# Module label -> (the migrations, by version, whose row-changing statements are mutated; the test files run against
# each mutant). Only UPDATE, INSERT and DELETE statements are mutated: the back-fills, where a wrong condition
# quietly gives old rows a wrong value; a wrong CREATE or ALTER fails every test that writes.
SQL_TARGETS: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
    "migrations SQL (store/schema.py: migration 14's back-fills)": (
        (14,), ("tests/test_migration_levels.py", "tests/test_problem_suites.py")),
}
SQL_PYTEST_ARGS = ("-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "not heavy")
SQL_RESULTS = "sql_mutants.json"  # under mutants/: each SQL mutant's verdict and diff, for --no-run and --resume


def module_of(name: str) -> str | None:
    """The mutmut module label a mutant's name belongs to."""
    return next((label for label, patterns in TARGETS.items() if any(fnmatch.fnmatchcase(name, p) for p in patterns)),
                None)


# One thread for torch's OpenMP and MKL pools in mutmut and its forked test runs (see the module's docstring).
MUTMUT_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _mutmut_exe() -> str:
    return shutil.which("mutmut", path=str(Path(sys.executable).parent)) or "mutmut"


def mutmut(*args: str, timeout_s: float | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([_mutmut_exe(), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
                          env=MUTMUT_ENV)


def run_module(patterns: list[str], max_children: int | None, budget_s: float | None) -> tuple[int, bool, str]:
    """`mutmut run` over one module's functions: (exit code, stopped at the budget, output's tail). Past the budget
    mutmut gets SIGINT, which keeps the verdicts it has (they are read back from mutants/)."""
    extra = ["--max-children", str(max_children)] if max_children else []
    proc = subprocess.Popen([_mutmut_exe(), "run", *extra, *patterns], cwd=REPO, env=MUTMUT_ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=budget_s)
        return proc.returncode, False, out[-3000:]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        return 0, True, out[-3000:]


def results() -> dict[str, str]:
    """Every mutant's status as `mutmut results --all true` prints it (name: status)."""
    proc = mutmut("results", "--all", "true")
    found = {}
    for line in proc.stdout.splitlines():
        match = re.match(r"\s*(\S+): (.+)$", line)
        if match:
            found[match.group(1)] = match.group(2).strip()
    return found


# ---------------------------------------------------------------- the migrations' SQL

_SQL_TOKEN = re.compile(
    r"(?P<string>'(?:[^']|'')*')|(?P<null>\bIS\s+(?:NOT\s+)?NULL\b)|(?P<notin>\bNOT\s+IN\b)"
    r"|(?P<word>[A-Za-z_][\w.$]*)|(?P<number>\d+)|(?P<op><>|!=|>=|<=|[=<>])|(?P<open>\()|(?P<close>\))|(?P<other>\S)",
    re.IGNORECASE)
_FLIPPED = {">": ">=", ">=": ">", "<": "<=", "<=": "<", "<>": "=", "!=": "=", "=": "<>"}


def _sql_tokens(sql: str) -> list[tuple[str, str, int, int]]:
    """(kind, text, start, end) of each token; a word's kind is its upper-cased keyword for AND, OR, IN, WHERE, SET."""
    tokens = []
    for match in _SQL_TOKEN.finditer(sql):
        kind, text = match.lastgroup or "other", match.group()
        if kind == "word" and text.upper() in ("AND", "OR", "IN", "WHERE", "SET"):
            kind = text.upper()
        tokens.append((kind, text, match.start(), match.end()))
    return tokens


def sql_mutants(sql: str) -> list[str]:
    """Each one-change variant of a statement: a comparison flipped (> and >=, < and <=, = and <>), AND and OR
    swapped, IS NULL and IS NOT NULL, IN and NOT IN, a number one up and one down, a string literal changed
    ('x' to 'XXxXX'), one condition of its WHERE dropped."""
    tokens = _sql_tokens(sql)
    changes: list[tuple[int, int, str]] = []  # (start, end, replacement)
    for i, (kind, text, start, end) in enumerate(tokens):
        before = [t[0] for t in tokens[max(0, i - 2):i]]
        if kind == "op" and not (text == "=" and before[-2:-1] in (["SET"], ["other"])):  # not `SET col =`, `, col =`
            changes.append((start, end, _FLIPPED[text]))
        elif kind in ("AND", "OR"):
            changes.append((start, end, "OR" if kind == "AND" else "AND"))
        elif kind == "null":
            changes.append((start, end, "IS NULL" if "NOT" in text.upper() else "IS NOT NULL"))
        elif kind in ("IN", "notin"):
            changes.append((start, end, "NOT IN" if kind == "IN" else "IN"))
        elif kind == "number":
            changes += [(start, end, str(int(text) + 1))] + ([(start, end, str(int(text) - 1))] if int(text) else [])
        elif kind == "string":
            changes.append((start, end, f"'XX{text[1:-1]}XX'"))
    where = next((i for i, t in enumerate(tokens) if t[0] == "WHERE"), None)
    if where is not None:
        conditions, depth, first = [], 0, where + 1  # the WHERE's conditions: split at AND outside parentheses
        for i in range(where + 1, len(tokens)):
            depth += tokens[i][0] == "open"
            depth -= tokens[i][0] == "close"
            if tokens[i][0] == "AND" and depth == 0:
                conditions.append((first, i - 1, i))
                first = i + 1
        conditions.append((first, len(tokens) - 1, None))
        for n, (lo, hi, and_at) in enumerate(conditions):
            if len(conditions) == 1:  # the only condition: the WHERE goes with it
                changes.append((tokens[where][2], tokens[hi][3], ""))
            elif and_at is not None:  # this condition and the AND after it
                changes.append((tokens[lo][2], tokens[and_at + 1][2], ""))
            else:  # the last condition and the AND before it
                changes.append((tokens[conditions[n - 1][2]][2], tokens[hi][3], ""))
    return [sql[:start] + new + sql[end:] for start, end, new in changes]


def _sql_diff(old: str, new: str | None) -> list[str]:
    """The changed lines of a statement (whitespace runs read as one space), as `-`/`+` lines."""
    old_lines = [" ".join(line.split()) for line in old.strip().splitlines()]
    if new is None:
        return ["- " + " ".join(old_lines), "+ (statement left out)"]
    new_lines = [" ".join(line.split()) for line in new.strip().splitlines()]
    return [line[0] + " " + line[1:] for line in difflib.unified_diff(old_lines, new_lines, lineterm="", n=0)
            if line[:1] in "-+" and not line.startswith(("---", "+++"))]


# A pytest process with one statement of one migration replaced (or left out) in store/schema.py's MIGRATIONS: the
# list is changed in place, so the Store and the tests, which import it, see the change.
_SQL_BOOTSTRAP = """
import json, sys
from kernelbench_rl.store import schema
change = json.loads(sys.argv[1])
if change is not None:
    version, index, statement = change
    for at, (number, description, statements) in enumerate(schema.MIGRATIONS):
        if number == version:
            statements = list(statements)
            if statement is None:
                del statements[index]
            else:
                statements[index] = statement
            schema.MIGRATIONS[at] = (number, description, statements)
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


def _sql_test_run(change: list | None, tests: tuple[str, ...], timeout_s: float | None) -> tuple[str, float]:
    """(killed | survived | timeout | exit code N, seconds) of the tests with `change` ([version, index, statement
    or None]) made."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", _SQL_BOOTSTRAP, json.dumps(change), *tests, *SQL_PYTEST_ARGS],
                              cwd=REPO, env=MUTMUT_ENV, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0
    status = {0: "survived", 1: "killed"}.get(proc.returncode, f"exit code {proc.returncode}")
    if change is None and proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
    return status, time.monotonic() - t0


def run_sql_module(label: str, max_children: int | None, budget_s: float | None,
                   known: dict[str, dict]) -> tuple[dict[str, dict], bool]:
    """Every SQL mutant of the module's migrations, judged by its tests: ({name: {status, diff}}, stopped at the
    budget). Mutants in `known` (a resumed run's) are not run again."""
    from kernelbench_rl.store.schema import MIGRATIONS

    versions, tests = SQL_TARGETS[label]
    status, base_s = _sql_test_run(None, tests, None)
    if status != "survived":
        raise harness.BadInput(f"{label}: its tests fail without a mutant ({status}); fix them first")
    jobs = []
    for version, _, statements in MIGRATIONS:
        if version not in versions:
            continue
        for index, statement in enumerate(statements):
            if not re.match(r"\s*(UPDATE|INSERT|DELETE)\b", statement, re.IGNORECASE):
                continue
            name = f"store.schema.MIGRATIONS.v{version}.statement_{index}__sql_mutant_"
            variants = [*sql_mutants(statement), None]
            jobs += [(f"{name}{n}", [version, index, variant], _sql_diff(statement, variant))
                     for n, variant in enumerate(variants, start=1)]
    found = {name: known[name] for name, _, _ in jobs if name in known}
    deadline = None if budget_s is None else time.monotonic() + budget_s
    stopped = False
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, max_children or 1)) as pool:
        def judge(job):
            name, change, diff = job
            if deadline is not None and time.monotonic() > deadline:
                return name, {"status": "not checked", "diff": diff}
            verdict, _ = _sql_test_run(change, tests, max(60.0, 10 * base_s))
            return name, {"status": verdict, "diff": diff}
        for name, verdict in pool.map(judge, [job for job in jobs if job[0] not in found]):
            found[name] = verdict
            stopped = stopped or verdict["status"] == "not checked"
    return found, stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--only", help="the start of module labels (verdict, reward, GRPO, resume, curriculum, answers, "
                        "checkpoints, migrations, export, sensitivity, compute, leftover, timing; 'migrations SQL' for the back-fills "
                        "alone)")
    parser.add_argument("--no-run", action="store_true", help="report the last run's results without running")
    parser.add_argument("--resume", action="store_true",
                        help="keep mutants/ (mutmut's copy, its test map and timings) instead of starting afresh")
    parser.add_argument("--module-budget-s", type=float, default=None,
                        help="stop each module's run after this many seconds (default: no bound)")
    parser.add_argument("--max-children", type=int, default=None,
                        help="mutants tested at once (default: mutmut's, the CPU count)")
    return harness.run_main(run, parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    every = [*TARGETS, *SQL_TARGETS]
    labels = [label for label in every if not args.only or label.lower().startswith(args.only.lower())]
    if not labels:
        raise harness.BadInput(f"--only {args.only!r} names none of: {', '.join(every)}")
    if (any(label in TARGETS for label in labels)
            and shutil.which("mutmut", path=str(Path(sys.executable).parent)) is None):
        raise harness.BadInput("mutmut is not installed in this environment: pip install -e '.[mutation]'")
    started = time.monotonic()
    wall_by_label: dict[str, float] = {}
    stopped: list[str] = []
    sql_file = REPO / "mutants" / SQL_RESULTS
    sql_found: dict[str, dict] = json.loads(sql_file.read_text()) if sql_file.exists() else {}
    if not args.no_run:
        if not args.resume:
            shutil.rmtree(REPO / "mutants", ignore_errors=True)
            sql_found = {}
        for label in labels:
            t0 = time.monotonic()
            if label in SQL_TARGETS:
                found, at_budget = run_sql_module(label, args.max_children, args.module_budget_s, sql_found)
                sql_found.update(found)
                sql_file.parent.mkdir(exist_ok=True)
                sql_file.write_text(json.dumps(sql_found, indent=1, sort_keys=True))
            else:
                code, at_budget, tail = run_module(TARGETS[label], args.max_children, args.module_budget_s)
                if code != 0:
                    print(tail, file=sys.stderr)
                    print(f"mutmut run failed for {label} (its output above)", file=sys.stderr)
                    return 1
            wall_by_label[label] = round(time.monotonic() - t0)
            if at_budget:
                stopped.append(label)
                print(f"{label}: stopped at its budget of {args.module_budget_s:g} s", file=sys.stderr)
    wall_s = time.monotonic() - started
    statuses = {name: status for name, status in results().items() if module_of(name) in labels} \
        if any(label in TARGETS for label in labels) else {}
    sql_of = {label: {name: found for name, found in sql_found.items()
                      if any(name.startswith(f"store.schema.MIGRATIONS.v{v}.") for v in SQL_TARGETS[label][0])}
              for label in labels if label in SQL_TARGETS}
    table = []
    for label in labels:
        if label in SQL_TARGETS:
            mine = {name: found["status"] for name, found in sql_of[label].items()}
        else:
            mine = {n: s for n, s in statuses.items() if module_of(n) == label}
        counts = {status: sum(s == status for s in mine.values()) for status in sorted(set(mine.values()))}
        judged = sum(counts.get(s, 0) for s in COUNTED)
        killed = counts.get("killed", 0) + counts.get("timeout", 0)
        table.append({"module": label, "mutants": len(mine), **counts, "wall_s": wall_by_label.get(label),
                      "stopped_at_budget": label in stopped,
                      "score": round(killed / judged, 3) if judged else None,
                      "survivors": sorted(n for n, s in mine.items() if s == "survived"),
                      "no_tests": sorted(n for n, s in mine.items() if s == "no tests")})
    harness.print_table(["module", "mutants", "killed", "timeout", "survived", "no tests", "score"], [
        [row["module"], row["mutants"], *(row.get(k, 0) for k in ("killed", "timeout", "survived", "no tests")),
         None if row["score"] is None else f"{row['score']:.1%}"] for row in table])
    for row in table:
        for name in row["survivors"] + row["no_tests"]:
            if row["module"] in SQL_TARGETS:
                diff = sql_of[row["module"]][name]["diff"]
            else:
                shown = mutmut("show", name).stdout
                diff = [line for line in shown.splitlines()
                        if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))]
            print(f"\n{'survived' if name in row['survivors'] else 'no tests'}: {name}\n  " + "\n  ".join(diff))
    harness.write_json(args.out, {"date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
                                  "cpus": len(os.sched_getaffinity(0)), "wall_s": round(wall_s), "modules": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
