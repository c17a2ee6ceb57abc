"""Interrupted collections: ledger spend that a later run may take back (DESIGN.md section 4).

Why: the collect stage writes its ledger rows before it draws any noise, so a crash can only
over-count. But a run killed between the ledger and the publication (driver lost, machine
reboot, a failed task past its retries) leaves spend in the ledger for trajectories whose noisy
version nobody ever saw; a rerun under a new run id would then count that budget twice and
release less than an undisturbed run. A collect run's spend is voided here only when the run
disclosed nothing at all:
- it never registered a release (`trajpriv_raw.collect_releases` has no row of it), and
- no row of it is in `trajpriv_pub.perturbed_trajectories` (publication is one Spark write per
  run; a run killed after part of that write committed keeps all of its spend).
Voided runs are left out of the next plan's prior spend, and their ledger partitions are dropped
after that run's own ledger is written (a crash in between voids both next time).

Assumes one collect process at a time per catalog (the embedded Derby metastore enforces it): a
run that is still in flight elsewhere would look interrupted.
"""

from __future__ import annotations

import logging
from urllib.parse import unquote

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.catalog import delete_scope, table_exists

log = logging.getLogger("trajpriv.collect")

LEDGER = "trajpriv_raw.privacy_ledger"
RELEASES = "trajpriv_raw.collect_releases"
PUBLISHED = "trajpriv_pub.perturbed_trajectories"
STAGE = "collect"


def _partition_values(spark: SparkSession, table: str, column: str, spec: str = "") -> set[str]:
    """Values of one partition column from the metastore (no data files read)."""
    if not table_exists(spark, table):
        return set()
    rows = spark.sql(f"SHOW PARTITIONS {table}{f' PARTITION ({spec})' if spec else ''}").collect()
    values = set()
    for row in rows:
        for part in row[0].split("/"):
            key, _, value = part.partition("=")
            if key == column:
                values.add(unquote(value))
    return values


def interrupted_runs(spark: SparkSession, current_run: str) -> list[str]:
    """Collect runs with ledger spend that disclosed nothing (see the module docstring)."""
    spent = _partition_values(spark, LEDGER, "run_id", f"stage='{STAGE}'")
    candidates = spent - _partition_values(spark, RELEASES, "run_id") - {current_run}
    if candidates and table_exists(spark, PUBLISHED):
        published = spark.table(PUBLISHED).where(F.col("run_id").isin(sorted(candidates)))
        candidates -= {r[0] for r in published.select("run_id").distinct().collect()}
    return sorted(candidates)


def drop_voided(spark: SparkSession, runs: list[str]) -> None:
    """Remove the ledger rows of voided runs (their spend is taken over by the current run)."""
    for run in runs:
        log.warning("collect run %s was interrupted before publishing anything: its ledger "
                    "spend is voided (the current run spends for those trajectories)", run)
        delete_scope(spark, LEDGER, {"stage": STAGE, "run_id": run})
