# slurm-rl — the two commands in README.md are `make demo` and `make test`; `make install`
# installs rlsbatch and slurm-rl for every user of the host (docs/admin.md).
# All three work from nothing on Debian 12 as root, and are safe to run twice.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch (the rl policy, training; setup.cfg's [rl] extra) is installed as the CPU build:
# TORCH_PIN first from the indexes pip is configured with (a mirror that carries +cpu wheels),
# else with TORCH_INDEX as an extra index. PyPI alone has only the CUDA build of torch==2.13.0
# (~19 nvidia-* packages, several GB). `make TORCH_PIN=torch==2.13.0` on a GPU host; an empty
# TORCH_INDEX skips the second try.
TORCH_PIN ?= torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# The engine `make test` runs the test cluster on: docker (default; slurmctld and the four
# slurmd in containers, docker/cluster_docker.py) or native (daemons on this host).
# `make test ENGINE=native` chooses the native launcher; with ENGINE=docker and no Docker
# engine that can be started, docker/engine-up says so in one loud line and falls back to it.
# pytest gets the engine actually used as SLURM_RL_ENGINE, and SLURM_CONF pointing at its
# slurm.conf. `make demo` does the same; `make cluster` is the native launcher.
ENGINE ?= docker
ifeq ($(filter $(ENGINE),docker native),)
$(error ENGINE=$(ENGINE): use docker or native)
endif
export SLURM_CONF := $(or $(SLURM_RL_CLUSTER_DIR),/var/tmp/slurm-rl-cluster)/etc/slurm.conf

.PHONY: demo test dev install install-deps uninstall system-deps docker-deps cluster cluster-down \
	lint typecheck unit clean test-matrix smoke-native

# The demo on the same engine as `make test` (docker/engine-up, with its fallback to the native
# launcher); it ends by printing the `docker/cluster --engine ENGINE env` line for that engine.
demo: dev docker-deps
	@set -e; exports=$$(docker/engine-up $(ENGINE)); eval "$$exports"; \
	echo "==> the demo on the $$SLURM_RL_ENGINE cluster (SLURM_CONF=$$SLURM_CONF): one workload under each policy (about 4 minutes)"; \
	$(VENV)/bin/python -m slurm_rl.demo

# The cluster on $(ENGINE) (docker/engine-up), pytest against it, then the native launcher's
# smoke test, so that the launcher for hosts without Docker stays tested too (~5 s).
# PYTEST_ARGS (empty: the whole suite) narrows pytest, e.g. PYTEST_ARGS=tests/docker.
test: dev docker-deps lint typecheck
	@set -e; exports=$$(docker/engine-up $(ENGINE)); eval "$$exports"; \
	echo "==> pytest on the $$SLURM_RL_ENGINE cluster (SLURM_CONF=$$SLURM_CONF; unit, property and integration tests)"; \
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory smoke-native

# The native launcher (docker/cluster up) passes docker/smoke-test, in its default directory
# (never one a SLURM_RL_CLUSTER_DIR in the caller's environment names: that may be the
# dockerized cluster's).
# A native cluster it had to start for this is stopped again afterwards; one already up stays.
NATIVE := env -u SLURM_RL_CLUSTER_DIR SLURM_CONF=/var/tmp/slurm-rl-cluster/etc/slurm.conf \
	SLURM_RL_ENGINE=native
smoke-native: system-deps
	@echo "==> the native launcher's smoke test (docker/cluster --engine native up; docker/smoke-test)"
	@was_up=0; $(NATIVE) docker/cluster status >/dev/null 2>&1 && was_up=1; \
	$(NATIVE) docker/cluster up && $(NATIVE) docker/smoke-test; rc=$$?; \
	if [ $$was_up = 0 ]; then \
	  echo "==> stopping the native cluster the smoke test started (docker/cluster --engine native down)"; \
	  $(NATIVE) docker/cluster down >/dev/null || true; fi; \
	exit $$rc

