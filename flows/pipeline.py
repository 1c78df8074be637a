"""The pipeline flow: ingest -> index -> SFT warm start -> curriculum training -> checkpoint evaluation.

Its defaults are the embedded smoke run (`make run`): CPU, offline, the tiny local policy,
Triton's CPU interpreter, the bundled embedding model over our own solutions, an SFT warm start,
six curriculum steps on four level-1 problems and a checkpoint evaluation. A real run changes parameters
(from the Prefect UI form, or `kernelbench-rl pipeline --config default --train-steps 200 ...`).
Re-running with the same run_id resumes: every stage is idempotent through DuckDB keys.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as the pipeline's process (not imported by a worker or a test)
    # Before Prefect's imports (seconds): a Ctrl-C while the pipeline starts is one line and exit 130, not a traceback.
    from kernelbench_rl.commands.signals import install_startup_stop

    install_startup_stop()

import sys  # noqa: E402 - after the handler above
from pathlib import Path  # noqa: E402

from prefect import flow  # noqa: E402

from deployments.temporary_api import temporary_api
from flows.common import build_config
from flows.curriculum import curriculum
from kernelbench_rl.commands.pipeline import (
    SMOKE_OVERRIDES, check_pipeline_inputs, parse_levels, pipeline_arg_parser, pipeline_overrides,
)
from flows.evaluate import evaluate_checkpoint
from flows.index import build_index
from kernelbench_rl.commands.hints import command
from kernelbench_rl.commands.signals import (
    install_stop_handlers, note_stops, quiet_logs_after_stop, stopped_line,
)
from kernelbench_rl.errors import UserError
from kernelbench_rl.training.checkpoints import check_run_files
from kernelbench_rl import ownership
from kernelbench_rl.store import endings
from flows.ingest import ingest_corpus
from tasks._stops import cancelled_on_stop, is_stop
from tasks.training import publish_training_curves, sft_warm_start


@flow(name="pipeline", log_prints=True)
@cancelled_on_stop  # a stop leaves the flow run Cancelled (its state saved), not Crashed
def pipeline(
    run_id: str = "smoke",
    config: str = "default",
    overrides: list[str] = SMOKE_OVERRIDES,  # noqa: B006
    db_path: str = "runs/kernelbench_rl.duckdb",
    log_dir: str = "runs/logs",
    corpus_sources: list[str] = ["solutions"],  # noqa: B006
    build_rag_index: bool = True,
    train_steps: int = 6,
    levels: list[int] = [1],  # noqa: B006
    num_problems: int = 0,
    eval_samples: int = 2,
    eval_max_problems: int = 4,
    cluster: str | None = None,
    rebuild_index: bool = False,
) -> dict:
    """Ingest the corpus, build the index, warm-start the policy (SFT), train through the curriculum,
    evaluate the final checkpoint.

    An index already beside the database (e.g. one built with `index build --verified-only`) is kept
    unless `rebuild_index` is set.

    Args:
        run_id: Name of the run; the same run id resumes it (one process owns a run at a time).
        config: Packaged config (default, raicl, kevin) or the path of a YAML file.
        overrides: Config overrides as key=value, e.g. policy.backend=tinker, eval.device=cuda, eval.size=real.
        db_path: The DuckDB file every stage writes to.
        log_dir: TensorBoard logs and checkpoints go under this folder, one sub-folder per run.
        corpus_sources: Retrieval corpora to ingest: solutions (offline), kernelbook, sakana.
        build_rag_index: Build (or keep) the retrieval index; off means prompts get the default example.
        train_steps: Training steps of the run in all.
        levels: KernelBench levels to train and evaluate on.
        num_problems: Training problems (the first N of the train split; 0 means all of it).
        eval_samples: Samples per held-out problem in the checkpoint evaluation (at least 1).
        eval_max_problems: Held-out problems evaluated (at least 1; past the holdout set's size: all of it).
        cluster: Where kernels are evaluated: local | dask-local | dask://HOST:PORT (default: eval.cluster).
        rebuild_index: Rebuild the retrieval index even if one is already beside the database.
    """
    note_stops()  # SIGINT/SIGTERM: noted, then Prefect's handling (runs inside save their state and stop)
    db_path = str(Path(db_path).resolve())
    log_dir = str(Path(log_dir).resolve())
    if cluster:  # local | dask-local | dask://HOST:PORT: where training's and evaluation's kernels run
        overrides = [*overrides, f"eval.cluster={cluster}"]
    # Every parameter and config key, before any stage starts (a bad key fails here, not after ingestion), and the
    # problems of the levels asked for.
    selection = check_pipeline_inputs(config, overrides, run_id=run_id, db_path=db_path, log_dir=log_dir,
                                      train_steps=train_steps, levels=levels, num_problems=num_problems,
                                      eval_samples=eval_samples, eval_max_problems=eval_max_problems)
    overrides = selection.overrides
    with ownership.owning(db_path, run_id):  # the whole pipeline owns the run: a second one stops here
        print(selection.line)
        previous = endings.previous_attempt(db_path, run_id)
        if previous:
            print(f"run {run_id}: {previous}")
        _record_start(db_path, run_id)
        try:
            result = _stages(run_id, config, overrides, db_path, log_dir, corpus_sources, build_rag_index,
                             train_steps, levels, num_problems, eval_samples, eval_max_problems, rebuild_index)
        except BaseException as exc:
            endings.pipeline_ended(db_path, run_id, stopped=is_stop(exc), error=exc)
            raise
        endings.pipeline_ended(db_path, run_id)
        return result


def _record_start(db_path: str, run_id: str) -> None:
    """The run's row says `running`, owned by this process, with this flow run and the API it reports to (so a crash
    found later is marked in Prefect too); crashes found earlier whose marks waited for an API of this Prefect home
    are marked now."""
    import prefect.settings
    from prefect.runtime import flow_run

    from kernelbench_rl import prefect_marks

    api_url = prefect.settings.PREFECT_API_URL.value() or None
    home = str(prefect.settings.get_current_settings().home)
    endings.pipeline_started(db_path, run_id, flow_run_id=flow_run.get_id(), prefect_api_url=api_url,
                             prefect_home=home)
    prefect_marks.apply_pending(home, api_url)


def ensure_index(db_path: str, index_dir: str, rebuild: bool) -> dict:
    """The retrieval index the run uses: the one already there (the user's), unless asked to rebuild it."""
    from kernelbench_rl.rag.index import index_damage, index_exists

    if index_exists(index_dir) and not rebuild:
        damage = index_damage(index_dir)
        if damage is None:
            print(f"keeping the retrieval index in {index_dir} (rebuild_index=True, or --rebuild-index, rebuilds it)")
            return {"path": index_dir, "kept": True}
        # Rebuilt as a missing one is (its rows come from the database; nothing is lost).
        print(f"the retrieval index in {index_dir} is damaged ({damage}): rebuilding it", file=sys.stderr, flush=True)
    return {**build_index(db_path=db_path, index_dir=index_dir), "kept": False}


def _stages(run_id: str, config: str, overrides: list[str], db_path: str, log_dir: str, corpus_sources: list[str],
            build_rag_index: bool, train_steps: int, levels: list[int], num_problems: int, eval_samples: int,
            eval_max_problems: int, rebuild_index: bool) -> dict:
    ingested = ingest_corpus(db_path=db_path, sources=corpus_sources, levels=levels)
    index = None
    if build_rag_index:
        index_dir = str(Path(db_path).parent / "rag_index")
        index = ensure_index(db_path, index_dir, rebuild_index)
        overrides = [*overrides, f"rag.index_dir={index_dir}"]  # training and evaluation retrieve from it
    cfg = build_config(config, overrides, run_id=run_id, db_path=db_path, log_dir=log_dir, train_steps=train_steps,
                       levels=levels, num_problems=num_problems)
    # The supervised warm start: RL then starts from its weights (resumes, or is skipped once done).
    warm_start = sft_warm_start(cfg) if cfg.sft.enabled else None
    trained = curriculum(run_id=run_id, config=config, overrides=overrides, db_path=db_path, log_dir=log_dir,
                         train_steps=train_steps, levels=levels, num_problems=num_problems)
    endings.pipeline_started(db_path, run_id)  # training finished; the pipeline runs on (its evaluation)
    table = evaluate_checkpoint(run_id=run_id, checkpoint="latest", compare_base=True, config=config,
                                overrides=overrides, db_path=db_path, log_dir=log_dir,
                                samples_per_problem=eval_samples, split="holdout", max_problems=eval_max_problems,
                                levels=levels)
    summary = publish_training_curves(cfg)
    return {"ingested": ingested, "index": index, "sft": warm_start, "trained": trained, "evaluation": table,
            "summary": summary, "db_path": db_path}


EXAMPLE_SQL = (
    "SELECT step, stage, round(reward_mean, 3) AS reward, format_rate, compile_rate, correct_rate "
    "FROM train_steps WHERE run_id = '{run_id}' ORDER BY step"
)


def main() -> None:
    # SIGINT and SIGTERM alike stop the pipeline: the stage under way saves its state, the run is marked stopped,
    # the flow run Cancelled, one line is said and the exit code is 130; Prefect's logs of the stop are quieted.
    install_stop_handlers()
    quiet_logs_after_stop()
    endings.FOUND_BY = "`kernelbench-rl pipeline`"
    parser = pipeline_arg_parser(description=__doc__)
    args = parser.parse_args()
    code, reason = 1, None
    try:
        _main(args)
        code = 0
    except UserError as exc:  # before Prefect, or a stage's (its logs of it are quieted: one sentence, no traceback)
        print(f"error: {exc}", file=sys.stderr)
        code, reason = int(exc.exit_code), str(exc)
        raise SystemExit(code) from None
    except BaseException as exc:  # noqa: BLE001 - a stop, whichever handler turned the signal into an exception
        if not is_stop(exc):
            raise
        quiet_logs_after_stop()  # handlers Prefect set up after the start
        code, reason = 130, stopped_line(args.run_id, args.db_path)
        print(reason, file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    finally:
        # However it ended, the run's row says so (its exit code and sentence; a row the stages left running is
        # stopped or failed), or the run's lock file does where the database cannot take it.
        endings.settle_at_exit(code, reason)


def _run_flow(args, overrides: list[str]) -> dict:
    # Prefect's temporary API (when no server is configured) in a session of its own: a terminal's Ctrl-C reaches
    # only this process, which reports the flow run's end and then stops the server. Its database full or not
    # writable: one sentence (codes 7, 6), not the HTTP 500s of its API.
    with temporary_api():
        return pipeline(
            run_id=args.run_id, config=args.config, overrides=overrides, db_path=args.db_path, log_dir=args.log_dir,
            train_steps=args.train_steps, levels=parse_levels(args.levels), num_problems=args.num_problems,
            eval_samples=args.eval_samples, eval_max_problems=args.eval_max_problems,
            build_rag_index=not args.no_index, cluster=args.cluster, rebuild_index=args.rebuild_index,
        )


def _main(args) -> None:
    overrides = pipeline_overrides(args)
    # One sentence before Prefect starts, not a flow run's traceback (a level without problems included).
    check_pipeline_inputs(args.config, overrides, run_id=args.run_id, db_path=args.db_path, log_dir=args.log_dir,
                          train_steps=args.train_steps, levels=parse_levels(args.levels),
                          num_problems=args.num_problems, eval_samples=args.eval_samples,
                          eval_max_problems=args.eval_max_problems)
    ownership.acquire(args.db_path, args.run_id)  # held until exit; the flow takes it again (re-entrant)
    # Damaged, unwritable or full: said here in one sentence, before the orchestrator starts.
    check_run_files(args.db_path, Path(args.log_dir), args.run_id)
    result = _run_flow(args, overrides)
    print("\n" + "=" * 72)
    print(result["summary"])
    print("=" * 72)
    print(f"Results are in {result['db_path']} (DuckDB) and {Path(args.log_dir).resolve() / args.run_id} "
          "(TensorBoard: tensorboard --logdir runs/logs).")
    cli = command("kernelbench-rl")  # .venv/bin is often not on PATH
    print("Try:")
    print(f"  {cli} sql \"{EXAMPLE_SQL.format(run_id=args.run_id)}\"")
    print(f"  {cli} sql \"SELECT eval_id, checkpoint, level, metrics_json FROM eval_reports ORDER BY created_at\"")


if __name__ == "__main__":
    main()
