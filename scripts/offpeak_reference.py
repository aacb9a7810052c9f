#!/usr/bin/env python3
"""An independent (pandas) computation of tessera's off-peak profile (docs/findings.md,
`offpeak_window`) from a generic long CSV (docs/frames.md, `csv:FILE`), to check the detector.

Usage: offpeak_reference.py CSV [--since ISO|none] [--until ISO|none] [--tz ZONE]
                                [--min-share 0.9] [--min-gpus 10%] [--min-hours 4]
Prints one JSON object on stdout:
  {"period", "gpus_observed", "k", "baseline", "observed_hours",
   "profile": [{"slot", "label", "observations", "free_at_p"}, ...every slot],
   "windows": [{"start_slot", "hours", "expected_free_gpus"}, ...], "hot_slots"}

Rules (GPU rows only; every entity of the file is taken as a GPU):
 0. Rows with kind=node (per-node counts) become GPU rows: per node and timestamp with a
    gpus_allocated value A, T rows (T = the node's last gpus_total at or before that time, else
    its first), entity `<node>/gpu-<i>`, holders = 1 for i < A, else 0.
 1. A row per (entity, timestamp) ends at ts (ms) and covers (ts - interval, ts], interval = the
    entity's median step between consecutive distinct timestamps (an entity with one timestamp
    gets the median of the other entities' intervals). busy = max gpu_busy_ratio, mem = max
    memory_used_bytes, held = max holders of that (entity, ts); NaN when absent.
 2. Range: since < ts <= until (each bound only when given).
 3. Per GPU and UTC hour h = floor((ts - 1) / 3.6e6): covered = sum of min(interval, ts - h*3.6e6),
    capped at 3.6e6. A row is free when (mem NaN or mem < 2**30) and (busy NaN or busy <= 0.05)
    and (held NaN or held == 0), not all three NaN. The GPU is free in h when all its rows there are free and covered >= 1.8e6.
 4. h is an observation when the covered time of the GPUs with rows in h adds up to at least
    half of (those GPUs x 1 h); other hours are dropped. free(h) = the GPUs free in h.
 5. span = last - first observed hour + 1; weekly profile when span >= 336 h, else daily. Slot
    from the local time (--tz) of the hour's start: weekday*24 + hour (weekly) or hour (daily);
    period = the local date of that week's Monday (weekly) or the local date (daily). Two hours
    in one (slot, period) (DST fall-back) keep the smaller free count.
 6. Per slot: n = periods, v = sorted free counts, f = v[n - need], need = clamp(ceil(P*n), 1, n).
 7. B = min f over slots with n > 0; K = the count, or ceil(share x gpus_observed) (>= 1).
 8. Windows: cyclic runs of slots with n > 0 and f >= B + K, at least --min-hours long (a run
    over every slot is not returned); expected_free_gpus = min f over the run.
"""
import argparse
import json
import math
import sys

import numpy as np
import pandas as pd

