"""The DuckDB schema: every table, its natural key, and the migrations that build it.

This module and `store/db.py` are the only places that hold SQL. Other modules write rows as
dicts through `Store.upsert(table, rows)`; the natural key of each table (`PRIMARY KEY`) makes a
retried write replace rather than duplicate.

Migrations are append-only: never edit a shipped migration, add the next one.
"""

from __future__ import annotations

# Each entry: (version, description, list of SQL statements).
MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "initial schema",
        [
            """
            CREATE TABLE IF NOT EXISTS runs (
                run_id VARCHAR PRIMARY KEY,
                kind VARCHAR,              -- train | eval | pipeline | nightly
                config_json VARCHAR,
                status VARCHAR,            -- running | finished | failed
                stage VARCHAR,             -- current reward stage (format/compile/correctness/speed)
                level INTEGER,             -- current curriculum level
                last_step INTEGER,
                created_at TIMESTAMP DEFAULT now(),
                updated_at TIMESTAMP DEFAULT now()
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS problems (
                problem_id VARCHAR,        -- L1/19
                source_sha256 VARCHAR,
                level INTEGER,
                number INTEGER,
                name VARCHAR,              -- KernelBench file stem, e.g. 19_ReLU
                origin VARCHAR,            -- bundled | kernelbench_root | hf
                split VARCHAR,             -- train | holdout
                source VARCHAR,
                created_at TIMESTAMP DEFAULT now(),
                PRIMARY KEY (problem_id, source_sha256)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS kernels (
                sha256 VARCHAR PRIMARY KEY,  -- sha256 of the candidate source
                backend VARCHAR,
                source VARCHAR,
                created_at TIMESTAMP DEFAULT now()
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS blobs (
                sha256 VARCHAR PRIMARY KEY,  -- prompts, completions, feedback: stored once
                kind VARCHAR,
                text VARCHAR,
                created_at TIMESTAMP DEFAULT now()
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS rollouts (
                run_id VARCHAR,
                step INTEGER,
                problem_id VARCHAR,
                sample_index INTEGER,      -- index within the group
                turn INTEGER,              -- 0 for single-turn
                stage VARCHAR,
                level INTEGER,
                prompt_sha256 VARCHAR,
                completion_sha256 VARCHAR,
                kernel_sha256 VARCHAR,     -- NULL when nothing could be extracted
                eval_key VARCHAR,          -- evaluations.eval_key
                prompt_tokens INTEGER,
                completion_tokens INTEGER,
                created_at TIMESTAMP DEFAULT now(),
                PRIMARY KEY (run_id, step, problem_id, sample_index, turn)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS evaluations (
                eval_key VARCHAR PRIMARY KEY,  -- sha256(problem_id | kernel sha256 | settings hash)
                problem_id VARCHAR,
                kernel_sha256 VARCHAR,
                settings_hash VARCHAR,
                backend VARCHAR,
                precision VARCHAR,
                device_kind VARCHAR,
                hardware VARCHAR,
                format_ok BOOLEAN,
                compiled BOOLEAN,
                correct BOOLEAN,
                error_category VARCHAR,
                error_message VARCHAR,
                runtime_ms DOUBLE,
                baseline_ms DOUBLE,
                speedup DOUBLE,
                flags VARCHAR,             -- JSON list
                result_json VARCHAR,       -- the whole EvalResult
                created_at TIMESTAMP DEFAULT now()
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS rewards (
                run_id VARCHAR,
                step INTEGER,
                problem_id VARCHAR,
                sample_index INTEGER,
                turn INTEGER,
                stage VARCHAR,
                reward DOUBLE,             -- this turn's own score
                return_value DOUBLE,       -- discounted return used for training
                advantage DOUBLE,
                components_json VARCHAR,
                created_at TIMESTAMP DEFAULT now(),
                PRIMARY KEY (run_id, step, problem_id, sample_index, turn)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS train_steps (
                run_id VARCHAR,
                step INTEGER,
                stage VARCHAR,
                level INTEGER,
                loss DOUBLE,
                reward_mean DOUBLE,
                reward_std DOUBLE,
                format_rate DOUBLE,
                compile_rate DOUBLE,
                correct_rate DOUBLE,
                hack_rate DOUBLE,
                num_samples INTEGER,
                num_trained INTEGER,       -- samples left after constant-reward groups are dropped
                sampling_s DOUBLE,
                eval_s DOUBLE,
                train_s DOUBLE,
                metrics_json VARCHAR,
                created_at TIMESTAMP DEFAULT now(),
                PRIMARY KEY (run_id, step)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS checkpoints (
                run_id VARCHAR,
                name VARCHAR,
                step INTEGER,
                backend VARCHAR,           -- local | tinker
                state_path VARCHAR,        -- training state (optimizer included)
                sampler_path VARCHAR,      -- weights for sampling
                created_at TIMESTAMP DEFAULT now(),
                PRIMARY KEY (run_id, name)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS curriculum_events (
                run_id VARCHAR,
                step INTEGER,
                kind VARCHAR,              -- stage | level | manual
                from_value VARCHAR,
                to_value VARCHAR,
                reason VARCHAR,
                created_at TIMESTAMP DEFAULT now(),
                PRIMARY KEY (run_id, step, kind)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS corpus_docs (
                sha256 VARCHAR PRIMARY KEY,  -- sha256 of the normalised kernel code
                source VARCHAR,            -- kernelbook | sakana | solutions
                revision VARCHAR,
                backend VARCHAR,           -- triton | cuda
                licence VARCHAR,
                origin_id VARCHAR,         -- the row's id in its source (uuid, Level_ID/Task_ID, file)
                kb_level INTEGER,          -- KernelBench level/task it solves, when known (leak filter)
                kb_task INTEGER,
                title VARCHAR,
                pytorch_code VARCHAR,
                kernel_code VARCHAR,
                speedup DOUBLE,
                meta_json VARCHAR,
                verified BOOLEAN,          -- re-verified by our evaluator (NULL: not tried)
                verdict VARCHAR,
                created_at TIMESTAMP DEFAULT now()
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS embeddings (
                doc_sha256 VARCHAR,
                model_id VARCHAR,
                dimension INTEGER,
                vector FLOAT[],
                created_at TIMESTAMP DEFAULT now(),
                PRIMARY KEY (doc_sha256, model_id)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS index_builds (
                build_id VARCHAR PRIMARY KEY,
                model_id VARCHAR,
                dimension INTEGER,
                index_kind VARCHAR,        -- flat | hnsw | ivf
                num_docs INTEGER,
                corpus_hash VARCHAR,
                path VARCHAR,
                build_seconds DOUBLE,
                params_json VARCHAR,
                created_at TIMESTAMP DEFAULT now()
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS eval_reports (
                report_id VARCHAR PRIMARY KEY,  -- run / checkpoint / split / level
                run_id VARCHAR,
                checkpoint VARCHAR,
                split VARCHAR,
                level INTEGER,
                num_problems INTEGER,
                samples_per_problem INTEGER,
                metrics_json VARCHAR,      -- pass@k, fast_p, compile/correct rates, geomean speedup
                created_at TIMESTAMP DEFAULT now()
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS baselines (
                problem_id VARCHAR,
                source_sha256 VARCHAR,
                precision VARCHAR,
                hardware VARCHAR,
                size VARCHAR,              -- real | small
                eager_ms DOUBLE,
                compile_ms DOUBLE,
                eager_spread_ms DOUBLE,
                created_at TIMESTAMP DEFAULT now(),
                PRIMARY KEY (problem_id, source_sha256, precision, hardware, size)
            )
            """,
        ],
    ),
]

