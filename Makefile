# gpu-tenancy: `make up` builds the lab, `make test` checks the code, `make help` lists every target.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= dev
# Extra flags for `pulumi up` / `pulumi destroy` / `pulumi refresh`, e.g. PULUMI_FLAGS=--yes
PULUMI_FLAGS ?=
# `make up REPLACE=<urn>` replaces that resource in the update (pulumi up --replace)
REPLACE ?=
STATE_DIR := .pulumi-state
# Generated, never committed (git-ignored): `make graph` output.
BUILD := build
# The lab tests, `make docs` and `make e2e` use; Pulumi.dev.yaml ships with the same keys and is yours to edit.
REFERENCE_STACK := tests/fixtures/reference-stack.yaml

# The local backend encrypts secrets with a passphrase. Unless you provide one, a random passphrase is generated
# once, OUTSIDE the project directory (a copy of the project then holds the encrypted state but not its key):
# ~/.config/gpu-tenancy/<stack>-<hash of this directory>.passphrase, mode 600. Keep it: it is the only key to the
# secrets in the state.
PASSPHRASE_DIR ?= $(HOME)/.config/gpu-tenancy
ifeq ($(origin PULUMI_CONFIG_PASSPHRASE),undefined)
export PULUMI_CONFIG_PASSPHRASE_FILE ?= $(PASSPHRASE_DIR)/$(STACK)-$(shell printf '%s' '$(CURDIR)' | sha256sum | cut -c1-12).passphrase
endif

# `make graph TENANTS=32` analyses N generated tenants instead of the stack file.
TENANTS ?=
# `make secret KEY=<key path> FILE=<file>`
KEY ?=
FILE ?=
# `make kubeconfig TENANT=<name> [ADMIN=1]`; `make verify DISRUPTIVE=1 [TENANT=<name>]`
TENANT ?=
DISRUPTIVE ?=
ADMIN ?=

.PHONY: help venv lint test test-product preflight upstream charts backend pulumi-cli secret preview up down refresh status verify plan graph bench docs snapshots e2e kubeconfig

help:
	@echo "make up          preflight, the pinned Helm charts, local backend, stack '$(STACK)', pulumi up"
	@echo "make up REPLACE=<urn>  the same, replacing that one resource (its URN: pulumi stack --show-urns)"
	@echo "make down        pulumi destroy the stack '$(STACK)'"
	@echo "make refresh     pulumi refresh the stack '$(STACK)' (its state from what exists now)"
	@echo "make secret      KEY=<key path> FILE=<file>: the file's content as an encrypted config value, via stdin"
	@echo "make preview     preflight, the pinned Helm charts, local backend, pulumi preview of stack '$(STACK)'"
	@echo "make status      one table per tenant: endpoint, nodes, cards and slots, what the smoke test proved"
	@echo "make verify      check the running platform of stack '$(STACK)' (exit 0 = every check holds)"
	@echo "make verify DISRUPTIVE=1 [TENANT=<name>]  also cut one tenant's Konnectivity tunnel (a GPU pod must be"
	@echo "                 rejected), then restore it; the tenant's GPU pods cannot be created meanwhile"
	@echo "make kubeconfig TENANT=<name> [ADMIN=1]  write the tenant's user (or admin) kubeconfig, mode 600"
	@echo "make test        create .venv, install pinned dependencies, lint, run the tests"
	@echo "make test-product  the product's tests alone, without the repository checks (README, docs, Makefile, ...)"
	@echo "make lint        ruff on the Python code, shellcheck on components/*/scripts/*.sh and ops/scripts/*.sh"
	@echo "make preflight   check this host and Pulumi.$(STACK).yaml (about a second)"
	@echo "make upstream    download the pinned upstream reference files (CRDs, chart values), check their sha256"
	@echo "make charts      download each pinned Helm chart once into .cache/charts, check it against its sha256"
	@echo "make plan        where HAMi would place each declared GPU workload, quota figures; a picture (build/)"
	@echo "make graph       resources, longest dependency chain and tenant coupling, without a cluster (build/)"
	@echo "make bench       graph and image-pull benchmark for 2, 8 and 32 tenants"
	@echo "make docs        regenerate docs/dependency-graph.md and the docs' samples from the reference stack"
	@echo "make snapshots   rewrite tests/fixtures/snapshots/ (generated objects, whole) from the code; review with git diff"
	@echo "make e2e         the real lifecycle on this Docker host (tests/e2e: up and verify, changes, upgrade, destroy)"
	@echo "make venv, make backend, make pulumi-cli: the steps the targets above use"

