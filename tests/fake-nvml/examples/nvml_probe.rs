//! Probe NVML through tessera's NVML backend, read-only: the inventory, two samples one second
//! apart, and for every MIG-capable GPU its GPU-instance profile table and placements compared
//! with tessera's built-in MIG tables (`tessera_core::mig`). For checking those tables (and
//! the backend) on a real GPU; it changes no GPU setting.
//!
//! ```text
//! cargo run -p tessera-fake-nvml --example nvml_probe [-- /path/to/libnvidia-ml.so.1]
//! ```
//!
//! Exits 1 when a table row or placement list differs from tessera's table, 2 when NVML cannot
//! be used at all.

use std::path::PathBuf;
use std::process::ExitCode;

use tessera_core::device::GpuBackend;
use tessera_core::mig;
use tessera_core::model::Placement;
use tessera_core::nvml::NvmlBackend;

fn main() -> ExitCode {
    let lib = std::env::args_os().nth(1).map(PathBuf::from);
    let mut backend = match NvmlBackend::new(lib.as_deref()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let inventory = match backend.inventory() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("inventory: {e}");
            return ExitCode::from(2);
        }
    };
    println!("{inventory:#?}");
    for n in 0..2 {
        if n > 0 {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        match backend.sample() {
            Ok(s) => println!("sample {n}: {s:#?}"),
            Err(e) => println!("sample {n}: error: {e}"),
        }
    }
    let missing = backend.missing_functions();
    if !missing.is_empty() {
        println!("missing NVML functions: {missing:?}");
    }

    let mut mismatches = 0;
    for gpu in &inventory.gpus {
        let Some(model) = mig::model_by_nvml_name(&gpu.name) else {
            println!(
                "GPU {}: {:?} is not in tessera's MIG tables",
                gpu.index, gpu.name
            );
            continue;
        };
        if !model.supports_mig() {
            continue;
        }
        let table = match backend.profile_table(gpu.index) {
            Ok(t) => t,
            Err(e) => {
                println!("GPU {} ({}): profile table: {e}", gpu.index, model.key);
                continue;
            }
        };
        println!(
            "GPU {} ({}): {} profiles (MIG mode {:?})",
            gpu.index,
            model.key,
            table.len(),
            gpu.mig_mode
        );
        for row in &table {
            let ours = model.profile_by_index(row.index);
            let placements = backend.possible_placements(gpu.index, row.id);
            let expected: Option<Vec<Placement>> = ours.map(|p| p.placements().collect());
            let same_row = ours.is_some_and(|p| {
                p.id == row.id
                    && p.max_count == row.instance_count
                    && p.compute_slices == row.slice_count
            });
            let same_placements = match (&placements, &expected) {
                (Ok(got), Some(exp)) => got == exp,
                _ => false,
            };
            let status = if same_row && same_placements {
                "MATCH"
            } else {
                "MISMATCH"
            };
            if status == "MISMATCH" {
                mismatches += 1;
            }
            println!(
                "  {status} index {} id {} slices {} count {} memory {} MiB (tessera: {:?}) placements {:?} (tessera: {:?})",
                row.index,
                row.id,
                row.slice_count,
                row.instance_count,
                row.memory_size_mb,
                ours.map(|p| (
                    p.id,
                    p.name.as_str(),
                    p.compute_slices,
                    p.max_count,
                    p.memory_bytes >> 20
                )),
                placements,
                expected,
            );
        }
        for p in &model.profiles {
            if !table.iter().any(|r| r.index == p.index) {
                println!(
                    "  MISSING tessera profile {} (index {}) not reported by NVML",
                    p.name, p.index
                );
            }
        }
    }
    if mismatches > 0 {
        println!("{mismatches} mismatching MIG profile rows");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
