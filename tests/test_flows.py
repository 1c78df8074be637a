"""Flows against a real (test) Prefect API: idempotent ingestion, the evaluation artifact, and the
deployment definitions the UI reads (typed parameters, the nightly cron)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.store import Store
from prefect_session import shared_prefect_api

REPO = Path(__file__).resolve().parents[1]
TINY_EVAL_OVERRIDES = ["policy.backend=local", "policy.base_model=local:tiny", "sampling.max_tokens=16",
                       "eval.device=cpu", "eval.size=small"]


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    with shared_prefect_api() as url:
        yield url


def _deployments() -> dict[str, dict]:
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    return {d["name"]: d for d in spec["deployments"]}


# -- deployment definitions (no server needed) ---------------------------------------------------
def test_nightly_eval_deployment_has_a_valid_cron_schedule() -> None:
    from prefect.client.schemas.schedules import CronSchedule

    nightly = _deployments()["nightly-eval"]
    crons = [s for s in nightly.get("schedules", []) if "cron" in s]
    assert crons, "nightly-eval has no cron schedule"
    schedule = CronSchedule(cron=crons[0]["cron"], timezone=crons[0].get("timezone"))  # validates the expression
    assert len(schedule.cron.split()) == 5
    assert crons[0].get("active", True)


def test_every_deployment_entrypoint_loads_and_its_parameters_exist() -> None:
    from prefect.flows import load_flow_from_entrypoint

    for name, deployment in _deployments().items():
        loaded = load_flow_from_entrypoint(str(REPO / deployment["entrypoint"]))
        known = set(loaded.parameters.properties)
        unknown = set(deployment.get("parameters") or {}) - known
        assert not unknown, f"deployment {name} sets parameters its flow lacks: {unknown}"


def test_pipeline_parameters_are_typed_for_the_ui_form() -> None:
    from flows.evaluate import nightly_eval
    from flows.pipeline import pipeline

    props = pipeline.parameters.properties
    expected = {"run_id": "string", "config": "string", "db_path": "string", "train_steps": "integer",
                "num_problems": "integer", "eval_samples": "integer", "eval_max_problems": "integer",
                "build_rag_index": "boolean", "levels": "array", "overrides": "array", "corpus_sources": "array"}
    for name, json_type in expected.items():
        assert props[name].get("type") == json_type, (name, props[name])
    assert props["levels"]["items"] == {"type": "integer"}
    assert props["overrides"]["items"] == {"type": "string"}
    # every parameter of the scheduled flow is typed too (a bare `Any` would render as free text)
    for name, prop in nightly_eval.parameters.properties.items():
        assert "type" in prop or "anyOf" in prop, (name, prop)


# -- flows against the test API ------------------------------------------------------------------
def test_ingest_corpus_records_problems_and_solutions_once(prefect_api: str, tmp_path: Path) -> None:
    from flows.ingest import ingest_corpus
    from kernelbench_rl.problems import list_solutions, load_problems

    db = str(tmp_path / "kb.duckdb")
    first = ingest_corpus(db_path=db, sources=["solutions"], levels=[1])
    store = Store(db)
    level1 = {p.id for p in load_problems(levels=[1])}
    assert {r[0] for r in store.fetchall("SELECT problem_id FROM problems")} == level1
    docs = store.query("SELECT origin_id, source, kernel_code FROM corpus_docs").to_dicts()
    report = first["sources"]["solutions"]
    assert report["inserted"] == len(docs) > 0
    solution_ids = {f"solutions:{pid}" for pid, _ in list_solutions()}
    assert {d["origin_id"] for d in docs} <= solution_ids
    assert all(d["source"] == "solutions" and d["kernel_code"] for d in docs)
    # every solution is stored unless the loader counted it as skipped (e.g. identical code)
    skipped = sum(report["stats"].get("skipped", {}).values())
    assert len(docs) + skipped == len(solution_ids)

    second = ingest_corpus(db_path=db, sources=["solutions"], levels=[1])
    assert second["sources"]["solutions"]["inserted"] == 0
    assert second["sources"]["solutions"]["already_stored"] == len(docs)
    assert store.fetchall("SELECT count(*) FROM corpus_docs")[0][0] == len(docs)
    assert store.fetchall("SELECT count(*) FROM problems")[0][0] == len(level1)


def test_evaluate_checkpoint_flow_publishes_a_markdown_artifact(prefect_api: str, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.evaluate import evaluate_checkpoint

    db = tmp_path / "kb.duckdb"
    run_id = "Flow_Test.v1"  # dots, capitals and underscores must still give a valid artifact key
    table = evaluate_checkpoint(run_id=run_id, checkpoint="base", compare_base=True, overrides=TINY_EVAL_OVERRIDES,
                                db_path=str(db), log_dir=str(tmp_path / "logs"), samples_per_problem=1,
                                split="holdout", max_problems=1, levels=[1])
    assert "| metric | base (holdout) |" in table

    async def read() -> list:
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_="eval-flow-test")))

    artifacts = asyncio.run(read())
    assert len(artifacts) == 1, [a.key for a in artifacts]
    artifact = artifacts[0]
    assert re.fullmatch(r"[a-z0-9-]+", artifact.key)
    assert artifact.type == "markdown"
    assert table in artifact.data
    assert "data:image/png;base64," in artifact.data
    assert (tmp_path / "logs" / run_id).is_dir()
    reports = Store(db).fetchall("SELECT report_id, eval_id FROM eval_reports ORDER BY report_id")
    assert [r[0] for r in reports] == [f"{run_id}|base|holdout|{level}|{r[1]}" for level, r in zip(("L1", "all"), reports)]


def test_curriculum_flow_puts_retrieved_examples_in_the_prompts(prefect_api: str, tmp_path: Path) -> None:
    """With rag.enabled, the training prompts carry the index's nearest examples, not the default one-shot."""
    from flows.common import build_config
    from flows.curriculum import curriculum
    from flows.index import build_index
    from flows.ingest import ingest_corpus
    from kernelbench_rl.problems import get_problem

    db, index_dir = str(tmp_path / "kb.duckdb"), str(tmp_path / "rag_index")
    ingest_corpus(db_path=db, sources=["solutions"], levels=[1])
    assert build_index(db_path=db, index_dir=index_dir)["num_docs"] > 0
    overrides = [*TINY_EVAL_OVERRIDES, "policy.lora_rank=4", "sampling.group_size=2", "training.batch_problems=2",
                 "rag.enabled=true", "rag.k=1", f"rag.index_dir={index_dir}", "curriculum.enabled=false"]
    params = dict(run_id="rag-flow", overrides=overrides, db_path=db, log_dir=str(tmp_path / "logs"), train_steps=1,
                  levels=[1], num_problems=2)
    assert curriculum(**params)["next_step"] == 1

    prompts = Store(db).query(
        "SELECT DISTINCT r.problem_id, b.text FROM rollouts r JOIN blobs b ON b.sha256 = r.prompt_sha256 "
        "WHERE r.run_id = 'rag-flow'").to_dicts()
    assert len(prompts) == 2
    retrieve = build_run_parts(build_config("default", overrides, run_id="rag-flow", db_path=db,
                                            log_dir=str(tmp_path / "logs"))).open_retriever()
    for row in prompts:
        [example] = retrieve(get_problem(row["problem_id"]), 1)
        assert example.kernel_code.strip() in row["text"], row["problem_id"]


