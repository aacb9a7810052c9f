#!/usr/bin/env python3
"""The peer of the CSV benchmark (docs/performance.md): DuckDB, through its Python package,
applying tessera's idle-loaded rule to the same generic long CSV that `tessera analyze` reads.

Rule (docs/findings.md): per process (entity), rows where memory >= 1 GiB and SM activity <= 1%
(the rows' max), runs of consecutive such rows (a gap longer than max(3 rows, 5 min) breaks a
run), runs of at least 60 minutes. Prints the idle-loaded entities found and the wall time.
Usage: bench-csv-duckdb.py FILE.csv [--threads N]
"""
import argparse
import time

import duckdb

p = argparse.ArgumentParser()
p.add_argument("csv")
p.add_argument("--threads", type=int, default=0)
a = p.parse_args()
start = time.perf_counter()
con = duckdb.connect()
if a.threads:
    con.execute(f"SET threads = {a.threads}")
q = f"""
WITH obs AS (
  SELECT entity, CAST(timestamp AS DOUBLE) AS ts, metric, CAST(value AS DOUBLE) AS value
  FROM read_csv('{a.csv}', header = true, all_varchar = true)
  WHERE kind = 'process'
),
rows AS (
  SELECT entity, ts,
         max(value) FILTER (WHERE metric = 'memory_used_bytes') AS mem,
         max(value) FILTER (WHERE metric IN ('sm_ratio', 'sm_active_ratio')) AS sm
  FROM obs GROUP BY entity, ts
),
gaps AS (
  SELECT entity, ts,
         (mem >= 1073741824 AND sm <= 0.01) AS idle,
         ts - lag(ts) OVER (PARTITION BY entity ORDER BY ts) AS gap
  FROM rows
),
flagged AS (
  SELECT *, median(gap) OVER (PARTITION BY entity) AS step FROM gaps
),
runs AS (
  SELECT entity, ts, idle, step,
         sum(CASE WHEN NOT idle OR gap > greatest(3 * step, 300) THEN 1 ELSE 0 END)
           OVER (PARTITION BY entity ORDER BY ts) AS grp
  FROM flagged
),
spans AS (
  SELECT entity, grp, min(ts) - any_value(step) AS start, max(ts) AS stop
  FROM runs WHERE idle GROUP BY entity, grp
)
SELECT entity, count(*) AS spans, sum(stop - start) / 3600.0 AS idle_hours
FROM spans WHERE stop - start >= 3600
GROUP BY entity ORDER BY entity
"""
found = con.execute(q).fetchall()
took = time.perf_counter() - start
print(f"duckdb {duckdb.__version__}: {len(found)} idle-loaded entities in {took:.2f} s")
