#!/usr/bin/env python3
"""An independent reader of NVIDIA GPUs for the GPU check kit (scripts/gpu-check.sh): it loads
libnvidia-ml with ctypes (no tessera code, no pip package) and reads each GPU's identity,
memory, power, energy, temperature, clocks, utilisation and MIG mode, recording every NVML call
with its return code and value (NOT_SUPPORTED and NO_PERMISSION are recorded, never fatal).

Read-only: it calls only nvmlInit_v2, nvmlShutdown, nvmlSystemGet* and nvmlDeviceGet*.

Usage:
  gpu-check-read.py [--lib PATH]                      JSON on stdout: {"driver", "gpus": [...], "calls": [...]}
  gpu-check-read.py [--lib PATH] --query-gpu=F,... --format=csv,noheader,nounits
      prints what `nvidia-smi --query-gpu` would for these fields (index, uuid, name,
      memory.total, memory.used, power.draw, temperature.gpu, clocks.sm, clocks.mem,
      utilization.gpu, utilization.memory, mig.mode.current): the kit's tests use it as a
      stand-in for nvidia-smi on the fake library.
"""
import ctypes
import json
import os
import sys

RET = {0: "SUCCESS", 1: "UNINITIALIZED", 2: "INVALID_ARGUMENT", 3: "NOT_SUPPORTED",
       4: "NO_PERMISSION", 6: "NOT_FOUND", 7: "INSUFFICIENT_SIZE", 9: "DRIVER_NOT_LOADED",
       12: "LIB_RM_VERSION_MISMATCH", 13: "GPU_IS_LOST", 15: "CORRUPTED_INFOROM",
       17: "GPU_NOT_FOUND", 999: "UNKNOWN"}


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong),
                ("reserved", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


def load(path):
    for p in ([path] if path else []) + ["libnvidia-ml.so.1", "libnvidia-ml.so"]:
        try:
            return ctypes.CDLL(p), p
        except OSError:
            continue
    sys.exit("gpu-check-read: cannot load libnvidia-ml (give --lib PATH)")


class Reader:
    def __init__(self, lib):
        self.lib = lib
        self.calls = []

    def call(self, fn, gpu, *args, value=None):
        f = getattr(self.lib, fn, None)
        if f is None:
            self.calls.append({"fn": fn, "gpu": gpu, "ret": "MISSING_SYMBOL"})
            return False
        rc = f(*args)
        entry = {"fn": fn, "gpu": gpu, "ret": RET.get(rc, str(rc))}
        ok = rc == 0
        if ok and value is not None:
            entry["value"] = value()
        self.calls.append(entry)
        return ok


def read(lib):
    r = Reader(lib)
    if not r.call("nvmlInit_v2", None):
        return {"error": "nvmlInit_v2: " + r.calls[-1]["ret"], "calls": r.calls, "gpus": []}
    out = {"gpus": []}
    buf = ctypes.create_string_buffer(96)
    if r.call("nvmlSystemGetDriverVersion", None, buf, 96, value=lambda: buf.value.decode()):
        out["driver"] = buf.value.decode()
    n = ctypes.c_uint()
    if not r.call("nvmlDeviceGetCount_v2", None, ctypes.byref(n), value=lambda: n.value):
        out["calls"] = r.calls
        return out
    for i in range(n.value):
        h = ctypes.c_void_p()
        if not r.call("nvmlDeviceGetHandleByIndex_v2", i, i, ctypes.byref(h)):
            continue
        g = {"index": i}
        s = ctypes.create_string_buffer(96)
        if r.call("nvmlDeviceGetUUID", i, h, s, 96, value=lambda: s.value.decode()):
            g["uuid"] = s.value.decode()
        if r.call("nvmlDeviceGetName", i, h, s, 96, value=lambda: s.value.decode()):
            g["name"] = s.value.decode()
        # v2 first: its "used" leaves out the driver's reserved memory, as nvidia-smi shows it
        # (v1's includes it); v1 where the library has no v2.
        m2 = MemoryV2()
        m2.version = ctypes.sizeof(MemoryV2) | (2 << 24)
        if r.call("nvmlDeviceGetMemoryInfo_v2", i, h, ctypes.byref(m2),
                  value=lambda: {"total": m2.total, "used": m2.used, "reserved": m2.reserved}):
            g["memory_total_bytes"], g["memory_used_bytes"] = m2.total, m2.used
        else:
            m = Memory()
            if r.call("nvmlDeviceGetMemoryInfo", i, h, ctypes.byref(m),
                      value=lambda: {"total": m.total, "used": m.used}):
                g["memory_total_bytes"], g["memory_used_bytes"] = m.total, m.used
        u = ctypes.c_uint()
        if r.call("nvmlDeviceGetPowerUsage", i, h, ctypes.byref(u), value=lambda: u.value):
            g["power_watts"] = u.value / 1000.0
        e = ctypes.c_ulonglong()
        if r.call("nvmlDeviceGetTotalEnergyConsumption", i, h, ctypes.byref(e),
                  value=lambda: e.value):
            g["energy_joules"] = e.value / 1000.0
        if r.call("nvmlDeviceGetTemperature", i, h, 0, ctypes.byref(u), value=lambda: u.value):
            g["temperature_celsius"] = float(u.value)
        for name, kind in (("sm_clock_hertz", 1), ("memory_clock_hertz", 2)):
            if r.call("nvmlDeviceGetClockInfo", i, h, kind, ctypes.byref(u), value=lambda: u.value):
                g[name] = u.value * 1e6
        ut = Utilization()
        if r.call("nvmlDeviceGetUtilizationRates", i, h, ctypes.byref(ut),
                  value=lambda: {"gpu": ut.gpu, "memory": ut.memory}):
            g["busy_ratio"] = ut.gpu / 100.0
            g["memory_controller_ratio"] = ut.memory / 100.0
        cur, pend = ctypes.c_uint(), ctypes.c_uint()
        if r.call("nvmlDeviceGetMigMode", i, h, ctypes.byref(cur), ctypes.byref(pend),
                  value=lambda: {"current": cur.value, "pending": pend.value}):
            g["mig_mode_current"] = cur.value == 1
        out["gpus"].append(g)
    r.call("nvmlShutdown", None)
    out["calls"] = r.calls
    return out


SMI = {
    "index": lambda g: g["index"],
    "uuid": lambda g: g.get("uuid", "[N/A]"),
    "name": lambda g: g.get("name", "[N/A]"),
    "memory.total": lambda g: g["memory_total_bytes"] // (1 << 20),
    "memory.used": lambda g: g["memory_used_bytes"] // (1 << 20),
    "power.draw": lambda g: "%.2f" % g["power_watts"],
    "temperature.gpu": lambda g: int(g["temperature_celsius"]),
    "clocks.sm": lambda g: int(g["sm_clock_hertz"] / 1e6),
    "clocks.mem": lambda g: int(g["memory_clock_hertz"] / 1e6),
    "utilization.gpu": lambda g: int(round(g["busy_ratio"] * 100)),
    "utilization.memory": lambda g: int(round(g["memory_controller_ratio"] * 100)),
    "mig.mode.current": lambda g: "Enabled" if g.get("mig_mode_current") else "Disabled",
}


def main():
    args = sys.argv[1:]
    path = None
    query = None
    for a in args:
        if a.startswith("--lib="):
            path = a.split("=", 1)[1]
        elif a.startswith("--query-gpu="):
            query = a.split("=", 1)[1].split(",")
    if "--lib" in args:
        path = args[args.index("--lib") + 1]
    path = path or os.environ.get("GPU_CHECK_NVML_LIB")
    lib, _ = load(path)
    data = read(lib)
    if query is None:
        json.dump(data, sys.stdout, indent=1, sort_keys=True)
        print()
        return
    for g in data["gpus"]:
        row = []
        for f in query:
            try:
                row.append(str(SMI[f.strip()](g)))
            except (KeyError, TypeError):
                row.append("[N/A]")
        print(", ".join(row))


if __name__ == "__main__":
    main()
