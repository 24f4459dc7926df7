# The few commands people need. `make run` and `make test` set up everything themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test lint format bench clean

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

run: $(VENV)/.installed-run
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput -v 0
	exec $(PY) -m evalhub.runall

test: $(VENV)/.installed-dev
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed-dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) var
