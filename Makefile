# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.stamp-setup

.PHONY: setup demo test lint clean

setup: $(STAMP)

# Re-install only when the pins change, so a second run takes a second.
$(STAMP): pyproject.toml constraints.txt scripts/ensure_services.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==26.3 || true
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,dev]'
	bash scripts/ensure_services.sh
	touch $(STAMP)

demo: setup
	$(VENV)/bin/infertune optimize minilm --scenario examples/scenarios/minilm-cpu.yaml --out runs/demo --overwrite

test: setup
	$(VENV)/bin/pytest -q

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache
