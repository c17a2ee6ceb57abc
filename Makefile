# Two commands a newcomer needs: `make run` and `make test`. Both bootstrap .venv idempotently.
PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG ?= conf/default.yaml

.PHONY: run test envs venv browser postgres-deps postgres serve serve-stop bench clean-data airflow-venv airflow-run dist

venv: $(STAMP)

# torch first and pinned, so nothing later can pull a multi-GB CUDA build. The package asks for
# ranges (pyspark>=4.0,<5); constraints.txt pins the versions the suite was tested with.
# pyspark comes as a source archive of 440 MB of jars that pip turns into a wheel: stored, not
# deflated (the jars are zips already), that takes 14 s instead of 25. pip installs without
# compiling (one core); COMPILE_ALL compiles the bytecode once at the end on every core (a
# speed-up only: a file it cannot compile is compiled on import, as before).
CONSTRAINTS := constraints.txt
PIP_INSTALL = $(1)/bin/python -m pip install --quiet --no-compile
COMPILE_ALL = $(1)/bin/python -m compileall -qq -j 0 $(1)/lib || true
$(STAMP): pyproject.toml setup.py $(CONSTRAINTS)
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(call PIP_INSTALL,$(VENV)) -c $(CONSTRAINTS) "torch==2.13.0"
	$(call PIP_INSTALL,$(VENV)) -c $(CONSTRAINTS) pyspark \
	  --config-settings=--build-option=--compression=stored
	$(call PIP_INSTALL,$(VENV)) -c $(CONSTRAINTS) -e ".[test]"
	$(call COMPILE_ALL,$(VENV))
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/trajpriv run --config $(CONFIG)

# What the suite needs. The two environments share nothing, so they are built side by side
# (fresh machine, empty pip cache: 91-116 s instead of 139-167 s one after the other); the apt
# installs run first, one after the other (dpkg takes one lock).
envs: browser postgres-deps
	@$(MAKE) --no-print-directory -j2 venv airflow-venv

# Three workers (pytest-xdist), each test file on one worker (--dist loadfile): most tests wait
# on JVM starts and subprocesses, and a file's module fixtures (a trained baseline, a reference
# collection) are then built once, not once per worker.
# The project's own bytecode first: where PYTHONDONTWRITEBYTECODE is set, every stage, worker
# and rank process would compile the modules it imports again. A file that does not compile is
# named here and fails its tests below.
# The files come in an order shuffled with SHUFFLE_SEED (a new one each run unless given), so
# a test that depends on another's leftovers fails on some run; the seed is printed first and
# last: `make test SHUFFLE_SEED=N` replays that order. The end of the output has the 25 slowest
# tests and the seconds of every file (tests/suite_timing.py).
ifndef SHUFFLE_SEED
SHUFFLE_SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
test: envs
	$(VPY) -m compileall -q jobs udfs models || true
	@echo "make test: files shuffled with seed $(SHUFFLE_SEED) (replay: make test SHUFFLE_SEED=$(SHUFFLE_SEED))"
	$(VPY) -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder --durations=25 \
	  --shuffle-files $(SHUFFLE_SEED)

