//! The container images (issue 37 item 1): `scripts/build-images.sh` builds both from scratch
//! with buildah (no registry), and each binary runs from the image's root filesystem, mounted
//! with `buildah mount` and entered with `chroot` (`podman run` cannot start containers on these
//! machines: crun fails to set RLIMIT_NOFILE): `--version`, the simulated `--once`, the exporter
//! serving `/metrics`, and `--once` through the NVML backend with the fake `libnvidia-ml.so.1`
//! placed where the NVIDIA container toolkit puts the driver's. Debug binaries (the ones the
//! other tests build); needs root, as buildah's storage and chroot do.

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
