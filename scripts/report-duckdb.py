#!/usr/bin/env python3
"""The peer of `tessera report` (docs/performance.md, issue 61): DuckDB, through its Python
package, computing the report's fleet tallies from the same history Parquet files, in the same
range, with the same number of threads; the cost of merely reading and grouping the data, and an
independent answer for the report's figures (analyzer/tests/report_duckdb.rs compares them).

Tallies (docs/report.md): rows whose end `ts` is in (since, until];
- GPU-hours observed and energy (kWh) of the fleet, per node and per GPU model: each gpu row's
  `interval_ms` and `energy_delta_joules`;
- per team: each gpu row's interval split evenly between the processes on that GPU in that row
  (process rows of the same node, GPU and `ts`); a team is the process's `namespace`, else
  `slurm job <slurm_job_id>`, else `(unattributed)`;
- free GPUs per UTC hour (the report's `charts.free_timeline`, the off-peak detector's rule): a
  row is free with under 1 GiB used, at most 5% activity (the interval's max SM activity, else
  busy ratio) and no holder (a signal the row lacks is not held against it, but one of the three
  must be known); a GPU is free in an hour when all its rows there are and they cover at least
  half of it.

Usage: report-duckdb.py HISTORY_DIR --since MS --until MS [--threads N]
Prints one JSON document on stdout (with `seconds`, the wall time of the queries).
"""
import argparse
import json
import time

import duckdb

p = argparse.ArgumentParser()
p.add_argument("history")
p.add_argument("--since", type=int, required=True, help="unix ms, rows ending after it")
p.add_argument("--until", type=int, required=True, help="unix ms, rows ending at or before it")
p.add_argument("--threads", type=int, default=0)
a = p.parse_args()

start = time.perf_counter()
con = duckdb.connect()
if a.threads:
    con.execute(f"SET threads = {a.threads}")
where = f"ts > {a.since} AND ts <= {a.until}"
con.execute(
    f"""CREATE TEMP VIEW gpu AS
    SELECT ts, interval_ms, node, gpu, model, energy_delta_joules, memory_used_max_bytes,
           sm_active_max, busy_max, holders
    FROM read_parquet('{a.history}/*/gpu/*.parquet', union_by_name = true) WHERE {where}"""
)
con.execute(
    f"""CREATE TEMP VIEW process AS
    SELECT ts, node, gpu,
           coalesce(namespace, 'slurm job ' || slurm_job_id, '(unattributed)') AS team
    FROM read_parquet('{a.history}/*/process/*.parquet', union_by_name = true) WHERE {where}"""
)


def tally(key):
    rows = con.execute(
        f"""SELECT {key}, sum(interval_ms) / 3.6e6, sum(energy_delta_joules) / 3.6e6
        FROM gpu GROUP BY {key} ORDER BY {key}"""
    ).fetchall()
    return {str(k): {"gpu_hours": h, "energy_kwh": e} for k, h, e in rows}


fleet = con.execute(
    "SELECT count(DISTINCT (node, gpu)), sum(interval_ms) / 3.6e6, sum(energy_delta_joules) / 3.6e6 FROM gpu"
).fetchone()
teams = con.execute(
    """WITH per AS (
         SELECT p.team, g.interval_ms / count(*) OVER (PARTITION BY p.node, p.gpu, p.ts) AS share
         FROM process p JOIN gpu g USING (node, gpu, ts))
       SELECT team, sum(share) / 3.6e6 FROM per GROUP BY team ORDER BY team"""
).fetchall()
free = con.execute(
    """WITH r AS (
         SELECT node, gpu, (ts - 1) // 3600000 AS hour,
                least(interval_ms, ts - (ts - 1) // 3600000 * 3600000) AS covered,
                coalesce(sm_active_max, busy_max) AS act,
                memory_used_max_bytes AS mem, holders
         FROM gpu),
       h AS (
         SELECT node, gpu, hour,
                bool_and(coalesce((mem IS NULL OR mem < 1073741824)
                                  AND (act IS NULL OR act <= 0.05)
                                  AND (holders IS NULL OR holders = 0)
                                  AND (mem IS NOT NULL OR act IS NOT NULL OR holders IS NOT NULL),
                                  false)) AS all_free,
                least(sum(covered), 3600000) AS covered
         FROM r GROUP BY ALL)
       SELECT hour * 3600000, count(*), count(*) FILTER (WHERE all_free AND covered >= 1800000)
       FROM h GROUP BY hour ORDER BY hour"""
).fetchall()
seconds = time.perf_counter() - start
print(
    json.dumps(
        {
            "seconds": round(seconds, 3),
            "threads": a.threads or None,
            "fleet": {"gpus": fleet[0], "gpu_hours": fleet[1], "energy_kwh": fleet[2]},
            "by_node": tally("node"),
            "by_model": tally("model"),
            "teams": {t: h for t, h in teams},
            "free_by_hour": [{"hour_ms": h, "gpus": n, "free_gpus": f} for h, n, f in free],
        },
        indent=1,
    )
)
