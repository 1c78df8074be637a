"""`kernelbench-rl sft`: the supervised warm start (cross-entropy on verified kernels) before RL."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""

    @app.command("sft")
    def sft(
        config: str = typer.Option("default", "--config", "-c",
                                   help="YAML file, or a packaged config: default, raicl, kevin."),
        overrides: list[str] = typer.Argument(None, help="key=value overrides, e.g. sft.steps=40 sft.learning_rate=3e-3"),
        stop_after: int | None = typer.Option(None, "--stop-after", help="Run at most this many steps now; re-run to resume."),
    ) -> None:
        """Warm-start the policy on the verified corpus (never a holdout problem's kernel); resumable.

        `kernelbench-rl train` with the same config then starts RL from these weights.
        """
        from kernelbench_rl.config import load_config

        # The config first: a bad key, or nothing to do, is told before torch and the training stack are imported.
        cfg = load_config(config, list(overrides or []))
        if not cfg.sft.enabled:
            typer.echo("sft.enabled is false: nothing to do.")
            raise typer.Exit(0)
        from kernelbench_rl.compose import build_run_parts
        from kernelbench_rl.training.sft import SftStepResult, run_sft

        from kernelbench_rl.commands.signals import stop_signals, stopped_line
        from kernelbench_rl.errors import ExitCode

        def show(result: SftStepResult) -> None:
            mark = f" · checkpoint {result.checkpoint}" if result.checkpoint else ""
            typer.echo(f"sft step {result.step}: loss {result.loss:.4f}/token over {result.tokens} tokens "
                       f"({result.examples} examples, lr {result.learning_rate:.2e}){mark}")

        run_id = cfg.run_id or ""
        try:
            # SIGINT and SIGTERM alike: SFT stops with its state saved at its last finished step, one line said.
            with stop_signals():
                parts = build_run_parts(cfg)
                run_id = parts.run_id
                from kernelbench_rl import ownership

                ownership.check_free(cfg.db_path, run_id)
                from kernelbench_rl.training.checkpoints import check_run_files

                check_run_files(cfg.db_path, cfg.log_dir, run_id)  # damaged, unwritable, full: one sentence
                typer.echo(f"run {run_id}: SFT warm start of {parts.base_model} -> {cfg.db_path}")
                retrieve = parts.open_retriever()
                summary = run_sft(parts, retrieve=retrieve, stop_after_steps=stop_after, on_step=show)
        except KeyboardInterrupt:
            typer.echo(stopped_line(run_id or cfg.resolved_run_id(), cfg.db_path), err=True)
            raise typer.Exit(ExitCode.STOPPED) from None
        resumed = f" (resumed after step {summary.resumed_from_step})" if summary.resumed_from_step is not None else ""
        left = ", ".join(f"{k} {v}" for k, v in sorted(summary.excluded.items())) or "none"
        typer.echo(f"run {summary.run_id}: {summary.num_examples} examples (left out: {left}); "
                   f"{summary.steps_run} step(s) done{resumed} of {summary.total_steps}; loss "
                   f"{_fmt(summary.first_loss)} -> {_fmt(summary.last_loss)}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
