# slurm-rl — the two commands in README.md are `make demo` and `make test`.
# Both work from nothing on Debian 12 as root, and are safe to run twice.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_PIN := torch==2.13.0
export SLURM_CONF := $(or $(SLURM_RL_CLUSTER_DIR),/var/tmp/slurm-rl-cluster)/etc/slurm.conf

.PHONY: demo test install system-deps cluster cluster-down lint typecheck unit clean

demo: install cluster
	$(VENV)/bin/python -m slurm_rl.demo

test: install cluster lint typecheck
	$(VENV)/bin/pytest -q

# Debian packages: Slurm (slurmctld, slurmd, client), munge, and Python's venv.
system-deps:
	@missing=""; \
	for cmd in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge; do \
	  command -v $${cmd%%:*} >/dev/null 2>&1 || missing="$$missing $${cmd##*:}"; \
	done; \
	$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# The Python package in a virtualenv. torch is pinned to the CPU build first: an unpinned
# torch would pull a multi-GB CUDA build; setup.cfg then asks only for a range.
$(STAMP): setup.cfg pyproject.toml | system-deps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIN)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: system-deps $(STAMP)

cluster: system-deps
	docker/cluster up

cluster-down:
	docker/cluster down

lint: install
	$(VENV)/bin/ruff check slurm_rl submit db tests benchmarks

typecheck: install
	$(VENV)/bin/mypy slurm_rl submit db tests benchmarks

clean: cluster-down
	rm -rf $(VENV) *.egg-info