MIGRATIONS.append(
    (
        2,
        "rollouts carry their verdict, so format failures (no kernel, no evaluation row) are queryable",
        [
            "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS format_ok BOOLEAN",
            "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS error_category VARCHAR",
            "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS error_message VARCHAR",
        ],
    )
)

MIGRATIONS.append(
    (
        3,
        "sft_steps: the supervised warm start, one row per optimizer step (its checkpoint, when saved)",
        [
            """
            CREATE TABLE IF NOT EXISTS sft_steps (
                run_id VARCHAR,
                step INTEGER,
                loss DOUBLE,               -- mean cross-entropy per completion token
                loss_sum DOUBLE,           -- summed over the batch's completion tokens (Tinker's loss)
                tokens INTEGER,            -- completion tokens trained on (prompt tokens carry no loss)
                examples INTEGER,          -- examples in the batch
                learning_rate DOUBLE,
                epoch DOUBLE,
                state_path VARCHAR,        -- set on steps that saved a checkpoint (resume point)
                sampler_path VARCHAR,
                created_at TIMESTAMP DEFAULT now(),
                PRIMARY KEY (run_id, step)
            )
            """,
        ],
    )
)

# Versions apply by membership, not by order of arrival: a database that got 4 before 3 existed still gets 3.
MIGRATIONS.append(
    (
        4,
        "evaluation history (one eval_reports row per evaluation), per-sample evaluation results, run owners",
        [
            "ALTER TABLE eval_reports ADD COLUMN IF NOT EXISTS eval_id VARCHAR",  # one checkpoint evaluation
            """
            CREATE TABLE IF NOT EXISTS eval_samples (
                eval_id VARCHAR,           -- eval_reports.eval_id
                run_id VARCHAR,
                checkpoint VARCHAR,
                split VARCHAR,
                problem_id VARCHAR,
                level INTEGER,
                sample_index INTEGER,
                turn INTEGER,              -- the turn whose verdict counts (the episode's best)
                format_ok BOOLEAN,
                compiled BOOLEAN,
                correct BOOLEAN,
                speedup DOUBLE,            -- counted speedups only
                error_category VARCHAR,
                error_message VARCHAR,
                eval_key VARCHAR,          -- evaluations.eval_key (NULL when nothing was evaluated)
                completion_sha256 VARCHAR, -- blobs.sha256
                created_at TIMESTAMP DEFAULT now(),
                PRIMARY KEY (eval_id, problem_id, sample_index)
            )
            """,
            "ALTER TABLE runs ADD COLUMN IF NOT EXISTS owner_pid INTEGER",
            "ALTER TABLE runs ADD COLUMN IF NOT EXISTS owner_host VARCHAR",
        ],
    )
)

