"""Flow: train through the curriculum, one task per step; promotions become Prefect events."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.events import emit_event

from flows.common import build_config
from kernelbench_rl.commands.signals import note_stops
from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.training import TrainingRun
from tasks.training import train_step
from tasks._stops import cancelled_on_stop


def promotion_event(run_id: str, event: dict) -> dict:
    """A promotion as a Prefect event whose name and resource say it (the UI's event feed shows both)."""
    change = f"{event['from_value']}-to-{event['to_value']}"
    return {
        "event": f"kernelbench-rl.curriculum.{event['kind']}-promoted.{change}",
        "resource": {
            "prefect.resource.id": f"kernelbench-rl.run.{run_id}",
            "prefect.resource.name": f"{run_id}: {event['kind']} {event['from_value']} -> {event['to_value']} "
                                     f"at step {event['step']}",
            "kernelbench-rl.kind": str(event["kind"]),
            "kernelbench-rl.from": str(event["from_value"]),
            "kernelbench-rl.to": str(event["to_value"]),
        },
        "payload": event,
    }


def _emit_promotions(run_id: str, events: list[dict]) -> None:
    for event in events:
        emit_event(**promotion_event(run_id, event))


@flow(name="curriculum", log_prints=True)
@cancelled_on_stop
def curriculum(
    run_id: str = "default",
    config: str = "default",
    overrides: list[str] = [],  # noqa: B006
    db_path: str = "runs/kernelbench_rl.duckdb",
    log_dir: str = "runs/logs",
    train_steps: int | None = None,
    levels: list[int] | None = None,
    num_problems: int | None = None,
) -> dict:
    """Train (or resume: the same run_id continues after its last checkpoint) until the configured steps."""
    note_stops()  # SIGINT/SIGTERM: noted, then Prefect's handling (the run saves its state and stops)
    logger = get_run_logger()
    cfg = build_config(config, overrides, run_id=run_id, db_path=db_path, log_dir=log_dir,
                       train_steps=train_steps, levels=levels, num_problems=num_problems)
    parts = build_run_parts(cfg, policy_beside=True)
    # RA-ICL: retrieved examples in every prompt when the config enables retrieval (the index must exist).
    retrieve = parts.open_retriever()
    with TrainingRun(parts, retrieve=retrieve) as run:  # entering starts (or resumes) the run
        if run.resumed_from_step is not None:
            logger.info(f"run {run.run_id} resumes after checkpoint step {run.resumed_from_step}")
        last = None
        while not run.finished:
            last = train_step(run, run.next_step)
            _emit_promotions(run.run_id, last["events"])
            for event in last["events"]:
                logger.info(f"curriculum: {event['kind']} {event['from_value']} -> {event['to_value']} ({event['reason']})")
        return {"run_id": run.run_id, "next_step": run.next_step, "last": last,
                "stage": run.curriculum.stage, "level": run.curriculum.level}
