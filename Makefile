# The README's two commands live here: `make demo` and `make test`.
SHELL := /bin/bash
CLUSTER ?= dk
KUBECONFIG_LOCAL ?= /tmp/$(CLUSTER).kubeconfig
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test venv lint unit packaging verify cluster-up cluster-down docs bench bench-tenants chaos clean paths mk-up mk-down mk-test mk-chaos

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

## demo: build and start the local cluster and the admission controller, run the tutorial,
## stop what it started (a cluster or controller that was already running stays running).
demo: venv
	PYTHON=$(abspath $(PY)) ADMISSION_PYTHON=$(abspath $(PY)) \
	  deploy/local/demo.sh $(CLUSTER) $(KUBECONFIG_LOCAL)

## test: lint, unit tests, the packaging test, then every cluster test against the local
## cluster (started and stopped here) or the cluster named by $$KUBECONFIG.
test: venv lint unit packaging
	$(PY) -m pytest tests/verify
	$(PY) -m pytest -m machine tests/cluster
	$(PY) -m pytest -m 'not machine' tests/cluster
	$(PY) -m pytest -s tests/multikueue/test_flow.py

## paths: only the paths that make a pod without the readmission gate (a deleted JobSet, a
## later attempt, a finished rank, a queue that drops the check; part of `test` too) against
## $$KUBECONFIG or the local cluster; old pods linger 20 s in their TERM handler.
paths: venv
	$(PY) -m pytest -m paths tests/cluster

lint: venv
	$(VENV)/bin/ruff check dispatch_kubeflow admission tests bench examples docs verify chaos deploy/local/*.py
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	shellcheck -x deploy/local/*.sh deploy/kind/*.sh .ci/run chaos/ledger.sh

## unit: the unit suite, spread over up to four processes (pytest-xdist): most of its time is
## waits on the event loop, so two cores already halve it.
UNIT_WORKERS ?= auto
unit: venv
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest tests/unit -n $(UNIT_WORKERS) --maxprocesses 4

## packaging: build the sdist and the wheel, install each into fresh venvs (no extra, each
## extra; the checkout and git-URL forms of docs/install.md) and run every console script's
## --help there (tests/packaging; needs the package index, as `venv` does; about 75 s).
packaging: venv
	$(PY) -m pytest tests/packaging

## verify: model-check the readmission protocol with spin (and the variants that must fail).
verify: venv
	$(PY) verify/run.py

cluster-up: venv
	deploy/local/up.sh $(CLUSTER) $(KUBECONFIG_LOCAL)

cluster-down:
	deploy/local/down.sh $(CLUSTER)

## mk-up, mk-down: three local clusters for MultiKueue, a Kueue manager and two workers
## (deploy/local/multikueue.sh; docs/local-cluster.md). `test` runs the flow test (a job through MultiKueue); `mk-test` every one.
mk-up: venv
	deploy/local/multikueue.sh up

mk-down:
	deploy/local/multikueue.sh down

## mk-test: every MultiKueue test (tests/multikueue: the flow, the setup's cut and heal, a job's worker cut off, a hold; about 20 minutes warm).
mk-test: venv
	$(PY) -m pytest -s tests/multikueue

## docs: check the generated pages (the configuration reference, the kubectl captures, the
## figures of docs/data/, whose plots it draws), fetch the pinned Mermaid from the npm
## registry (once, into the cache), build the site, then load a page of it in headless
## Chromium and check that its diagram was drawn (tests/docs; a few seconds). The API
## reference's built page must hold no raw Sphinx role (:meth: ...): docs/check_rendered.py.
docs: venv
	$(PY) docs/gen_config_reference.py --check
	$(PY) docs/capture_kubectl.py --check
	$(PY) docs/gen_figures.py --check
	$(PY) docs/fetch_mermaid.py
	$(VENV)/bin/mkdocs build --strict
	$(PY) docs/check_rendered.py
	$(PY) -m pytest tests/docs

## bench: the local cluster's numbers (its own cluster), then the adapter's and the scale
## benchmark's against $$KUBECONFIG (a running cluster with the admission controller; for
## scale, the local cluster $$(CLUSTER), whose processes it measures), N = $$(SCALE_JOBS).
## The Kubeflow SDK has a venv of its own: its kubernetes client, once installed, is
## imported by kopf too, which slows every test process.
SCALE_JOBS ?= 50 200 1000
BENCH_VENV ?= .venv-bench
bench: venv
	test -x $(BENCH_VENV)/bin/python || python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q -e '.[bench]'
	$(PY) bench/cluster.py
	$(PY) bench/adapter.py
	$(BENCH_VENV)/bin/python bench/scale.py --jobs $(SCALE_JOBS) --cluster $(CLUSTER) --sdk 3

## bench-tenants: the controller beside another team's $$(FOREIGN) Workloads, N = $$(TENANT_JOBS)
## dispatch jobs without and then beside them, on the local cluster $$(CLUSTER) (issue 28);
## TENANT_FLAGS='--floor --fenced-floor' adds the scale benchmark's floors to the same run.
TENANT_JOBS ?= 1000
FOREIGN ?= 10000
TENANT_FLAGS ?=
bench-tenants: venv
	KUBECONFIG=$(KUBECONFIG_LOCAL) $(PY) bench/tenants.py --jobs $(TENANT_JOBS) \
	  --foreign $(FOREIGN) --cluster $(CLUSTER) $(TENANT_FLAGS)

## chaos: RUNS randomized runs of the fault suite from SEED against the local cluster
## $$(CLUSTER) (its fault tools too); results in chaos-results/ (docs/guarantees.md).
RUNS ?= 3
SEED ?= 1
chaos: venv
	$(PY) -m chaos.runner --runs $(RUNS) --seed $(SEED) --kubeconfig $(KUBECONFIG_LOCAL) \
	  --cluster $(CLUSTER) --out chaos-results

## mk-chaos: RUNS randomized runs of the MultiKueue campaign from SEED on the three local
## clusters (make mk-up first; 5 to 10 minutes a run); results in chaos-results/multikueue.
mk-chaos: venv
	$(PY) -m chaos.multikueue --runs $(RUNS) --seed $(SEED) --out chaos-results/multikueue

clean:
	rm -rf $(VENV) $(BENCH_VENV) site .mypy_cache .ruff_cache .pytest_cache
