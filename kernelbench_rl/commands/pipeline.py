"""`kernelbench-rl pipeline` and `kernelbench-rl serve`: launchers for the Prefect side.

The library never imports Prefect, so these run the flow modules in a fresh interpreter (exec); the flows
themselves live in flows/ and deployments/.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Annotated, NoReturn, Optional

import typer

from kernelbench_rl.problems.loaders import REPO_ROOT


def pipeline_arg_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The pipeline's command-line options: one definition for `python -m flows.pipeline` and the CLI's help."""
    parser = argparse.ArgumentParser(prog="kernelbench-rl pipeline", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-id", default="smoke", help="Run id; the same id resumes the run.")
    parser.add_argument("--config", default="default", help="Packaged config (default, raicl, kevin) or a YAML path.")
    parser.add_argument("--db-path", default=os.environ.get("KBRL_DB", "runs/kernelbench_rl.duckdb"),
                        help="DuckDB file (default: $KBRL_DB, else runs/kernelbench_rl.duckdb).")
    parser.add_argument("--log-dir", default="runs/logs", help="TensorBoard logs and checkpoints go under here.")
    parser.add_argument("--train-steps", type=int, default=6, help="Training steps of the curriculum stage.")
    parser.add_argument("--levels", default="1", help="Comma-separated levels.")
    parser.add_argument("--num-problems", type=int, default=0,
                        help="The first N training problems of the levels (0: the config's problems.ids, else all of the train split).")
    parser.add_argument("--eval-samples", type=int, default=2, help="Samples per held-out problem.")
    parser.add_argument("--eval-max-problems", type=int, default=4,
                        help="Held-out problems evaluated (at least 1; a number past the holdout set's size takes all of it).")
    parser.add_argument("--no-index", action="store_true",
                        help="Skip the retrieval index (and so retrieval: prompts get the default one-shot example).")
    parser.add_argument("--rebuild-index", action="store_true",
                        help="Rebuild the retrieval index even if one is already beside the database (default: keep it).")
    parser.add_argument("--real", action="store_true",
                        help="Drop the smoke overrides (tiny local policy, CPU evaluator): use the config as written.")
    parser.add_argument("--cluster", default=None,
                        help="Where kernels are evaluated (eval.cluster): local, dask-local or dask://HOST:PORT; "
                             "on a Dask cluster the checkpoint evaluations also run on Prefect's DaskTaskRunner.")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config, e.g. eval.device=cuda")
    return parser


@dataclass(frozen=True)
class ProblemSelection:
    """The problems a pipeline run takes: its overrides with the `problems.ids` chosen, and one line saying which."""

    overrides: list[str]
    line: str


def check_pipeline_inputs(
    config: str, overrides: list[str], *, run_id: str, db_path: str, log_dir: str, train_steps: int,
    levels: list[int], num_problems: int, eval_samples: int, eval_max_problems: int | None,
) -> ProblemSelection:
    """Every parameter and config key of a pipeline run, checked before any stage starts (UserError, one sentence),
    and the problems it takes (`select_problems`)."""
    from kernelbench_rl.commands.options import check_max_problems
    from kernelbench_rl.config import load_config
    from kernelbench_rl.config.schema import refuse_untrainable_sampling
    from kernelbench_rl.errors import UserError

    if not run_id or not run_id.strip():
        raise UserError("The run id is empty; pass one, e.g. --run-id smoke.")
    for name, value, least in (("--train-steps", train_steps, 0), ("--num-problems", num_problems, 0),
                               ("--eval-samples", eval_samples, 1)):
        if value < least:
            raise UserError(f"{name} must be at least {least}, not {value}.")
    check_max_problems(eval_max_problems, "--eval-max-problems")
    if not levels:
        raise UserError("--levels names no level; pass e.g. --levels 1 or --levels 1,2.")
    cfg = load_config(config, [*overrides, f"run_id={run_id}", f"db_path={db_path}", f"log_dir={log_dir}",
                               f"training.steps={train_steps}",
                               f"problems.levels=[{','.join(str(lv) for lv in levels)}]"])
    if train_steps > 0:
        refuse_untrainable_sampling(cfg.sampling.temperature)
    return select_problems(cfg, overrides, levels=levels, num_problems=num_problems)


def _levels_text(levels: list[int]) -> str:
    return ("level " if len(levels) == 1 else "levels ") + ",".join(str(level) for level in levels)


def select_problems(cfg, overrides: list[str], *, levels: list[int], num_problems: int) -> ProblemSelection:
    """The problems of `levels` the run trains on, and one line saying which (the held-out ones are evaluated):

    - `num_problems` > 0: the first N of the levels' train split;
    - the smoke default (`problems.ids` as SMOKE_OVERRIDES names it): for level 1 its four elementwise problems, for
      every other level asked its first SMOKE_PROBLEMS_PER_LEVEL training problems, those with a known solution first
      (the SFT warm start learns from them);
    - `problems.ids` of the user's: those, each of which must be a training problem of the levels;
    - none: the whole train split of the levels.

    A level with no problems in the source, or levels that leave nothing held out for the checkpoint evaluation, are
    refused here (UserError, exit code 2), before Prefect or any stage starts."""
    from kernelbench_rl.compose import load_split
    from kernelbench_rl.errors import UserError
    from kernelbench_rl.problems.loaders import load_problems, load_solution
    from kernelbench_rl.problems.model import resolve_problem

    split = load_split(cfg.problems)
    empty = [level for level in levels if not any(p.level == level for p in split.all)]
    if empty:
        where = f"the problems in {cfg.problems.source_root}" if cfg.problems.source_root else "the bundled problems"
        have = sorted({p.level for p in load_problems(cfg.problems.source_root)})
        raise UserError(f"{_levels_text(empty).capitalize()} has no problems among {where} (levels "
                        f"{', '.join(map(str, have))}); pass --levels with levels that have some, e.g. --levels "
                        f"{have[0] if have else 1}.")
    if not split.holdout:
        count = f"its {len(split.all)} problems are all" if len(split.all) > 1 else "its one problem is"
        raise UserError(f"{_levels_text(levels).capitalize()} leaves no problem held out for the pipeline's checkpoint "
                        f"evaluation ({count} trained on); add a level with more problems, e.g. --levels 1,"
                        + ",".join(map(str, levels)) + ".")
    train_ids = [p.id for p in split.train]
    named = [o for o in overrides if o.startswith("problems.ids=")]
    if num_problems:
        ids = train_ids[:num_problems]
        how = f"{', '.join(ids)} (the first {len(ids)} training problems of {_levels_text(levels)})"
        overrides = [*overrides, f"problems.ids=[{','.join(ids)}]"]
    elif named and named[-1] == SMOKE_IDS_OVERRIDE:
        ids, parts = [], []
        for level in levels:
            if level == 1:
                chosen = list(SMOKE_IDS)
                parts.append(f"{', '.join(chosen)} (level 1's smoke set)")
            else:
                level_ids = [p for p in split.train if p.level == level]
                solved = [p.id for p in level_ids if load_solution(p) is not None]
                chosen = (solved + [p.id for p in level_ids if p.id not in solved])[:SMOKE_PROBLEMS_PER_LEVEL]
                parts.append(f"{', '.join(chosen)} (level {level}'s first {len(chosen)} training problems"
                             f"{' with a known solution' if solved else ''})")
            ids += chosen
        how = "; ".join(parts)
        overrides = [o for o in overrides if o != SMOKE_IDS_OVERRIDE] + [f"problems.ids=[{','.join(ids)}]"]
    elif cfg.problems.ids:
        ids, held = [], []
        for pid in cfg.problems.ids:
            problem = resolve_problem(pid, split.all)
            if problem is None:
                raise UserError(f"Problem {pid} (problems.ids) is not among the problems of {_levels_text(levels)}; "
                                "name problems of those levels, or pass --levels with its level (`kernelbench-rl "
                                "problems list` shows the ids).")
            (ids if problem.id in train_ids else held).append(problem.id)
        if not ids:
            raise UserError(f"Every problem problems.ids names ({', '.join(held)}) is held out for the checkpoint "
                            "evaluation, so none can be trained on; name training problems of "
                            f"{_levels_text(levels)} (`kernelbench-rl problems list` shows the ids).")
        how = f"{', '.join(ids)} (problems.ids" + (f"; {', '.join(held)} held out, not trained on)" if held else ")")
    else:
        how = f"all {len(train_ids)} training problems of {_levels_text(levels)}"
    line = (f"problems ({_levels_text(levels)}): training on {how}; {len(split.holdout)} held out for the "
            "checkpoint evaluation.")
    return ProblemSelection(list(overrides), line)


def parse_levels(text: str) -> list[int]:
    from kernelbench_rl.errors import UserError

    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--levels must be comma-separated level numbers such as 1,2, not {text!r}.") from None


PIPELINE_DESCRIPTION = (
    "Run the pipeline flow: ingest -> index -> SFT warm start -> curriculum training -> checkpoint evaluation. With no arguments "
    "it runs the embedded defaults (CPU, offline, the tiny local policy, Triton's CPU interpreter, Prefect's "
    "ephemeral API, runs/kernelbench_rl.duckdb); the same --run-id resumes a run."
)


# The embedded default, sized to learn visibly on 2 CPU cores: four elementwise training problems whose
# kernels fit in 400 tokens, an SFT warm start on their verified kernels (loss ~7 -> ~0.1 per token),
# then RL whose samples are judged by the evaluator, with a curriculum quick enough to promote in a few steps.
SMOKE_IDS = ("L1/19", "L1/20", "L1/21", "L1/25")  # level 1's smoke problems; other levels: select_problems
SMOKE_IDS_OVERRIDE = f"problems.ids=[{','.join(SMOKE_IDS)}]"
SMOKE_PROBLEMS_PER_LEVEL = 4
SMOKE_OVERRIDES = [
    "policy.backend=local", "policy.base_model=local:tiny", SMOKE_IDS_OVERRIDE,
    "sampling.group_size=4", "sampling.max_tokens=400", "sampling.temperature=0.3",
    "sft.steps=150", "sft.batch_size=2", "sft.max_examples=4", "sft.learning_rate=0.005", "sft.checkpoint_every=25",
    "training.batch_problems=4", "training.learning_rate=0.0003", "training.checkpoint_every=1",
    "curriculum.threshold=0.4", "curriculum.window=1",  # a step after each promotion is the old stage's (async)
    # Adam as torch's default for the tiny model at these learning rates: with the cookbook's beta2 0.95 and eps
    # 1e-8 (the defaults, for real models at 1e-5) its format rate fell from 0.19 to 0 in five steps; with these
    # it rises from 0.81 to 1.0 and reaches the correctness stage.
    "training.adam_beta2=0.999", "training.adam_eps=1e-12",
    "eval.device=cpu", "eval.size=small", "rag.enabled=true", "rag.k=1",
]


def pipeline_overrides(args: argparse.Namespace) -> list[str]:
    """The config overrides a command line means: the smoke ones unless --real, then the user's."""
    overrides = ([] if args.real else list(SMOKE_OVERRIDES)) + list(args.overrides)
    if args.no_index:
        overrides.append("rag.enabled=false")  # no index, so no retrieved examples in the prompts
    return overrides


# Modules that take SIGINT back in their first lines (signals.install_startup_stop): launched with SIGINT ignored
# across the exec and the new interpreter's start, where a Ctrl-C would otherwise be a traceback.
TAKES_SIGINT_BACK = frozenset({"flows.pipeline"})


def _launch(module: str, args: list[str]) -> NoReturn:
    """Become `python -m module args`: the flow module takes this process's place (exec).

    So the pid a supervisor, `make` or a terminal holds is the process that handles SIGINT and SIGTERM and
    stops what it started; a launcher in between would have to guess whether a signal already reached it.
    """
    env = dict(os.environ)
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    from kernelbench_rl.prefect_home import project_prefect_env

    env.update(project_prefect_env(env))  # the home `serve` shows (its API when it is up), not ~/.prefect
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    sys.stdout.flush()
    sys.stderr.flush()
    if module in TAKES_SIGINT_BACK:
        import signal

        from kernelbench_rl.commands.signals import SIGINT_HELD_ENV

        if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            env[SIGINT_HELD_ENV] = "1"
    os.execve(sys.executable, [sys.executable, "-m", module, *args], env)


def register(app: typer.Typer) -> None:
    def pipeline(args: list[str]) -> None:
        # Check every parameter and config key here, in a second, before Prefect and the stages start.
        parsed = pipeline_arg_parser(description=PIPELINE_DESCRIPTION).parse_args(args)
        check_pipeline_inputs(
            parsed.config, pipeline_overrides(parsed), run_id=parsed.run_id, db_path=parsed.db_path,
            log_dir=parsed.log_dir, train_steps=parsed.train_steps, levels=parse_levels(parsed.levels),
            num_problems=parsed.num_problems, eval_samples=parsed.eval_samples,
            eval_max_problems=parsed.eval_max_problems)
        from kernelbench_rl import ownership

        ownership.check_free(parsed.db_path, parsed.run_id)  # a second `make run` stops here, before Prefect
        _launch("flows.pipeline", args)

    # The parser's options as a typer command: one definition (`python -m flows.pipeline` reads the same), and
    # the same help as every other command.
    from kernelbench_rl.commands.options import argparse_as_typer

    app.command("pipeline", help=PIPELINE_DESCRIPTION)(argparse_as_typer(pipeline_arg_parser(), pipeline))

    @app.command("serve")
    def serve(
        port: Annotated[int, typer.Option(help="Port of the Prefect server and UI.")] = 4200,
        no_worker: Annotated[bool, typer.Option("--no-worker", help="Do not start a worker.")] = False,
        prefect_home: Annotated[Optional[str], typer.Option(
            "--prefect-home", help="PREFECT_HOME of the server (default: $PREFECT_HOME, else runs/prefect here: where "
            "`kernelbench-rl pipeline` records its runs).", show_default=False)] = None,
    ) -> None:
        """Start a local Prefect server (UI on localhost), deploy prefect.yaml and start a process worker.

        Ctrl-C, or SIGINT or SIGTERM to its pid, stops the worker and the server it started; if the port is already served,
        it says what runs there and exits as busy (3, below).
        """
        args = ["--port", str(port)] + (["--no-worker"] if no_worker else [])
        args += ["--prefect-home", prefect_home] if prefect_home else []
        _launch("deployments.serve", args)