def test_nightly_eval_evaluates_the_run_with_the_newest_checkpoint(prefect_api: str, tmp_path: Path) -> None:
    """The shipped schedule names no run: it evaluates the run with the newest checkpoint and says so."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.evaluate import nightly_eval
    from kernelbench_rl.config import load_config
    from kernelbench_rl.errors import UserError
    from kernelbench_rl.training import run_training

    db = tmp_path / "kb.duckdb"
    assert "Nothing to evaluate" in nightly_eval(db_path=str(db))  # a fresh server before any training: no failure
    # No run_id: the run is named by the hash of its config, which the nightly's db_path must not change.
    cfg = load_config("default", [*TINY_EVAL_OVERRIDES, f"db_path={db}", f"log_dir={tmp_path / 'logs'}",
                                  "policy.lora_rank=4", "training.steps=1", "training.batch_problems=1",
                                  "sampling.group_size=2", "training.checkpoint_every=1", "problems.levels=[1]",
                                  "problems.ids=[L1/19]", "curriculum.enabled=false"])
    assert run_training(build_run_parts(cfg, policy_beside=True), progress=False).finished
    run_id = cfg.resolved_run_id()
    # The run's own configuration is used (tiny policy, CPU), so no overrides are needed.
    table = nightly_eval(db_path=str(db), samples_per_problem=1, max_problems=1)
    assert "| metric | base (holdout) | step_000000 (holdout) |" in table

    async def read() -> list:
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=f"nightly-{run_id}")))

    artifact = asyncio.run(read())[0]
    assert f"run `{run_id}`, checkpoint `step_000000` (step 0)" in artifact.data
    assert "newest checkpoint" in artifact.data
    history = Store(db).fetchall("SELECT DISTINCT eval_id FROM eval_reports WHERE run_id = ? "
                                 "AND checkpoint = 'step_000000'", [run_id])
    assert len(history) == 1  # (a second night adds its own rows: tests/test_deployment.py, test_checkpoint_eval.py)
    with pytest.raises(UserError, match="no checkpoint"):
        nightly_eval(run_ids=["never-trained"], db_path=str(db))


def test_the_pipeline_keeps_an_index_the_user_built(prefect_api: str, tmp_path: Path) -> None:
    """An index already beside the database (e.g. `index build --verified-only`) survives a pipeline run."""
    from flows.index import build_index
    from flows.ingest import ingest_corpus
    from flows.pipeline import ensure_index
    import os

    from kernelbench_rl.rag.index import INDEX_FILE

    db = str(tmp_path / "kb.duckdb")
    index_dir = tmp_path / "rag_index"
    ingest_corpus(db_path=db, sources=["solutions"], levels=[1])
    users = build_index(db_path=db, index_dir=str(index_dir))
    os.utime(index_dir / INDEX_FILE, ns=(1, 1))  # marks the user's file: a rebuild writes a new one
    kept = ensure_index(db, str(index_dir), rebuild=False)
    assert kept["kept"] is True and (index_dir / INDEX_FILE).stat().st_mtime_ns == 1
    rebuilt = ensure_index(db, str(index_dir), rebuild=True)
    assert rebuilt["kept"] is False and (index_dir / INDEX_FILE).stat().st_mtime_ns != 1
    assert users["num_docs"] == rebuilt["num_docs"]


def test_promotion_events_name_their_stages(prefect_api: str) -> None:
    """A promotion reads in the UI's event feed without opening its JSON: the stages are in its name and resource."""
    import json
    import time
    import urllib.request

    from prefect import flow

    from flows.curriculum import _emit_promotions

    event = {"step": 3, "kind": "stage", "from_value": "format", "to_value": "compile", "reason": "format_rate 0.9"}

    @flow(name="emit-promotion-test")
    def emit() -> None:
        _emit_promotions("evt-run", [event])

    emit()
    found: list = []
    deadline = time.monotonic() + 30
    while not found and time.monotonic() < deadline:
        request = urllib.request.Request(
            f"{prefect_api}/events/filter", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"filter": {"event": {"prefix": ["kernelbench-rl.curriculum."]}}, "limit": 50}).encode())
        with urllib.request.urlopen(request, timeout=10) as resp:
            found = [e for e in json.load(resp)["events"] if e["resource"]["prefect.resource.id"] == "kernelbench-rl.run.evt-run"]
        time.sleep(0.5)
    assert found, "the promotion event never reached the API"
    assert found[0]["event"] == "kernelbench-rl.curriculum.stage-promoted.format-to-compile"
    assert found[0]["resource"]["prefect.resource.name"] == "evt-run: stage format -> compile at step 3"
