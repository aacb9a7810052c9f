//! The queue plan applied to a real Slurm's accounting (issue 58; docs/queues.md, "Slurm"):
//! Debian's MariaDB, `slurmdbd`, `munged` and `slurmctld` started in one temporary folder (as in
//! `slurm_real.rs`, whose daemon guard this reuses; `scripts/test.sh` installs `slurmdbd` and
//! `mariadb-server`), and the real `sacctmgr` run by `tessera queue apply --scheduler slurm`.
//!
//! What `sacctmgr show qos` says is compared with the plan: the dry run changes nothing; `--yes`
//! creates one QOS per team and the off-peak QOS with their `GrpTRES=gres/gpu=N`; a re-apply
//! changes nothing and duplicates nothing; an edited plan updates; a QOS of the plan's name that
//! is not tessera's refuses the apply; undo removes tessera's QOS and leaves the others. The
//! systemd timer of `queue schedule --scheduler slurm` is evaluated by `systemd-analyze calendar`
//! across the autumn and spring daylight-saving changes of Europe/Berlin, and `queue edge` at each
//! elapse sets the off-peak QOS's limit the plan gives for that moment.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::queue_kueue::{WEEKDAY, plan_text};
use crate::slurm_real::{Cluster, MUNGED, Root, SLURMCTLD, free_ports, this_node};
use crate::support::cli::run;

const SLURMDBD: &str = "/usr/sbin/slurmdbd";
const MARIADBD: &str = "/usr/sbin/mariadbd";
const INSTALL_DB: &str = "/usr/bin/mariadb-install-db";
const MARIADB: &str = "/usr/bin/mariadb";
const SACCTMGR: &str = "/usr/bin/sacctmgr";

/// A single-node Slurm with accounting: its daemons, its `slurm.conf` and a clean environment
/// for the clients.
struct Accounting {
    cluster: Cluster,
    conf: String,
    _tmp: tempfile::TempDir,
}

impl Accounting {
    fn sacctmgr(&self, args: &[&str]) -> Output {
        Command::new(SACCTMGR)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .output()
            .expect("run sacctmgr")
    }

    /// `name|GrpTRES|Description` of every QOS, sorted.
    fn qos(&self) -> Vec<String> {
        let out = self.sacctmgr(&["-n", "-P", "show", "qos", "format=Name,GrpTRES,Description"]);
        assert!(out.status.success(), "{out:?}{}", self.cluster.logs());
        let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        v.sort();
        v
    }

    /// `tessera queue VERB PLAN ARGS --scheduler slurm` with this Slurm's configuration.
    fn tessera(&self, verb: &str, plan: &Path, extra: &[&str]) -> (i32, String, String) {
        let audit = self.cluster.dir.join("audit.jsonl");
        let mut args = vec![
            "queue",
            verb,
            plan.to_str().unwrap(),
            "--scheduler",
            "slurm",
            "--audit-log",
            audit.to_str().unwrap(),
        ];
        args.extend(extra);
        run_with_conf(&self.conf, &args)
    }
}

