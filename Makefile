# gpu-tenancy: `make up` builds the lab, `make test` checks the code.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= dev
# Extra flags for `pulumi up` / `pulumi destroy`, e.g. PULUMI_FLAGS=--yes
PULUMI_FLAGS ?=
STATE_DIR := .pulumi-state

# The local backend encrypts secrets with a passphrase. Unless you provide
# one, a random passphrase is generated once into .pulumi-passphrase (mode 600,
# git-ignored): keep it, it is the only key to the secrets in the state.
ifeq ($(origin PULUMI_CONFIG_PASSPHRASE),undefined)
export PULUMI_CONFIG_PASSPHRASE_FILE ?= $(CURDIR)/.pulumi-passphrase
endif

# `make graph TENANTS=32` analyses N generated tenants instead of the stack file.
TENANTS ?=

.PHONY: help venv lint test preflight backend up down verify graph bench e2e kubeconfig

help:
	@echo "make up      preflight, local backend, stack '$(STACK)', pulumi up"
	@echo "make test    create .venv, install pinned dependencies, lint, run the tests"
	@echo "make down    pulumi destroy the stack '$(STACK)'"
	@echo "make kubeconfig TENANT=<name>  write <name>.kubeconfig (mode 600) from the stack outputs"
	@echo "make verify  check the running platform of stack '$(STACK)' (exit 0 = every check holds)"
	@echo "make graph   resources, longest dependency chain and tenant coupling, without a cluster"
	@echo "make bench   graph benchmark for 2, 8 and 32 tenants"
	@echo "make e2e     full lifecycle on this Docker host (up, verify, update, no-op, destroy)"

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

lint: venv
	$(VENV)/bin/ruff check .

test: lint
	$(PY) -m pytest

preflight: venv
	$(PY) -m tools.preflight --stack $(STACK)

backend:
	@mkdir -p $(STATE_DIR)
	@if [ -n "$${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ] && [ ! -s "$$PULUMI_CONFIG_PASSPHRASE_FILE" ]; then \
		(umask 077 && $(PY) -c 'import secrets; print(secrets.token_urlsafe(32))' > "$$PULUMI_CONFIG_PASSPHRASE_FILE"); \
		echo "generated $$PULUMI_CONFIG_PASSPHRASE_FILE (keep it: it decrypts the stack's secrets)"; \
	fi
	pulumi stack select $(STACK) --create

up: preflight backend
	pulumi up --stack $(STACK) $(PULUMI_FLAGS)

down: venv backend
	pulumi destroy --stack $(STACK) $(PULUMI_FLAGS)

verify: venv
	$(PY) -m tools.verify --stack $(STACK)

graph: venv
ifeq ($(TENANTS),)
	$(PY) -m tools.graph --stack $(STACK) --mermaid docs/dependency-graph.md
else
	$(PY) -m tools.graph --tenants $(TENANTS) --mermaid dependency-graph-$(TENANTS).md
endif

bench: venv
	$(PY) -m bench.graph_bench

e2e: venv
	GPU_TENANCY_E2E=1 $(PY) -m pytest -m e2e tests/e2e -v -rs

kubeconfig: venv
	@test -n "$(TENANT)" || { echo "usage: make kubeconfig TENANT=<tenant name>" >&2; exit 2; }
	@umask 077 && pulumi stack output tenantKubeconfigs --show-secrets --json --stack $(STACK) \
		| $(PY) -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$(TENANT)" > "$(TENANT).kubeconfig"
	@echo "wrote $(TENANT).kubeconfig (tenant admin credentials: keep it private)"