MIGRATIONS.append(
    (
        7,
        "evaluations carry the speed of light: the problem's floor and the share of it the candidate reached",
        [
            "ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS floor_ms DOUBLE",
            "ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS sol_fraction DOUBLE",
            "ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS reference_sol_fraction DOUBLE",
            "ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS bound VARCHAR",
        ],
    )
)

MIGRATIONS.append(
    (
        10,
        "truncated completions are visible (each rollout's stop reason, each step's truncated rate); checkpoint TTLs; "
        "an SFT step knows the warm start's planned steps",
        [
            "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS stop_reason VARCHAR",  # stop | length (cut at max_tokens)
            "ALTER TABLE train_steps ADD COLUMN IF NOT EXISTS truncated_rate DOUBLE",
            "ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS ttl_s INTEGER",  # NULL: never expires
            "ALTER TABLE sft_steps ADD COLUMN IF NOT EXISTS total_steps INTEGER",  # the warm start's planned steps
        ],
    )
)

MIGRATIONS.append(
    (
        11,
        "asynchronous training: each step records how far behind the policy that sampled it was",
        [
            # steps of training the step's sampler weights lacked (0: on-policy; at most training.max_steps_off_policy)
            "ALTER TABLE train_steps ADD COLUMN IF NOT EXISTS staleness INTEGER",
            # the last step trained into those weights (NULL: the run's starting weights)
            "ALTER TABLE train_steps ADD COLUMN IF NOT EXISTS sampler_step INTEGER",
        ],
    )
)

MIGRATIONS.append(
    (
        12,
        "baselines say where they were timed: a child running the reference, or the worker itself",
        [
            # child | worker (NULL: timed before baselines moved to a child, i.e. in the worker)
            "ALTER TABLE baselines ADD COLUMN IF NOT EXISTS timed_in VARCHAR",
        ],
    )
)

