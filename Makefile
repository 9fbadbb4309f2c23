# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.stamp-setup

.PHONY: setup demo test check lint types docs wheel clean

setup: $(STAMP)

# Re-install only when the pins change, so a second run takes a second.
$(STAMP): pyproject.toml constraints.txt scripts/ensure_services.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==26.3 || true
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,dev]'
	bash scripts/ensure_services.sh
	touch $(STAMP)

# 10 minutes, not the default 5.5: the scenario's p99 at 20 req/s is decided by 3,000 answers
# (150 s), which the run holds back for its confirmation only when the stages before it keep
# their usual time (optimize/confirm_stage.py, decisive_reserve_s)
demo: setup
	$(VENV)/bin/infertune optimize minilm --scenario examples/scenarios/minilm-cpu.yaml --out runs/demo --overwrite --budget 10m

# The fast tests and the slow ones that time nothing (exports, INT8 passes: marked timing_free)
# on two workers, each module on one worker so a module's shared fixture is built once; then the
# slow ones that time something (load tests, whole optimize runs with a budget, Ray, services)
# one at a time, so no measurement shares the cores with another test.
test: setup
	$(VENV)/bin/pytest -q -m "not slow or timing_free" -n 2 --dist loadscope --durations=10
	$(VENV)/bin/pytest -q -m "slow and not timing_free" --durations=15

# The quick loop before a commit: lint, types and the tests not marked slow, on two workers
# (under 2 minutes on 2 cores). `make test` runs everything, slow tests and services included.
check: lint types
	$(VENV)/bin/pytest -q -m "not slow" -n 2

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

types: setup
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml, docs/): --strict fails on a broken link or a page missing
# from the nav. The site goes to build/site (git-ignored).
docs: setup
	$(VENV)/bin/mkdocs build --strict --quiet --site-dir build/site

# Build the wheel, install it (not editable) into a fresh venv, run doctor/advise/optimize.
wheel: setup
	bash scripts/check_wheel.sh

clean:
	rm -rf $(VENV) runs .pytest_cache