HOUR_MS = 3_600_000
GIB = 2**30
EPOCH = pd.Timestamp(0, tz="UTC")
DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def parse_bound(s):
    if s is None or s.strip().lower() in ("none", ""):
        return None
    t = pd.Timestamp(s)
    if t.tzinfo is None:
        t = t.tz_localize("UTC")
    return int((t - EPOCH) // pd.Timedelta(milliseconds=1))


def to_ms(col):
    if pd.api.types.is_numeric_dtype(col):
        return np.round(col.to_numpy(dtype="float64") * 1000.0).astype("int64")
    num = pd.to_numeric(col, errors="coerce")
    if num.notna().all():
        return np.round(num.to_numpy(dtype="float64") * 1000.0).astype("int64")
    # RFC 3339 timestamps (numbers mixed in are taken as unix seconds)
    out = np.empty(len(col), dtype="int64")
    isnum = num.notna().to_numpy()
    out[isnum] = np.round(num[isnum].to_numpy(dtype="float64") * 1000.0).astype("int64")
    dt = pd.to_datetime(col[~isnum], utc=True, format="ISO8601")
    out[~isnum] = ((dt - EPOCH) // pd.Timedelta(milliseconds=1)).to_numpy(dtype="int64")
    return out


def node_rows(node):
    """Rule 0: kind=node counts as per-GPU `holders` rows."""
    out = []
    alloc = node[node["metric"] == "gpus_allocated"].groupby(["entity", "ts"])["value"].max()
    tot = node[(node["metric"] == "gpus_total") & node["value"].notna()]
    tot = tot.sort_values("ts", kind="stable")
    for n, a in alloc.groupby(level="entity"):
        t = tot[tot["entity"] == n]
        if t.empty:
            sys.exit(f"node {n}: gpus_allocated without gpus_total")
        tts, tv = t["ts"].to_numpy(), t["value"].to_numpy()
        ts = a.index.get_level_values("ts").to_numpy()
        k = np.searchsorted(tts, ts, side="right")
        total = np.where(k > 0, tv[np.maximum(k - 1, 0)], tv[0]).astype(int)
        for when, alloc_n, tot_n in zip(ts, a.to_numpy(), total):
            for i in range(tot_n):
                v = np.nan if np.isnan(alloc_n) else float(i < alloc_n)
                out.append((when, f"{n}/gpu-{i}", "holders", v))
    return pd.DataFrame(out, columns=["ts", "entity", "metric", "value"])


def main():
    ap = argparse.ArgumentParser(description="independent reference of tessera's off-peak profile")
    ap.add_argument("csv")
    ap.add_argument("--since", default="none")
    ap.add_argument("--until", default="none")
    ap.add_argument("--tz", default="UTC")
    ap.add_argument("--min-share", type=float, default=0.9)
    ap.add_argument("--min-gpus", default="10%")
    ap.add_argument("--min-hours", type=int, default=4)
    a = ap.parse_args()
    since, until = parse_bound(a.since), parse_bound(a.until)

    raw = pd.read_csv(a.csv, usecols=lambda c: c in ("timestamp", "entity", "metric", "value",
                                                     "kind"),
                      dtype={"entity": str, "metric": str, "kind": str})
    raw["ts"] = to_ms(raw["timestamp"])
    raw["value"] = pd.to_numeric(raw["value"], errors="coerce")
    if "kind" in raw:
        is_node = (raw["kind"] == "node").to_numpy()
        raw = pd.concat([raw[~is_node], node_rows(raw[is_node])], ignore_index=True)

    # 1. Sampling period per entity (over the whole file), then rows per (entity, ts).
    ets = raw[["entity", "ts"]].drop_duplicates().sort_values(["entity", "ts"])
    d = ets.groupby("entity")["ts"].diff()
    interval = d.groupby(ets["entity"]).median()
    interval = interval.reindex(ets["entity"].unique())
    if interval.isna().any():
        fill = interval.median()
        interval = interval.fillna(fill if not math.isnan(fill) else HOUR_MS)
    interval = interval.astype("int64")

    keep = raw["metric"].isin(["gpu_busy_ratio", "memory_used_bytes", "holders"])
    piv = raw[keep].groupby(["entity", "ts", "metric"])["value"].max().unstack("metric")
    rows = ets.set_index(["entity", "ts"]).join(piv).reset_index()
    for m in ("gpu_busy_ratio", "memory_used_bytes", "holders"):
        if m not in rows:
            rows[m] = np.nan
    rows = rows.rename(columns={"gpu_busy_ratio": "busy", "memory_used_bytes": "mem",
                                "holders": "held"})

    # 2. Range.
    if since is not None:
        rows = rows[rows["ts"] > since]
    if until is not None:
        rows = rows[rows["ts"] <= until]
    gpus_observed = int(rows["entity"].nunique())

    # 3. Per GPU and hour.
    rows = rows.assign(
        interval=rows["entity"].map(interval).to_numpy(dtype="int64"),
        h=(rows["ts"].to_numpy() - 1) // HOUR_MS,
    )
    rows["cov"] = np.minimum(rows["interval"], rows["ts"] - rows["h"] * HOUR_MS)
    busy, mem, held = rows["busy"], rows["mem"], rows["held"]
    rows["free"] = ((mem.isna() | (mem < GIB)) & (busy.isna() | (busy <= 0.05))
                    & (held.isna() | (held == 0)) & ~(mem.isna() & busy.isna() & held.isna()))
    gh = rows.groupby(["h", "entity"], sort=False).agg(cov=("cov", "sum"), allfree=("free", "all"))
    gh["cov"] = gh["cov"].clip(upper=HOUR_MS)
    gh["gfree"] = gh["allfree"] & (gh["cov"] >= HOUR_MS // 2)

    # 4. Observations.
    hours = gh.groupby(level="h").agg(cov=("cov", "sum"), n=("cov", "size"), free=("gfree", "sum"))
    hours = hours[hours["cov"] >= 0.5 * hours["n"] * HOUR_MS].sort_index()
    observed_hours = len(hours)

    # 5. Profile period and slots.
    if observed_hours:
        span = int(hours.index.max() - hours.index.min() + 1)
    else:
        span = 0
    weekly = span >= 14 * 24
    nslots = 168 if weekly else 24
    local = pd.to_datetime(hours.index.to_numpy() * HOUR_MS, unit="ms", utc=True).tz_convert(a.tz)
    wd = np.asarray(local.day_of_week)
    hr = np.asarray(local.hour)
    ldate = pd.to_datetime(np.asarray(local.date))  # local calendar dates, naive
    if weekly:
        slot = wd * 24 + hr
        period = ldate - pd.to_timedelta(wd, unit="D")
    else:
        slot = hr
        period = ldate
    obs = pd.DataFrame({"slot": slot, "period": period, "free": hours["free"].to_numpy()})
    obs = obs.groupby(["slot", "period"])["free"].min().reset_index()

    # 6. f per slot.
    P = a.min_share
    profile = []
    f = {}
    nobs = obs.groupby("slot")["free"].apply(lambda s: sorted(int(x) for x in s)).to_dict()
    for s in range(nslots):
        v = nobs.get(s, [])
        n = len(v)
        if n:
            need = min(max(math.ceil(P * n), 1), n)
            fs = v[n - need]
        else:
            fs = 0
        f[s] = (n, fs)
        label = f"{DAYS[s // 24]} {s % 24:02d}:00" if weekly else f"{s:02d}:00"
        profile.append({"slot": s, "label": label, "observations": n, "free_at_p": fs})

    # 7. Baseline and K.
    seen = [fs for n, fs in f.values() if n > 0]
    B = min(seen) if seen else 0
    mg = a.min_gpus.strip()
    if mg.endswith("%"):
        K = max(math.ceil(float(mg[:-1]) / 100.0 * gpus_observed), 1)
    else:
        K = int(mg)

    # 8. Windows: cyclic runs of hot slots.
    hot = [f[s][0] > 0 and f[s][1] >= B + K for s in range(nslots)]
    windows = []
    if seen and not all(hot) and any(hot):
        first_cold = hot.index(False)
        i = 0
        while i < nslots:
            cur = (first_cold + i) % nslots
            if hot[cur]:
                j = i
                while j < nslots and hot[(first_cold + j) % nslots]:
                    j += 1
                ln = j - i
                if ln >= a.min_hours:
                    slots = [(first_cold + x) % nslots for x in range(i, j)]
                    windows.append({"start_slot": cur, "hours": ln,
                                    "expected_free_gpus": min(f[x][1] for x in slots)})
                i = j
            else:
                i += 1
        windows.sort(key=lambda w: w["start_slot"])

    json.dump({"period": "week" if weekly else "day", "gpus_observed": gpus_observed, "k": K,
               "baseline": B, "observed_hours": observed_hours, "profile": profile,
               "windows": windows, "hot_slots": int(sum(hot))}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
