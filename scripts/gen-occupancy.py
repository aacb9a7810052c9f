#!/usr/bin/env python3
"""Writes a multi-week GPU occupancy trace (a scheduler's view of a fleet: each GPU held by a
job or free) in tessera's generic long CSV (docs/frames.md, `csv:FILE`), for the off-peak
detector (docs/findings.md, `offpeak_window`). Standard library only; deterministic from --seed.

Columns: timestamp,entity,metric,value,node,gpu,model
  timestamp  integer unix seconds on a grid of --step seconds; the first row is at
             start + step, the last at start + weeks * 7 days. A row at t describes the
             interval (t - step, t] (tessera's row convention).
  entity     the GPU's uuid, `GPU-node07-3` (unique per GPU); node `node07`; gpu the index.
  metric     `gpu_busy_ratio`: 1 when the GPU is held by a job in that interval, 0 when free.
             With --with-memory also `memory_used_bytes`: 0 when free, the job's memory
             (6e9 .. 30e9 bytes, fixed per job) when held.
One row per GPU and timestamp per metric, sorted by timestamp, then GPU.

Planted structure (local time of --tz, decided per interval from the local time of the interval's
start; counts for the default 192 GPUs and scaled as fractions of the fleet for other sizes):
  - 16 GPUs (8.3%) are never held: over-provisioning, the off-peak baseline.
  - Weekdays Mon-Fri 08:00-20:00 (and every hour not named below) every other GPU is held.
  - Weekday nights, Mon-Thu 20:00 to 03:00 the next day: 42 more GPUs free; inside them,
    22:00-02:00, 48 more free (every week).
  - Tue 01:00-11:00 and Wed 02:00-12:00: 40 more free (on top of the night windows where they
    overlap), so the Mon and Tue nights run on into the morning (their own shapes: Mon night
    20:00 - Tue 11:00, Tue night 20:00 - Wed 12:00; Wed and Thu nights end at 03:00).
  - Weekend, Sat 04:00 to Mon 07:00: 60 more free; inside it, Sat 15:00 - Sun 15:00, 80 more.
  Levels (UTC, default fleet): weekday days 16; Mon-Thu nights 58, 106 at 22-02; Tue 01-02 146,
  Tue 02-03 98, Tue 03-11 56; Wed 02-03 98, Wed 03-12 56; weekend 76, 156 Sat 15 - Sun 15.
  Expected off-peak windows (K = 10% = 20, so f >= 36): Mon 20:00 15 h, Tue 20:00 16 h,
  Wed 20:00 7 h, Thu 20:00 7 h, Sat 04:00 51 h.
  All planted changes happen on whole local hours, so the hourly free counts are exact.
Irregular structure (each event in one week only; it never recurs):
  - Random short jobs, 0.5-6 h on the step grid, each taking 1-3 GPUs (scaled) of the GPUs
    that are otherwise free, starting at any grid point inside free time; 14 per week (scaled).
    They lower a window's free count by a few GPUs in one week.
  - One maintenance drain per week: one whole node's GPUs forced free for 2-6 h on a weekday
    between 09:00 and 20:00 (a dip in occupancy, more GPUs free in that week only).
Which GPUs are free varies: the free set grows and shrinks by random picks, and at every hour
boundary about 5% of the free GPUs swap with held ones (count kept), so only the never-held
GPUs are free all the time.

Options: --nodes 24 --gpus-per-node 8 --weeks 3 --step 900 --seed 7 --tz UTC
  --start 2026-10-05T00:00:00Z (a Monday) --model "Tesla V100-SXM2-32GB" --with-memory
  --drop-fleet START_ISO,MINUTES (repeatable: omit every row whose timestamp lies in
  (START, START + MINUTES], a fleet-wide exporter outage) --out FILE (default stdout).
Prints nothing but CSV on stdout; one summary line goes to stderr.
"""
import argparse
import math
import random
import sys
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

REF_GPUS = 192  # the counts below are for this fleet size; scaled for others
REF = {"never": 16, "night": 42, "deep": 48, "morning": 40, "weekend": 60, "weekend_deep": 80}


def parse_iso(s):
    s = s.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    d = datetime.fromisoformat(s)
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return int(d.timestamp())


