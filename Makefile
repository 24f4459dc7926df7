# The few commands people need. `make run` and `make test` set up everything themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run demo fake-llm test test-venvs lint format bench clean synth-venvs env-venvs client-venv

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Reinstalled when pyproject.toml changes. The `evalhub` command (client/) comes along, and
# the `demo` extra (FastAPI and the OpenAI SDK): the example task app and the 30-line one of
# docs/task-apps.md, which the first job of the docs serves from this virtualenv, need them.
$(VENV)/.installed-run: pyproject.toml client/pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[demo]' -e ./client
	touch $@

# The test and bench virtualenvs (eight of them, 4 GB) are installed with uv, from PyPI into
# .venv: it resolves the same versions pip would and links them from its cache. Not compiled
# as installed (pip's compiling of every file was most of its seven minutes here): the suite
# writes each module's bytecode the first time one of its processes imports it (`test`).
UV := $(VENV)/bin/uv
UV_INSTALL = $(UV) pip install -q --python

$(UV): | $(VENV)/bin/python
	$(PY) -m pip install -q 'uv>=0.9'

$(VENV)/.installed-dev: pyproject.toml client/pyproject.toml | $(UV)
	$(UV_INSTALL) $(PY) -e '.[dev]' -e ./client
	# synth-ai's clients are tested against evalhub. Its declared dependencies (dspy, datasets,
	# torch-sized extras) are far more than its eval clients import: install it alone; the dev
	# extra lists what those imports need.
	$(UV_INSTALL) $(PY) --no-deps synth-ai==0.4.4
	touch $@ $(VENV)/.installed-run

# Newer synth-ai releases, each in a virtualenv of its own with only what its task-app framework
# and eval clients import (tests/support/synth_venvs/<version>.txt); rebuilt when that changes.
SYNTH_VERSIONS := 0.5.0 0.7.3
SYNTH_VENVS := $(foreach v,$(SYNTH_VERSIONS),.venv-synth/$(v)/.installed)

.venv-synth/%/.installed: tests/support/synth_venvs/%.txt | $(UV)
	rm -rf .venv-synth/$*
	$(PYTHON) -m venv --without-pip .venv-synth/$*
	$(UV_INSTALL) .venv-synth/$*/bin/python -r $<
	$(UV_INSTALL) .venv-synth/$*/bin/python --no-deps synth-ai==$*
	touch $@

synth-venvs: $(SYNTH_VENVS)

# The environment servers of other ecosystems the tests run jobs against (tests/environments):
# eval-protocol's MCP-Gym, OpenEnv, Atropos. Each is a virtualenv of its own built from
# tests/support/env_venvs/<name>.txt (their dependencies are far heavier than evalhub's and
# pin other versions of the same libraries); evalhub goes in with --no-deps for the
# `evalhub-atropos` console script.
ENV_NAMES := eval-protocol openenv atroposlib
ENV_VENVS := $(foreach n,$(ENV_NAMES),.venv-env/$(n)/.evalhub)
# The peers of the observability tests (tests/observability), built the same way without
# evalhub: Arize Phoenix (an OTLP trace collector and UI) and Inspect AI (its log reader).
PEER_NAMES := phoenix inspect
ENV_VENVS += $(foreach n,$(PEER_NAMES),.venv-env/$(n)/.installed)

.venv-env/%/.installed: tests/support/env_venvs/%.txt | $(UV)
	rm -rf .venv-env/$*
	$(PYTHON) -m venv --without-pip .venv-env/$*
	$(UV_INSTALL) .venv-env/$*/bin/python -r $<
	touch $@

# Kept: a stamp made on the way to another is otherwise removed by make, and the venv rebuilt.
.PRECIOUS: .venv-env/%/.installed

# evalhub itself again whenever pyproject.toml changes (its console scripts' entry points).
.venv-env/%/.evalhub: .venv-env/%/.installed pyproject.toml
	$(UV_INSTALL) .venv-env/$*/bin/python --no-deps -e .
	touch $@

env-venvs: $(ENV_VENVS)

# The `evalhub` command installed alone, as on a laptop or a CI runner: a virtualenv holding
# only client/ and its dependencies (tests/client runs its executable); rebuilt when it changes.
CLIENT_SOURCES := client/pyproject.toml $(wildcard client/evalhub_client/*.py)

.venv-client/.installed: $(CLIENT_SOURCES) | $(UV)
	rm -rf .venv-client
	$(PYTHON) -m venv --without-pip .venv-client
	$(UV_INSTALL) .venv-client/bin/python ./client
	touch $@

client-venv: .venv-client/.installed

run: $(VENV)/.installed-run
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput -v 0
	exec $(PY) -m evalhub.runall

# A fake LLM provider for `make run` without a paid one (evalhub/fakeprovider): it prints the two
# settings to start evalhub with. FAKE_LLM_PORT chooses its port.
FAKE_LLM_PORT ?= 8011
fake-llm: $(VENV)/.installed-run
	exec $(PY) -m evalhub.fakeprovider --port $(FAKE_LLM_PORT)

demo: $(VENV)/.installed-run
	exec $(PY) -m evalhub.demo $(DEMO_ARGS)

# The test virtualenvs are independent of each other: built side by side.
test-venvs: $(VENV)/.installed-dev $(SYNTH_VENVS) $(ENV_VENVS) .venv-client/.installed

# The suite starts hundreds of Python processes (workers, web servers, peers): the first to
# import a module writes its bytecode for the others, even where the environment sets
# PYTHONDONTWRITEBYTECODE (else each would compile all it imports again).
test:
	$(MAKE) --no-print-directory -j4 test-venvs
	$(PY) manage.py makemigrations --check --dry-run
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest $(PYTEST_ARGS)

# The peers the benchmark compares evalhub with (LiteLLM's proxy, pinned) and py-spy, in a
# virtualenv of their own so the runtime install stays lean; rebuilt when the list changes.
.venv-bench/.installed: bench/requirements-peers.txt | $(UV)
	rm -rf .venv-bench
	$(PYTHON) -m venv --without-pip .venv-bench
	$(UV_INSTALL) .venv-bench/bin/python -r $<
	touch $@

# One table, every figure beside its baseline measured in the same run (bench/run_all.py).
# BENCH_ARGS=--quick checks that it works in a few minutes (its figures are noise).
# As for the suite, the bytecode is written once: with PYTHONDONTWRITEBYTECODE set, every worker
# and web process the benchmarks start compiled all it imported (most of a capped worker's minute
# of start-up).
bench: $(VENV)/.installed-dev .venv-bench/.installed
	env -u PYTHONDONTWRITEBYTECODE $(PY) bench/run_all.py $(BENCH_ARGS)

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed-dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .venv-synth .venv-bench .venv-env .venv-client var
