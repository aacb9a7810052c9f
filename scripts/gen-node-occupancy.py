#!/usr/bin/env python3
"""Writes an occupancy-only trace (a scheduler's counts: GPUs held per node, no memory, no
activity) in tessera's generic long CSV (docs/frames.md, `csv:FILE`), in one of two forms of the
same data, for the off-peak detector (docs/findings.md, `offpeak_window`). Standard library
only; deterministic from --seed.

  --form node  kind=node rows: entity = the node, metric `gpus_allocated` (GPUs held) every
               --step seconds, and `gpus_total`: node 0's once, at its third sample (before it
               the first value applies); node 1's with every sample; the others' once, before
               their first sample.
  --form gpu   kind=gpu rows: entity = `<node>/gpu-<i>` (labels node, gpu), metric `holders`:
               1 for i < the node's held count, 0 otherwise (the per-node form's expansion).

Columns: timestamp,entity,metric,value,kind,node,gpu
Timestamps are integer unix seconds on a grid of --step seconds: the first at start + step, the
last at start + weeks * 7 days (the default start, Monday 2026-10-05 10:30 UTC, puts both ends in
the middle of an hour).

Held GPUs per node (of --gpus-per-node, default 8), from the UTC time of the interval's start:
weekdays 08:00-20:00 all but one; weekday nights 3, and 1 from 23:00 to 05:00; weekends 2; plus
noise: -1, 0 or +1 with probabilities 0.15, 0.7, 0.15, clipped to 0..gpus. Node 2 is drained
(0 held) every Wednesday 12:00-15:00.

Options: --nodes 3 --gpus-per-node 8 --weeks 3 --step 900 --seed 5
         --start 2026-10-05T10:30:00Z --form node|gpu --out FILE (default stdout)
"""
import argparse
import random
import sys
from datetime import datetime, timezone


def parse_iso(s):
    s = s.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    return int(datetime.fromisoformat(s).timestamp())


def held(rng, gpus, node, ts):
    t = datetime.fromtimestamp(ts, timezone.utc)
    wd, hr = t.weekday(), t.hour
    if node == 2 and wd == 2 and 12 <= hr < 15:
        return 0
    if wd >= 5:
        base = 2
    elif 8 <= hr < 20:
        base = gpus - 1
    elif hr >= 23 or hr < 5:
        base = 1
    else:
        base = 3
    r = rng.random()
    noise = -1 if r < 0.15 else (1 if r > 0.85 else 0)
    return max(0, min(gpus, base + noise))


def main():
    p = argparse.ArgumentParser(description="occupancy-only trace (see the docstring)")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--weeks", type=int, default=3)
    p.add_argument("--step", type=int, default=900)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--start", default="2026-10-05T10:30:00Z")
    p.add_argument("--form", choices=["node", "gpu"], default="node")
    p.add_argument("--out")
    a = p.parse_args()

    rng = random.Random(a.seed)
    t0 = parse_iso(a.start)
    n_steps = a.weeks * 7 * 86400 // a.step
    gpus = a.gpus_per_node
    out = open(a.out, "w") if a.out else sys.stdout
    out.write("timestamp,entity,metric,value,kind,node,gpu\n")
    if a.form == "node":
        for n in range(2, a.nodes):
            out.write(f"{t0},node{n},gpus_total,{gpus},node,,\n")
    for i in range(n_steps):
        t_start = t0 + i * a.step
        t = t_start + a.step
        for n in range(a.nodes):
            h = held(rng, gpus, n, t_start)
            if a.form == "node":
                out.write(f"{t},node{n},gpus_allocated,{h},node,,\n")
                if n == 1 or (n == 0 and i == 2):
                    out.write(f"{t},node{n},gpus_total,{gpus},node,,\n")
            else:
                for g in range(gpus):
                    out.write(f"{t},node{n}/gpu-{g},holders,{1 if g < h else 0},gpu,node{n},{g}\n")
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
