"""Readers, one small module per source format, plus shared quarantine and validation helpers.

No pyspark here: `jobs.ingest` adapts these kernels to Spark.
"""
