//! Loading NVML: no library, a library that is not NVML, and the MIG profile table and placements
//! read through raw calls (checked against `tessera_core::mig`'s tables on H100, H200 and
//! both A100s).

use crate::common;

use std::path::Path;

use common::*;
use tessera_core::device::DeviceError;
use tessera_core::mig;
use tessera_core::model::Placement;
use tessera_core::nvml::NvmlBackend;

#[test]
fn no_driver_is_library_not_found_with_a_hint() {
    let err = NvmlBackend::new(Some(Path::new("/nonexistent/libnvidia-ml.so.1")))
        .expect_err("no library");
    assert!(
        matches!(err, DeviceError::LibraryNotFound { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("NVML not available"), "{text}");
    assert!(text.contains("--backend sim"), "{text}");
    assert!(
        text.contains("/nonexistent/libnvidia-ml.so.1 not found"),
        "{text}"
    );
}

#[test]
fn a_library_without_nvml_is_a_missing_symbol() {
    match NvmlBackend::new(Some(Path::new("libm.so.6"))) {
        Err(DeviceError::MissingSymbol { symbol }) => assert_eq!(symbol, "nvmlInit_v2"),
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
}

#[test]
fn placements_and_profiles_match_the_mig_tables() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    // (node, GPU index, model key)
    for (node, gpu, key) in [
        ("gpu-node-1", 0, "H100-80GB"),
        ("gpu-node-1", 3, "H100-80GB"),
        ("gpu-node-2", 0, "A100-80GB"),
        ("gpu-node-2", 2, "H200-141GB"),
        ("gpu-node-3", 0, "A100-40GB"),
    ] {
        fake.load(&demo_path(), node);
        let b = fake.backend(node);
        let model = mig::model(key).expect("model");
        for p in &model.profiles {
            let expected: Vec<Placement> = p.placements().collect();
            let got = b.possible_placements(gpu, p.id).expect("placements");
            assert_eq!(got, expected, "{key} profile {} ({})", p.id, p.name);
        }
        let table = b.profile_table(gpu).expect("profile table");
        assert_eq!(table.len(), model.profiles.len(), "{key}");
        for row in &table {
            let p = model.profile_by_index(row.index).expect("known index");
            assert_eq!(row.id, p.id, "{key} index {}", row.index);
            assert_eq!(row.instance_count, p.max_count);
            assert_eq!(row.slice_count, p.compute_slices);
            assert_eq!(row.memory_size_mb, p.memory_bytes / (1024 * 1024));
        }
        // The wrapper's own `possible_placements` is broken in nvml-wrapper 0.13 (never sets
        // the length): this is why the backend makes the raw call. If this starts failing, the
        // crate was fixed.
        let dev = b.nvml().device_by_index(gpu).expect("device");
        assert!(
            dev.possible_placements(9)
                .expect("call succeeds")
                .is_empty()
        );
    }
}
