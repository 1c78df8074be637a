# Two commands on a fresh machine: `make run` (the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-fast mutation serve bench-gpu clean

# torch first, pinned, so no resolver pulls the multi-GB CUDA build onto a CPU machine.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,trl]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/kernelbench-rl pipeline

# Both cores: pytest-xdist gives each worker whole test files (module fixtures such as an evaluator pool start once
# per file), the longest files first (tests/conftest.py orders them; --no-loadscope-reorder keeps that order), then
# the tests marked `alone` run with nothing beside them, collected only from the files that mark any. Both parts
# always run; either failing fails.
TEST_WORKERS ?= 2
ALONE_FILES = $(shell grep -rl --include='test_*.py' 'mark\.alone' tests)
test: $(STAMP)
	@status=0; \
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not alone" || status=$$?; \
	$(PY) -m pytest -q -ra -p no:xdist -m alone $(or $(ALONE_FILES),tests) || status=$$?; \
	exit $$status

# The fast tier, for everyday work (docs/testing.md): every test not marked `heavy` (tests/conftest.py marks those that
# start an evaluator pool, a server or a Python subprocess, or run long in-process), on both cores;
# tests/fast_tier.py fails any test of it that starts an interpreter, a pool or a server all the same.
# `make test` still runs everything.
test-fast: $(STAMP)
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) --dist load -p tests.fast_tier -m "not heavy"

# Mutation testing of the verdict, reward, GRPO and resume code, the evaluation's and the training's and store's
# signals that feed the reward, and the migrations' back-fill SQL (bench/mutation.py; a few hours on 2 cores).
mutation: $(STAMP)
	$(PY) -m pip install -q 'mutmut==3.8.1'
	$(PY) bench/mutation.py --out bench/results/mutation_cpu.json

serve: $(STAMP)
	$(VENV)/bin/kernelbench-rl serve

clean:
	rm -rf $(VENV) runs .pytest_cache mutants
