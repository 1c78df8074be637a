"""`kernelbench-rl eval-model`: any OpenAI-compatible model on the evaluation problems (pass@k, fast_p)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kernelbench_rl.commands.options import ProblemsRootOption, check_max_problems
from kernelbench_rl.errors import InfraError, UserError


def eval_model_command(
    policy: Annotated[str, typer.Option("--policy", help="openai:MODEL, the model name the server knows.")],
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="The server's /v1 URL, e.g. http://127.0.0.1:8001/v1 (default: OpenAI's).")] = None,
    samples: Annotated[int, typer.Option("--samples", help="Samples per problem (k of pass@k is at most this).")] = 4,
    split: Annotated[str, typer.Option("--split", help="holdout, train or all.")] = "holdout",
    max_problems: Annotated[Optional[int], typer.Option("--max-problems", help="Only the first N problems of the split (at least 1; default: all of them).")] = None,
    config: Annotated[str, typer.Option("--config", "-c", help="YAML file, or a packaged config: default, raicl, kevin.")] = "default",
    overrides: Annotated[Optional[list[str]], typer.Argument(help="key=value overrides, e.g. problems.levels=[1] eval.device=cpu")] = None,
    db: Annotated[Optional[Path], typer.Option("--db", help="DuckDB file (default: the config's db_path).")] = None,
    run_id: Annotated[Optional[str], typer.Option("--run-id", help="run_id of the report rows (default: the config's).")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Requests in flight at once.")] = 8,
    retries: Annotated[int, typer.Option("--retries", help="Retries of a 429/5xx/timeout, with exponential backoff.")] = 4,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds one request may take.")] = 300.0,
    problems_root: ProblemsRootOption = None,
    context_tokens: Annotated[Optional[int], typer.Option(
        "--context-tokens", help="The served model's context window in tokens, for a server whose GET /models does "
        "not say it (vLLM and SGLang do). Each answer may take what it leaves after the prompt; sampling.max_tokens=N "
        "caps that; with neither, requests carry no max_tokens and the server decides.", show_default=False)] = None,
) -> None:
    """Sample k kernels per problem from the model, evaluate them, and record an eval report like a checkpoint's.

    The server is asked first (GET /models: does it answer, and what context does the model have). Each answer is
    recorded as it arrives, so the same command after a run that died, or whose server stopped answering (a partial
    report), sends only the requests left.
    """
    from kernelbench_rl.config import load_config

    # Flags and config first: a mistake is told before torch, Tinker and the evaluation stack are imported.
    if samples < 1:
        raise UserError("--samples must be at least 1.")
    check_max_problems(max_problems)
    extra = list(overrides or [])
    if db is not None:
        extra.append(f"db_path={db}")
    if run_id is not None:
        extra.append(f"run_id={run_id}")
    if problems_root is not None:
        from kernelbench_rl.commands.env import problems_root_override

        extra.append(problems_root_override(problems_root))
    cfg = load_config(config, extra)
    from kernelbench_rl.commands.evaluate import require_config_gpu
    from kernelbench_rl.writable import check_writable_file

    require_config_gpu(cfg)
    check_writable_file(cfg.db_path, "the database")  # every answer is recorded as it arrives: before any is paid for
    from kernelbench_rl.store.files import check_free_space

    check_free_space(cfg.db_path, "before the evaluation")  # the floor every writer keeps (KBRL_MIN_FREE_MB)
    from kernelbench_rl.compose import build_run_parts
    from kernelbench_rl.training.model_answers import UnansweredRequests

    try:
        parts = build_run_parts(cfg, policy_beside=True)  # a missing problems root is told here, before torch
        from kernelbench_rl.training.checkpoint_eval import evaluate_model

        report = evaluate_model(parts, policy, base_url=base_url, samples_per_problem=samples, split=split,
                                max_problems=max_problems, ks=sorted({1, 5, 10, samples}), concurrency=concurrency,
                                max_retries=retries, timeout_s=timeout_s, context_tokens=context_tokens,
                                say=typer.echo)
    except UnansweredRequests as exc:  # the server stopped answering: what was judged, then "run again"
        _print_report(exc.report, cfg.db_path)
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(exc.exit_code) from None
    except InfraError as exc:  # ours, not the model's: retry later, never a traceback (docs/cli.md)
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(exc.exit_code) from None
    _print_report(report, cfg.db_path)


def _print_report(report, db_path) -> None:
    """The table, what got no verdict, and what the model cost (answers cut at the token budget included)."""
    from kernelbench_rl.training.checkpoint_eval import markdown_table

    typer.echo(markdown_table([report]))
    if report.overall.unjudged_samples:
        typer.secho(f"partial: {report.overall.unjudged_samples} sample(s) got no verdict on their kernel (eval_samples "
                    f"rows of eval_id {report.eval_id} say why); they are left out of every rate above.", err=True,
                    fg=typer.colors.YELLOW)
    usage = report.usage or {}
    answers = usage.get("requests", 0) + usage.get("reused", 0)
    reused = f", {usage['reused']} answer(s) reused from the interrupted run" if usage.get("reused") else ""
    typer.echo(f"{usage.get('requests', 0)} requests, {usage.get('prompt_tokens', 0)} prompt + "
               f"{usage.get('completion_tokens', 0)} completion tokens, {usage.get('retries', 0)} retries{reused}; "
               f"{usage.get('truncated', 0)} of {answers} answers hit the token budget (finish_reason length); "
               f"report {report.run_id}|{report.label}|{report.split} -> {db_path} (table eval_reports)")

def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    app.command("eval-model")(eval_model_command)
