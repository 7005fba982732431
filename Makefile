# The two commands of the README: `make demo` (the main job) and `make test` (the test suite).
# Both create .venv and install the project on first use, from requirements-cpu.lock: every package at
# the version the suite passed with, CPU torch included, installed with --no-deps so nothing else is
# resolved (scripts/lock.sh says why a frozen environment, not a resolver's lock). `make lock` refreshes it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements-cpu.lock

.PHONY: demo test install lock clean-venv

install: $(STAMP)

# pip's chatter goes to .venv/install.log; on failure its tail is shown. --no-build-isolation: the project
# builds with the lock's setuptools, not one fetched for the build.
$(STAMP): $(LOCK) pyproject.toml setup.cfg
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing into $(VENV) (first run only: a few minutes; log in $(VENV)/install.log)"
	@($(BIN)/python -m pip install --no-deps --requirement $(LOCK) && \
	  $(BIN)/python -m pip install --no-deps --no-build-isolation --editable .) \
	  > $(VENV)/install.log 2>&1 || { tail -30 $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

# Resolve pyproject.toml's ranges afresh into requirements-cpu.lock (then run `make test` before committing it).
lock:
	bash scripts/lock.sh $(PYTHON)

# The linter first (ruff, configured in pyproject.toml): a finding fails `make test` before pytest runs.
# pytest exits 5 when it collected no test: that is a broken suite here, not a pass.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest; status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$status

# The main job: the embedded ScaleRL LOO sweep, ending in a LOO table, a PDF report and MLflow runs.
# Rerun it to resume after an interruption.
demo: $(STAMP)
	$(BIN)/sweep run sweeps/loo.yaml

clean-venv:
	rm -rf $(VENV)
