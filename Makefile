# The two commands of the README: `make demo` (the main job) and `make test` (the test suite).
# Both create .venv and install the project on first use. torch is pinned to the CPU build through
# constraints-cpu.txt so that no resolver ever pulls CUDA wheels on a CPU machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install clean-venv

install: $(STAMP)

# pip's chatter goes to .venv/install.log; on failure its tail is shown.
$(STAMP): pyproject.toml constraints-cpu.txt setup.cfg
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing into $(VENV) (first run only: a few minutes; log in $(VENV)/install.log)"
	@($(BIN)/python -m pip install --constraint constraints-cpu.txt torch && \
	  $(BIN)/python -m pip install --constraint constraints-cpu.txt --editable '.[dev,trl]') \
	  > $(VENV)/install.log 2>&1 || { tail -30 $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

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
