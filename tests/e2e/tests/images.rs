//! The container images (issue 37 item 1): `scripts/build-images.sh` builds both from scratch
//! with buildah (no registry), and each binary runs from the image's root filesystem, mounted
//! with `buildah mount` and entered with `chroot` (`podman run` cannot start containers on these
//! machines: crun fails to set RLIMIT_NOFILE): `--version`, the simulated `--once`, the exporter
//! serving `/metrics`, and `--once` through the NVML backend with the fake `libnvidia-ml.so.1`
//! placed where the NVIDIA container toolkit puts the driver's. Debug binaries (the ones the
//! other tests build); needs root, as buildah's storage and chroot do.
//!
//! `deploy/images/Containerfile` (for Docker and Podman, against a registry) cannot be built here
//! (no registry), so its final targets are read by a small, strict parser and their entrypoint,
//! user, working directory, environment, `org.opencontainers.image.*` labels and exposed ports
//! compared with the config of the images the script built; its build stage must build both
//! packages `--locked` from the rust image of the workspace's `rust-version`, with the release
//! environment of `scripts/release-env.sh`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tessera_e2e::{exporter, fake_nvml, run, tessera};

fn buildah(args: &[&str]) -> String {
    let out = Command::new("buildah")
        .args(args)
        .output()
        .expect("buildah (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "buildah {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// An image loaded from its OCI archive into a working container, mounted; removed on drop.
struct Mounted {
    ctr: String,
    image: String,
    root: PathBuf,
}

impl Mounted {
    fn new(archive: &Path) -> Mounted {
        let ctr = buildah(&[
            "from",
            "--pull-never",
            &format!("oci-archive:{}", archive.display()),
        ]);
        let image = buildah(&[
            "inspect",
            "--type",
            "container",
            "--format",
            "{{.FromImageID}}",
            &ctr,
        ]);
        let root = PathBuf::from(buildah(&["mount", &ctr]));
        Mounted { ctr, image, root }
    }

    /// The image's config (the container's OCI view: labels, user, env, entrypoint).
    fn config(&self) -> serde_json::Value {
        let text = buildah(&["inspect", "--type", "container", &self.ctr]);
        let v: serde_json::Value = serde_json::from_str(&text).expect("inspect JSON");
        v["OCIv1"]["config"].clone()
    }

    /// `chroot ROOT ARGS…` with `env`.
    fn chroot(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = Command::new("/usr/sbin/chroot");
        c.arg(&self.root)
            .args(args)
            .env_clear()
            .envs(env.iter().copied());
        c
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        for args in [
            vec!["unmount", self.ctr.as_str()],
            vec!["rm", self.ctr.as_str()],
            vec!["rmi", "-f", self.image.as_str()],
        ] {
            let _ = Command::new("buildah").args(&args).output();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `GET /metrics` until the exporter answers (a minute at most: a hang guard, not a bound).
fn scrape(port: u16) -> String {
    let start = Instant::now();
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
            let mut body = String::new();
            if s.read_to_string(&mut body).is_ok() && body.contains("tessera_gpu_") {
                return body;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the exporter never served /metrics"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn images_build_from_scratch_and_their_binaries_run_from_the_image() {
    // The binaries the other tests use (the macros build them when missing).
    let (_, version, _) = run(tessera!["--version"]);
    let _ = run(exporter!["--version"]);
    let bins = tessera_e2e::target_profile_dir();
    let out = tempfile::tempdir().expect("tmp");
    let root = tessera_e2e::repo_root();
    let status = Command::new("bash")
        .arg(root.join("scripts/build-images.sh"))
        .arg("--bin-dir")
        .arg(&bins)
        .arg("--out")
        .arg(out.path())
        .status()
        .expect("bash");
    assert!(status.success());
    let listed = std::fs::read_to_string(out.path().join("images.txt")).unwrap();
    let archive = |name: &str| out.path().join(format!("{name}-0.1.0.oci.tar"));
    for name in ["tessera-exporter", "tessera"] {
        assert!(listed.contains(&format!("{name}:0.1.0 ")), "{listed}");
        assert!(archive(name).is_file(), "{name}");
    }

    // The CLI image: labels, a non-root user, the binary runs with only what the image holds.
    let cli = Mounted::new(&archive("tessera"));
    let cfg = cli.config();
    assert_containerfile_matches("tessera", &cfg);
    assert_eq!(cfg["User"], "65532:65532", "{cfg}");
    assert_eq!(
        cfg["Labels"]["org.opencontainers.image.version"], "0.1.0",
        "{cfg}"
    );
    assert_eq!(
        cfg["Labels"]["org.opencontainers.image.title"], "tessera",
        "{cfg}"
    );
    let (o, v, e) = run(cli.chroot(&["/usr/bin/tessera", "--version"], &[]));
    assert!(o.status.success(), "{e}");
    assert_eq!(v, version);
    assert!(
        !cli.root
            .join("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
            .exists()
    );

    // The exporter image: the toolkit's variables are set; simulated and NVML paths run.
    let exp = Mounted::new(&archive("tessera-exporter"));
    let cfg = exp.config();
    assert_containerfile_matches("tessera-exporter", &cfg);
    let env: Vec<String> = serde_json::from_value(cfg["Env"].clone()).unwrap();
    assert!(
        env.contains(&"NVIDIA_VISIBLE_DEVICES=all".to_string()),
        "{env:?}"
    );
    assert!(
        env.contains(&"NVIDIA_DRIVER_CAPABILITIES=utility".to_string()),
        "{env:?}"
    );
    let (o, once, e) = run(exp.chroot(
        &["/usr/bin/tessera-exporter", "--backend", "sim", "--once"],
        &[],
    ));
    assert!(o.status.success(), "{e}");
    assert!(
        once.contains("backend sim") && once.contains("NVIDIA H100 80GB HBM3"),
        "{once}"
    );

    let port = free_port();
    let mut child = exp
        .chroot(
            &[
                "/usr/bin/tessera-exporter",
                "--backend",
                "sim",
                "--web.listen-address",
                &format!("127.0.0.1:{port}"),
                "--kubelet.pod-resources-socket=",
            ],
            &[],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chroot");
    let body = scrape(port);
    let _ = child.kill();
    let _ = child.wait();
    assert!(body.contains("tessera_gpu_power_watts{"), "{body}");

    // Where the NVIDIA container toolkit injects the driver's library.
    let lib = exp.root.join("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    std::fs::copy(fake_nvml(), &lib).expect("copy the fake library");
    std::fs::copy(
        root.join("fixtures/scenarios/demo.toml"),
        exp.root.join("tmp/scenario.toml"),
    )
    .unwrap();
    let (o, once, e) = run(exp.chroot(
        &["/usr/bin/tessera-exporter", "--once"],
        &[("TESSERA_FAKE_NVML_SCENARIO", "/tmp/scenario.toml")],
    ));
    assert!(o.status.success(), "{e}");
    assert!(
        once.contains("backend nvml") && once.contains("NVIDIA H100 80GB HBM3"),
        "{once}"
    );
}

/// One stage of a Containerfile as its instructions declare it (ARG values at their defaults).
#[derive(Debug, Default)]
struct Stage {
    name: String,
    from: String,
    args: BTreeMap<String, String>,
    user: Option<String>,
    workdir: Option<String>,
    env: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    entrypoint: Option<Vec<String>>,
    exposed: Vec<String>,
    copies: Vec<Vec<String>>,
    runs: Vec<String>,
}

/// The instructions of `text` (keyword, arguments, first line number): `\` continues a line,
/// comment lines are skipped (also inside a continuation); a continuation into an empty line or
/// the end of the file is an error.
fn instructions(text: &str) -> Result<Vec<(String, String, usize)>, String> {
    let mut out = Vec::new();
    let mut pending: Option<(String, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim();
        if trimmed.starts_with('#') {
            continue;
        }
        if trimmed.is_empty() {
            if pending.is_some() {
                return Err(format!("line {n}: empty line inside a continuation"));
            }
            continue;
        }
        let (mut joined, start) = pending.take().unwrap_or_default();
        let start = if joined.is_empty() { n } else { start };
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head);
                joined.push(' ');
                pending = Some((joined, start));
            }
            None => {
                joined.push_str(trimmed);
                let (keyword, rest) = joined
                    .split_once(char::is_whitespace)
                    .unwrap_or((&joined, ""));
                out.push((keyword.to_string(), rest.trim().to_string(), start));
            }
        }
    }
    match pending {
        Some((_, start)) => Err(format!("line {start}: continuation runs past the end")),
        None => Ok(out),
    }
}

/// Splits `s` into words at white space outside quotes: `"…"` (with `\"` and `\\`) and `'…'`;
/// `$NAME` and `${NAME}` outside single quotes become the value of ARG `NAME` (an unknown
/// name is an error).
fn words(s: &str, args: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => out.extend(word.take()),
            (None, '"' | '\'') => {
                quote = Some(c);
                word.get_or_insert_default();
            }
            (Some(q), c) if c == q => quote = None,
            (Some('"') | None, '\\') => {
                let next = chars.next().ok_or("a trailing backslash")?;
                word.get_or_insert_default().push(next);
            }
            (Some('"') | None, '$') => {
                let braced = chars.next_if_eq(&'{').is_some();
                let mut name = String::new();
                while let Some(c) = chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_') {
                    name.push(c);
                }
                if braced && chars.next() != Some('}') {
                    return Err(format!("unterminated ${{{name}"));
                }
                let value = args
                    .get(&name)
                    .ok_or_else(|| format!("${name} is no ARG of the stage"))?;
                word.get_or_insert_default().push_str(value);
            }
            (_, c) => word.get_or_insert_default().push(c),
        }
    }
    if let Some(q) = quote {
        return Err(format!("unterminated {q} quote in {s:?}"));
    }
    out.extend(word);
    Ok(out)
}

/// `KEY=VALUE` pairs (ENV, LABEL); the legacy `ENV KEY VALUE` form is an error.
fn pairs(s: &str, args: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, String> {
    words(s, args)?
        .into_iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(format!("{w:?} is not KEY=VALUE")),
        })
        .collect()
}

/// The stages of a Containerfile, strictly: only FROM, ARG, ENV, USER, WORKDIR, ENTRYPOINT (exec
/// form), LABEL, COPY, EXPOSE and RUN, nothing before the first FROM, a name on every stage.
fn parse_containerfile(text: &str) -> Result<Vec<Stage>, String> {
    let mut stages: Vec<Stage> = Vec::new();
    for (keyword, rest, n) in instructions(text)? {
        let at = |e: String| format!("line {n}: {keyword}: {e}");
        if keyword == "FROM" {
            match rest.split_whitespace().collect::<Vec<_>>()[..] {
                [image, "AS", name] if !image.starts_with('-') => stages.push(Stage {
                    name: name.to_string(),
                    from: image.to_string(),
                    ..Stage::default()
                }),
                _ => return Err(at(format!("{rest:?} is not IMAGE AS NAME"))),
            }
            continue;
        }
        let stage = stages
            .last_mut()
            .ok_or_else(|| at("before the first FROM".into()))?;
        let one = |stage: &Stage| match words(&rest, &stage.args).map_err(at)?[..] {
            [ref w] => Ok(w.clone()),
            _ => Err(at(format!("{rest:?} is not one word"))),
        };
        match keyword.as_str() {
            "ARG" => {
                let (name, default) = rest.split_once('=').unwrap_or((&rest, ""));
                let default = match words(default, &stage.args).map_err(at)?[..] {
                    [] => String::new(),
                    [ref w] => w.clone(),
                    _ => return Err(at(format!("{rest:?} is not NAME[=DEFAULT]"))),
                };
                stage.args.insert(name.to_string(), default);
            }
            "ENV" => stage.env.extend(pairs(&rest, &stage.args).map_err(at)?),
            "LABEL" => stage.labels.extend(pairs(&rest, &stage.args).map_err(at)?),
            "USER" => stage.user = Some(one(stage)?),
            "WORKDIR" => stage.workdir = Some(one(stage)?),
            "ENTRYPOINT" => {
                let exec: Vec<String> = serde_json::from_str(&rest)
                    .map_err(|e| at(format!("not the exec form (a JSON array): {e}")))?;
                stage.entrypoint = Some(exec);
            }
            "EXPOSE" => stage.exposed.extend(words(&rest, &stage.args).map_err(at)?),
            "COPY" => {
                let w = words(&rest, &stage.args).map_err(at)?;
                stage.copies.push(w);
            }
            "RUN" => stage.runs.push(rest),
            _ => return Err(at("not an instruction this parser reads".into())),
        }
    }
    Ok(stages)
}

fn containerfile_text() -> String {
    let path = tessera_e2e::repo_root().join("deploy/images/Containerfile");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What differs between the Containerfile stage `name` and an image config (`buildah inspect`'s
/// OCI config): entrypoint, user, working directory, environment, exposed ports, the
/// `org.opencontainers.image.*` label keys, and their values except revision and created (which
/// change with each build; version is the ARG's default, the workspace's version).
fn containerfile_differences(text: &str, name: &str, cfg: &serde_json::Value) -> Vec<String> {
    let stages = match parse_containerfile(text) {
        Ok(s) => s,
        Err(e) => return vec![format!("the Containerfile does not parse: {e}")],
    };
    let Some(stage) = stages.iter().find(|s| s.name == name) else {
        return vec![format!("no stage {name}")];
    };
    let mut diffs = Vec::new();
    let mut differ = |what: &str, file: String, image: String| {
        if file != image {
            diffs.push(format!(
                "{name}: {what}: Containerfile {file}, image {image}"
            ));
        }
    };
    let strings = |v: &serde_json::Value| -> Vec<String> {
        serde_json::from_value(v.clone()).unwrap_or_default()
    };
    differ(
        "entrypoint",
        format!("{:?}", stage.entrypoint),
        format!("{:?}", Some(strings(&cfg["Entrypoint"]))),
    );
    differ(
        "user",
        format!("{:?}", stage.user),
        format!("{:?}", cfg["User"].as_str()),
    );
    differ(
        "workdir",
        format!("{:?}", stage.workdir),
        format!("{:?}", cfg["WorkingDir"].as_str()),
    );
    let image_env: BTreeMap<String, String> = strings(&cfg["Env"])
        .iter()
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    differ("env", format!("{:?}", stage.env), format!("{image_env:?}"));
    let mut ports: Vec<String> = stage
        .exposed
        .iter()
        .map(|p| match p.contains('/') {
            true => p.clone(),
            false => format!("{p}/tcp"),
        })
        .collect();
    ports.sort();
    let image_ports: Vec<String> = cfg["ExposedPorts"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    differ(
        "exposed ports",
        format!("{ports:?}"),
        format!("{image_ports:?}"),
    );
    let oci = |labels: BTreeMap<String, String>| -> BTreeMap<String, String> {
        labels
            .into_iter()
            .filter(|(k, _)| k.starts_with("org.opencontainers.image."))
            .map(|(k, v)| match k.as_str() {
                "org.opencontainers.image.revision" | "org.opencontainers.image.created" => {
                    (k, "(per build)".to_string())
                }
                _ => (k, v),
            })
            .collect()
    };
    let image_labels: BTreeMap<String, String> =
        serde_json::from_value(cfg["Labels"].clone()).unwrap_or_default();
    differ(
        "labels",
        format!("{:?}", oci(stage.labels.clone())),
        format!("{:?}", oci(image_labels)),
    );
    diffs
}

/// The Containerfile's stage `name` has the configuration of the image the script built (and
/// a planted difference in it would be found).
fn assert_containerfile_matches(name: &str, cfg: &serde_json::Value) {
    let text = containerfile_text();
    let diffs = containerfile_differences(&text, name, cfg);
    assert!(diffs.is_empty(), "{diffs:#?}");
    let planted = text.replace("USER 65532:65532", "USER 65534:65534");
    let diffs = containerfile_differences(&planted, name, cfg);
    assert!(diffs.len() == 1 && diffs[0].contains("user"), "{diffs:#?}");
}

/// `rust-version` of the root Cargo.toml's `[workspace.package]`.
fn workspace_rust_version() -> String {
    let toml = std::fs::read_to_string(tessera_e2e::repo_root().join("Cargo.toml")).unwrap();
    let section = toml
        .split("\n[")
        .find(|s| s.starts_with("workspace.package]"))
        .expect("[workspace.package]");
    section
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("rust-version")
        .to_string()
}

#[test]
fn the_containerfile_builds_both_binaries_locked_with_the_workspace_rust() {
    let stages = parse_containerfile(&containerfile_text()).expect("the Containerfile parses");
    let names: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["build", "tessera-exporter", "tessera"]);
    let build = &stages[0];
    assert_eq!(
        build.from,
        format!(
            "docker.io/library/rust:{}-bookworm",
            workspace_rust_version()
        )
    );
    // The commit `--version` shows: REVISION, passed to build-support/commit.rs.
    assert_eq!(build.args["REVISION"], "unknown");
    assert_eq!(build.env["TESSERA_BUILD_COMMIT"], "unknown");
    let run: Vec<&str> = build
        .runs
        .iter()
        .flat_map(|r| r.split_whitespace())
        .collect();
    // Stripped by the workspace's release profile, the build paths remapped by the snippet the
    // scripts use (tests/e2e/tests/release_binaries.rs checks both on a throwaway crate).
    assert_eq!(
        run,
        [
            ".",
            "./scripts/release-env.sh",
            "&&",
            "tessera_release_env",
            "/src",
            "&&",
            "cargo",
            "build",
            "--release",
            "--locked",
            "-p",
            "tessera-exporter",
            "-p",
            "tessera"
        ],
        "{:?}",
        build.runs
    );
    for stage in &stages[1..] {
        let name = &stage.name;
        assert_eq!(
            stage.copies,
            [vec![
                "--from=build".to_string(),
                format!("/src/target/release/{name}"),
                format!("/usr/bin/{name}"),
            ]],
            "{name}"
        );
        assert_eq!(stage.args["VERSION"], env!("CARGO_PKG_VERSION"), "{name}");
    }
}

#[test]
fn the_containerfile_parser_is_strict() {
    let ok =
        "FROM a AS b\nARG V=1\nENV A=x \\\n  # a comment\n  B=\"y z\"\nLABEL k=\"${V}\" l=$V\n";
    let stage = &parse_containerfile(ok).unwrap()[0];
    assert_eq!(stage.env["A"], "x");
    assert_eq!(stage.env["B"], "y z");
    assert_eq!(stage.labels["k"], "1");
    assert_eq!(stage.labels["l"], "1");
    for bad in [
        "ENV A=1\nFROM a AS b\n",
        "FROM a\n",
        "FROM a AS b\nENV A 1\n",
        "FROM a AS b\nENTRYPOINT /usr/bin/x\n",
        "FROM a AS b\nHEALTHCHECK NONE\n",
        "FROM a AS b\nLABEL k=$NOPE\n",
        "FROM a AS b\nLABEL k=\"open\n",
        "FROM a AS b\nENV A=1 \\\n",
        "FROM a AS b\nENV A=1 \\\n\nB=2\n",
        "FROM a AS b\nUSER a b\n",
    ] {
        assert!(parse_containerfile(bad).is_err(), "{bad:?}");
    }
}