/// `tessera ARGS` with `SLURM_CONF` set for it (and the sacctmgr it runs).
fn run_with_conf(conf: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env("SLURM_CONF", conf)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run tessera");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn start() -> Accounting {
    for tool in [
        MUNGED, SLURMCTLD, SLURMDBD, MARIADBD, INSTALL_DB, MARIADB, SACCTMGR,
    ] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: install Debian's munge, slurmctld, slurmdbd, slurm-client and \
             mariadb-server (scripts/test.sh does)"
        );
    }
    let root = Root::get();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    for sub in ["state", "spool", "db"] {
        fs::create_dir(dir.join(sub)).unwrap();
    }
    let p = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let mut key = vec![0u8; 1024];
    std::io::Read::read_exact(&mut fs::File::open("/dev/urandom").unwrap(), &mut key).unwrap();
    fs::write(dir.join("munge.key"), &key).unwrap();
    fs::set_permissions(dir.join("munge.key"), fs::Permissions::from_mode(0o400)).unwrap();
    let (node, cpus) = this_node(root);
    let (db_port, dbd_port) = free_ports();
    let (ctld_port, _) = free_ports();
    let sock = p("munge.sock");
    let conf = p("slurm.conf");
    fs::write(
        &conf,
        format!(
            "ClusterName=tessera-test\nSlurmctldHost={node}(127.0.0.1)\nSlurmctldPort={ctld_port}\n\
             SlurmUser=root\nAuthType=auth/munge\nAuthInfo=socket={sock}\nCredType=cred/munge\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n\
             SchedulerType=sched/builtin\nMpiDefault=none\nJobCompType=jobcomp/none\n\
             StateSaveLocation={state}\nSlurmdSpoolDir={spool}\nSlurmctldPidFile={pid}\n\
             SlurmctldLogFile={log}\n\
             AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n\
             AccountingStoragePort={dbd_port}\nAccountingStoragePass={sock}\n\
             AccountingStorageTRES=gres/gpu\nGresTypes=gpu\n\
             NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
             PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP\n",
            state = p("state"),
            spool = p("spool"),
            pid = p("slurmctld.pid"),
            log = p("slurmctld.log"),
        ),
    )
    .unwrap();
    // slurmdbd reads slurmdbd.conf beside slurm.conf ($SLURM_CONF's folder); only its owner
    // may read it (it holds the database password).
    fs::write(
        dir.join("slurmdbd.conf"),
        format!(
            "AuthType=auth/munge\nAuthInfo=socket={sock}\nDbdHost=localhost\nDbdAddr=127.0.0.1\n\
             DbdPort={dbd_port}\nSlurmUser=root\nStorageType=accounting_storage/mysql\n\
             StorageHost=127.0.0.1\nStoragePort={db_port}\nStorageUser=slurm\nStoragePass=test\n\
             StorageLoc=slurm_acct_db\nPidFile={pid}\nLogFile={log}\n",
            pid = p("slurmdbd.pid"),
            log = p("slurmdbd.log"),
        ),
    )
    .unwrap();
    fs::set_permissions(dir.join("slurmdbd.conf"), fs::Permissions::from_mode(0o600)).unwrap();
    for name in ["mariadbd", "munged", "slurmdbd", "slurmctld"] {
        fs::File::create(dir.join(format!("{name}.out"))).unwrap();
    }
    if root == Root::Sudo {
        let out = root.run("chown", &["-R", "0:0", dir.to_str().unwrap()]);
        assert!(out.status.success(), "sudo chown: {out:?}");
    }
    let out = root.run(
        INSTALL_DB,
        &[
            "--no-defaults",
            &format!("--datadir={}", p("db")),
            "--user=root",
            "--auth-root-authentication-method=normal",
        ],
    );
    assert!(out.status.success(), "mariadb-install-db: {out:?}");
    let mut cluster = Cluster {
        root,
        dir: dir.clone(),
        daemons: Vec::new(),
    };
    let db_sock = p("mariadb.sock");
    let a = [
        "--no-defaults".to_string(),
        format!("--datadir={}", p("db")),
        format!("--socket={db_sock}"),
        format!("--port={db_port}"),
        "--bind-address=127.0.0.1".into(),
        "--user=root".into(),
        format!("--pid-file={}", p("mariadbd.pid")),
        format!("--log-error={}", p("mariadbd.log")),
    ];
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    cluster.start("mariadbd", MARIADBD, &a, dir.join("mariadbd.pid"));
    cluster.wait_for("MariaDB", Duration::from_secs(60), || {
        let out = root.run(
            MARIADB,
            &[
                "--no-defaults",
                "-S",
                &db_sock,
                "-u",
                "root",
                "-e",
                "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'test'; \
                 GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';",
            ],
        );
        out.status.success().then_some(())
    });
    let a = [
        "--foreground".to_string(),
        format!("--socket={sock}"),
        format!("--key-file={}", p("munge.key")),
        format!("--pid-file={}", p("munged.pid")),
        format!("--log-file={}", p("munged.log")),
        format!("--seed-file={}", p("munged.seed")),
    ];
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    cluster.start("munged", MUNGED, &a, dir.join("munged.pid"));
    cluster.wait_for("munged's socket", Duration::from_secs(20), || {
        Path::new(&sock).exists().then_some(())
    });
    // slurmdbd finds its configuration through SLURM_CONF.
    let child = root
        .command("env")
        .args([&format!("SLURM_CONF={conf}"), SLURMDBD, "-D"])
        .stdin(Stdio::null())
        .stdout(fs::File::create(dir.join("slurmdbd.out")).unwrap())
        .stderr(fs::File::create(dir.join("slurmdbd.err")).unwrap())
        .spawn()
        .expect("start slurmdbd");
    cluster.daemons.push(crate::slurm_real::Daemon {
        name: "slurmdbd",
        child,
        pid_file: dir.join("slurmdbd.pid"),
    });
    let acc = Accounting {
        cluster,
        conf: conf.clone(),
        _tmp: tmp,
    };
    let mut acc = acc;
    let conf2 = conf.clone();
    acc.cluster
        .wait_for("slurmdbd", Duration::from_secs(60), || {
            let out = Command::new(SACCTMGR)
                .args(["-i", "add", "cluster", "tessera-test"])
                .env("SLURM_CONF", &conf2)
                .stdin(Stdio::null())
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&out.stdout);
            (out.status.success() || text.contains("already exists")).then_some(())
        });
    acc.cluster.start(
        "slurmctld",
        SLURMCTLD,
        &["-D", "-f", &conf],
        dir.join("slurmctld.pid"),
    );
    // slurmctld registers the gres/gpu TRES with slurmdbd as it starts.
    let conf3 = conf.clone();
    acc.cluster
        .wait_for("the gres/gpu TRES", Duration::from_secs(60), || {
            let out = Command::new(SACCTMGR)
                .args(["-n", "-P", "show", "tres", "format=Type,Name"])
                .env("SLURM_CONF", &conf3)
                .stdin(Stdio::null())
                .output()
                .ok()?;
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l == "gres|gpu")
                .then_some(())
        });
    acc
}