# Debian packages: Slurm (slurmctld, slurmd, slurmdbd, client), munge, MariaDB (slurmdbd's
# accounting on the native launcher), and Python's venv.
system-deps:
	@missing=""; \
	for cmd in slurmctld:slurmctld slurmd:slurmd slurmdbd:slurmdbd sbatch:slurm-client \
	           munged:munge mariadbd:mariadb-server; do \
	  command -v $${cmd%%:*} >/dev/null 2>&1 || missing="$$missing $${cmd##*:}"; \
	done; \
	$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "==> Debian packages:$$missing (apt-get, about a minute)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# With ENGINE=docker, `make test` also needs docker.io and debootstrap (the image is
# debootstrapped from the Debian mirror, no image registry). A failed install is not fatal:
# docker/engine-up then falls back to the native launcher, saying so.
docker-deps: system-deps
ifeq ($(ENGINE),docker)
	@missing=""; \
	for cmd in dockerd:docker.io debootstrap:debootstrap; do \
	  command -v $${cmd%%:*} >/dev/null 2>&1 || missing="$$missing $${cmd##*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "==> Debian packages for the Docker engine:$$missing (apt-get, about a minute)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; } || \
	  echo "==> WARNING: apt-get install$$missing failed: make test will fall back to the native launcher"; \
	fi
endif

# The Python package in a virtualenv, pip showing its own progress. torch's CPU build first
# (see TORCH_PIN above); setup.cfg's [rl] extra then asks only for a range.
$(STAMP): setup.cfg pyproject.toml | system-deps
	@echo "==> virtualenv $(VENV) and pip"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	@echo "==> $(TORCH_PIN) (CPU build: about 750 MB installed, .venv about 1.2 GB in all)"
	$(PY) -m pip install '$(TORCH_PIN)' || \
	  { test -n '$(TORCH_INDEX)' && echo "==> not in pip's configured index; trying $(TORCH_INDEX)" && \
	    $(PY) -m pip install --extra-index-url '$(TORCH_INDEX)' '$(TORCH_PIN)'; }
	@echo "==> slurm-rl and its dependencies (editable, with [dev,rl,exact])"
	$(PY) -m pip install -e '.[dev,rl,exact]'
	touch $(STAMP)

# The development virtualenv (.venv, editable, with [dev,rl,exact]) that demo, test, lint and
# typecheck use.
dev: system-deps $(STAMP)

# `make install`: a virtualenv at PREFIX made with the system's Python (root's own interpreter,
# e.g. pyenv's under /root, is not readable by other users), the package installed into it as a
# copy (users need no access to this tree), everything readable by all, and rlsbatch and slurm-rl
# linked into BINDIR (/usr/local/bin is on every user's PATH on Debian). Without torch unless
# RL=1: rlsbatch, status and the daemon's heuristic policies do not need it; RL=1 adds the [rl]
# extra with TORCH_PIN as above (about 750 MB more). Run again to upgrade in place.
# PREFIX/.slurm-rl-install lists the links made, so that `make uninstall` removes exactly those
# and PREFIX, and nothing else.
PREFIX ?= /opt/slurm-rl
BINDIR ?= /usr/local/bin
SYSTEM_PYTHON ?= /usr/bin/python3
RL ?= 0
INSTALLED := $(PREFIX)/.slurm-rl-install
COMMANDS := rlsbatch slurm-rl

# Debian's python3 and python3-venv (ensurepip), for SYSTEM_PYTHON's venv.
install-deps:
	@if ! $(SYSTEM_PYTHON) -c 'import venv, ensurepip' 2>/dev/null; then \
	  echo "==> Debian packages: python3 python3-venv (apt-get, about a minute)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv; \
	fi

