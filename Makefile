# Two commands on a fresh machine: `make run` (the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test serve bench-gpu clean

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

test: $(STAMP)
	$(PY) -m pytest -q -ra

serve: $(STAMP)
	$(VENV)/bin/kernelbench-rl serve

clean:
	rm -rf $(VENV) runs .pytest_cache
