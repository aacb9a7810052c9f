//! Release binaries are stripped and name no build path (issue 49): the workspace's
//! `[profile.release]` sets `strip = "symbols"`, and `scripts/release-env.sh` (what
//! `scripts/build-debs.sh`, `scripts/build-images.sh` and `deploy/images/Containerfile` source
//! before a release build) appends `--remap-path-prefix` flags to RUSTFLAGS.
//!
//! A release build of the workspace takes half an hour, so the test builds a throwaway crate
//! instead, with the real pieces: the workspace's `[profile.release]` section copied into its
//! manifest, RUSTFLAGS from the real script, a generated source file under its target folder
//! (as the exporter's gRPC client is) and a path dependency under a temporary `CARGO_HOME` (where
//! crates.io code lives). Each of them holds a panic location, a path rustc writes into the
//! binary. The binary must have no symbol table (`readelf`, `nm`: binutils, which
//! `scripts/test.sh` installs) and contain neither temporary folder's path, and a flag the caller
//! had in RUSTFLAGS must still reach rustc. What it does not check: the workspace's own binaries
//! (built in debug by the other tests), or paths a crate writes itself (`env!("CARGO_MANIFEST_DIR")`
//! in non-test code: none).

use std::path::Path;
use std::process::Command;

use tessera_e2e::repo_root;

const PROBE: &str = "release-probe";

