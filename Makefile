# S4 / S4D reproduction suite. `make all` sets up and runs the smoke tier of every table; `make test` tests.
# Runs and reports go to the local store (local/results/, local/tables/: git-ignored), so these targets leave the
# tracked tree unchanged; check reads the committed results/ overlaid by local/results/ and names each verdict's
# store. Maintainers: `make reference-report` regenerates tables/ from results/ (results land there with
# `python -m runners run --reference ...`).
# TIER=smoke|budget|full selects the tier of a table target, e.g. `make s4-table-2 TIER=budget`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TIER ?= smoke
# torch 2.13.0 CPU lies on the CI machines' disk; on a GPU machine use e.g. TORCH=torch==2.11.0 (or your own build).
TORCH ?= torch==2.13.0
# DATA=suite: the tier's configuration on data the suite generates (`make s4-table-4 TIER=full DATA=suite`);
# GPUS=0,1,2,3: one training cell per GPU, resumable (`make s4d-table-5 TIER=full DATA=suite GPUS=0,1,2,3`)
DATA ?= release
RUN_OPTS = $(if $(filter-out release,$(DATA)),--data $(DATA)) $(if $(GPUS),--gpus $(GPUS))
TABLE = $(PY) -m runners run --tier $(TIER) $(RUN_OPTS) $(1) ; status=$$?; $(PY) -m runners report >/dev/null; \
	[ $$status -ne 0 ] && exit $$status; $(PY) -m runners check --tier $(TIER) $(1)

.PHONY: all setup smoke test report reference-report check list bench-kernels bench-layers analytic resolution-change init-ablation \
	s4-table-2 s4-table-3 s4-table-4 s4-table-5 s4-table-6 s4-generation lra-pathx \
	s4d-table-2 s4d-table-3 s4d-table-4 s4d-table-5 s4d-table-6 s4d-table-11 \
	s4d-theorem-3 s4d-conjecture-5 s4d-theorem-6 s4d-figure-4 s4d-proposition-1

all: smoke

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed

smoke: setup
	$(PY) -m runners run --tier smoke --no-progress
	$(PY) -m runners report
	$(PY) -m runners check --tier smoke

test: setup
	$(PY) -m pytest -q -ra -n auto

report: setup
	$(PY) -m runners report

reference-report: setup
	$(PY) -m runners report --results reference

check: setup
	$(PY) -m runners check

list: setup
	$(PY) -m runners list

analytic: setup
	$(call TABLE,s4d-theorem-3 s4d-conjecture-5 s4d-theorem-6 s4d-figure-4 s4d-proposition-1)

bench-kernels: setup
	$(PY) -m benchmarks.bench_kernels $(if $(OFFICIAL_S4),--official $(OFFICIAL_S4))

bench-layers: setup
	$(PY) -m benchmarks.bench_layers $(if $(OFFICIAL_S4),--official $(OFFICIAL_S4))

s4-table-2: setup ; $(call TABLE,s4-table-2)
s4-table-3: setup ; $(call TABLE,s4-table-3)
s4-table-4: setup ; $(call TABLE,s4-table-4)
s4-table-5: setup ; $(call TABLE,s4-table-5)
s4-table-6: setup ; $(call TABLE,s4-table-6)
s4-generation: setup ; $(call TABLE,s4-generation)
lra-pathx: setup ; $(call TABLE,lra-pathx)
resolution-change: setup ; $(call TABLE,resolution-change)
init-ablation: setup ; $(call TABLE,init-ablation)
s4d-table-2: setup ; $(call TABLE,s4d-table-2)
s4d-table-3: setup ; $(call TABLE,s4d-table-3)
s4d-table-4: setup ; $(call TABLE,s4d-table-4)
s4d-table-5: setup ; $(call TABLE,s4d-table-5)
s4d-table-6: setup ; $(call TABLE,s4d-table-6)
s4d-table-11: setup ; $(call TABLE,s4d-table-11)
s4d-theorem-3: setup ; $(call TABLE,s4d-theorem-3)
s4d-conjecture-5: setup ; $(call TABLE,s4d-conjecture-5)
s4d-theorem-6: setup ; $(call TABLE,s4d-theorem-6)
s4d-figure-4: setup ; $(call TABLE,s4d-figure-4)
s4d-proposition-1: setup ; $(call TABLE,s4d-proposition-1)
