"""The suite's JVM options (tests/conftest.py): which JVMs run C1-only, and with what room.

The shared session of each worker lives for the whole run and compiles with all tiers; every
short JVM (a stage's subprocess, spark-submit under Airflow) runs C1-only. Under pytest-xdist
the workers inherit the controlling process's SPARK_SUBMIT_OPTS, so a worker once took the
suite's own options for a user's and kept its shared session C1-only: its 48 MiB code cache
filled after a few hundred queries and the JVM died mid-test ("CodeCache is full").
"""

from __future__ import annotations

import pytest

from tests.conftest import C1_ONLY, JVM_OPTS, SUITE_JVM_OPTS, user_jvm_opts


def test_options_the_suite_set_are_not_a_users():
    worker = {"SPARK_SUBMIT_OPTS": JVM_OPTS, SUITE_JVM_OPTS: JVM_OPTS}
    assert user_jvm_opts(worker) is None
    assert user_jvm_opts({}) is None
    assert user_jvm_opts({"SPARK_SUBMIT_OPTS": "-Xmx1g"}) == "-Xmx1g"
    # a user who changes them after the suite marked its own is a user again
    assert user_jvm_opts({**worker, "SPARK_SUBMIT_OPTS": "-Xmx1g"}) == "-Xmx1g"


def test_a_c1_only_jvm_reserves_the_full_code_cache():
    assert C1_ONLY in JVM_OPTS and "-XX:ReservedCodeCacheSize=240m" in JVM_OPTS.split()


@pytest.mark.spark
def test_the_shared_session_compiles_with_all_tiers(spark):
    import os

    if user_jvm_opts(os.environ) is not None:
        pytest.skip("SPARK_SUBMIT_OPTS set by whoever runs the suite: its JVMs use those")
    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert C1_ONLY not in args, args
