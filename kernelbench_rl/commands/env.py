"""`kernelbench-rl env serve`: the KernelBench OpenEnv environment over HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from kernelbench_rl.commands.options import ProblemsRootOption
from kernelbench_rl.errors import UserError

env_app = typer.Typer(help="The KernelBench environment as an OpenEnv server.", no_args_is_help=True)


@env_app.command("serve")
def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8000,
    device: Annotated[Optional[str], typer.Option("--device", help="Evaluator device: cpu, cuda or auto (default: the config's).")] = None,
    db: Annotated[Optional[Path], typer.Option("--db", help="DuckDB file for verdicts and rollouts (default: the config's db_path).")] = None,
    config: Annotated[str, typer.Option("--config", "-c", help="YAML file, or a packaged config: default, raicl, kevin.")] = "default",
    overrides: Annotated[Optional[list[str]], typer.Argument(help="key=value overrides, e.g. eval.correctness_trials=1 problems.levels=[1]")] = None,
    max_turns: Annotated[Optional[int], typer.Option("--max-turns", help="Turns per episode (default: env.turns of the config).")] = None,
    preset: Annotated[Optional[str], typer.Option("--preset", help="Reward preset: format, compile, correctness, speed, speed_of_light, kernrl or kernrl_server.")] = None,
    run_id: Annotated[str, typer.Option("--run-id", help="run_id of this server's rollouts/rewards rows.")] = "openenv",
    problems_root: ProblemsRootOption = None,
    max_open_episodes: Annotated[int, typer.Option(
        "--max-open-episodes", help="Episodes open at once; past it, a reset closes the one idle the longest.")] = 256,
) -> None:
    """Serve reset/step/state over HTTP (OpenEnv's contract); episodes share one evaluator pool."""
    from kernelbench_rl.config import load_config
    from kernelbench_rl.rewards.shaping import PRESETS

    if device is not None and device not in ("cpu", "cuda", "auto"):
        raise UserError(f"--device must be cpu, cuda or auto, not {device!r}.")
    if preset is not None and preset not in PRESETS:
        raise UserError(f"--preset must be one of {', '.join(PRESETS)}, not {preset!r}.")
    if max_turns is not None and max_turns < 1:
        raise UserError("--max-turns must be at least 1.")
    if not 0 < port < 65536:
        raise UserError(f"--port must be between 1 and 65535, not {port}.")
    if max_open_episodes < 1:
        raise UserError(f"--max-open-episodes must be at least 1, not {max_open_episodes}.")
    extra = list(overrides or [])
    if device is not None:
        extra.append(f"eval.device={device}")
    if db is not None:
        extra.append(f"db_path={db}")
    if problems_root is not None:
        extra.append(problems_root_override(problems_root))
    cfg = load_config(config, extra)
    from kernelbench_rl.commands.evaluate import require_config_gpu
    from kernelbench_rl.writable import check_writable_file

    require_config_gpu(cfg)
    # Every step writes its rows: a store it cannot write is refused now, not answered with a 500 per step.
    check_writable_file(cfg.db_path, "the database")
    import uvicorn

    from kernelbench_rl.compose import build_service
    from kernelbench_rl.integrations.openenv_server import create_app
    from kernelbench_rl.store import Store

    store = Store(cfg.db_path)
    store.init()
    service = build_service(cfg, store=store, max_turns=max_turns, preset=preset, run_id=run_id)
    service.max_open_episodes = max_open_episodes
    from kernelbench_rl.problems import describe_problems

    typer.echo(f"kernelbench-rl env: {describe_problems([*service.train.values(), *service.holdout.values()])}; "
               f"{len(service.train)} training + {len(service.holdout)} holdout, "
               f"{service.spec.turns} turn(s), preset {service.preset}, evaluator on {service.evaluator.settings.device}, "
               f"rows -> {cfg.db_path} (run_id {run_id}); idle episodes close after {service.idle_timeout_s:g} s "
               f"(env.idle_timeout_s), at most {max_open_episodes} open at once; http://{host}:{port}")
    from kernelbench_rl.commands.signals import stop_signals

    try:
        # uvicorn stops on SIGINT or SIGTERM and then sends the signal on: ours ends here, after the evaluator's
        # clean-up (its workers and its kbrl-eval-home-* folder), not by the default handler's exit.
        with stop_signals():
            uvicorn.run(create_app(service), host=host, port=port, log_level="warning")
    except KeyboardInterrupt:
        pass
    finally:
        service.close()


def problems_root_override(path: Path) -> str:
    """`--problems-root PATH` as the config override it stands for (`problems.root`), the path made absolute."""
    return f"problems.root={json.dumps(str(path.expanduser().resolve()))}"  # quoted: any path is one YAML string


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    app.add_typer(env_app, name="env")
