"""The pipeline flow: ingest -> index -> SFT warm start -> curriculum training -> checkpoint evaluation.

Its defaults are the embedded smoke run (`make run`): CPU, offline, the tiny local policy,
Triton's CPU interpreter, the bundled embedding model over our own solutions, two curriculum
steps on four level-1 problems and a checkpoint evaluation. A real run changes parameters
(from the Prefect UI form, or `kernelbench-rl pipeline --config default --train-steps 200 ...`).
Re-running with the same run_id resumes: every stage is idempotent through DuckDB keys.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import build_config
from flows.curriculum import curriculum
from kernelbench_rl.commands.pipeline import pipeline_arg_parser
from flows.evaluate import evaluate_checkpoint
from flows.index import build_index
from flows.ingest import ingest_corpus
from tasks.training import publish_training_curves, sft_warm_start

# The embedded default, sized to learn visibly on 2 CPU cores: four elementwise training problems whose
# kernels fit in 400 tokens, an SFT warm start on their verified kernels (loss ~7 -> ~0.1 per token),
# then RL whose samples are judged by the evaluator, with a curriculum quick enough to promote in a few steps.
SMOKE_OVERRIDES = [
    "policy.backend=local", "policy.base_model=local:tiny", "problems.ids=[L1/19,L1/20,L1/21,L1/25]",
    "sampling.group_size=4", "sampling.max_tokens=400", "sampling.temperature=0.5",
    "sft.steps=130", "sft.batch_size=4", "sft.max_examples=4", "sft.learning_rate=0.005", "sft.checkpoint_every=65",
    "training.batch_problems=4", "training.learning_rate=0.0002", "training.checkpoint_every=1",
    "curriculum.threshold=0.5", "curriculum.window=2",
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
    train_steps: int = 6,
    levels: list[int] = [1],  # noqa: B006
    num_problems: int = 0,
    eval_samples: int = 2,
    eval_max_problems: int = 4,
) -> dict:
    """Ingest the corpus, build the index, warm-start the policy (SFT), train through the curriculum, evaluate the final checkpoint."""
    db_path = str(Path(db_path).resolve())
    log_dir = str(Path(log_dir).resolve())
    ingested = ingest_corpus(db_path=db_path, sources=corpus_sources, levels=levels)
    index = None
    if build_rag_index:
        index_dir = str(Path(db_path).parent / "rag_index")
        index = build_index(db_path=db_path, index_dir=index_dir)
        overrides = [*overrides, f"rag.index_dir={index_dir}"]  # training and evaluation retrieve from it
    cfg = build_config(config, overrides, run_id=run_id, db_path=db_path, log_dir=log_dir, train_steps=train_steps,
                       levels=levels, num_problems=num_problems)
    # The supervised warm start: RL then starts from its weights (resumes, or is skipped once done).
    warm_start = sft_warm_start(cfg) if cfg.sft.enabled else None
    trained = curriculum(run_id=run_id, config=config, overrides=overrides, db_path=db_path, log_dir=log_dir,
                         train_steps=train_steps, levels=levels, num_problems=num_problems)
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
    parser = pipeline_arg_parser(description=__doc__)
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
    print(result["summary"])
    print("=" * 72)
    print(f"Results are in {result['db_path']} (DuckDB) and {Path(args.log_dir).resolve() / args.run_id} "
          "(TensorBoard: tensorboard --logdir runs/logs).")
    print("Try:")
    print(f"  kernelbench-rl sql \"{EXAMPLE_SQL.format(run_id=args.run_id)}\"")
    print("  kernelbench-rl sql \"SELECT checkpoint, level, metrics_json FROM eval_reports\"")


if __name__ == "__main__":
    main()
