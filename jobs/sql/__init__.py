"""`trajpriv sql`: queries over the published zone, answered by one warm Spark session.

Why a server: a fresh JVM and Hive metastore per query take far longer than the query; a small
local server (`jobs.sql.server`) holds one SparkSession for a storage.root and answers each
query from it. The command starts it on first use (`jobs.sql.client`), it stops after an idle
timeout or on `trajpriv sql --stop`, and a stage that needs the root asks it to stop first (embedded
Derby admits one JVM). Statements are split by `jobs.sql.script`, run by `jobs.sql.engine`
(read-only and zone checks) and printed by `jobs.sql.render`.
"""
