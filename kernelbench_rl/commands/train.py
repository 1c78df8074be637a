"""`kernelbench-rl train`: GRPO training from a YAML config with key=value overrides."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from kernelbench_rl.parts import RunParts


# A local policy on the CPU with more than this per step runs for minutes per step (the default config is sized for
# Tinker and a GPU: 8 problems x 8 answers of up to 3,072 tokens).
CPU_ANSWER_TOKENS_PER_STEP = 16 * 1024


def describe_plan(parts: RunParts) -> list[str]:
    """What one step does, where, and (on a CPU with a config sized for a GPU) that it takes a while and why."""
    import os

    training, group_size = parts.training, parts.sampling.group_size
    answers = training.batch_problems * group_size
    turns = parts.env.turns
    tokens = parts.env.max_tokens
    policy = parts.policy
    tinker = policy.backend == "tinker" or (policy.backend == "auto" and bool(os.environ.get("TINKER_API_KEY")))
    if tinker:
        where = "on Tinker's service"
    else:
        import torch

        device = policy.device if policy.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        where = f"by the local backend on the {'GPU' if device == 'cuda' else 'CPU'}"
    eval_device = parts.evaluator.settings.device
    judge = "Triton's CPU interpreter (correctness only)" if eval_device == "cpu" else "the evaluator on the GPU"
    per_turn = f" per turn, {turns} turns" if turns > 1 else ""
    lines = [f"plan: {training.steps} steps; each samples {training.batch_problems} problems x "
             f"{group_size} answers = {answers} answers of up to {tokens} tokens{per_turn} {where}, "
             f"judged by {judge}; progress shows each problem as it is judged, with the time left at that pace"]
    if not tinker and where.endswith("CPU") and answers * tokens * turns > CPU_ANSWER_TOKENS_PER_STEP:
        lines.append(f"note: up to {answers * tokens * turns:,} tokens per step sampled on the CPU: expect minutes per "
                     "step before the first problem is judged (this config is sized for Tinker and a GPU). For a run "
                     "sized for a laptop: `kernelbench-rl pipeline` (make run), or add sampling.group_size=4 "
                     "training.batch_problems=2 sampling.max_tokens=400.")
    return lines


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""

    @app.command("train")
    def train(
        config: str = typer.Option("default", "--config", "-c",
                                   help="YAML file, or a packaged config: default, raicl, kevin."),
        overrides: list[str] = typer.Argument(None, help="key=value overrides, e.g. training.steps=3 env.mode=kevin"),
        stop_after: int | None = typer.Option(None, "--stop-after", help="Run at most this many steps now; re-run to resume."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
        cluster: str | None = typer.Option(None, "--cluster", help=(
            "Where kernels are evaluated (eval.cluster): local, dask-local or dask://HOST:PORT.")),
    ) -> None:
        """Train (or resume: the same command continues from the last checkpoint).

        The run id is `run_id=NAME` if given, else a hash of the configuration (a changed key starts a new
        run). One process owns a run at a time; a second one is told who holds it and exits as busy (below).
        """
        from kernelbench_rl.config import load_config

        # The config first: a bad key or value is refused before torch, Tinker and the training stack are imported.
        cfg = load_config(config, list(overrides or []) + ([f"eval.cluster={cluster}"] if cluster else []))
        from kernelbench_rl.commands.evaluate import require_config_gpu
        from kernelbench_rl.commands.signals import stop_signals, stopped_line

        run_id = cfg.run_id or ""
        try:
            # SIGINT and SIGTERM alike: the run stops with its state saved, marked stopped, one line said.
            with stop_signals():
                require_config_gpu(cfg)  # and a GPU asked for that is not there, before the training stack too
                from kernelbench_rl.compose import build_run_parts
                from kernelbench_rl.store import Store
                from kernelbench_rl.training import run_training
                from kernelbench_rl.training.loop import describe_run_start

                parts = build_run_parts(cfg, policy_beside=True)
                run_id = parts.run_id
                from kernelbench_rl import ownership

                ownership.check_free(cfg.db_path, run_id)  # a busy run: its owner, nothing else
                from kernelbench_rl.training.checkpoints import check_run_files

                check_run_files(cfg.db_path, cfg.log_dir, run_id)  # damaged, unwritable, full: one sentence
                store = Store(cfg.db_path)
                typer.echo(describe_run_start(store, run_id, named=bool(cfg.run_id)))
                typer.echo(f"run {run_id}: {cfg.env.mode} mode, policy {parts.base_model} "
                           f"({cfg.policy.backend} backend) -> {cfg.db_path}, logs in {parts.run_dir}")
                for line in describe_plan(parts):
                    typer.echo(line)
                retrieve = parts.open_retriever(store)
                summary = run_training(parts, progress=progress, lines=not progress, stop_after_steps=stop_after,
                                       retrieve=retrieve, store=store)
        except KeyboardInterrupt:
            typer.echo(stopped_line(run_id or cfg.resolved_run_id(), cfg.db_path), err=True)
            from kernelbench_rl.errors import ExitCode

            raise typer.Exit(ExitCode.STOPPED) from None
        resumed = f" (resumed after step {summary.resumed_from_step})" if summary.resumed_from_step is not None else ""
        typer.echo(f"run {summary.run_id}: {summary.steps_run} step(s) done{resumed}; last step {summary.last_step}, "
                   f"stage {summary.stage}, level {summary.level}{'; finished' if summary.finished else ''}")
        if summary.truncated_rate is not None:
            typer.echo(f"truncated completions (cut at {parts.env.max_tokens} tokens): "
                       f"{summary.truncated_rate:.1%} of the run's sampled turns; rewards.truncated={cfg.rewards.truncated}")
