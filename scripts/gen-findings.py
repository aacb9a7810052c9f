#!/usr/bin/env python3
"""A large findings document (`tessera analyze --format json`, docs/findings.md) for measuring
the memory of `tessera scale-down --findings` (docs/performance.md).

    python3 scripts/gen-findings.py --mib 250 --until 2026-11-30T00:00:00Z > big.json

Each finding is ~1.7 KB; one in 50 is an idle_loaded finding of a pod (idle for the last day,
so idle now), one in 50 an allocated_unused one of kind `unused`; the rest are busy_not_working
and consolidation findings with spans and a long summary, which scale-down does not count. The
detectors carry a large `data` block (an off-peak profile) that it does not read either.
Deterministic: the same arguments give the same bytes. Writes to stdout.
"""

import argparse
import json
import sys
from datetime import datetime, timedelta, timezone


def rfc3339(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, default=250.0, help="approximate size, MiB")
    ap.add_argument("--until", default="2026-11-30T00:00:00Z", help="the data's end, RFC 3339")
    args = ap.parse_args()
    until = datetime.fromisoformat(args.until.replace("Z", "+00:00")).astimezone(timezone.utc)
    since = until - timedelta(days=7)
    out = sys.stdout
    target = int(args.mib * (1 << 20))
    profile = [{"hour": h, "activity_p50": 0.123, "activity_p95": 0.456, "gpus": 1024}
               for h in range(168)] * 20
    head = {
        "version": 1,
        "from": rfc3339(since),
        "until": rfc3339(until),
        "sources": ["history:/var/lib/tessera/history"],
        "tz": "UTC",
        "detectors": [
            {"id": d, "title": d, "findings": 0, "summary": "…", "notes": [],
             "data": {"period": "week", "profile": profile}}
            for d in ["idle_loaded", "allocated_unused", "busy_not_working", "consolidation",
                      "offpeak_window"]
        ],
    }
    text = json.dumps(head, separators=(",", ":"))
    out.write(text[:-1] + ',"findings":[\n')
    written = len(text) + 14
    i = 0
    while written < target - 4096:
        node, gpu = f"gpu-node-{i // 8 % 4096}", i % 8
        kind = i % 50
        entity = {"kind": "process", "node": node, "gpu": gpu,
                  "uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000", "pid": 4000 + i % 30000,
                  "process": "python3", "namespace": f"team-{i % 37}", "pod": f"pod-{i}"}
        idle_span = [{"start": rfc3339(until - timedelta(days=1)), "end": rfc3339(until),
                      "memory_max_gib": 14.5, "minutes": 1440.0}]
        if kind == 0:
            detector = "idle_loaded"
            evidence = {"activity_source": "process_sm", "idle_gib_hours": 348.0,
                        "idle_hours": 24.0, "idle_share": 0.143, "memory_max_gib": 14.5,
                        "observed_hours": 168.0, "reclaimable_gpu_hours": 24.0,
                        "spans": idle_span}
        elif kind == 1:
            detector = "allocated_unused"
            entity = {"kind": "gpu", "node": node, "gpu": gpu, "namespace": f"team-{i % 37}",
                      "pod": f"held-{i}"}
            evidence = {"activity_mean": None, "held_hours": 168.0, "kind": "unused",
                        "spans": [{"start": rfc3339(until - timedelta(hours=30)),
                                   "end": rfc3339(until), "minutes": 1800.0}],
                        "unused_hours": 30.0, "wasted_gpu_hours": 30.0}
        else:
            detector = "busy_not_working" if kind % 2 else "consolidation"
            evidence = {"busy_mean": 0.97, "sm_active_mean": 0.01,
                        "spans": [{"start": rfc3339(since + timedelta(hours=h)),
                                   "end": rfc3339(since + timedelta(hours=h, minutes=50)),
                                   "minutes": 50.0} for h in range(0, 160, 20)],
                        "signals": {"tensor_active_mean": "unknown: no tensor activity in the data"}}
        finding = {"id": f"{detector}-{i:016x}", "detector": detector, "severity": "warning",
                   "entity": entity,
                   "summary": f"{node} GPU {gpu}: " + "busy without doing work, " * 12,
                   "action": "look at the workload: " + "check the input pipeline; " * 6,
                   "evidence": evidence}
        line = ("" if i == 0 else ",\n") + json.dumps(finding, separators=(",", ":"))
        out.write(line)
        written += len(line)
        i += 1
    out.write("\n]}\n")


if __name__ == "__main__":
    main()
