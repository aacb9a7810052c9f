use std::collections::BTreeMap;

use super::format::check_profile_name;
use super::*;
use crate::mig;
use crate::model::{GpuInfo, Inventory, MigInstanceInfo, MigMode, Placement};

const GOOD: &str = r#"
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  balanced:
    - device-filter: ["0x233010DE", "0x20B210DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
  custom:
    - devices: [0, 1]
      mig-enabled: false
    - devices: [2]
      mig-enabled: true
      mig-devices: { "3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1, "4g.40gb": 0 }
    - devices: [3]
      mig-enabled: true
      mig-devices: {}
"#;

fn parse(text: &str) -> Result<PartedFile, PartedError> {
    PartedFile::parse(text, "test.yaml")
}

fn err(text: &str) -> String {
    parse(text).expect_err("must fail").to_string()
}

fn gpu(index: u32, model: &str, layout: &[(&str, u32)]) -> GpuInfo {
    let m = mig::model(model).unwrap();
    GpuInfo {
        index,
        minor_number: None,
        uuid: format!("GPU-{index}"),
        name: m.nvml_name.into(),
        pci_bus_id: String::new(),
        memory_total_bytes: Some(m.memory_total_bytes),
        power_limit_watts: None,
        mig_mode: Some(MigMode {
            current: !layout.is_empty(),
            pending: !layout.is_empty(),
        }),
        mig_instances: layout
            .iter()
            .enumerate()
            .map(|(i, (name, start))| {
                let p = m.profile_by_name(name).unwrap();
                MigInstanceInfo {
                    gpu_instance_id: i as u32 + 1,
                    compute_instance_id: 0,
                    profile_id: p.id,
                    profile_name: p.name.clone(),
                    placement: Placement {
                        start: *start,
                        size: p.memory_slices,
                    },
                    uuid: format!("MIG-{index}-{i}"),
                    memory_total_bytes: None,
                }
            })
            .collect(),
    }
}

fn node(gpus: Vec<GpuInfo>) -> Inventory {
    Inventory {
        node: "n".into(),
        driver_version: None,
        cuda_version: None,
        gpus,
    }
}

#[test]
fn parses_the_mig_parted_format() {
    let f = parse(GOOD).unwrap();
    assert_eq!(f.configs.len(), 3);
    let b = &f.configs["balanced"];
    assert_eq!(b[0].device_filter, vec![0x2330_10DE, 0x20B2_10DE]);
    assert_eq!(b[1].device_filter, vec![0x20B0_10DE]);
    assert_eq!(b[0].mig_devices["1g.10gb"], 2);
    let c = &f.configs["custom"];
    assert_eq!(c[0].devices, Devices::Indices(vec![0, 1]));
    assert!(
        !c[1].mig_devices.contains_key("4g.40gb"),
        "zero counts dropped"
    );
    assert!(c[2].mig_enabled && c[2].mig_devices.is_empty());
}

#[test]
fn bad_files_fail_with_where_and_what() {
    let e = err("version: v2\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n");
    assert!(
        e.contains("test.yaml") && e.contains("version") && e.contains("v1"),
        "{e}"
    );
    let e = err(
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      colour: red\n",
    );
    assert!(
        e.contains("unknown field `colour`") && e.contains("line 6"),
        "{e}"
    );
    let e = err("version: v1\nmig-configs:\n  a:\n    - devices: some\n      mig-enabled: false\n");
    assert!(
        e.contains("\"all\" or a list of GPU indices") && e.contains("line 4"),
        "{e}"
    );
    let e = err("version: v1\nmig-configs:\n  a:\n    - devices: all\n");
    assert!(e.contains("mig-enabled"), "{e}");
    let e = err("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n");
    assert!(
        e.contains("mig-configs.a[0]") && e.contains("mig-devices is required"),
        "{e}"
    );
    let e = err(
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {\"1g.10gb\": 1}\n",
    );
    assert!(e.contains("mig-enabled is false"), "{e}");
    let e = err(
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1c.3g.40gb\": 1}\n",
    );
    assert!(
        e.contains("compute-instance profile") && e.contains("3g.40gb"),
        "{e}"
    );
    let e = err(
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"big\": 1}\n",
    );
    assert!(e.contains("bad profile name \"big\""), "{e}");
    let e = err(
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": -1}\n",
    );
    assert!(e.contains("line 6"), "{e}");
    let e = err(
        "version: v1\nmig-configs:\n  a:\n    - device-filter: H100\n      devices: all\n      mig-enabled: false\n",
    );
    assert!(e.contains("device-filter") && e.contains("\"H100\""), "{e}");
    let e = err("version: v1\nmig-configs:\n  a: []\n");
    assert!(
        e.contains("mig-configs.a") && e.contains("at least one entry"),
        "{e}"
    );
    let e = err("version: v1\nmig-configs: {}\n");
    assert!(e.contains("at least one config"), "{e}");
    let e = err("version: v1\n");
    assert!(e.contains("mig-configs"), "{e}");
    let e = err(
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n",
    );
    assert!(
        e.contains("duplicate key \"a\"") && e.contains("line"),
        "{e}"
    );
    let e = err(
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 1, \"1g.10gb\": 2}\n",
    );
    assert!(e.contains("duplicate key \"1g.10gb\""), "{e}");
    assert!(err("{").contains("test.yaml"));
    let missing = parse(GOOD).unwrap().select("nope").unwrap_err().to_string();
    assert!(
        missing.contains("\"nope\"") && missing.contains("all-disabled, balanced, custom"),
        "{missing}"
    );
}

#[test]
fn profile_names() {
    for ok in [
        "1g.10gb",
        "7g.141gb",
        "1g.10gb+me",
        "1g.24gb+me.all",
        "1g.24gb-me",
    ] {
        check_profile_name(ok).unwrap();
    }
    for bad in [
        "1g10gb", "g.10gb", "1g.gb", "1g.10", "1g.10gb+", "1g.10gbx", "x1g.10gb",
    ] {
        assert!(check_profile_name(bad).is_err(), "{bad}");
    }
}

#[test]
fn device_filter_and_indices_select_gpus() {
    let f = parse(GOOD).unwrap();
    let plan = f.select("balanced").unwrap();
    let h100 = gpu(0, "H100-80GB", &[]);
    let a40 = gpu(1, "A100-40GB", &[]);
    let h200 = gpu(2, "H200-141GB", &[]);
    assert_eq!(
        plan.entry_for(&h100).unwrap().unwrap().mig_devices["3g.40gb"],
        1
    );
    assert_eq!(
        plan.entry_for(&a40).unwrap().unwrap().mig_devices["3g.20gb"],
        1
    );
    assert!(
        plan.entry_for(&h200).unwrap().is_none(),
        "not in any filter"
    );
    let mut unknown = h100.clone();
    unknown.name = "NVIDIA A100 80GB PCIe".into();
    assert!(
        plan.entry_for(&unknown)
            .unwrap_err()
            .contains("device-filter")
    );
    let custom = f.select("custom").unwrap();
    assert!(!custom.entry_for(&h100).unwrap().unwrap().mig_enabled);
    let conflict = parse(
            "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: false\n    - devices: [1]\n      mig-enabled: true\n      mig-devices: {}\n",
        )
        .unwrap()
        .select("c")
        .unwrap();
    assert!(conflict.entry_for(&h100).unwrap().is_some());
    assert!(
        conflict
            .entry_for(&a40)
            .unwrap_err()
            .contains("entries 0 and 1")
    );
}

#[test]
fn check_rejects_what_a_gpu_cannot_do() {
    let f = parse(GOOD).unwrap();
    let inv = node(vec![
        gpu(0, "H100-80GB", &[]),
        gpu(1, "H100-80GB", &[]),
        gpu(2, "H100-80GB", &[]),
        gpu(3, "H100-80GB", &[]),
    ]);
    assert!(
        f.select("custom")
            .unwrap()
            .validate(&inv)
            .unwrap()
            .is_empty()
    );
    assert!(
        f.select("balanced")
            .unwrap()
            .validate(&inv)
            .unwrap()
            .is_empty()
    );
    // A100-40GB names on an H100.
    let wrong = parse("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 7}\n").unwrap();
    let e = wrong
        .select("c")
        .unwrap()
        .validate(&inv)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("GPU 0 (NVIDIA H100 80GB HBM3)")
            && e.contains("\"1g.5gb\" does not exist on H100-80GB")
            && e.contains("1g.10gb"),
        "{e}"
    );
    // Eight instances are refused when the file is parsed; 3 + 3 + 2 compute slices here.
    let too_many = parse("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2, \"2g.20gb\": 1}\n").unwrap();
    let e = too_many
        .select("c")
        .unwrap()
        .validate(&inv)
        .unwrap_err()
        .to_string();
    assert!(e.contains("compute slices"), "{e}");
    // Within compute slices (3 + 3 + 1) and max counts, but 4 + 4 + 2 memory slots > 8.
    let no_room = parse("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2, \"1g.20gb\": 1}\n").unwrap();
    let e = no_room
        .select("c")
        .unwrap()
        .validate(&inv)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no placement"), "{e}");
    let fits = parse("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"4g.40gb\": 1, \"2g.20gb\": 1, \"1g.20gb\": 1}\n").unwrap();
    fits.select("c").unwrap().validate(&inv).unwrap();
    // 4g.40gb + 2g.20gb + 1g.20gb: 4g at 0, 2g at 4, 1g.20gb at 6.
    let mut unknown = node(vec![gpu(0, "H100-80GB", &[])]);
    unknown.gpus[0].name = "NVIDIA Future GPU".into();
    let e = wrong
        .select("c")
        .unwrap()
        .validate(&unknown)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no MIG profile table"), "{e}");
    let warnings = f
        .select("custom")
        .unwrap()
        .validate(&node(vec![
            gpu(0, "H100-80GB", &[]),
            gpu(1, "H100-80GB", &[]),
        ]))
        .unwrap();
    assert_eq!(
        warnings.len(),
        2,
        "devices 2 and 3 do not exist: {warnings:?}"
    );
}

#[test]
fn drift_compares_mode_and_instance_counts() {
    let f = parse(GOOD).unwrap();
    let plan = f.select("custom").unwrap();
    let inv = node(vec![
        gpu(0, "H100-80GB", &[]),
        // Plan: MIG off; actual: two instances.
        gpu(1, "H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)]),
        // Plan: 3g + 2g + 1g; actual: the same.
        gpu(
            2,
            "H100-80GB",
            &[("1g.10gb", 6), ("3g.40gb", 0), ("2g.20gb", 4)],
        ),
        // Plan: MIG on, no instances; actual: MIG off.
        gpu(3, "H100-80GB", &[]),
        // No entry selects GPU 4.
        gpu(4, "H100-80GB", &[]),
    ]);
    let d = plan.drift(&inv);
    let by: BTreeMap<u32, (bool, u32)> = d
        .iter()
        .map(|g| (g.index, (g.drifted, g.differing_instances)))
        .collect();
    assert_eq!(by[&0], (false, 0));
    assert_eq!(by[&1], (true, 2));
    assert_eq!(by[&2], (false, 0));
    assert_eq!(by[&3], (true, 0));
    assert!(!by.contains_key(&4));
    // Same mode, different counts: 3g + 2g + 1g planned, 7 × 1g present: six 1g too many,
    // one 3g and one 2g missing.
    let seven: Vec<(&str, u32)> = (0..7).map(|s| ("1g.10gb", s)).collect();
    let d = plan.drift(&node(vec![gpu(2, "H100-80GB", &seven)]));
    assert_eq!((d[0].drifted, d[0].differing_instances), (true, 8));
}
