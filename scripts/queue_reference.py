#!/usr/bin/env python3
"""The queue plan's team quotas computed independently of tessera (docs/queues.md, "Rules"):
DuckDB reads the history's Parquet files, pandas computes the demand and the quantiles.
Prints JSON: {team: {model: {hours, held_share, q_guarantee, median, q_limit, max, class,
guarantee, limit}}}.

  queue_reference.py HISTORY_DIR SINCE_MS UNTIL_MS [GUARANTEE_Q LIMIT_Q SERVING_SHARE]

Rules, as docs/queues.md states them: rows ending in (SINCE, UNTIL]; a row ending at ts is in
UTC hour floor((ts - 1) / 3600000); an hour is observed when the rows' time inside it, each
GPU's capped at the hour, adds up to at least half an hour per GPU seen in it; a team's demand
of a model in an observed hour is the distinct GPUs (outside MIG mode) with holders > 0 and its
namespace, 0 when none; quantiles by nearest rank, index round((n - 1) * q) half away from zero;
serving when held in >= SERVING_SHARE of the hours (any model), guarantee = the GUARANTEE_Q
quantile for serving teams and 0 otherwise, limit = max(LIMIT_Q quantile, guarantee), both at
most the model's GPUs.
"""
import json
import math
import sys

import duckdb
import pandas as pd

HOUR = 3_600_000


def nearest(values, q):
    v = sorted(values)
    i = int(math.floor((len(v) - 1) * q + 0.5))
    return v[min(max(i, 0), len(v) - 1)]


def main():
    root, since, until = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    gq, lq, share = (float(x) for x in (sys.argv[4:7] or ["0.05", "0.95", "0.9"]))
    rows = duckdb.sql(
        f"""select node, uuid, model, ts, interval_ms, holders, holder_namespace, mig_enabled
            from read_parquet('{root}/*/gpu/*.parquet', union_by_name = true)
            where ts > {since} and ts <= {until}"""
    ).df()
    rows["hour"] = (rows["ts"] - 1) // HOUR
    rows["covered"] = (rows["ts"] - rows["hour"] * HOUR).clip(upper=rows["interval_ms"])
    per_gpu = rows.groupby(["node", "uuid", "hour"], as_index=False)["covered"].sum()
    per_gpu["covered"] = per_gpu["covered"].clip(upper=HOUR)
    cover = per_gpu.groupby("hour").agg(gpus=("uuid", "size"), covered=("covered", "sum"))
    observed = sorted(cover.index[cover["covered"] * 2 >= cover["gpus"] * HOUR])
    models = rows.groupby(["node", "uuid"])["model"].first()
    capacity = models.value_counts().to_dict()
    held = rows[(rows["holders"] > 0) & rows["holder_namespace"].notna()]
    held = held[~held["mig_enabled"].fillna(False).astype(bool)]
    counts = (
        held.groupby(["holder_namespace", "model", "hour"])
        .apply(lambda g: len(set(zip(g["node"], g["uuid"]))), include_groups=False)
        .rename("gpus")
        .reset_index()
    )
    out = {}
    for team, t in counts.groupby("holder_namespace"):
        series = {}
        for model, m in t.groupby("model"):
            by_hour = dict(zip(m["hour"], m["gpus"]))
            series[model] = [int(by_hour.get(h, 0)) for h in observed]
        any_held = sum(1 for i in range(len(observed)) if any(s[i] > 0 for s in series.values()))
        cls = "serving" if any_held / len(observed) >= share else "job-like"
        out[team] = {}
        for model, s in series.items():
            cap = int(capacity[model])
            g = nearest(s, gq) if cls == "serving" else 0
            g = min(g, cap)
            out[team][model] = {
                "hours": len(s),
                "held_share": round(sum(1 for x in s if x > 0) / len(s), 3),
                "q_guarantee": nearest(s, gq),
                "median": nearest(s, 0.5),
                "q_limit": nearest(s, lq),
                "max": max(s),
                "class": cls,
                "guarantee": g,
                "limit": min(max(nearest(s, lq), g), cap),
            }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
