"""The pipeline flow: ingest -> index -> curriculum training -> checkpoint evaluation.

Its defaults are the embedded smoke run (`make run`): CPU, offline, the tiny local policy,
Triton's CPU interpreter, the bundled embedding model over our own solutions, two curriculum
steps on four level-1 problems and a checkpoint evaluation. A real run changes parameters
(from the Prefect UI form, or `kernelbench-rl pipeline --config default --train-steps 200 ...`).
Re-running with the same run_id resumes: every stage is idempotent through DuckDB keys.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from prefect import flow

from flows.curriculum import curriculum
from flows.evaluate import evaluate_checkpoint
from flows.index import build_index
from flows.ingest import ingest_corpus

SMOKE_OVERRIDES = [
    "policy.backend=local", "policy.base_model=local:tiny", "sampling.group_size=4", "sampling.max_tokens=96",
    "training.batch_problems=4", "training.learning_rate=0.001", "training.checkpoint_every=1",
    "eval.device=cpu", "eval.size=small", "rag.enabled=true", "rag.k=1",
]


@flow(name="pipeline", log_prints=True)
def pipeline(
    run_id: str = "smoke",
    config: str = "default",
    overrides: list[str] = SMOKE_OVERRIDES,  # noqa: B006
    db_path: str = "runs/kernelbench_rl.duckdb",
    log_dir: str = "runs/logs",
    corpus_sources: list[str] = ["solutions"],  # noqa: B006
    build_rag_index: bool = True,
    train_steps: int = 2,
    levels: list[int] = [1],  # noqa: B006
    num_problems: int = 4,
    eval_samples: int = 2,
    eval_max_problems: int = 4,
) -> dict:
    """Ingest the corpus, build the index, train through the curriculum, evaluate the final checkpoint."""
    db_path = str(Path(db_path).resolve())
    log_dir = str(Path(log_dir).resolve())
    ingested = ingest_corpus(db_path=db_path, sources=corpus_sources, levels=levels)
    index = None
    if build_rag_index:
        index_dir = str(Path(db_path).parent / "rag_index")
        os.environ["KBRL_RAG_INDEX"] = index_dir  # the retriever of the training run reads it
        index = build_index(db_path=db_path, index_dir=index_dir)
    trained = curriculum(run_id=run_id, config=config, overrides=overrides, db_path=db_path, log_dir=log_dir,
                         train_steps=train_steps, levels=levels, num_problems=num_problems)
    table = evaluate_checkpoint(run_id=run_id, checkpoint="latest", compare_base=True, config=config,
                                overrides=overrides, db_path=db_path, log_dir=log_dir,
                                samples_per_problem=eval_samples, split="holdout", max_problems=eval_max_problems,
                                levels=levels)
    return {"ingested": ingested, "index": index, "trained": trained, "evaluation": table, "db_path": db_path}


EXAMPLE_SQL = (
    "SELECT step, stage, round(reward_mean, 3) AS reward, format_rate, compile_rate, correct_rate "
    "FROM train_steps WHERE run_id = '{run_id}' ORDER BY step"
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="kernelbench-rl pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-id", default="smoke", help="Run id; the same id resumes the run.")
    parser.add_argument("--config", default="default", help="Packaged config (default, raicl, kevin) or a YAML path.")
    parser.add_argument("--db-path", default=os.environ.get("KBRL_DB", "runs/kernelbench_rl.duckdb"))
    parser.add_argument("--log-dir", default="runs/logs")
    parser.add_argument("--train-steps", type=int, default=2)
    parser.add_argument("--levels", default="1", help="Comma-separated levels.")
    parser.add_argument("--num-problems", type=int, default=4, help="Training problems (0: all of the train split).")
    parser.add_argument("--eval-samples", type=int, default=2, help="Samples per held-out problem.")
    parser.add_argument("--eval-max-problems", type=int, default=4)
    parser.add_argument("--no-index", action="store_true",
                        help="Skip the retrieval index (and so retrieval: prompts get the default one-shot example).")
    parser.add_argument("--real", action="store_true",
                        help="Drop the smoke overrides (tiny local policy, CPU evaluator): use the config as written.")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config, e.g. eval.device=cuda")
    args = parser.parse_args()
    overrides = ([] if args.real else list(SMOKE_OVERRIDES)) + args.overrides
    if args.no_index:
        overrides.append("rag.enabled=false")  # no index, so no retrieved examples in the prompts
    result = pipeline(
        run_id=args.run_id, config=args.config, overrides=overrides, db_path=args.db_path, log_dir=args.log_dir,
        train_steps=args.train_steps, levels=[int(x) for x in args.levels.split(",") if x],
        num_problems=args.num_problems, eval_samples=args.eval_samples, eval_max_problems=args.eval_max_problems,
        build_rag_index=not args.no_index,
    )
    print("\n" + "=" * 72)
    print(f"Results are in {result['db_path']} (DuckDB) and {Path(args.log_dir).resolve() / args.run_id} "
          "(TensorBoard: tensorboard --logdir runs/logs).")
    print("Try:")
    print(f"  kernelbench-rl sql \"{EXAMPLE_SQL.format(run_id=args.run_id)}\"")
    print("  kernelbench-rl sql \"SELECT checkpoint, level, metrics_json FROM eval_reports\"")
    print(json.dumps({k: result[k] for k in ("db_path",)}))


if __name__ == "__main__":
    main()
