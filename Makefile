# The two commands of the README. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# One intra-op thread: on 2-core machines torch's default of 2 stalled 10-100x whenever the other core was busy.
export OMP_NUM_THREADS ?= 1

.PHONY: train test test-slow clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/python -m rl_gpu train --output artifacts/make-train --overwrite --seeds 11 --device auto

# lint-imports checks the layering contracts of pyproject.toml ([tool.importlinter]) before the tests run.
# pytest-xdist runs the tests in one worker per core (at most 4): each test is single-threaded. worksteal: a worker
# that runs out of tests takes some from a busy one, so a few long tests near the end do not leave a core idle.
PYTEST_WORKERS ?= -n auto --maxprocesses 4 --dist worksteal

test: $(STAMP)
	$(BIN)/lint-imports --no-cache --no-logo
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow $(PYTEST_WORKERS)

clean:
	rm -rf $(VENV) artifacts .pytest_cache