fn plan_file(dir: &Path, research_limit: u32, with_research: bool) -> std::path::PathBuf {
    let p = dir.join("plan.yaml");
    fs::write(
        &p,
        plan_text(research_limit, with_research, "{ policy: finish }"),
    )
    .unwrap();
    p
}

/// The UTC instants at which the timer's `OnCalendar=` lines elapse after `from`, by
/// `systemd-analyze calendar` (systemd's own evaluation), `n` of each.
fn elapses(units: &str, from: &str, n: usize) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    for spec in units.lines().filter_map(|l| l.strip_prefix("OnCalendar=")) {
        let o = Command::new("systemd-analyze")
            .args([
                "calendar",
                &format!("--base-time={from}"),
                &format!("--iterations={n}"),
                spec,
            ])
            .env("TZ", "UTC")
            .output()
            .expect("systemd-analyze (scripts/test.sh installs systemd)");
        assert!(o.status.success(), "{o:?}");
        for l in String::from_utf8_lossy(&o.stdout).lines() {
            let l = l.trim();
            let Some(rest) = l.strip_prefix("Next elapse: ").or_else(|| {
                l.split_once(": ")
                    .filter(|(k, _)| k.starts_with("Iter."))
                    .map(|(_, v)| v)
            }) else {
                continue;
            };
            // "Sat 2026-10-24 20:00:00 UTC"
            let t = rest.trim_end_matches(" UTC");
            let t = t.split_once(' ').map_or(t, |(_, x)| x);
            let t = chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S")
                .unwrap_or_else(|e| panic!("{l}: {e}"));
            out.push(t.and_utc());
        }
    }
    out.sort();
    out
}

