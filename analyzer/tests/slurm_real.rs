//! The Slurm epilog (`deploy/slurm/epilog.sh`) under a real single-node Slurm: Debian's
//! `munged`, `slurmctld` and `slurmd` (`scripts/test.sh` installs the packages `munge`,
//! `slurmctld`, `slurmd` and `slurm-client`). The test fails, never skips, without them or
//! without root: the daemons run as root, directly when the test runs as root, else through
//! `sudo -n`.
//!
//! Everything lives in one temporary folder: a random munge key and munged's socket, a
//! `slurm.conf` (free ports chosen now, `proctrack/linuxproc`, `task/none`, `FirstJobId=501`,
//! the node as `slurmd -C` sees it), the daemons' state, spool, pid and log files, and an
//! `Epilog=` wrapper that points the real epilog at this test's `tessera` binary and at simulated
//! history holding Slurm jobs 500–502 (`support::slurm_jobs`). The daemons run in the foreground
//! and a guard stops them (SIGTERM, then SIGKILL) when the test ends, panics included.
//!
//! Three `sbatch --wrap "sleep 1"` jobs get ids 501, 502 and 503. The epilog must store
//! `501.json` (idle) and `502.json` (as `tessera job 502` prints it), store nothing for 503 (no
//! GPU rows: the reason goes to the epilog's stderr), and the node must stay `idle`: an epilog
//! that failed would have drained it.

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::cli::tessera;
use crate::support::slurm_jobs::history;

pub(crate) const MUNGED: &str = "/usr/sbin/munged";
pub(crate) const SLURMCTLD: &str = "/usr/sbin/slurmctld";
pub(crate) const SLURMD: &str = "/usr/sbin/slurmd";
const CLIENTS: [&str; 4] = [
    "/usr/bin/sbatch",
    "/usr/bin/squeue",
    "/usr/bin/sinfo",
    "/usr/bin/scontrol",
];

/// How the daemons get root.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Root {
    /// The test runs as root.
    Direct,
    /// Through `sudo -n` (passwordless sudo).
    Sudo,
}

impl Root {
    pub(crate) fn get() -> Root {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            return Root::Direct;
        }
        let sudo = Command::new("sudo")
            .args(["-n", "true"])
            .stdin(Stdio::null())
            .output();
        if sudo.is_ok_and(|o| o.status.success()) {
            return Root::Sudo;
        }
        panic!(
            "the real-Slurm test starts munged, slurmctld and slurmd as root: run the tests as \
             root, or give this user passwordless sudo (`sudo -n true` must succeed)"
        );
    }

    /// `program` as root.
    pub(crate) fn command(self, program: &str) -> Command {
        match self {
            Root::Direct => Command::new(program),
            Root::Sudo => {
                let mut cmd = Command::new("sudo");
                cmd.args(["-n", program]);
                cmd
            }
        }
    }

    /// `program ARGS` as root, waited for.
    pub(crate) fn run(self, program: &str, args: &[&str]) -> Output {
        self.command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"))
    }

    /// A file the daemons wrote (log files may be root's alone); empty when it is missing.
    pub(crate) fn read(self, path: &Path) -> String {
        match self {
            Root::Direct => fs::read_to_string(path).unwrap_or_default(),
            Root::Sudo => {
                let out = self.run("cat", &[path.to_str().unwrap()]);
                String::from_utf8_lossy(&out.stdout).into_owned()
            }
        }
    }
}

pub(crate) struct Daemon {
    pub(crate) name: &'static str,
    pub(crate) child: Child,
    pub(crate) pid_file: PathBuf,
}

/// The running daemons, stopped on drop: slurmd and slurmctld first, munged last.
pub(crate) struct Cluster {
    pub(crate) root: Root,
    pub(crate) dir: PathBuf,
    pub(crate) daemons: Vec<Daemon>,
}

