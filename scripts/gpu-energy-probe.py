#!/usr/bin/env python3
"""How long the NVML reads that dominate a sample take on a real GPU, read-only, through
nvidia-ml-py: the total energy counter (its own call and nvmlDeviceGetFieldValues), power, the
instant-power field, utilisation and per-process utilisation; 40 reads each, idle and under a
PyTorch fp16 matmul. One JSON line per condition. Run on a GPU machine:

    python3 scripts/gpu-energy-probe.py > energy-probe.jsonl

The H100 result is fixtures/real/nvidia-h100-80gb-hbm3/energy-probe.jsonl (README there).
"""
import time, statistics, json, sys, subprocess
import pynvml as N
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
FI = getattr(N, "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 83)
FP = getattr(N, "NVML_FI_DEV_POWER_INSTANT", None)
def t(f, n=40):
    xs, err = [], None
    for _ in range(n):
        a = time.perf_counter()
        try:
            v = f()
        except Exception as e:
            err = repr(e); v = None
        xs.append((time.perf_counter() - a) * 1e6)
        time.sleep(0.05)
    return {"p50_us": round(statistics.median(xs), 1), "max_us": round(max(xs), 1), "last": str(v)[:80], "err": err}
def fv(ids):
    r = N.nvmlDeviceGetFieldValues(h, ids)
    return [(x.fieldId, x.nvmlReturn, x.value.ullVal) for x in r]
def run(tag):
    out = {"tag": tag}
    out["energy_call"] = t(lambda: N.nvmlDeviceGetTotalEnergyConsumption(h))
    out["energy_fieldvalue"] = t(lambda: fv([FI]))
    out["power_usage"] = t(lambda: N.nvmlDeviceGetPowerUsage(h))
    if FP is not None:
        out["power_instant_fieldvalue"] = t(lambda: fv([FP]))
        out["energy_and_power_fieldvalues"] = t(lambda: fv([FI, FP]))
    out["utilization"] = t(lambda: N.nvmlDeviceGetUtilizationRates(h))
    out["process_util"] = t(lambda: N.nvmlDeviceGetProcessUtilization(h, 0))
    print(json.dumps(out), flush=True)
run("idle")
load = subprocess.Popen([sys.executable, "-c", "import time,torch\na=torch.randn(8192,8192,device='cuda',dtype=torch.float16)\nend=time.time()+40\nwhile time.time()<end: (a@a).sum().item()"])
time.sleep(8)
run("under fp16 matmul")
load.wait()
