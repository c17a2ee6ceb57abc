"""Readers, one small module per source format, plus shared quarantine and validation helpers.

No pyspark here: `jobs.ingest.stage` adapts these kernels to Spark.
"""