/// The `[profile.release]` section of a Cargo.toml's text, header included, up to the next
/// table (comments above that table stay with it).
fn release_profile(toml: &str) -> Option<String> {
    let start = toml.find("\n[profile.release]\n")? + 1;
    let rest = &toml[start..];
    let end = rest[1..].find("\n[").map(|e| e + 2).unwrap_or(rest.len());
    let section: Vec<&str> = rest[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    Some(section.join("\n") + "\n")
}

/// Whether `section` sets `key = "value"` (spaces around `=` as you like).
fn sets(section: &str, key: &str, value: &str) -> bool {
    section.lines().any(|l| {
        l.split_once('=')
            .is_some_and(|(k, v)| k.trim() == key && v.trim() == format!("\"{value}\""))
    })
}

#[test]
fn the_workspace_release_profile_strips_symbols() {
    let toml = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    let section = release_profile(&toml).expect("a [profile.release] in the workspace Cargo.toml");
    assert!(sets(&section, "strip", "symbols"), "{section}");
    // The parser itself: a planted section is found, its key read, the next table not included.
    let planted = "[a]\nx = 1\n\n[profile.release]\nstrip=\"symbols\"\n# c\n[profile.dev]\n";
    let s = release_profile(planted).unwrap();
    assert!(
        sets(&s, "strip", "symbols") && !s.contains("profile.dev"),
        "{s}"
    );
    assert!(release_profile("[profile.dev]\nstrip = \"symbols\"\n").is_none());
}

/// Where `needle` occurs in `haystack`, and a little around it, or `None`.
fn find(haystack: &[u8], needle: &str) -> Option<String> {
    let n = needle.as_bytes();
    let at = haystack.windows(n.len()).position(|w| w == n)?;
    let end = (at + n.len() + 60).min(haystack.len());
    Some(String::from_utf8_lossy(&haystack[at..end]).into_owned())
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_release_build_is_stripped_and_names_no_build_path() {
    let toml = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    let profile = release_profile(&toml).expect("a [profile.release] in the workspace Cargo.toml");
    // Two folders apart, so that either remapping is checked on its own.
    let src_dir = tempfile::tempdir().unwrap();
    let home_dir = tempfile::tempdir().unwrap();
    let src = src_dir.path().canonicalize().unwrap();
    let cargo_home = home_dir.path().canonicalize().unwrap();
    let dep = cargo_home.join("registry/src/index.crates.io-0000000000000000/dep-0.1.0");
    write(
        &dep.join("Cargo.toml"),
        "[package]\nname = \"dep\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
    );
    write(
        &dep.join("src/lib.rs"),
        "pub fn checked(n: usize) -> usize {\n    if n > 1000 {\n        panic!(\"dep: too many\");\n    }\n    n\n}\n",
    );
    write(
        &src.join("Cargo.toml"),
        &format!(
            "[package]\nname = \"{PROBE}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
             [dependencies]\ndep = {{ path = \"{}\" }}\n\n[workspace]\n\n{profile}",
            dep.display()
        ),
    );
    // Generated code under the target folder, included: its panic names an absolute path.
    write(
        &src.join("build.rs"),
        "fn main() {\n    println!(\"cargo::rustc-check-cfg=cfg(probe_user_flag)\");\n    \
         let out = std::env::var(\"OUT_DIR\").unwrap();\n    \
         std::fs::write(format!(\"{out}/generated.rs\"), \"pub fn generated(n: usize) -> usize { if n > 2000 { panic!(\\\"generated: too many\\\") } n }\\n\").unwrap();\n}\n",
    );
    write(
        &src.join("src/main.rs"),
        "// The caller's RUSTFLAGS must reach rustc alongside the remapping.\n\
         #[cfg(not(probe_user_flag))]\ncompile_error!(\"the caller's RUSTFLAGS were dropped\");\n\n\
         include!(concat!(env!(\"OUT_DIR\"), \"/generated.rs\"));\n\n\
         fn main() {\n    let n = std::env::args().count();\n    \
         println!(\"{}\", dep::checked(n) + generated(n));\n}\n",
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let script = repo_root().join("scripts/release-env.sh");
    let mut cmd = Command::new("sh");
    // What cargo set for this test binary (and a CARGO_TARGET_DIR of the caller's) stays out:
    // the probe's build sees a plain environment, with its own CARGO_HOME.
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("CARGO_") || k == "RUSTFLAGS" || k == "OUT_DIR" {
            cmd.env_remove(&key);
        }
    }
    let out = cmd
        .args([
            "-c",
            ". \"$1\" && tessera_release_env \"$2\" && echo \"$RUSTFLAGS\" >&2 && \
             exec \"$3\" build --release --offline --quiet",
            "sh",
        ])
        .arg(&script)
        .arg(&src)
        .arg(&cargo)
        .env("CARGO_HOME", &cargo_home)
        .env("RUSTFLAGS", "--cfg probe_user_flag")
        .current_dir(&src)
        .output()
        .expect("running sh");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the probe's release build: {err}");
    let bin = src.join("target/release").join(PROBE);
    let run = Command::new(&bin).output().expect("running the probe");
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "2");

    // No symbol table, no debug info.
    let sections = Command::new("readelf")
        .args(["-S", "-W"])
        .arg(&bin)
        .output()
        .expect("readelf (binutils; scripts/test.sh installs it)");
    assert!(sections.status.success());
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(sections.contains(".dynsym"), "{sections}");
    for gone in [".symtab", ".strtab", ".debug_"] {
        assert!(!sections.contains(gone), "{gone} in the probe:\n{sections}");
    }
    let nm = Command::new("nm")
        .arg(&bin)
        .output()
        .expect("nm (binutils)");
    let nm_err = String::from_utf8_lossy(&nm.stderr);
    assert!(
        nm.stdout.is_empty() && nm_err.contains("no symbols"),
        "nm lists symbols: {}",
        String::from_utf8_lossy(&nm.stdout)
    );

    // No build path: the panic locations are there, under the remapped names.
    let bytes = std::fs::read(&bin).unwrap();
    for (dir, what) in [(&src, "the source tree"), (&cargo_home, "CARGO_HOME")] {
        let dir = dir.to_str().unwrap();
        if let Some(around) = find(&bytes, dir) {
            panic!("the probe names {what} ({dir}): {around:?}; RUSTFLAGS: {err}");
        }
    }
    for remapped in [
        "/cargo/registry/src/index.crates.io-0000000000000000/dep-0.1.0/src/lib.rs",
        "/build/tessera/target/release/build/",
    ] {
        assert!(
            find(&bytes, remapped).is_some(),
            "{remapped} not in the probe"
        );
    }
}

#[test]
fn the_release_env_appends_to_rustflags_and_refuses_what_it_cannot_carry() {
    let script = repo_root().join("scripts/release-env.sh");
    let flags = |rustflags: Option<&str>, extra: &[(&str, &str)], root: &str| {
        let mut cmd = Command::new("sh");
        cmd.env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("RUSTFLAGS")
            .env("CARGO_HOME", "/opt/cargo-home")
            .current_dir("/");
        if let Some(f) = rustflags {
            cmd.env("RUSTFLAGS", f);
        }
        cmd.envs(extra.iter().copied());
        let out = cmd
            .args([
                "-c",
                ". \"$1\" && tessera_release_env \"$2\" && printf %s \"$RUSTFLAGS\"",
                "sh",
            ])
            .arg(&script)
            .arg(root)
            .output()
            .expect("running sh");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, got, _) = flags(Some("-C target-cpu=native"), &[], "/tmp");
    assert_eq!(code, Some(0));
    assert_eq!(
        got,
        "-C target-cpu=native --remap-path-prefix=/tmp=/build/tessera \
         --remap-path-prefix=/opt/cargo-home=/cargo"
    );
    let (_, got, _) = flags(None, &[("CARGO_TARGET_DIR", "/var/t")], "/tmp");
    assert_eq!(
        got,
        "--remap-path-prefix=/tmp=/build/tessera --remap-path-prefix=/var/t=/build/target \
         --remap-path-prefix=/opt/cargo-home=/cargo"
    );
    // CARGO_ENCODED_RUSTFLAGS would make cargo ignore RUSTFLAGS; RUSTFLAGS splits at spaces.
    let (code, _, err) = flags(None, &[("CARGO_ENCODED_RUSTFLAGS", "-Cx")], "/tmp");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("CARGO_ENCODED_RUSTFLAGS"), "{err}");
    let (code, _, err) = flags(None, &[("CARGO_HOME", "/opt/a b")], "/tmp");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("white space"), "{err}");
}
