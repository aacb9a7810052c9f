#!/usr/bin/env python3
"""A third, independent reader for the GPU check kit (scripts/gpu-check.sh): NVIDIA's own Python
binding, nvidia-ml-py (`pynvml`), where it is installed. It reads, per GPU:

- every GPM metric the binding names (NVML_GPM_METRIC_*: SM, tensor, DRAM, FP pipes, PCIe,
  NVLink, ...) from two GPM samples --interval seconds apart, each with its return code; per GPU
  instance too when MIG is on;
- the compute processes (`nvmlDeviceGetComputeRunningProcesses`) and the utilisation and memory,
  so the exporter's process list can be compared with NVIDIA's binding;
- how far back the driver keeps per-process utilisation (`process_utilization_history`): one
  `nvmlDeviceGetProcessUtilization` call with a timestamp 60 s back, per pid the number of
  readings, the oldest and newest age and the median gap between them. The exporter reads them
  once per history interval (10 s) with the last timestamp it saw (issue 51); this says whether
  the driver keeps that long.

Read-only: nvmlInit, nvmlShutdown, nvmlDeviceGet*, nvmlGpm* (sample alloc/get/free, metrics get,
support query). Every failure is recorded, never fatal. Without pynvml it prints
{"pynvml": "not installed"} and exits 0.

Usage: gpu-check-gpm.py [--lib PATH] [--interval SECONDS] > gpm.json

--lib loads that libnvidia-ml instead of the system's (the kit's tests pass the fake one).
"""
import json
import sys
import time

CHUNK = 16


def err(e):
    return type(e).__name__ + ": " + str(e)


def gpm_metrics(N, get_sample, interval, ids):
    """Two samples `interval` apart; one entry per metric id (value or error)."""
    out = {}
    s1 = N.nvmlGpmSampleAlloc()
    s2 = N.nvmlGpmSampleAlloc()
    try:
        get_sample(s1)
        time.sleep(interval)
        get_sample(s2)

        def ask(chunk):
            mg = N.c_nvmlGpmMetricsGet_t()
            mg.version = N.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(chunk)
            mg.sample1 = s1
            mg.sample2 = s2
            for j, (_, mid) in enumerate(chunk):
                mg.metrics[j].metricId = mid
            N.nvmlGpmMetricsGet(mg)
            for j, (name, _) in enumerate(chunk):
                m = mg.metrics[j]
                rc = int(m.nvmlReturn)
                out[name] = {"rc": rc, "value": float(m.value)} if rc == 0 else {"rc": rc}

        for k in range(0, len(ids), CHUNK):
            chunk = ids[k:k + CHUNK]
            try:
                ask(chunk)
            except Exception:
                for one in chunk:  # an id the driver does not know fails the whole call
                    try:
                        ask([one])
                    except Exception as e:
                        out[one[0]] = {"error": err(e)}
    finally:
        for s in (s1, s2):
            try:
                N.nvmlGpmSampleFree(s)
            except Exception:
                pass
    return out