# The report test renders report.html in a real headless browser: Debian's chromium.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the report test"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The PostgreSQL metastore (catalog.metastore: postgres): Debian's server and JDBC driver. A
# machine without apt (or not root) skips the install; its PostgreSQL tests then skip, saying why.
PG_JAR := /usr/share/java/postgresql.jar
postgres-deps:
	-@{ command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } \
	  && test -f $(PG_JAR) || { \
	  echo "installing Debian's postgresql and libpostgresql-jdbc-java for the metastore tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends postgresql libpostgresql-jdbc-java >/dev/null; }

# A local server for the metastore on PG_DIR (prints the JDBC URL for catalog.postgres_url).
PG_DIR ?= $(CURDIR)/.postgres
PG_PORT ?= 5433
postgres: $(STAMP) postgres-deps
	$(VPY) -m jobs.spark.metastore_pg start --dir $(PG_DIR) --port $(PG_PORT)

# The analysts' endpoints over the published zone (docs/operations/analysts.md): Spark's Thrift
# JDBC/ODBC server on localhost:10000 and Spark Connect on localhost:15002 (serve.* settings);
# `make serve-stop` stops them. Needs catalog.metastore: postgres in CONFIG.
serve: $(STAMP)
	$(VENV)/bin/trajpriv serve --config $(CONFIG)

serve-stop: $(STAMP)
	$(VENV)/bin/trajpriv serve --config $(CONFIG) --stop

clean-data:
	rm -rf data

# --- Airflow (issue 9) -----------------------------------------------------------------------
# A separate venv: the Spark provider pulls pyspark-client, which overwrites pyspark 4.3's files.
# Workers submit the stages with .venv's spark-submit (on PATH) and .venv's Python.
AIRFLOW_VENV := .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed
AIRFLOW_PKGS := "apache-airflow==3.3.2" "apache-airflow-providers-apache-spark==6.3.4"
# Airflow's home (metadata DB, logs); set it to keep Airflow's state elsewhere.
AIRFLOW_HOME ?= $(CURDIR)/data/airflow
# The Spark connection of the DAG (JSON or URI form); export your own to use a cluster.
AIRFLOW_CONN_TRAJPRIV_SPARK ?= {"conn_type": "spark", "host": "local[2]"}
# Logical date of `make airflow-run` (rerunning a date replaces its outputs) and DAG params (JSON).
AIRFLOW_DATE ?= $(shell date -u +%Y-%m-%d)
AIRFLOW_PARAMS ?= {}
AIRFLOW_ENV = AIRFLOW_HOME=$(AIRFLOW_HOME) AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/airflow_dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW_VAR_TRAJPRIV_PROJECT_DIR=$(CURDIR) PATH="$(CURDIR)/$(VENV)/bin:$$PATH" \
	AIRFLOW_CONN_TRAJPRIV_SPARK='$(AIRFLOW_CONN_TRAJPRIV_SPARK)'

airflow-venv: $(AIRFLOW_STAMP)

$(AIRFLOW_STAMP):
	test -x $(AIRFLOW_VENV)/bin/python || $(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(call PIP_INSTALL,$(AIRFLOW_VENV)) $(AIRFLOW_PKGS)
	$(call COMPILE_ALL,$(AIRFLOW_VENV))
	touch $(AIRFLOW_STAMP)

# One DAG run on the embedded default: sqlite metadata DB under data/airflow, tasks in-process.
airflow-run: $(STAMP) $(AIRFLOW_STAMP)
	mkdir -p $(AIRFLOW_HOME)
	$(AIRFLOW_ENV) $(AIRFLOW_VENV)/bin/airflow db migrate > $(AIRFLOW_HOME)/db-migrate.log 2>&1 \
		|| { cat $(AIRFLOW_HOME)/db-migrate.log; exit 1; }
	@echo "airflow-run: airflow dags test trajpriv_pipeline $(AIRFLOW_DATE)"
	$(AIRFLOW_ENV) $(AIRFLOW_VENV)/bin/airflow dags test trajpriv_pipeline $(AIRFLOW_DATE) \
		--conf '$(AIRFLOW_PARAMS)'

# The project as a wheel and an sdist (configs inside as `jobs.conf`, dependency ranges in the
# metadata): `pip install dist/trajpriv-*.whl` on a cluster's nodes, or pass the wheel to
# `spark-submit --py-files` (README, "A real Spark cluster"). Built with .venv's setuptools
# (--no-isolation: nothing to download). dist/trajpriv.zip is the same wheel under the name
# executors accept for --py-files.
dist: $(STAMP)
	rm -rf dist
	$(VPY) -m build --no-isolation --outdir dist . > /dev/null
	cp dist/trajpriv-*.whl dist/trajpriv.zip  # the wheel's bytes: Spark puts only .zip/.egg on sys.path
	@ls dist/*.whl dist/*.tar.gz dist/trajpriv.zip