install: install-deps
	@set -euo pipefail; umask 022; \
	if [ -e '$(PREFIX)' ] && [ ! -e '$(INSTALLED)' ] && [ -n "$$(ls -A '$(PREFIX)')" ]; then \
	  echo "install: $(PREFIX) exists and is not a slurm-rl install: choose another PREFIX=" >&2; \
	  exit 1; fi; \
	for cmd in $(COMMANDS); do link='$(BINDIR)'/$$cmd; \
	  if [ -e "$$link" -o -L "$$link" ] && [ "$$(readlink "$$link")" != '$(PREFIX)'/bin/$$cmd ]; then \
	    echo "install: $$link exists and is not a link to $(PREFIX)/bin/$$cmd: remove it or choose another BINDIR=" >&2; \
	    exit 1; fi; done; \
	links=$$(cat '$(INSTALLED)' 2>/dev/null || true); \
	if [ "$$(readlink -f '$(PREFIX)/bin/python' 2>/dev/null)" != "$$(readlink -f $(SYSTEM_PYTHON))" ]; then \
	  echo "==> virtualenv $(PREFIX) ($(SYSTEM_PYTHON) -m venv)"; \
	  $(SYSTEM_PYTHON) -m venv --clear '$(PREFIX)'; fi; \
	stage=$$(mktemp -d); trap 'rm -rf "$$stage"' EXIT; \
	cp -r setup.cfg pyproject.toml README.md slurm_rl submit db "$$stage"/; \
	if [ '$(RL)' = 1 ]; then \
	  echo "==> $(TORCH_PIN) into $(PREFIX) (CPU build: about 750 MB installed)"; \
	  '$(PREFIX)/bin/pip' install '$(TORCH_PIN)' || \
	    { test -n '$(TORCH_INDEX)' && echo "==> not in pip's configured index; trying $(TORCH_INDEX)" && \
	      '$(PREFIX)/bin/pip' install --extra-index-url '$(TORCH_INDEX)' '$(TORCH_PIN)'; }; \
	  req="$$stage[rl]"; else req="$$stage"; fi; \
	echo "==> slurm-rl and its dependencies into $(PREFIX) (from a copy of this tree; RL=$(RL))"; \
	'$(PREFIX)/bin/pip' install "$$req"; \
	install -d -m 755 '$(BINDIR)'; \
	for cmd in $(COMMANDS); do ln -sfn '$(PREFIX)'/bin/$$cmd '$(BINDIR)'/$$cmd; done; \
	{ [ -z "$$links" ] || echo "$$links"; for cmd in $(COMMANDS); do echo '$(BINDIR)'/$$cmd; done; } | \
	  sort -u > '$(INSTALLED)'; \
	chmod -R a+rX '$(PREFIX)'; \
	echo "==> rlsbatch and slurm-rl in $(BINDIR), for every user ($$(du -sh '$(PREFIX)' | cut -f1) in $(PREFIX))"; \
	command -v sbatch >/dev/null || echo "==> note: no sbatch on this host; rlsbatch needs Slurm's client commands (slurm-client)"

# Removes the links PREFIX/.slurm-rl-install lists (those still pointing into PREFIX) and PREFIX.
uninstall:
	@set -euo pipefail; \
	if [ ! -e '$(INSTALLED)' ]; then echo "uninstall: no slurm-rl install in $(PREFIX): nothing to do"; exit 0; fi; \
	while read -r link; do \
	  case "$$(readlink "$$link" || true)" in '$(PREFIX)'/bin/*) rm -f "$$link"; echo "removed $$link";; esac; \
	done < '$(INSTALLED)'; \
	rm -rf '$(PREFIX)'; echo "removed $(PREFIX)"

cluster: system-deps
	@echo "==> the test cluster (docker/cluster up: munge, slurmctld, 4 slurmd)"
	docker/cluster up

cluster-down:
	docker/cluster down

lint: dev
	@echo "==> ruff"
	$(VENV)/bin/ruff check slurm_rl submit db tests benchmarks

typecheck: dev
	@echo "==> mypy"
	$(VENV)/bin/mypy slurm_rl submit db tests benchmarks

# The cluster tests against each Slurm version Debian ships (bookworm 22.05, trixie 24.11,
# forky 26.05), each on a dockerized cluster of its own; needs a Docker engine. Not part of
# `make test`: run before a release (docker/README.md). MATRIX="trixie" runs one.
MATRIX ?= bookworm trixie forky
test-matrix: dev
	docker/test-matrix $(MATRIX)

clean: cluster-down
	rm -rf $(VENV) *.egg-info