def main():
    p = argparse.ArgumentParser(description="multi-week GPU occupancy trace in tessera's generic long CSV (see the docstring)")
    p.add_argument("--nodes", type=int, default=24)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--weeks", type=int, default=3)
    p.add_argument("--step", type=int, default=900, help="seconds between samples")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tz", default="UTC", help="time zone of the planted structure")
    p.add_argument("--start", default="2026-10-05T00:00:00Z")
    p.add_argument("--model", default="Tesla V100-SXM2-32GB")
    p.add_argument("--with-memory", action="store_true")
    p.add_argument("--drop-fleet", action="append", default=[], metavar="START_ISO,MINUTES")
    p.add_argument("--out")
    a = p.parse_args()

    tz = ZoneInfo(a.tz)
    step = a.step
    t0 = parse_iso(a.start)
    n_steps = a.weeks * 7 * 86400 // step
    drops = []
    for d in a.drop_fleet:
        s, m = d.rsplit(",", 1)
        ds = parse_iso(s)
        drops.append((ds, ds + int(round(float(m) * 60))))

    n_gpus = a.nodes * a.gpus_per_node
    scale = n_gpus / REF_GPUS
    c = {k: int(round(v * scale)) for k, v in REF.items()}
    rng = random.Random(a.seed)

    gpus = [(n, g) for n in range(a.nodes) for g in range(a.gpus_per_node)]
    never = set(rng.sample(range(n_gpus), c["never"]))
    pool = [i for i in range(n_gpus) if i not in never]
    width = max(2, len(str(a.nodes - 1)))

    # Planted free GPUs (beyond the never-held) from the local time of an interval's start.
    def planted(ts):
        lt = datetime.fromtimestamp(ts, tz)
        wd, hr = lt.weekday(), lt.hour
        free = 0
        if (wd <= 3 and hr >= 20) or (1 <= wd <= 4 and hr < 3):
            free += c["night"]
        if (wd <= 3 and hr >= 22) or (1 <= wd <= 4 and hr < 2):
            free += c["deep"]
        if (wd == 1 and 1 <= hr < 11) or (wd == 2 and 2 <= hr < 12):
            free += c["morning"]
        if (wd == 5 and hr >= 4) or wd == 6 or (wd == 0 and hr < 7):
            free += c["weekend"]
        if (wd == 5 and hr >= 15) or (wd == 6 and hr < 15):
            free += c["weekend_deep"]
        return free, wd, hr

    plan = [planted(t0 + i * step) for i in range(n_steps)]  # index i: row at t0 + (i+1)*step
    target = [f for f, _, _ in plan]

    # Irregular short jobs: reduce the free target for their duration (one week each).
    steps_per_week = 7 * 86400 // step
    jobs_per_week = max(1, int(round(14 * scale)))
    max_job_gpus = max(1, int(round(3 * scale)))
    min_len = max(1, math.ceil(1800 / step))
    max_len = max(min_len, 21600 // step)
    for w in range(a.weeks):
        for _ in range(jobs_per_week):
            g = rng.randint(1, max_job_gpus)
            ln = rng.randint(min_len, max_len)
            for _try in range(200):
                i0 = w * steps_per_week + rng.randrange(steps_per_week)
                if plan[i0][0] >= g:
                    break
            else:
                continue
            for i in range(i0, min(n_steps, i0 + ln)):
                target[i] -= g

    # Maintenance drains: one per week, one node forced free for 2-6 h on a weekday daytime.
    forced = [None] * n_steps
    hour_steps = max(1, 3600 // step)
    for w in range(a.weeks):
        node = rng.randrange(a.nodes)
        day = rng.randrange(5)
        hr = rng.randint(9, 14)
        ln = rng.randint(2, 6)
        ids = frozenset(i for i in range(n_gpus) if gpus[i][0] == node and i not in never)
        for i in range(w * steps_per_week, min(n_steps, (w + 1) * steps_per_week)):
            _, wd, h = plan[i]
            if wd == day and hr <= h < min(20, hr + ln):
                forced[i] = ids

    mem_choices = [6e9, 8e9, 12e9, 16e9, 20e9, 24e9, 30e9]
    mem = [0] * n_gpus
    for i in pool:
        mem[i] = int(rng.choice(mem_choices))
    free_set = set()  # pool GPUs free now (the never-held ones are always free)

    ents = [f"GPU-node{n:0{width}d}-{g}" for n, g in gpus]
    tails = [f",node{n:0{width}d},{g},{a.model}\n" for n, g in gpus]
    busy_mid = [f",{e},gpu_busy_ratio," for e in ents]
    mem_mid = [f",{e},memory_used_bytes," for e in ents]

    out = open(a.out, "w", buffering=1 << 22) if a.out else sys.stdout
    out.write("timestamp,entity,metric,value,node,gpu,model\n")
    rows = 0
    for i in range(n_steps):
        t_start = t0 + i * step
        t = t_start + step
        fset = forced[i] or frozenset()
        free_set -= fset
        avail = len(pool) - len(fset)
        want = max(0, min(avail, target[i]))
        if len(free_set) > want:
            for g in rng.sample(sorted(free_set), len(free_set) - want):
                free_set.discard(g)
                mem[g] = int(rng.choice(mem_choices))  # a job takes it
        elif len(free_set) < want:
            cand = sorted(x for x in pool if x not in free_set and x not in fset)
            free_set.update(rng.sample(cand, want - len(free_set)))
        if t_start % 3600 == 0 and free_set:
            # Churn at the hour: some free GPUs get a job, as many held ones are released.
            k = int(round(0.05 * len(free_set)))
            cand = sorted(x for x in pool if x not in free_set and x not in fset)
            k = min(k, len(cand))
            if k:
                out_g = rng.sample(sorted(free_set), k)
                in_g = rng.sample(cand, k)
                for g in out_g:
                    free_set.discard(g)
                    mem[g] = int(rng.choice(mem_choices))
                free_set.update(in_g)
        if any(lo < t <= hi for lo, hi in drops):
            continue
        ts = str(t)
        parts = []
        for gi in range(n_gpus):
            held = gi not in never and gi not in free_set and gi not in fset
            parts.append(ts + busy_mid[gi] + ("1" if held else "0") + tails[gi])
            if a.with_memory:
                parts.append(ts + mem_mid[gi] + (str(mem[gi]) if held else "0") + tails[gi])
        out.write("".join(parts))
        rows += len(parts)
    if out is not sys.stdout:
        out.close()
    else:
        out.flush()
    print(f"gen-occupancy: {rows} data rows, {n_gpus} GPUs, {n_steps} steps of {step} s, "
          f"tz {a.tz}", file=sys.stderr)


if __name__ == "__main__":
    main()
