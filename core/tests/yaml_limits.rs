//! Hostile YAML for every YAML reader of the exporter crate (issue 17, item 8): files nested
//! deeper than `input_limits::MAX_YAML_DEPTH` or larger than `MAX_YAML_BYTES` are refused
//! before serde_yaml_ng parses them (it is quadratic in flow nesting), quickly and with the file,
//! line and column; counts that would be expanded into memory are refused at parse time.

use std::path::Path;

use tessera_core::input_limits::{MAX_YAML_BYTES, MAX_YAML_DEPTH};
use tessera_core::mig::parted::PartedFile;
use tessera_core::mig::plan::{MigSchedule, TesseraPlan};

/// Each reader, by name: parse `text` named `source`, the error as text.
type Reader = fn(&str, &str) -> Result<(), String>;

fn readers() -> [(&'static str, Reader); 3] {
    [
        ("plan", |t, s| {
            TesseraPlan::parse(t, s)
                .map(drop)
                .map_err(|e| e.to_string())
        }),
        ("schedule", |t, s| {
            MigSchedule::parse(t, s)
                .map(drop)
                .map_err(|e| e.to_string())
        }),
        ("mig-parted", |t, s| {
            PartedFile::parse(t, s).map(drop).map_err(|e| e.to_string())
        }),
    ]
}

/// Each reader of a file: read `path`, the error as text.
type FileReader = fn(&Path) -> Result<(), String>;

fn file_readers() -> [(&'static str, FileReader); 3] {
    [
        ("plan", |p| {
            TesseraPlan::from_file(p)
                .map(drop)
                .map_err(|e| e.to_string())
        }),
        ("schedule", |p| {
            MigSchedule::from_file(p)
                .map(drop)
                .map_err(|e| e.to_string())
        }),
        ("mig-parted", |p| {
            PartedFile::from_file(p)
                .map(drop)
                .map_err(|e| e.to_string())
        }),
    ]
}

/// The reader refuses `text` at the depth check (the error names the depth limit and where it was
/// crossed), before the YAML parser sees the nesting.
#[track_caller]
fn fails_fast(what: &str, read: Reader, text: &str, want: &[&str]) {
    let err = read(text, "deep.yaml").expect_err(what);
    assert!(err.contains("deep.yaml"), "{what}: {err}");
    for w in want {
        assert!(err.contains(w), "{what}: expected {w:?} in: {err}");
    }
}

#[test]
fn a_200_kb_file_nested_100k_deep_fails_fast() {
    // The file of the issue: over a minute in serde_yaml_ng (quadratic in flow nesting).
    let flow = format!(
        "version: v1\nkind: tessera-mig-plan\nconfigs: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let maps = format!(
        "version: v1\nx: {}1{}\n",
        "{a: ".repeat(50_000),
        "}".repeat(50_000)
    );
    // Block nesting is linear in libyaml but just as deep.
    let block = format!("version: v1\nx:\n{}1\n", "- ".repeat(100_000));
    for (name, read) in readers() {
        // Depth 1 (the top mapping) + 31 flow sequences: the 32nd '[' is the 33rd level.
        let column = "configs: ".len() + MAX_YAML_DEPTH;
        fails_fast(
            name,
            read,
            &flow,
            &[
                &format!("line 3 column {column}"),
                "nested deeper than 32 levels",
            ],
        );
        fails_fast(name, read, &maps, &["line 2", "nested deeper than 32"]);
        fails_fast(name, read, &block, &["line 3", "nested deeper than 32"]);
    }
}

#[test]
fn nesting_at_the_limit_reaches_the_parser() {
    // 32 levels: past the depth check; the parser then names what is wrong with it.
    let text = format!(
        "version: v1\nx: {}{}\n",
        "[".repeat(MAX_YAML_DEPTH - 1),
        "]".repeat(MAX_YAML_DEPTH - 1)
    );
    for (name, read) in readers() {
        let err = read(&text, "ok.yaml").unwrap_err();
        assert!(!err.contains("nested deeper"), "{name}: {err}");
        assert!(err.contains("ok.yaml"), "{name}: {err}");
    }
}

#[test]
fn files_over_the_size_limit_are_refused_before_reading_them_whole() {
    let dir = tempfile::tempdir().unwrap();
    let plan = "version: v1\nkind: tessera-mig-plan\nconfigs:\n  day:\n    - gpu: 0\n      model: H100-80GB\n      mig-enabled: false\n";
    let schedule = "version: v1\nkind: tessera-mig-schedule\ntimezone: UTC\nplan: p.yaml\nswitches:\n  - at: \"07:00\"\n    config: day\n";
    let parted = "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n";
    let pad = |text: &str, total: u64| -> String {
        let mut t = text.to_string();
        t.push('#');
        t.push_str(&" ".repeat(total as usize - t.len() - 1));
        t.push('\n');
        t
    };
    for ((name, read), valid) in file_readers().into_iter().zip([plan, schedule, parted]) {
        let at = dir.path().join(format!("{name}-at.yaml"));
        std::fs::write(&at, pad(valid, MAX_YAML_BYTES)).unwrap();
        read(&at).unwrap_or_else(|e| panic!("{name}: {e}"));
        let over = dir.path().join(format!("{name}-over.yaml"));
        std::fs::write(&over, pad(valid, MAX_YAML_BYTES + 1)).unwrap();
        let err = read(&over).unwrap_err();
        assert!(
            err.contains(&format!("{name}-over.yaml"))
                && err.contains("larger than the limit of 8388608 bytes (8388609 bytes)"),
            "{name}: {err}"
        );
        // No size known: reading stops at the limit (an endless file returns, with the limit).
        let err = read(Path::new("/dev/zero")).unwrap_err();
        assert!(
            err.contains("/dev/zero") && err.contains("larger than the limit of 8388608 bytes"),
            "{name}: {err}"
        );
    }
    // Text handed over directly is held to the same limit.
    for (name, read) in readers() {
        let err = read(&pad(parted, MAX_YAML_BYTES + 1), "big.yaml").unwrap_err();
        assert!(
            err.contains("big.yaml") && err.contains("8388608"),
            "{name}: {err}"
        );
    }
}

#[test]
fn mig_parted_counts_are_bounded_before_they_are_expanded() {
    // `check` lists every instance: 4,294,967,295 of them was a 16 GiB allocation.
    let text = |count: u64| {
        format!(
            "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {{\"1g.10gb\": {count}}}\n"
        )
    };
    for count in [8, u32::MAX as u64] {
        // Refused by the count check before any instance is listed (the message names it).
        let err = PartedFile::parse(&text(count), "big.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("big.yaml")
                && err.contains("mig-configs.c[0].mig-devices")
                && err.contains(&format!("{count} × \"1g.10gb\""))
                && err.contains("at most 7"),
            "{err}"
        );
    }
    let seven = PartedFile::parse(&text(7), "ok.yaml").unwrap();
    assert_eq!(seven.configs["c"][0].mig_devices["1g.10gb"], 7);
    // Seven of each of two profiles: 14 instances, more than any GPU holds.
    let err = PartedFile::parse(
        "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 7, \"2g.20gb\": 7}\n",
        "two.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("14 GPU instances") && err.contains("at most 7"),
        "{err}"
    );
}

#[test]
fn plan_instances_are_bounded() {
    let inst = "        - profile: 1g.10gb\n          profile-id: 19\n          placement: { start: 0, size: 1 }\n";
    let text = format!(
        "version: v1\nkind: tessera-mig-plan\nconfigs:\n  day:\n    - gpu: 0\n      model: H100-80GB\n      mig-enabled: true\n      instances:\n{}",
        inst.repeat(10_000)
    );
    let err = TesseraPlan::parse(&text, "p.yaml").unwrap_err().to_string();
    assert!(
        err.contains("configs.day[0].instances")
            && err.contains("10000 instances")
            && err.contains("at most 7"),
        "{err}"
    );
}

#[test]
fn mig_parted_device_lists_are_bounded() {
    // Each index that names no GPU is one warning at start: a long list was a flood of them.
    let text = |n: usize| {
        let v: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        format!(
            "version: v1\nmig-configs:\n  c:\n    - devices: [{}]\n      mig-enabled: false\n",
            v.join(", ")
        )
    };
    PartedFile::parse(&text(64), "ok.yaml").unwrap();
    let err = PartedFile::parse(&text(65), "long.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("long.yaml")
            && err.contains("mig-configs.c[0].devices")
            && err.contains("65 GPU indices; expected at most 64"),
        "{err}"
    );
}
