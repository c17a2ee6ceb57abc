# Two commands a newcomer needs: `make run` and `make test`. Both bootstrap .venv idempotently.
PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG ?= conf/default.yaml

.PHONY: run test venv bench clean-data

venv: $(STAMP)

# torch first and pinned, so nothing later can pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet "torch==2.13.0"
	$(VPY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/trajpriv run --config $(CONFIG)

test: $(STAMP)
	$(VPY) -m pytest -q

clean-data:
	rm -rf data
