# commlens: two entry points for a fresh machine.
#   make bench   set up, then run a local 4-rank sweep on gloo/CPU (printed and stored)
#   make test    set up, then run the whole test suite (what .ci/run runs)

PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.commlens-setup

.PHONY: setup bench test clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup.sh
	touch $(STAMP)

bench: $(STAMP)
	$(VENV)/bin/commlens bench --nproc 4 --op all_reduce,all_gather,reduce_scatter,all_to_all -b 8 -e 64M -f 4

test: $(STAMP)
	VENV=$(VENV) bash scripts/test.sh

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