impl Cluster {
    pub(crate) fn start(
        &mut self,
        name: &'static str,
        program: &str,
        args: &[&str],
        pid_file: PathBuf,
    ) {
        let out = fs::File::create(self.dir.join(format!("{name}.out")))
            .unwrap_or_else(|e| panic!("{name}.out: {e}"));
        let child = self
            .root
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("start {program}: {e}"));
        self.daemons.push(Daemon {
            name,
            child,
            pid_file,
        });
    }

    /// The end of each daemon's log and of its stdout/stderr, for failure messages.
    pub(crate) fn logs(&self) -> String {
        let mut text = String::new();
        for name in self.daemons.iter().map(|d| d.name) {
            for file in [format!("{name}.log"), format!("{name}.out")] {
                let body = self.root.read(&self.dir.join(&file));
                let tail: String = {
                    let lines: Vec<&str> = body.lines().collect();
                    lines[lines.len().saturating_sub(40)..].join("\n")
                };
                text.push_str(&format!("\n--- {file} (last 40 lines)\n{tail}\n"));
            }
        }
        let epilog = self.root.read(&self.dir.join("epilog.err"));
        text.push_str(&format!("\n--- epilog.err\n{epilog}\n"));
        text
    }

    /// Panics, with the logs, when a daemon has exited.
    pub(crate) fn check_alive(&mut self) {
        for i in 0..self.daemons.len() {
            if let Ok(Some(status)) = self.daemons[i].child.try_wait() {
                let name = self.daemons[i].name;
                panic!("{name} exited ({status}){}", self.logs());
            }
        }
    }

    /// Polls `ready` every 100 ms until it gives a value, for at most `limit`; panics with the
    /// logs when a daemon exits or time runs out.
    pub(crate) fn wait_for<T>(
        &mut self,
        what: &str,
        limit: Duration,
        mut ready: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = ready() {
                return v;
            }
            self.check_alive();
            if Instant::now() > deadline {
                panic!(
                    "timed out after {limit:?} waiting for {what}{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn signal(&self, d: &Daemon, sig: libc::c_int, name: &str) {
        let pid = fs::read_to_string(&d.pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        match self.root {
            Root::Direct => {
                // SAFETY: kill has no memory preconditions; the pid is our own child's.
                unsafe { libc::kill(d.child.id() as i32, sig) };
            }
            Root::Sudo => {
                // sudo relays SIGTERM to the daemon, not SIGKILL: signal the daemon's own pid
                // (its pid file) too, through sudo.
                // SAFETY: as above; the pid is our own `sudo` child's.
                unsafe { libc::kill(d.child.id() as i32, sig) };
                if let Some(pid) = pid {
                    let _ = self.root.run("kill", &["-s", name, &pid.to_string()]);
                }
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Stop the Slurm daemons together, then munged, which they use until they exit.
        let (munge, slurm): (Vec<Daemon>, Vec<Daemon>) = std::mem::take(&mut self.daemons)
            .into_iter()
            .partition(|d| d.name == "munged");
        for mut group in [slurm, munge] {
            for d in &group {
                self.signal(d, libc::SIGTERM, "TERM");
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline
                && group
                    .iter_mut()
                    .any(|d| matches!(d.child.try_wait(), Ok(None)))
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            for d in &mut group {
                if matches!(d.child.try_wait(), Ok(None)) {
                    eprintln!("{} ignored SIGTERM for 10 s: SIGKILL", d.name);
                    self.signal(d, libc::SIGKILL, "KILL");
                    let _ = d.child.kill();
                }
                let _ = d.child.wait();
            }
        }
        if self.root == Root::Sudo {
            // Give the folder back, so that the temporary folder can be removed.
            // SAFETY: getuid and getgid have no preconditions and cannot fail.
            let owner = unsafe { format!("{}:{}", libc::getuid(), libc::getgid()) };
            let _ = self
                .root
                .run("chown", &["-R", &owner, self.dir.to_str().unwrap()]);
        }
    }
}

/// Two TCP ports nobody listens on now (the daemons bind them a moment later).
pub(crate) fn free_ports() -> (u16, u16) {
    let a = TcpListener::bind("0.0.0.0:0").expect("bind");
    let b = TcpListener::bind("0.0.0.0:0").expect("bind");
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

/// A shell word holding `s` literally.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The node as slurmd sees it (`slurmd -C`): its name and CPU count.
pub(crate) fn this_node(root: Root) -> (String, String) {
    let out = root.run(SLURMD, &["-C"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |key: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .map(str::to_owned)
            .unwrap_or_else(|| {
                panic!(
                    "slurmd -C: no {key} in {text:?} ({})",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    };
    (field("NodeName="), field("CPUs="))
}

#[test]
fn the_epilog_under_a_real_slurm_stores_verdicts_and_never_drains_the_node() {
    for tool in [MUNGED, SLURMCTLD, SLURMD].iter().chain(&CLIENTS) {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: install Debian's munge, slurmctld, slurmd and slurm-client \
             (scripts/test.sh does)"
        );
    }
    let root = Root::get();

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    // munged wants every folder above its socket searchable by all.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let h = history(&dir);
    let jobs = dir.join("jobs");
    for sub in ["state", "spool", "jobs"] {
        fs::create_dir(dir.join(sub)).unwrap();
    }
    let p = |name: &str| dir.join(name).to_str().unwrap().to_owned();

    // munge's key: random, the owner's alone.
    let mut key = vec![0u8; 1024];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .expect("read /dev/urandom");
    fs::write(dir.join("munge.key"), &key).unwrap();
    fs::set_permissions(dir.join("munge.key"), fs::Permissions::from_mode(0o400)).unwrap();

    // The epilog: the real script with this test's binary, history and folder. slurmd drops an
    // epilog's output when it exits 0, so its stderr goes to a file.
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/slurm/epilog.sh")
        .canonicalize()
        .unwrap();
    let wrapper = format!(
        "#!/bin/sh\nTESSERA={}\nTESSERA_SOURCE={}\nTESSERA_JOB_DIR={}\nTESSERA_JOB_SINCE=3650d\n\
         export TESSERA TESSERA_SOURCE TESSERA_JOB_DIR TESSERA_JOB_SINCE\n\
         exec /bin/sh {} 2>>{}\n",
        sh_quote(env!("CARGO_BIN_EXE_tessera")),
        sh_quote(&format!("history:{}", h.display())),
        sh_quote(&p("jobs")),
        sh_quote(script.to_str().unwrap()),
        sh_quote(&p("epilog.err")),
    );
    fs::write(dir.join("epilog"), wrapper).unwrap();
    fs::set_permissions(dir.join("epilog"), fs::Permissions::from_mode(0o755)).unwrap();

    let (node, cpus) = this_node(root);
    let (ctld_port, slurmd_port) = free_ports();
    let sock = p("munge.sock");
    let conf = format!(
        "ClusterName=tessera-test\n\
         SlurmctldHost={node}(127.0.0.1)\n\
         SlurmctldPort={ctld_port}\n\
         SlurmdPort={slurmd_port}\n\
         SlurmUser=root\n\
         SlurmdUser=root\n\
         AuthType=auth/munge\n\
         AuthInfo=socket={sock}\n\
         CredType=cred/munge\n\
         ProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\n\
         SelectType=select/cons_tres\n\
         SchedulerType=sched/builtin\n\
         MpiDefault=none\n\
         JobCompType=jobcomp/none\n\
         StateSaveLocation={state}\n\
         SlurmdSpoolDir={spool}\n\
         SlurmctldPidFile={ctld_pid}\n\
         SlurmdPidFile={slurmd_pid}\n\
         SlurmctldLogFile={ctld_log}\n\
         SlurmdLogFile={slurmd_log}\n\
         ReturnToService=2\n\
         FirstJobId=501\n\
         Epilog={epilog}\n\
         NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
         PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP\n",
        state = p("state"),
        spool = p("spool"),
        ctld_pid = p("slurmctld.pid"),
        slurmd_pid = p("slurmd.pid"),
        ctld_log = p("slurmctld.log"),
        slurmd_log = p("slurmd.log"),
        epilog = p("epilog"),
    );
    let conf_path = p("slurm.conf");
    fs::write(&conf_path, conf).unwrap();

    // The daemons' stdout and stderr, created now: under sudo the folder becomes root's.
    for name in ["munged", "slurmctld", "slurmd"] {
        fs::File::create(dir.join(format!("{name}.out"))).unwrap();
    }
    if root == Root::Sudo {
        // munged, as root, wants root's key and root's folders above its socket and seed file.
        let key = p("munge.key");
        let out = root.run("chown", &["0:0", dir.to_str().unwrap(), &key]);
        assert!(out.status.success(), "sudo chown: {out:?}");
    }
    let mut cluster = Cluster {
        root,
        dir: dir.clone(),
        daemons: Vec::new(),
    };

    let munged_args = [
        "--foreground".to_owned(),
        format!("--socket={sock}"),
        format!("--key-file={}", p("munge.key")),
        format!("--pid-file={}", p("munged.pid")),
        format!("--log-file={}", p("munged.log")),
        format!("--seed-file={}", p("munged.seed")),
    ];
    let munged_args: Vec<&str> = munged_args.iter().map(String::as_str).collect();
    cluster.start("munged", MUNGED, &munged_args, dir.join("munged.pid"));
    cluster.wait_for("munged's socket", Duration::from_secs(20), || {
        Path::new(&sock).exists().then_some(())
    });
    cluster.start(
        "slurmctld",
        SLURMCTLD,
        &["-D", "-f", &conf_path],
        dir.join("slurmctld.pid"),
    );
    cluster.start(
        "slurmd",
        SLURMD,
        &["-D", "-f", &conf_path],
        dir.join("slurmd.pid"),
    );

    let client = |program: &str, args: &[&str]| -> Output {
        Command::new(program)
            .args(args)
            .env("SLURM_CONF", &conf_path)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"))
    };
    let node_state = || {
        let out = client("/usr/bin/sinfo", &["-h", "-N", "-o", "%T"]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    cluster.wait_for("the node to be idle", Duration::from_secs(30), || {
        (node_state() == "idle").then_some(())
    });

    for expected in ["501", "502", "503"] {
        let out = client(
            "/usr/bin/sbatch",
            &["--parsable", "--output=/dev/null", "--wrap", "sleep 1"],
        );
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            out.status.success() && id == expected,
            "sbatch gave {id:?}, expected {expected}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            cluster.logs()
        );
    }
    // A job stays in squeue (COMPLETING) until its epilog has run. A drained node (an epilog
    // that failed) would keep the others pending: stop waiting then.
    let ended = cluster.wait_for("the three jobs to end", Duration::from_secs(60), || {
        let state = node_state();
        if state.starts_with("drain") {
            return Some(Err(state));
        }
        let out = client("/usr/bin/squeue", &["-h", "-o", "%i %T"]);
        (out.status.success() && out.stdout.trim_ascii().is_empty()).then_some(Ok(()))
    });
    if let Err(state) = ended {
        panic!("the node is {state}: an epilog failed{}", cluster.logs());
    }

    let mut stored: Vec<String> = fs::read_dir(&jobs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    stored.sort();
    assert_eq!(stored, ["501.json", "502.json"], "{}", cluster.logs());
    let summary = |id: &str| -> Value {
        let text = root.read(&jobs.join(format!("{id}.json")));
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{id}.json: {e}: {text:?}{}", cluster.logs()))
    };
    let idle = summary("501");
    assert_eq!(idle["job"], "501", "{idle:#}");
    assert_eq!(idle["rating"], "idle", "{idle:#}");
    assert!(idle["idle_hours"].as_f64().unwrap() > 12.0, "{idle:#}");
    let mig = summary("502");
    let src = format!("history:{}", h.display());
    let out = tessera(&[
        "job", "502", "--source", &src, "--since", "3650d", "--format", "json",
    ]);
    assert!(out.status.success());
    let direct: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(mig, direct, "the epilog stores what `tessera job` prints");

    let epilog_err = root.read(&dir.join("epilog.err"));
    assert!(
        epilog_err.contains("no summary for job 503"),
        "job 503 has no GPU rows: the epilog says so on stderr{}",
        cluster.logs()
    );
    // The point of an epilog that never fails: the node is not drained.
    let state = node_state();
    assert_eq!(state, "idle", "{}", cluster.logs());
    let out = client("/usr/bin/scontrol", &["show", "node", &node]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("State=IDLE ") && !shown.contains("DRAIN") && !shown.contains("Reason="),
        "{shown}{}",
        cluster.logs()
    );
    cluster.check_alive();
}
