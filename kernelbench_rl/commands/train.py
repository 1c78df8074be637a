"""`kernelbench-rl train`: GRPO training from a YAML config with key=value overrides."""

from __future__ import annotations

import typer


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
        from kernelbench_rl.training import run_training
        from kernelbench_rl.training.loop import describe_run_start
        from kernelbench_rl.training.setup import resolve_base_model

        from kernelbench_rl.commands.evaluate import require_config_gpu

        cfg = load_config(config, list(overrides or []) + ([f"eval.cluster={cluster}"] if cluster else []))
        require_config_gpu(cfg)
        typer.echo(describe_run_start(cfg))
        typer.echo(f"run {cfg.resolved_run_id()}: {cfg.env.mode} mode, policy {resolve_base_model(cfg)} "
                   f"({cfg.policy.backend} backend) -> {cfg.db_path}, logs in {cfg.run_log_dir()}")
        from kernelbench_rl.commands.signals import sigterm_as_interrupt

        try:
            with sigterm_as_interrupt():  # a supervisor's SIGTERM stops the run as Ctrl-C does: checkpoint kept
                summary = run_training(cfg, progress=progress, stop_after_steps=stop_after)
        except KeyboardInterrupt:
            typer.secho(f"run {cfg.resolved_run_id()}: stopped; its last finished step is saved, and the same "
                        "command resumes it.", err=True)
            raise typer.Exit(130) from None
        resumed = f" (resumed after step {summary.resumed_from_step})" if summary.resumed_from_step is not None else ""
        typer.echo(f"run {summary.run_id}: {summary.steps_run} step(s) done{resumed}; last step {summary.last_step}, "
                   f"stage {summary.stage}, level {summary.level}{'; finished' if summary.finished else ''}")
        if summary.truncated_rate is not None:
            typer.echo(f"truncated completions (cut at {cfg.max_completion_tokens()} tokens): "
                       f"{summary.truncated_rate:.1%} of the run's sampled turns; rewards.truncated={cfg.rewards.truncated}")
