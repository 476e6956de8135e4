# commlens: two entry points for a fresh machine, and the lint CI runs before the tests.
#   make bench   set up, then run a local 4-rank sweep on gloo/CPU (printed and stored)
#   make test    set up, then run the whole test suite (what .ci/run runs); as root it apt-installs the
#                services the tests need, starting and enabling none (README, scripts/test.sh)
#   make lint    set up, then ruff check, ruff format --check and mypy (.ci/run runs it before the tests)

PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.commlens-setup

.PHONY: setup bench test lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup.sh
	touch $(STAMP)

bench: $(STAMP)
	$(VENV)/bin/commlens bench --nproc 4 --op all_reduce,all_gather,reduce_scatter,all_to_all -b 8 -e 64M -f 4

test: $(STAMP)
	VENV=$(VENV) bash scripts/test.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
