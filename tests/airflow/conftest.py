"""Fixtures of the Airflow tests (helpers in af_support.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from af_support import AIRFLOW_BIN, AIRFLOW_VENV, ROOT, SPARK_CONN, AirflowRunner, clean_env


@pytest.fixture(scope="session")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> AirflowRunner:
    """A migrated sqlite AIRFLOW_HOME and the environment a local worker would have."""
    if not AIRFLOW_BIN.exists():
        pytest.skip(f"{AIRFLOW_VENV} is missing: run `make airflow-venv` (`make test` builds it)")
    home = tmp_path_factory.mktemp("airflow_home")
    env = clean_env()
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "airflow_dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW_CONN_TRAJPRIV_SPARK=SPARK_CONN,
        TRAJPRIV_HOME=str(ROOT),
        # The worker finds spark-submit on its PATH: .venv's pip-installed pyspark.
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    runner = AirflowRunner(home, env)
    proc = runner.run("db", "migrate", timeout=600)
    assert proc.returncode == 0, f"airflow db migrate failed:\n{proc.stdout[-4000:]}"
    return runner
