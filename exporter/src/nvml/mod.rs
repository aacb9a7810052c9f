//! NVML backend (in progress).
