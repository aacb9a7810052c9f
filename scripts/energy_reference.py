#!/usr/bin/env python3
"""An independent (pandas) computation of tessera's energy per workload (docs/report.md,
"Energy per workload") from a generic long CSV (docs/frames.md, `csv:FILE`) whose entities are
sampled once per row, every row on one grid: to check the report's team kWh and idle kWh.

Usage: energy_reference.py CSV --since ISO --until ISO
Prints one JSON object on stdout:
  {"gpu_kwh", "idle_kwh", "no_activity_kwh", "teams": {team: kWh}}  (unrounded)

Rules:
 1. One row per (kind, entity, timestamp); a row covers (ts - interval, ts], interval = the
    entity's median step. Range: since < ts <= until.
 2. A GPU row's energy: energy_delta_joules, else power_watts x interval; rows with neither are
    not counted (their processes get nothing). Activity: sm_active_ratio, else gpu_busy_ratio.
 3. GPUs without MIG rows at that ts: a = activity, else sum of the processes' sm (capped at 1),
    else nothing is split (all idle, counted as no activity when processes ran). The part E*a
    goes to processes by sm share; if no sm > 0, equally to processes with memory > 0, else
    equally to all.
 4. GPUs with MIG rows: C = 7; instances with processes ("loaded"), slices = the profile's
    leading number. If every loaded instance has sm_active: share = sm x slices / C; else if the
    GPU has activity a: share = a x slices / (sum of loaded slices); else the instances with
    sm_active get sm x slices / C (none: no activity). Shares summing above 1 are scaled to 1.
    An instance's part goes to its processes as in 3.
 5. Team = namespace, else "slurm job <id>", else "(unattributed)". Idle = E - sum of parts.
"""
import argparse
import json

import pandas as pd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--since", required=True)
    ap.add_argument("--until", required=True)
    args = ap.parse_args()
    df = pd.read_csv(args.csv, dtype=str, keep_default_na=False)
    df["ts"] = (df["timestamp"].astype(float) * 1000).round().astype("int64")
    df["value"] = df["value"].astype(float)
    since = int(pd.Timestamp(args.since).value // 1_000_000)
    until = int(pd.Timestamp(args.until).value // 1_000_000)
    # Interval per entity: its median step.
    steps = (
        df[["kind", "entity", "ts"]]
        .drop_duplicates()
        .sort_values("ts")
        .groupby(["kind", "entity"])["ts"]
        .apply(lambda s: s.diff().median())
    )
    df = df[(df["ts"] > since) & (df["ts"] <= until)]
    wide = df.pivot_table(
        index=["kind", "entity", "ts"], columns="metric", values="value", aggfunc="mean"
    ).reset_index()
    labels = df.groupby(["kind", "entity"]).agg(
        {c: (lambda s: next((v for v in s if v != ""), "")) for c in
         ["node", "gpu", "uuid", "gpu_instance", "profile", "namespace", "slurm_job_id"]}
    ).reset_index()
    wide = wide.merge(labels, on=["kind", "entity"])
    wide["interval"] = [steps[(k, e)] for k, e in zip(wide["kind"], wide["entity"])]

    def col(frame, name):
        return frame[name] if name in frame else pd.Series([float("nan")] * len(frame), index=frame.index)

    gpus = wide[wide["kind"] == "gpu"].copy()
    migs = wide[wide["kind"] == "mig"]
    procs = wide[wide["kind"] == "process"]
    gpus["energy"] = col(gpus, "energy_delta_joules").fillna(
        col(gpus, "power_watts") * gpus["interval"] / 1000.0
    )
    gpus["activity"] = col(gpus, "sm_active_ratio").fillna(col(gpus, "gpu_busy_ratio"))
    teams, total, idle, no_activity = {}, 0.0, 0.0, 0.0

    def team(p):
        if p["namespace"]:
            return p["namespace"]
        if p["slurm_job_id"]:
            return "slurm job " + p["slurm_job_id"]
        return "(unattributed)"

    def give(part, ps):
        """Splits `part` among the process rows `ps`; returns {row index: J}."""
        if len(ps) == 0 or part <= 0:
            return {}
        sm = col(ps, "sm_ratio").fillna(0.0).clip(0, 1)
        if sm.sum() > 0:
            return {i: part * sm[i] / sm.sum() for i in ps.index}
        mem = col(ps, "memory_used_bytes").fillna(0.0)
        to = ps.index[mem > 0] if (mem > 0).any() else ps.index
        return {i: part / len(to) for i in to}

    for _, g in gpus.iterrows():
        e = g["energy"]
        if pd.isna(e):
            continue
        total += e
        key = (g["node"], g["uuid"], g["gpu"], g["ts"])
        on = procs[(procs["node"] == key[0]) & (procs["uuid"] == key[1]) &
                   (procs["gpu"] == key[2]) & (procs["ts"] == key[3])]
        inst = migs[(migs["node"] == key[0]) & (migs["uuid"] == key[1]) &
                    (migs["gpu"] == key[2]) & (migs["ts"] == key[3])]
        given = {}
        known = True
        if len(inst) == 0:
            a = g["activity"]
            if pd.isna(a):
                sm = col(on, "sm_ratio").dropna()
                a = min(sm.clip(0, 1).sum(), 1.0) if len(sm) else float("nan")
            if pd.isna(a):
                known = False
            else:
                given = give(e * min(max(a, 0.0), 1.0), on)
        else:
            loaded = []
            for _, m in inst.drop_duplicates("gpu_instance").iterrows():
                ps = on[on["gpu_instance"] == m["gpu_instance"]]
                if len(ps):
                    loaded.append((int(m["profile"].split("g")[0]), col(inst.loc[[m.name]], "sm_active_ratio").iloc[0], ps))
            if loaded:
                a = g["activity"]
                if any(pd.isna(s) for _, s, _ in loaded) and not pd.isna(a):
                    total_slices = sum(c for c, _, _ in loaded)
                    shares = [a * c / total_slices for c, _, _ in loaded]
                elif all(pd.isna(s) for _, s, _ in loaded):
                    shares, known = None, False
                else:
                    shares = [0.0 if pd.isna(s) else s * c / 7 for c, s, _ in loaded]
                if shares is not None:
                    scale = 1 / sum(shares) if sum(shares) > 1 else 1.0
                    for (c, s, ps), sh in zip(loaded, shares):
                        given.update(give(e * sh * scale, ps))
        if not known and len(on):
            no_activity += e
            idle += e
            continue
        for i in on.index:
            teams.setdefault(team(procs.loc[i]), 0.0)
        for i, j in given.items():
            t = team(procs.loc[i])
            teams[t] = teams.get(t, 0.0) + j
        idle += e - sum(given.values())
    kwh = 3.6e6
    print(json.dumps({
        "gpu_kwh": total / kwh,
        "idle_kwh": idle / kwh,
        "no_activity_kwh": no_activity / kwh,
        "teams": {t: j / kwh for t, j in teams.items()},
    }))


if __name__ == "__main__":
    main()
