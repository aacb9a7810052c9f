#!/usr/bin/env python3
"""Compares what tessera-exporter read (`--once --format json`) with what an independent reader
read at about the same time (scripts/gpu-check-read.py's JSON, and nvidia-smi's --query-gpu CSV
when given), per GPU and field, for the GPU check kit (scripts/gpu-check.sh).

Usage: gpu-check-compare.py EXPORTER_ONCE.json READER.json [NVIDIA_SMI.csv] > compare.json
       gpu-check-compare.py --timings NVML_TRACE.jsonl > timings.json
       gpu-check-compare.py --scrapes NVML_TRACE.jsonl METRICS.prom... > scrapes.txt

--scrapes says which recorded sample each scrape served: the "(sample)" line whose timestamp is
the scrape's tessera_exporter_last_sample_timestamp_seconds, counted from 1 ("metrics-0.prom
samples=K"; "samples=unknown" when none matches).

--timings summarises a recording of the exporter's NVML calls (TESSERA_NVML_TRACE, one JSON line
per call): per function and GPU the number of calls, their return codes and the median, 95th
percentile and largest duration in µs; and the same for whole samples (the "(sample)" lines);
and per GPU, the whole sample's duration divided by its GPUs ("sample_per_gpu": median and 95th
percentile over all samples, over the samples that read the slow counters — the energy counter —
and over those that carried them; issue 51's target is a median of at most 2 ms per GPU).

nvidia-smi's CSV has the columns of SMI_FIELDS (csv,noheader,nounits). Values that move between
two reads (power, temperature, clocks, utilisation, memory in use) are compared with a tolerance;
identities (UUID, name, MIG mode, memory total) exactly. A field one side lacks is "absent"
there, never a difference by itself. Prints one JSON object: per GPU and field the values and
whether they agree; "differences" counts the fields that do not.
"""
import csv
import json
import sys

SMI_FIELDS = ["index", "uuid", "name", "memory.total", "memory.used", "power.draw",
              "temperature.gpu", "clocks.sm", "clocks.mem", "utilization.gpu",
              "utilization.memory", "mig.mode.current"]

# field: (tolerance absolute, tolerance relative); None = exact.
FIELDS = {
    "uuid": None,
    "name": None,
    "mig_mode_current": None,
    "memory_total_bytes": None,
    "memory_used_bytes": (256 << 20, 0.05),
    "power_watts": (30.0, 0.3),
    "energy_joules": (30_000.0, 0.01),
    "temperature_celsius": (3.0, 0.0),
    "sm_clock_hertz": (50e6, 0.1),
    "memory_clock_hertz": (50e6, 0.1),
    "busy_ratio": (0.25, 0.0),
    "memory_controller_ratio": (0.25, 0.0),
}


def exporter_gpus(doc):
    inv = {g["index"]: g for g in doc.get("inventory", {}).get("gpus", [])}
    out = {}
    for g in doc.get("sample", {}).get("gpus", []):
        i = g["index"]
        e = dict(g)
        meta = inv.get(i, {})
        e["name"] = meta.get("name")
        mode = meta.get("mig_mode") or {}
        if "current" in mode:
            e["mig_mode_current"] = bool(mode["current"])
        out[i] = e
    return out


def smi_gpus(path):
    out = {}
    with open(path, newline="") as f:
        for row in csv.reader(f, skipinitialspace=True):
            if not row:
                continue
            v = dict(zip(SMI_FIELDS, [x.strip() for x in row]))

            def num(k, scale=1.0):
                try:
                    return float(v[k]) * scale
                except (KeyError, ValueError):
                    return None
            g = {
                "uuid": v.get("uuid"),
                "name": v.get("name"),
                "memory_used_bytes": num("memory.used", float(1 << 20)),
                "power_watts": num("power.draw"),
                "temperature_celsius": num("temperature.gpu"),
                "sm_clock_hertz": num("clocks.sm", 1e6),
                "memory_clock_hertz": num("clocks.mem", 1e6),
                "busy_ratio": num("utilization.gpu", 0.01),
                "memory_controller_ratio": num("utilization.memory", 0.01),
            }
            if v.get("mig.mode.current") in ("Enabled", "Disabled"):
                g["mig_mode_current"] = v["mig.mode.current"] == "Enabled"
            try:
                out[int(v["index"])] = {k: x for k, x in g.items() if x is not None}
            except (KeyError, ValueError):
                continue
    return out


