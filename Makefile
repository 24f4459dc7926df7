# The few commands people need. `make run` and `make test` set up everything themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run demo test lint format bench clean synth-venvs env-venvs

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Reinstalled when pyproject.toml changes.
$(VENV)/.installed-run: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[dev]'
	# synth-ai's clients are tested against evalhub. Its declared dependencies (dspy, datasets,
	# torch-sized extras) are far more than its eval clients import: install it alone; the dev
	# extra lists what those imports need.
	$(PY) -m pip install -q --no-deps synth-ai==0.4.4
	touch $@ $(VENV)/.installed-run

# Newer synth-ai releases, each in a virtualenv of its own with only what its task-app framework
# and eval clients import (tests/support/synth_venvs/<version>.txt); rebuilt when that changes.
SYNTH_VERSIONS := 0.5.0 0.7.3
SYNTH_VENVS := $(foreach v,$(SYNTH_VERSIONS),.venv-synth/$(v)/.installed)

.venv-synth/%/.installed: tests/support/synth_venvs/%.txt
	rm -rf .venv-synth/$*
	$(PYTHON) -m venv .venv-synth/$*
	.venv-synth/$*/bin/python -m pip install -q --disable-pip-version-check -r $<
	.venv-synth/$*/bin/python -m pip install -q --disable-pip-version-check --no-deps synth-ai==$*
	touch $@

synth-venvs: $(SYNTH_VENVS)

# The environment servers of other ecosystems the tests run jobs against (tests/environments):
# eval-protocol's MCP-Gym, OpenEnv, Atropos. Each is a virtualenv of its own built from
# tests/support/env_venvs/<name>.txt (their dependencies are far heavier than evalhub's and
# pin other versions of the same libraries); evalhub goes in with --no-deps for the
# `evalhub-atropos` console script.
ENV_NAMES := eval-protocol openenv atroposlib
ENV_VENVS := $(foreach n,$(ENV_NAMES),.venv-env/$(n)/.installed)

.venv-env/%/.installed: tests/support/env_venvs/%.txt
	rm -rf .venv-env/$*
	$(PYTHON) -m venv .venv-env/$*
	.venv-env/$*/bin/python -m pip install -q --disable-pip-version-check -r $<
	.venv-env/$*/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

env-venvs: $(ENV_VENVS)

run: $(VENV)/.installed-run
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput -v 0
	exec $(PY) -m evalhub.runall

# The demo's example task app and fake provider need FastAPI and the OpenAI SDK (the `demo` extra).
$(VENV)/.installed-demo: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[demo]'
	touch $@ $(VENV)/.installed-run

demo: $(VENV)/.installed-demo
	exec $(PY) -m evalhub.demo $(DEMO_ARGS)

test: $(VENV)/.installed-dev $(SYNTH_VENVS) $(ENV_VENVS)
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) -m pytest $(PYTEST_ARGS)

# The peers the benchmark compares evalhub with (LiteLLM's proxy, pinned) and py-spy, in a
# virtualenv of their own so the runtime install stays lean; rebuilt when the list changes.
.venv-bench/.installed: bench/requirements-peers.txt
	rm -rf .venv-bench
	$(PYTHON) -m venv .venv-bench
	.venv-bench/bin/python -m pip install -q --disable-pip-version-check -r $<
	touch $@

# One table, every figure beside its baseline measured in the same run (bench/run_all.py).
# BENCH_ARGS=--quick checks that it works in a few minutes (its figures are noise).
bench: $(VENV)/.installed-dev .venv-bench/.installed
	$(PY) bench/run_all.py $(BENCH_ARGS)

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed-dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .venv-synth .venv-bench .venv-env var
