#!/usr/bin/env python3
"""Writes the CSV benchmark input (docs/performance.md, "CSV source"): a generic long CSV of
per-pod telemetry, as a public per-pod trace would be written in tessera's generic format.

256 workloads (pods) x 7 days, one sample a minute, two metrics per sample (`sm_ratio`,
`memory_used_bytes`): 5,160,960 data rows, about 284 MB. Columns:
timestamp,entity,metric,value,kind,pod  (kind = process; entity = the pod's name).

Planted truth, written next to the CSV as <out>.truth.json: every fifth workload is a model
loaded and idle for its whole life; every seventh idles for 3 hours each night (01:00-04:00 UTC)
and works the rest of the day; the others work with random bursts and never idle for an hour.
Deterministic (seeded). Usage: gen-csv-bench.py OUT.csv [--workloads N] [--days D] [--step S]
"""
import argparse
import json
import random

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--workloads", type=int, default=256)
p.add_argument("--days", type=int, default=7)
p.add_argument("--step", type=int, default=60, help="seconds between samples")
a = p.parse_args()

T0 = 1_793_577_600  # 2026-11-02T00:00:00Z, a Monday
GIB = 1 << 30
n_steps = a.days * 86_400 // a.step
rng = random.Random(14)
truth = {"idle_all_week": [], "idle_nightly": [], "busy": []}
with open(a.out, "w", buffering=1 << 22) as f:
    f.write("timestamp,entity,metric,value,kind,pod\n")
    for w in range(a.workloads):
        name = f"w-{w:04d}"
        mem = str(rng.choice([6, 12, 20, 38, 70]) * GIB)
        if w % 5 == 0:
            kind = "idle_all_week"
        elif w % 7 == 0:
            kind = "idle_nightly"
        else:
            kind = "busy"
        truth[kind].append(name)
        tail = f",process,{name}\n"
        lines = []
        for i in range(1, n_steps + 1):
            t = T0 + i * a.step
            if kind == "idle_all_week":
                sm = "0"
            elif kind == "idle_nightly" and 3600 < t % 86_400 <= 4 * 3600:
                sm = "0"
            else:
                # Work at least every 30 minutes: never an hour idle.
                sm = f"{rng.uniform(0.05, 0.9):.3f}" if (i % 30 == 0 or rng.random() < 0.7) else "0"
            lines.append(f"{t},{name},sm_ratio,{sm}{tail}")
            lines.append(f"{t},{name},memory_used_bytes,{mem}{tail}")
        f.write("".join(lines))
with open(a.out + ".truth.json", "w") as f:
    json.dump(truth, f, indent=1)