def main():
    interval = 1.0
    if "--interval" in sys.argv:
        interval = float(sys.argv[sys.argv.index("--interval") + 1])
    try:
        import pynvml as N
    except ImportError:
        print(json.dumps({"pynvml": "not installed"}))
        return
    if "--lib" in sys.argv:
        import ctypes
        N.nvmlLib = ctypes.CDLL(sys.argv[sys.argv.index("--lib") + 1])
    doc = {"pynvml": getattr(N, "__version__", "unknown"), "gpus": []}
    try:
        N.nvmlInit()
    except Exception as e:
        doc["error"] = "nvmlInit: " + err(e)
        print(json.dumps(doc, indent=1))
        return
    ids = sorted(((k[len("NVML_GPM_METRIC_"):].lower(), v) for k, v in vars(N).items()
                  if k.startswith("NVML_GPM_METRIC_") and k != "NVML_GPM_METRIC_MAX"
                  and isinstance(v, int)), key=lambda kv: kv[1])
    try:
        doc["driver"] = N.nvmlSystemGetDriverVersion()
        n = N.nvmlDeviceGetCount()
    except Exception as e:
        doc["error"] = err(e)
        n = 0
    for i in range(n):
        g = {"index": i}
        try:
            h = N.nvmlDeviceGetHandleByIndex(i)
        except Exception as e:
            g["error"] = err(e)
            doc["gpus"].append(g)
            continue
        for key, f in (("uuid", lambda: N.nvmlDeviceGetUUID(h)),
                       ("utilization", lambda: vars_of(N.nvmlDeviceGetUtilizationRates(h))),
                       ("memory", lambda: vars_of(N.nvmlDeviceGetMemoryInfo(h))),
                       ("processes", lambda: [vars_of(p) for p in
                                              N.nvmlDeviceGetComputeRunningProcesses(h)]),
                       ("mig_mode", lambda: list(N.nvmlDeviceGetMigMode(h)))):
            try:
                g[key] = f()
            except Exception as e:
                g[key] = {"error": err(e)}
        try:
            g["process_utilization_history"] = process_history(N, h)
        except Exception as e:
            g["process_utilization_history"] = {"error": err(e)}
        try:
            sup = N.nvmlGpmQueryDeviceSupport(h)
            g["gpm_supported"] = bool(sup.isSupportedDevice)
        except Exception as e:
            g["gpm_supported"] = {"error": err(e)}
        if g["gpm_supported"] is True:
            try:
                g["gpm"] = gpm_metrics(N, lambda s: N.nvmlGpmSampleGet(h, s), interval, ids)
            except Exception as e:
                g["gpm"] = {"error": err(e)}
            mig = g.get("mig_mode")
            if isinstance(mig, list) and mig and mig[0] == 1:
                g["gpm_per_gpu_instance"] = {}
                try:
                    gis = sorted({N.nvmlDeviceGetGpuInstanceId(N.nvmlDeviceGetMigDeviceHandleByIndex(h, k))
                                  for k in range(N.nvmlDeviceGetMaxMigDeviceCount(h))
                                  if try_handle(N, h, k)})
                except Exception as e:
                    gis = []
                    g["gpm_per_gpu_instance"] = {"error": err(e)}
                for gi in gis:
                    try:
                        g["gpm_per_gpu_instance"][str(gi)] = gpm_metrics(
                            N, lambda s, gi=gi: N.nvmlGpmMigSampleGet(h, gi, s), interval, ids)
                    except Exception as e:
                        g["gpm_per_gpu_instance"][str(gi)] = {"error": err(e)}
        doc["gpus"].append(g)
    try:
        N.nvmlShutdown()
    except Exception:
        pass
    json.dump(doc, sys.stdout, indent=1, sort_keys=True, default=str)
    print()


def process_history(N, h, back_s=60):
    """Per pid: the readings NVML returns since `back_s` seconds ago (count, ages, median gap)."""
    now_us = int(time.time() * 1e6)
    samples = N.nvmlDeviceGetProcessUtilization(h, now_us - back_s * 1_000_000)
    by_pid = {}
    for u in samples:
        by_pid.setdefault(u.pid, []).append(u.timeStamp)
    out = {"since_s": back_s, "pids": {}}
    for pid, stamps in by_pid.items():
        stamps.sort()
        gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
        out["pids"][str(pid)] = {
            "readings": len(stamps),
            "oldest_age_s": round((now_us - stamps[0]) / 1e6, 3),
            "newest_age_s": round((now_us - stamps[-1]) / 1e6, 3),
            "median_gap_s": round(gaps[len(gaps) // 2] / 1e6, 3) if gaps else None,
        }
    return out


def try_handle(N, h, k):
    try:
        N.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
        return True
    except Exception:
        return False


def vars_of(x):
    if hasattr(x, "_fields_"):
        return {name: getattr(x, name) for name, *_ in x._fields_
                if isinstance(getattr(x, name), (int, float, str))}
    if hasattr(x, "__dict__"):
        return {k: v for k, v in vars(x).items() if isinstance(v, (int, float, str))}
    return x


if __name__ == "__main__":
    main()