# The host check (standard library only, run by $(PYTHON) itself) names each missing apt package before the venv
# is made: a stock Ubuntu 24.04 has no ensurepip without python3.12-venv.
$(VENV)/.installed: requirements.txt requirements-dev.txt
	@command -v $(PYTHON) >/dev/null || { echo "missing: $(PYTHON): sudo apt-get install python3 python3-venv" >&2; exit 1; }
	@$(PYTHON) -m ops.hostcheck
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/shellcheck -x components/*/scripts/*.sh ops/scripts/*.sh

# pytest-xdist workers: one per CPU (`auto`; the CI runner has 2). Each test file runs whole on one worker
# (--dist loadfile), so a module's shared first `up` runs once. TEST_JOBS=0 runs in one process (for --pdb, -x).
TEST_JOBS ?= auto

test: lint
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadfile

# The product's tests alone, without the checks marked `repo` (README, docs, Makefile, workflows, comments, layout).
test-product: venv
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadfile -m "not repo"

preflight: venv
	$(PY) -m ops.preflight --stack $(STACK) --charts

upstream: venv
	$(PY) -m ops.upstream fetch --group reference

charts: venv
	$(PY) -m ops.upstream fetch --group chart

pulumi-cli:
	@command -v pulumi >/dev/null || { $(PYTHON) -m ops.hostcheck pulumi; exit 1; }

backend: pulumi-cli venv
	@mkdir -p $(STATE_DIR)
	@$(PY) -m ops.passphrase --stack $(STACK) --state-dir $(STATE_DIR)
	pulumi stack select $(STACK) --create

# A credential goes in from a file on pulumi's stdin (pulumi config set reads the value from stdin when it is not a
# terminal, dropping one trailing newline: pulumi/pulumi pkg/cmd/pulumi/config/config_set.go), so it is never on a
# command line (ps, /proc/<pid>/cmdline), in the shell history or in /tmp; the make variables carry only its path.
# After `backend`, so pulumi encrypts with this stack's passphrase file; without KEY and FILE, no prerequisite: the
# usage comes before any install hint.
secret: $(if $(KEY),$(if $(FILE),backend))
	@test -n '$(KEY)' && test -n '$(FILE)' || { echo "usage: make secret STACK=$(STACK) KEY='<key path, e.g. management.kubeconfig>' FILE=<file>" >&2; exit 2; }
	@test -r '$(FILE)' || { echo "make secret: cannot read FILE=$(FILE)" >&2; exit 2; }
	pulumi config set --secret --stack $(STACK) --path 'gpu-tenancy:$(KEY)' < '$(FILE)'

# pulumi-kubernetes writes each provider's kubeconfig to a temporary file and never removes it (provider/pkg/
# provider/provider.go writeKubeconfigToFile): Pulumi runs with a private TMPDIR (mktemp -d: mode 700) that is
# removed when it ends. Every pulumi command the docs give goes through one of these targets.
PRIVATE_TMP := tmp="$$(mktemp -d)" && trap 'rm -rf "$$tmp"' EXIT && TMPDIR="$$tmp"

# What `make up` and `make preview` do first, in this order, one step after the other: the host and stack checks (no
# download needed, so the preflight table appears even offline), then the pinned charts (the fetch stops at the first
# unreachable host), then their check, then the backend and stack.
define BEFORE_PULUMI
	@$(PY) -m ops.preflight --stack $(STACK)
	$(PY) -m ops.upstream fetch --group chart
	@$(PY) -m ops.upstream verify --group chart
	+@$(MAKE) --no-print-directory backend
endef

up: venv
	$(BEFORE_PULUMI)
	$(PRIVATE_TMP) pulumi up --stack $(STACK) $(if $(value REPLACE),--replace '$(value REPLACE)') $(PULUMI_FLAGS)
	@$(PY) -m ops.status --stack $(STACK) || true

# What `make up` would do, with the same steps before it (and the same private TMPDIR: the kubeconfig file).
preview: venv
	$(BEFORE_PULUMI)
	$(PRIVATE_TMP) pulumi preview --stack $(STACK) $(PULUMI_FLAGS)

# A cluster that no longer answers cannot stop a tear-down: its objects are dropped from the state
# (pulumi-kubernetes reads PULUMI_K8S_DELETE_UNREACHABLE; an adopted cluster's provider refuses it explicitly).
down: pulumi-cli venv backend
	$(PRIVATE_TMP) PULUMI_K8S_DELETE_UNREACHABLE=true pulumi destroy --stack $(STACK) $(PULUMI_FLAGS)

refresh: pulumi-cli venv backend
	$(PRIVATE_TMP) pulumi refresh --stack $(STACK) $(PULUMI_FLAGS)

status: pulumi-cli venv
	$(PY) -m ops.status --stack $(STACK)

verify: pulumi-cli venv
	$(PY) -m ops.verify --stack $(STACK) $(if $(DISRUPTIVE),--disruptive $(if $(TENANT),--disrupt-tenant '$(TENANT)'))

plan: venv
	@mkdir -p $(BUILD)
	$(PY) -m ops.plan --stack $(STACK) --svg $(BUILD)/gpu-plan-$(STACK).svg

graph: venv
	@mkdir -p $(BUILD)
ifeq ($(TENANTS),)
	$(PY) -m ops.graph --stack $(STACK) --mermaid $(BUILD)/dependency-graph.md
else
	$(PY) -m ops.graph --tenants $(TENANTS) --mermaid $(BUILD)/dependency-graph-$(TENANTS).md
endif

docs: venv
	$(PY) -m ops.graph --stack-file $(REFERENCE_STACK) --mermaid docs/dependency-graph.md
	$(PY) -m tests.support.readme

snapshots: venv
	$(PY) -m tests.support.snapshots

bench: venv
	$(PY) -m bench.graph_bench
	$(PY) -m bench.image_pulls

# The host checks first (no download needed, so a host without Docker, kind or pulumi says so even offline), then
# the pinned charts, as `make up` does.
e2e: venv
	@$(PY) -m ops.preflight
	@$(MAKE) --no-print-directory charts
	GPU_TENANCY_E2E=1 $(PY) -m pytest -m e2e tests/e2e -v -rs

# The usage first, then the prerequisites (a sub-make, so a missing TENANT is said before a missing pulumi).
kubeconfig:
	@test -n "$(TENANT)" || { echo "usage: make kubeconfig TENANT=<tenant name> [ADMIN=1]" >&2; exit 2; }
	@$(MAKE) --no-print-directory pulumi-cli venv
	@$(PY) -m ops.kubeconfig --stack $(STACK) --tenant '$(TENANT)' $(if $(ADMIN),--admin)
