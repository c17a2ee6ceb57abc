# Two commands a newcomer needs: `make run` and `make test`. Both bootstrap .venv idempotently.
PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG ?= conf/default.yaml

.PHONY: run test venv browser bench clean-data

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

test: $(STAMP) browser
	$(VPY) -m pytest -q

# The report test renders report.html in a real headless browser: Debian's chromium.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the report test"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

clean-data:
	rm -rf data