#[test]
fn the_queue_plan_becomes_slurm_qos_limits_changed_at_the_window_edges() {
    let acc = start();
    let dir = acc.cluster.dir.clone();
    // Someone else's QOS: never touched.
    let out = acc.sacctmgr(&[
        "-i",
        "add",
        "qos",
        "ops",
        "set",
        "GrpTRES=gres/gpu=3",
        "Description=the ops team's",
    ]);
    assert!(out.status.success(), "{out:?}");
    let before = acc.qos();
    let plan = plan_file(&dir, 5, true);

    let (code, out, err) = acc.tessera("apply", &plan, &["--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}{}", acc.cluster.logs());
    assert!(
        out.contains("+ create QOS tessera-research  gres/gpu=5"),
        "{out}"
    );
    assert!(
        out.contains("does not accept GPU amounts in reservations"),
        "{out}"
    );
    assert!(
        out.contains("sacctmgr -i modify account where name=research set qos+=tessera-research"),
        "{out}"
    );
    assert!(out.contains("dry run: nothing changed"), "{out}");
    assert_eq!(acc.qos(), before, "the dry run wrote");

    let (code, out, err) = acc.tessera("apply", &plan, &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}{}", acc.cluster.logs());
    assert!(out.contains("applied: 3 created"), "{out}");
    let mark = "tessera cohort=tessera";
    let want = |research: u32, offpeak: u32| {
        let mut v = before.clone();
        v.push(format!("tessera-offpeak|gres/gpu={offpeak}|{mark}"));
        v.push(format!("tessera-research|gres/gpu={research}|{mark}"));
        v.push(format!("tessera-serving|gres/gpu=2|{mark}"));
        v.sort();
        v
    };
    assert_eq!(acc.qos(), want(5, 1));
    let audit = fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    assert_eq!(
        audit.lines().filter(|l| l.contains("QueueCreated")).count(),
        3,
        "{audit}"
    );

    let (code, out, err) = acc.tessera("apply", &plan, &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("nothing to change (3 QOS as planned)"),
        "{out}"
    );
    assert_eq!(acc.qos(), want(5, 1), "no duplicates");

    let plan = plan_file(&dir, 6, true);
    let (code, out, err) = acc.tessera("apply", &plan, &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("~ update QOS tessera-research\n    GrpTRES gres/gpu: 5 -> 6"),
        "{out}"
    );
    assert_eq!(acc.qos(), want(6, 1));

    // The window edges: systemd's own calendar evaluation of the timer, and `queue edge` at each
    // elapse and a minute before.
    let (code, units, err) = run(&[
        "queue",
        "schedule",
        plan.to_str().unwrap(),
        "--scheduler",
        "slurm",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(units.contains("--scheduler slurm --yes"), "{units}");
    let autumn = elapses(&units, "2026-10-24 00:00:00 UTC", 1);
    let spring = elapses(&units, "2027-03-27 00:00:00 UTC", 1);
    let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
    assert_eq!(
        autumn,
        [t("2026-10-24T20:00:00Z"), t("2026-10-25T07:00:00Z")]
    );
    assert_eq!(
        spring,
        [t("2027-03-27T21:00:00Z"), t("2027-03-28T06:00:00Z")]
    );
    for fires in [autumn, spring] {
        let minute = chrono::Duration::minutes(1);
        for (at, offpeak) in [
            (fires[0] - minute, 1),
            (fires[0], 6),
            (fires[1] - minute, 6),
            (fires[1], 1),
        ] {
            let now = at.to_rfc3339();
            let (code, _, err) = acc.tessera("edge", &plan, &["--yes", "--now", &now]);
            assert_eq!(code, 0, "edge at {now}: {err}");
            assert_eq!(acc.qos(), want(6, offpeak), "at {now}");
        }
    }

    // Slurm 23.02 and later take GPU amounts in reservations: with this sacctmgr saying so (the
    // real one behind it) and a fake scontrol that keeps reservations in a file (Debian 12's
    // Slurm is 22.05, which refuses them), the window becomes a weekly reservation, kept on
    // re-apply and removed by undo.
    let (sacctmgr23, scontrol) = slurm23_tools(&dir);
    let tools = [
        "--sacctmgr",
        sacctmgr23.to_str().unwrap(),
        "--scontrol",
        scontrol.to_str().unwrap(),
    ];
    let mut args = vec!["--yes", "--now", WEEKDAY];
    args.extend(tools);
    let (code, out, err) = acc.tessera("apply", &plan, &args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("+ create reservation tessera-offpeak-1-sat WEEKLY from 2026-10-31T22:00:00 for 600 min, gres/gpu=6 for research,serving"),
        "{out}"
    );
    let kept = fs::read_to_string(dir.join("reservations")).unwrap();
    assert_eq!(kept.lines().count(), 1, "{kept}");
    assert!(
        kept.contains("Duration=10:00:00") && kept.contains("TRES=gres/gpu=6"),
        "{kept}"
    );
    let (code, out, err) = acc.tessera("apply", &plan, &args);
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains("reservation tessera-offpeak"),
        "nothing to change: {out}"
    );
    // scontrol has no compare-and-swap: the reservations are read again right before each
    // write, and a reservation someone else made between that read and the first one refuses
    // the step (here: deleted, then made again by the ops team before tessera's create).
    let state = dir.join("reservations");
    fs::write(&state, "").unwrap();
    let _ = fs::remove_file(dir.join("reservations.shows"));
    let theirs = "ReservationName=tessera-offpeak-1-sat StartTime=2026-10-31T22:00:00 Duration=02:00:00 Flags=WEEKLY Accounts=ops TRES=gres/gpu=1";
    fs::write(dir.join("reservations.interfere"), format!("2\n{theirs}\n")).unwrap();
    let (code, out, err) = acc.tessera("apply", &plan, &args);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("reservation tessera-offpeak-1-sat changed since tessera read it"),
        "{err}"
    );
    assert_eq!(
        fs::read_to_string(&state).unwrap(),
        format!("{theirs}\n"),
        "theirs is kept, not written over"
    );
    fs::remove_file(dir.join("reservations.interfere")).unwrap();
    let (code, out, err) = acc.tessera("apply", &plan, &args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "~ update reservation tessera-offpeak-1-sat: 600 min, gres/gpu=6 for research,serving"
        ),
        "the next apply decides on what is there now: {out}"
    );
    let mut undo = vec!["--yes"];
    undo.extend(tools);
    // The same read before undo's delete: a reservation changed since undo read it is kept.
    let _ = fs::remove_file(dir.join("reservations.shows"));
    let changed = theirs.replace("Accounts=ops", "Accounts=ops,research");
    fs::write(
        dir.join("reservations.interfere"),
        format!("2\n{changed}\n"),
    )
    .unwrap();
    let (code, _, err) = acc.tessera("undo", Path::new("--cohort=tessera"), &undo);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("reservation tessera-offpeak-1-sat changed since tessera read it"),
        "{err}"
    );
    assert_eq!(fs::read_to_string(&state).unwrap(), format!("{changed}\n"));
    fs::remove_file(dir.join("reservations.interfere")).unwrap();
    let (code, out, err) = acc.tessera("undo", Path::new("--cohort=tessera"), &undo);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("- delete reservation tessera-offpeak-1-sat"),
        "{out}"
    );
    assert_eq!(fs::read_to_string(dir.join("reservations")).unwrap(), "");
    assert_eq!(acc.qos(), before, "undo leaves only the others' QOS");
    let (code, _, err) = acc.tessera("apply", &plan, &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");

    // A dropped team is pruned; a QOS of a planned name that is not tessera's refuses the apply.
    let plan = plan_file(&dir, 6, false);
    let (code, out, err) = acc.tessera("apply", &plan, &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("- delete QOS tessera-research"), "{out}");
    // (undo takes no plan: the cohort stands where the plan would)
    let (code, _, err) = acc.tessera("undo", Path::new("--cohort=tessera"), &["--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(acc.qos(), before, "undo leaves only the others' QOS");
    let out = acc.sacctmgr(&[
        "-i",
        "add",
        "qos",
        "tessera-serving",
        "set",
        "GrpTRES=gres/gpu=9",
        "Description=the ops team's",
    ]);
    assert!(out.status.success(), "{out:?}");
    let theirs = acc.qos();
    let (code, _, err) = acc.tessera("apply", &plan, &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("QOS tessera-serving") && err.contains("not tessera's"),
        "{err}"
    );
    assert_eq!(acc.qos(), theirs, "nothing changed");
}

/// A `sacctmgr` that says it is Slurm 23.11 and runs the real one otherwise, and a fake
/// `scontrol` (Python) keeping reservations in `dir/reservations` as `scontrol show reservation
/// -o` prints them, for the reservation path Debian's 22.05 cannot take.
fn slurm23_tools(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let sacctmgr = dir.join("sacctmgr23");
    fs::write(
        &sacctmgr,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'slurm 23.11.4'; exit 0; fi\nexec {SACCTMGR} \"$@\"\n"
        ),
    )
    .unwrap();
    let state = dir.join("reservations");
    fs::write(&state, "").unwrap();
    let scontrol = dir.join("scontrol23");
    fs::write(
        &scontrol,
        format!(
            r#"#!/usr/bin/env python3
import os, sys
path = {state:?}
lines = [l for l in open(path).read().splitlines() if l]
a = sys.argv[1:]
kv = dict(x.split("=", 1) for x in a if "=" in x)
def hms(m):
    m = int(m)
    return "%02d:%02d:00" % (m // 60, m % 60)
def line(kv, old=None):
    d = dict(old or {{}})
    d.update(kv)
    if "Duration" in kv:
        d["Duration"] = hms(kv["Duration"])
    return " ".join("%s=%s" % (k, d[k]) for k in ["ReservationName", "StartTime", "Duration", "Flags", "Accounts", "TRES"] if k in d)
def parse(l):
    return dict(x.split("=", 1) for x in l.split())
if a[:2] == ["show", "reservation"]:
    # Someone else's change between two reads: `path.interfere` holds N and a line, added to
    # the reservations at the Nth read counted in `path.shows`.
    n = int(open(path + ".shows").read()) + 1 if os.path.exists(path + ".shows") else 1
    open(path + ".shows", "w").write(str(n))
    if os.path.exists(path + ".interfere"):
        at, theirs = open(path + ".interfere").read().split(chr(10), 1)
        if int(at) == n:
            name = parse(theirs.strip())["ReservationName"]
            lines = [l for l in lines if parse(l)["ReservationName"] != name] + [theirs.strip()]
    print(chr(10).join(lines) if lines else "No reservations in the system")
elif a[:2] == ["create", "reservation"]:
    lines.append(line(kv))
elif a[0] == "update":
    lines = [line(kv, parse(l)) if parse(l)["ReservationName"] == kv["ReservationName"] else l for l in lines]
elif a[0] == "delete":
    lines = [l for l in lines if parse(l)["ReservationName"] != kv["ReservationName"]]
else:
    sys.exit("unexpected: %r" % a)
open(path, "w").write("".join(l + chr(10) for l in lines))
"#
        ),
    )
    .unwrap();
    for p in [&sacctmgr, &scontrol] {
        fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
    }
    (sacctmgr, scontrol)
}

#[test]
fn without_slurm_accounting_nothing_is_changed_and_the_reason_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let plan = plan_file(dir.path(), 5, true);
    let (code, _, err) = run(&[
        "queue",
        "apply",
        plan.to_str().unwrap(),
        "--scheduler",
        "slurm",
        "--sacctmgr",
        "/nonexistent/sacctmgr",
        "--yes",
        "--now",
        WEEKDAY,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("Slurm's accounting is not reachable"), "{err}");
    assert!(err.contains("/nonexistent/sacctmgr"), "{err}");
}