def agree(field, a, b):
    tol = FIELDS[field]
    if tol is None:
        return a == b
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return False
    absolute, relative = tol
    return abs(a - b) <= max(absolute, relative * max(abs(a), abs(b)))


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    k = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return round(xs[k], 1)


def timings(path):
    groups = {}
    bad = 0
    # Per whole sample: µs per GPU, and whether it read the energy counter.
    per_gpu = {"all": [], "reading": [], "carrying": []}
    read_energy = False
    with open(path) as f:
        for line in f:
            try:
                c = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if c.get("function") == "nvmlDeviceGetTotalEnergyConsumption":
                read_energy = True
            if c.get("function") == "(sample)":
                gpus = (c.get("value") or {}).get("gpus") or 0
                if gpus > 0:
                    us = float(c.get("micros", 0.0)) / gpus
                    per_gpu["all"].append(us)
                    per_gpu["reading" if read_energy else "carrying"].append(us)
                read_energy = False
            key = (c.get("function", "?"), c.get("gpu"))
            g = groups.setdefault(key, {"micros": [], "rc": {}})
            g["micros"].append(float(c.get("micros", 0.0)))
            rc = c.get("rc", "?")
            g["rc"][rc] = g["rc"].get(rc, 0) + 1
    rows = []
    for (function, gpu), g in sorted(groups.items(), key=lambda kv: (str(kv[0][1]), kv[0][0])):
        rows.append({"function": function, "gpu": gpu, "calls": len(g["micros"]), "rc": g["rc"],
                     "p50_us": percentile(g["micros"], 0.5),
                     "p95_us": percentile(g["micros"], 0.95),
                     "max_us": round(max(g["micros"]), 1)})
    sample_per_gpu = {k: {"samples": len(v), "p50_us": percentile(v, 0.5),
                          "p95_us": percentile(v, 0.95)} for k, v in per_gpu.items()}
    return {"trace": path, "unreadable_lines": bad, "functions": rows,
            "sample_per_gpu": sample_per_gpu}


def scrapes(trace, proms):
    stamps = []
    with open(trace) as f:
        for line in f:
            try:
                c = json.loads(line)
            except ValueError:
                continue
            if c.get("function") == "(sample)":
                stamps.append((c.get("value") or {}).get("timestamp_ms"))
    out = []
    for p in proms:
        k = "unknown"
        try:
            for line in open(p):
                if line.startswith("tessera_exporter_last_sample_timestamp_seconds"):
                    ms = round(float(line.split()[-1]) * 1000)
                    hits = [i + 1 for i, t in enumerate(stamps) if t is not None and abs(t - ms) <= 1]
                    if hits:
                        k = hits[-1]
        except OSError:
            pass
        out.append("%s samples=%s" % (p.rsplit("/", 1)[-1], k))
    return out


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--scrapes":
        print("\n".join(scrapes(sys.argv[2], sys.argv[3:])))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--timings":
        json.dump(timings(sys.argv[2]), sys.stdout, indent=1)
        print()
        return
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    exp = exporter_gpus(json.load(open(sys.argv[1])))
    reader = {g["index"]: g for g in json.load(open(sys.argv[2])).get("gpus", [])}
    smi = smi_gpus(sys.argv[3]) if len(sys.argv) > 3 else {}
    out = {"gpus": [], "differences": 0, "compared": 0}
    for i in sorted(set(exp) | set(reader) | set(smi)):
        gpu = {"index": i, "fields": {}}
        for field in FIELDS:
            e = exp.get(i, {}).get(field)
            others = {"reader": reader.get(i, {}).get(field), "nvidia-smi": smi.get(i, {}).get(field)}
            entry = {"exporter": e, **others}
            verdicts = {}
            for who, v in others.items():
                if e is None or v is None:
                    continue
                ok = agree(field, e, v)
                verdicts[who] = ok
                out["compared"] += 1
                if not ok:
                    out["differences"] += 1
            if e is None and any(v is not None for v in others.values()):
                entry["note"] = "absent in the exporter, read by another reader"
            entry["agrees"] = verdicts
            gpu["fields"][field] = entry
        out["gpus"].append(gpu)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