# Which suite a row's problem belongs to: KernelBench's L1/23 and kernrl's L1/23 (L1_23_Softmax) are two problems
# under one problem_id. Rows written before this column get what the record itself tells: a verdict's suite from its
# result (`versions.suite`), a rollout's from its verdict, a problem's from its origin, and levels past 3, which only
# kernrl has; what is left stays NULL (written before suites were recorded, and not to be guessed).
_SUITE_TABLES = ("problems", "rollouts", "rewards", "evaluations", "baselines", "eval_samples")
MIGRATIONS.append(
    (
        14,
        "every row that names a problem names its suite (kernelbench | kernrl)",
        [
            *(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS suite VARCHAR" for table in _SUITE_TABLES),
            """
            UPDATE problems SET suite = CASE
                WHEN origin = 'kernrl_root' OR (origin = 'bundled' AND level > 3) THEN 'kernrl'
                WHEN origin IN ('bundled', 'kernelbench_root', 'hf') THEN 'kernelbench' END
            WHERE suite IS NULL
            """,
            """
            UPDATE evaluations SET suite = json_extract_string(result_json, '$.versions.suite')
            WHERE suite IS NULL AND json_valid(result_json)
            """,
            """
            UPDATE rollouts SET suite = e.suite FROM evaluations e
            WHERE rollouts.suite IS NULL AND rollouts.eval_key = e.eval_key AND e.suite IS NOT NULL
            """,
            "UPDATE rollouts SET suite = 'kernrl' WHERE suite IS NULL AND level > 3",
            """
            UPDATE rewards SET suite = r.suite FROM rollouts r
            WHERE rewards.suite IS NULL AND r.suite IS NOT NULL AND rewards.run_id = r.run_id AND rewards.step = r.step
              AND rewards.problem_id = r.problem_id AND rewards.sample_index = r.sample_index AND rewards.turn = r.turn
            """,
            """
            UPDATE eval_samples SET suite = e.suite FROM evaluations e
            WHERE eval_samples.suite IS NULL AND eval_samples.eval_key = e.eval_key AND e.suite IS NOT NULL
            """,
            "UPDATE eval_samples SET suite = 'kernrl' WHERE suite IS NULL AND level > 3",
            """
            UPDATE baselines SET suite = p.suite FROM problems p
            WHERE baselines.suite IS NULL AND p.suite IS NOT NULL AND baselines.problem_id = p.problem_id
              AND baselines.source_sha256 = p.source_sha256
            """,
        ],
    )
)

# A served model's answers, each as it arrives: a rerun of the same evaluation sends only the requests left.
MIGRATIONS.append(
    (
        15,
        "answers of a model behind an OpenAI-compatible server, per request (an evaluation resumes from them)",
        [
            """
            CREATE TABLE IF NOT EXISTS model_answers (
                eval_id VARCHAR,           -- eval_reports.eval_id
                run_id VARCHAR,
                checkpoint VARCHAR,        -- openai:MODEL
                split VARCHAR,
                problem_id VARCHAR,
                sample_index INTEGER,
                turn INTEGER,
                request_sha256 VARCHAR,    -- the model, the prompt's messages and the sampling settings
                completion_sha256 VARCHAR, -- blobs.sha256
                finish_reason VARCHAR,     -- stop | length (cut at the token budget)
                prompt_tokens INTEGER,
                completion_tokens INTEGER,
                max_tokens INTEGER,        -- the budget sent (NULL: none, the server decided)
                created_at TIMESTAMP DEFAULT now(),
                PRIMARY KEY (eval_id, problem_id, sample_index, turn)
            )
            """,
        ],
    )
)

# How a run ended, and a run that ended without a word: `crashed` (its owner process gone while its row said
# `running`) with when and how that was found; the exit code and one sentence of a run that ended cleanly; the Prefect
# flow run of a pipeline (and where its API was), so a crash found later is marked there too.
MIGRATIONS.append(
    (
        16,
        "run endings: when and how a run ended (crashed runs found after their owner died), its exit code, and the "
        "Prefect flow run of a pipeline",
        [
            "ALTER TABLE runs ADD COLUMN IF NOT EXISTS ended_at TIMESTAMP",  # ended, or (crashed) when that was found
            "ALTER TABLE runs ADD COLUMN IF NOT EXISTS end_reason VARCHAR",  # one sentence: how it ended or was found
            "ALTER TABLE runs ADD COLUMN IF NOT EXISTS exit_code INTEGER",  # the command's (NULL: crashed, or running)
            "ALTER TABLE runs ADD COLUMN IF NOT EXISTS flow_run_id VARCHAR",  # the pipeline's Prefect flow run
            "ALTER TABLE runs ADD COLUMN IF NOT EXISTS prefect_api_url VARCHAR",  # the API that flow run reported to
            "ALTER TABLE runs ADD COLUMN IF NOT EXISTS prefect_home VARCHAR",  # PREFECT_HOME of the flow process
        ],
    )
)

TABLES = [
    "runs", "problems", "kernels", "blobs", "rollouts", "evaluations", "rewards", "train_steps",
    "checkpoints", "curriculum_events", "corpus_docs", "embeddings", "index_builds", "eval_reports",
    "baselines", "eval_samples", "sft_steps", "model_answers",
]
