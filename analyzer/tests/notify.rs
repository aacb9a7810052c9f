//! `tessera notify` against a real Alertmanager (Debian's `prometheus-alertmanager`) with the
//! shipped example configuration (`deploy/alertmanager/alertmanager.yml`): one alert per finding
//! with its labels and annotations, grouped per team by the example routes, renewed (not
//! duplicated) by a second run, resolved when the finding is gone; hostile label values from data
//! escaped and cut; the CronJob and the systemd units of `deploy/notify/` run as shipped.
//! Faults are in `notify_faults`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::support::alertmanager::Alertmanager;
use super::support::cli::run;
use super::support::pki::Pki;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn demo() -> String {
    format!("history:{}", repo().join("fixtures/demo-history").display())
}

fn example_config() -> PathBuf {
    repo().join("deploy/alertmanager/alertmanager.yml")
}

/// `tessera notify` on `source` with `extra` flags against `url`: (exit code, stdout, stderr).
/// The data of these tests is older than --evidence.max-age: --allow-stale-evidence.
fn notify(source: &str, url: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "notify",
        "--source",
        source,
        "--alertmanager.url",
        url,
        "--allow-stale-evidence",
    ];
    args.extend_from_slice(extra);
    run(&args)
}

/// The finding ids `tessera analyze` reports for the same flags.
fn analyze_ids(source: &str, extra: &[&str]) -> BTreeMap<String, Value> {
    let mut args = vec!["analyze", "--source", source, "--format", "json"];
    args.extend_from_slice(extra);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    // Each finding with the rank of the action that answers it (`_action_rank`), if any.
    let mut rank = BTreeMap::new();
    for a in v["actions"].as_array().unwrap() {
        for f in a["findings"].as_array().unwrap() {
            rank.insert(f.as_str().unwrap().to_string(), a["rank"].clone());
        }
    }
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let id = f["id"].as_str().unwrap().to_string();
            let mut f = f.clone();
            f["_action_rank"] = rank.get(&id).cloned().unwrap_or(Value::Null);
            (id, f)
        })
        .collect()
}

fn by_id(alerts: &[Value]) -> BTreeMap<String, Value> {
    alerts
        .iter()
        .map(|a| {
            (
                a["labels"]["finding_id"].as_str().unwrap().to_string(),
                a.clone(),
            )
        })
        .collect()
}

fn label<'a>(a: &'a Value, k: &str) -> Option<&'a str> {
    a["labels"][k].as_str()
}

fn utc(s: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .with_timezone(&chrono::Utc)
}

#[test]
fn findings_fire_group_per_team_renew_without_duplicates_and_resolve_when_gone() {
    let am = Alertmanager::start(&example_config());
    let src = demo();
    let findings = analyze_ids(&src, &[]);
    assert_eq!(findings.len(), 6, "{:?}", findings.keys());

    // Run 1: every finding (info and up) fires, one alert each, with the finding's labels.
    let before = chrono::Utc::now();
    let (code, out, err) = notify(&src, &am.url, &["--min-severity", "info"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("6 new, 0 renewed"), "{err}");
    let alerts = am.tessera_alerts();
    let got = by_id(&alerts);
    assert_eq!(
        got.keys().collect::<BTreeSet<_>>(),
        findings.keys().collect::<BTreeSet<_>>()
    );
    for (id, a) in &got {
        let f = &findings[id];
        let detector = f["detector"].as_str().unwrap();
        assert_eq!(label(a, "source"), Some("tessera"));
        assert_eq!(label(a, "detector"), Some(detector));
        assert_eq!(label(a, "severity"), f["severity"].as_str());
        assert!(label(a, "alertname").unwrap().starts_with("Tessera"));
        assert_eq!(label(a, "namespace"), f["entity"]["namespace"].as_str());
        assert_eq!(label(a, "team"), f["entity"]["namespace"].as_str());
        assert_eq!(label(a, "pod"), f["entity"]["pod"].as_str());
        assert_eq!(label(a, "node"), f["entity"]["node"].as_str());
        assert_eq!(a["annotations"]["summary"], f["summary"]);
        // The one action of the finding's workload (crate::actions), else its own suggestion.
        match f["_action_rank"].as_u64() {
            Some(rank) => assert!(
                a["annotations"]["action"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("action {rank}. ")),
                "{id}: {}",
                a["annotations"]["action"]
            ),
            None => assert_eq!(a["annotations"]["action"], f["action"]),
        }
        assert_eq!(a["generatorURL"], format!("tessera://finding/{id}"));
        assert_eq!(a["status"]["state"], "active");
        // endsAt = now + the default TTL (2h).
        let ends = utc(a["endsAt"].as_str().unwrap());
        assert!(ends >= before + chrono::Duration::minutes(119), "{ends}");
        if detector == "idle_loaded" {
            assert!(
                a["annotations"]["cost"]
                    .as_str()
                    .unwrap()
                    .contains(" USD ("),
                "{a}"
            );
        }
    }
    // startsAt: the finding's first idle span.
    let embed = &got["idle_loaded-e415ab0c3ba39391"];
    assert_eq!(label(embed, "alertname"), Some("TesseraIdleLoaded"));
    assert_eq!(label(embed, "pod"), Some("embed-test-5c8d7-qq9zl"));
    assert_eq!(label(embed, "gpu"), Some("2"));
    assert_eq!(
        utc(embed["startsAt"].as_str().unwrap()),
        utc("2026-11-02T00:00:00Z")
    );
    assert!(out.contains("firing   TesseraIdleLoaded"), "{out}");

    // The example routes group them per team: each team's findings in one group of its
    // receiver, the findings without a team in the efficiency report's.
    let groups = am.get("/api/v2/alerts/groups?filter=source%3D%22tessera%22");
    let mut per: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for g in groups.as_array().unwrap() {
        let receiver = g["receiver"]["name"].as_str().unwrap().to_string();
        let team = g["labels"]["team"].as_str().unwrap_or("-").to_string();
        for a in g["alerts"].as_array().unwrap() {
            per.entry(format!("{receiver} team={team}"))
                .or_default()
                .insert(a["labels"]["finding_id"].as_str().unwrap().to_string());
        }
    }
    let want: BTreeMap<String, BTreeSet<String>> = [
        (
            "team-research team=research",
            &[
                "idle_loaded-e415ab0c3ba39391",
                "idle_loaded-55b7e9fdd4590231",
            ][..],
        ),
        ("team-nlp team=nlp", &["idle_loaded-62b584d9feade941"]),
        ("team-vision team=vision", &["idle_loaded-6e688b07b2244c5d"]),
        (
            "gpu-efficiency-report team=-",
            &[
                "consolidation-8d31a57f64a57860",
                "offpeak_window-1400810ff9416774",
            ],
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
    .collect();
    assert_eq!(per, want);

    // Run 2: the same alerts renewed, no duplicate (same count, same fingerprints).
    let fingerprints = |alerts: &[Value]| -> BTreeMap<String, String> {
        by_id(alerts)
            .into_iter()
            .map(|(id, a)| (id, a["fingerprint"].as_str().unwrap().to_string()))
            .collect()
    };
    let first = fingerprints(&alerts);
    let (code, _, err) = notify(&src, &am.url, &["--min-severity", "info"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("0 new, 6 renewed") && err.contains("0 resolution"),
        "{err}"
    );
    let again = am.tessera_alerts();
    assert_eq!(again.len(), 6);
    assert_eq!(fingerprints(&again), first);

    // Run 3 on the first day only: three findings are gone and resolve; the others stay.
    let day = ["--min-severity", "info", "--until", "2026-11-03T00:00:00Z"];
    let still = analyze_ids(&src, &day[2..]);
    assert!(still.len() < 6 && !still.is_empty(), "{:?}", still.keys());
    let (code, out, err) = notify(&src, &am.url, &day);
    assert_eq!(code, 0, "{err}");
    let gone: BTreeSet<&String> = findings
        .keys()
        .filter(|k| !still.contains_key(*k))
        .collect();
    for id in &gone {
        assert!(
            out.lines()
                .any(|l| l.starts_with("resolved") && l.contains(id.as_str())),
            "{id} not resolved:\n{out}"
        );
    }
    let after = am.tessera_alerts();
    assert_eq!(
        by_id(&after).keys().collect::<BTreeSet<_>>(),
        still.keys().collect::<BTreeSet<_>>(),
        "Alertmanager still holds a resolved alert"
    );
    // A resolved alert is still known to the API as resolved (state of its group gone): the
    // active list no longer has it, and nothing else changed.
    assert_eq!(
        fingerprints(&after),
        first
            .into_iter()
            .filter(|(id, _)| still.contains_key(id))
            .collect()
    );
}

#[test]
fn hostile_pod_names_reach_alertmanager_escaped_and_cut() {
    let dir = tempfile::tempdir().unwrap();
    let long = "p".repeat(5000);
    let hostile = format!("evil\"pod'\\x\u{1b}[2J\nline2{long}");
    let mut csv = String::from("timestamp,entity,metric,value,kind,node,uuid,pod,namespace\n");
    // Two idle hours of a pod holding 2 GiB, one row a minute.
    for i in 0..=120 {
        let ts = 1_793_577_600 + i * 60;
        for (m, v) in [
            ("memory_used_bytes", "2147483648"),
            ("sm_active_ratio", "0"),
        ] {
            csv.push_str(&format!(
                "{ts},101,{m},{v},process,n1,GPU-1,\"{}\",\"team \"\"a\"\"\"\n",
                hostile.replace('"', "\"\"")
            ));
        }
    }
    let path = dir.path().join("hostile.csv");
    std::fs::write(&path, csv).unwrap();
    let src = format!("csv:{}", path.display());
    let am = Alertmanager::start(&example_config());
    for _ in 0..2 {
        let (code, out, err) = notify(&src, &am.url, &["--detector", "idle_loaded"]);
        assert_eq!(code, 0, "{out}\n{err}");
    }
    let alerts = am.tessera_alerts();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let pod = label(&alerts[0], "pod").unwrap();
    assert!(pod.len() <= 256, "{} bytes", pod.len());
    assert!(
        pod.starts_with("evil\"pod'\\x\\u{1b}[2J\\nline2ppp") && pod.ends_with('…'),
        "{pod}"
    );
    assert!(!pod.chars().any(char::is_control), "{pod:?}");
    assert_eq!(label(&alerts[0], "namespace"), Some("team \"a\""));
    assert_eq!(label(&alerts[0], "team"), Some("team \"a\""));
    let summary = alerts[0]["annotations"]["summary"].as_str().unwrap();
    assert!(!summary.chars().any(char::is_control) && summary.len() <= 4096);
}

#[test]
fn a_private_ca_and_a_client_certificate_reach_an_alertmanager_behind_tls() {
    // Alertmanager's own TLS (exporter-toolkit's web config): a certificate of a private CA, and
    // client certificates of that CA required.
    let pki = Pki::new();
    let web = pki.path("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  client_ca_file: {}\n  client_auth_type: RequireAndVerifyClientCert\n",
            pki.p("server.crt"),
            pki.p("server.key"),
            pki.p("ca.crt")
        ),
    )
    .unwrap();
    let am = Alertmanager::start_tls(&example_config(), &web, pki.client_agent());
    assert!(am.url.starts_with("https://"), "{}", am.url);
    let src = demo();
    let (ca, cert, key, rogue_cert, rogue_key) = (
        pki.p("ca.crt"),
        pki.p("client.crt"),
        pki.p("client.key"),
        pki.p("rogue.crt"),
        pki.p("rogue.key"),
    );
    let ca_flag = ["--alertmanager.tls.ca-file", ca.as_str()];
    let client = [
        "--alertmanager.tls.cert-file",
        cert.as_str(),
        "--alertmanager.tls.key-file",
        key.as_str(),
    ];
    // Without the CA the server's certificate is not trusted; without a client certificate,
    // or with one of another CA, Alertmanager refuses the client. Nothing is sent.
    for (flags, want) in [
        ([&client[..]].concat(), "UnknownIssuer"),
        (ca_flag.to_vec(), "nothing was sent"),
        (
            [
                &ca_flag[..],
                &[
                    "--alertmanager.tls.cert-file",
                    rogue_cert.as_str(),
                    "--alertmanager.tls.key-file",
                    rogue_key.as_str(),
                ][..],
            ]
            .concat(),
            "nothing was sent",
        ),
    ] {
        let (code, out, err) = notify(&src, &am.url, &flags);
        assert_eq!(code, 2, "{flags:?}: {out}\n{err}");
        assert!(
            err.contains(want) && err.contains("reading tessera's alerts from"),
            "{flags:?}: {err}"
        );
        assert!(am.tessera_alerts().is_empty());
    }
    // The CA and the client certificate: the alerts are delivered, renewed on a second run.
    let flags = [&ca_flag[..], &client[..]].concat();
    for want in ["2 new, 0 renewed", "0 new, 2 renewed"] {
        let (code, out, err) = notify(&src, &am.url, &flags);
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(err.contains(want), "{err}");
    }
    let alerts = am.tessera_alerts();
    assert_eq!(alerts.len(), 2, "{alerts:?}");
    // Bad TLS flags are bad input, refused before any data is read.
    let not_pem = pki.p("server.key");
    for (flags, want) in [
        (
            vec!["--alertmanager.tls.ca-file", "/nonexistent/ca.crt"],
            "bad --alertmanager.tls.ca-file /nonexistent/ca.crt",
        ),
        (
            vec!["--alertmanager.tls.ca-file", not_pem.as_str()],
            "no PEM certificate",
        ),
        (
            vec!["--alertmanager.tls.cert-file", cert.as_str()],
            "--alertmanager.tls.key-file",
        ),
        (
            vec![
                "--alertmanager.tls.cert-file",
                cert.as_str(),
                "--alertmanager.tls.key-file",
                ca.as_str(),
            ],
            "no PEM private key",
        ),
    ] {
        let (code, _, err) = notify(&src, &am.url, &flags);
        assert_eq!(code, 2, "{flags:?}: {err}");
        assert!(err.contains(want), "{flags:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // TLS flags with an http:// URL: refused rather than sent in clear text.
    let http = am.url.replace("https://", "http://");
    let (code, _, err) = notify(&src, &http, &ca_flag);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not https://"), "{err}");
}

/// The args of the CronJob's container, with the source and the Alertmanager URL replaced (and
/// --allow-stale-evidence added: the demo history is older than --evidence.max-age).
fn cronjob_args(source: &str, url: &str) -> (Vec<String>, String) {
    let text = std::fs::read_to_string(repo().join("deploy/notify/cronjob.yaml")).unwrap();
    let cronjob: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let schedule = cronjob["spec"]["schedule"].as_str().unwrap().to_string();
    let container = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["command"][0].as_str(), Some("tessera"));
    let mut args: Vec<String> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| {
            let a = a.as_str().unwrap();
            if a.starts_with("--source=") {
                format!("--source={source}")
            } else if a.starts_with("--alertmanager.url=") {
                format!("--alertmanager.url={url}")
            } else if a.starts_with("--since=") {
                // The demo history is older than a week before now.
                "--since=2026-11-01T00:00:00Z".to_string()
            } else {
                a.to_string()
            }
        })
        .collect();
    args.push("--allow-stale-evidence".into());
    (args, schedule)
}

/// A duration flag's value in minutes (`2h`, `30m`, `30min`).
fn minutes(v: &str) -> u64 {
    let (n, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap());
    let n: u64 = n.parse().unwrap();
    match unit {
        "h" => n * 60,
        "m" | "min" => n,
        other => panic!("unit {other} in {v}"),
    }
}

fn flag<'a>(args: &'a [String], name: &str) -> &'a str {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{name} not in {args:?}"))
}

#[test]
fn the_cronjob_and_the_systemd_timer_of_deploy_run_and_keep_the_ttl_above_their_interval() {
    let am = Alertmanager::start(&example_config());
    let src = demo();
    let (args, schedule) = cronjob_args(&src, &am.url);
    assert_eq!(args[0], "notify");
    // "*/30 * * * *": every 30 minutes; the TTL is at least twice that.
    let every = minutes(&format!(
        "{}m",
        schedule
            .split_whitespace()
            .next()
            .unwrap()
            .trim_start_matches("*/")
    ));
    assert!(
        minutes(flag(&args, "--ttl")) >= 2 * every,
        "{schedule} {args:?}"
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run(&argv);
    assert_eq!(code, 0, "{out}\n{err}");
    let alerts = am.tessera_alerts();
    // --min-severity=warning: the two warnings, each with the CronJob's cluster label and
    // generator URL.
    assert_eq!(alerts.len(), 2, "{alerts:?}");
    for a in &alerts {
        assert_eq!(label(a, "cluster"), Some("example"));
        assert_eq!(label(a, "severity"), Some("warning"));
        let id = label(a, "finding_id").unwrap();
        assert_eq!(
            a["generatorURL"],
            format!("https://gpu-reports.example.invalid/tessera.html#{id}")
        );
    }

    // systemd: the flags file's arguments run as well, and the timer's interval is at most half
    // the TTL.
    let notify_dir = repo().join("deploy/notify");
    let defaults = std::fs::read_to_string(notify_dir.join("tessera-notify.default")).unwrap();
    let line = defaults
        .lines()
        .find_map(|l| l.strip_prefix("TESSERA_NOTIFY_ARGS="))
        .unwrap()
        .trim_matches('"');
    let args: Vec<String> = line
        .split_whitespace()
        .map(|a| {
            if a.starts_with("--source=") {
                format!("--source={src}")
            } else if a.starts_with("--alertmanager.url=") {
                format!("--alertmanager.url={}", am.url)
            } else if a.starts_with("--since=") {
                "--since=2026-11-01T00:00:00Z".to_string()
            } else {
                a.to_string()
            }
        })
        .collect();
    let timer = std::fs::read_to_string(notify_dir.join("tessera-notify.timer")).unwrap();
    let interval = timer
        .lines()
        .find_map(|l| l.strip_prefix("OnUnitActiveSec="))
        .unwrap();
    assert!(
        minutes(flag(&args, "--ttl")) >= 2 * minutes(interval),
        "{interval} {args:?}"
    );
    let mut argv = vec!["notify", "--allow-stale-evidence"];
    argv.extend(args.iter().map(String::as_str));
    let (code, _, err) = run(&argv);
    assert_eq!(code, 0, "{err}");
    // Without the cluster label these are other alerts; the CronJob's are left alone (the
    // filter includes --label), so 2 + 2.
    assert_eq!(am.tessera_alerts().len(), 4);

    // The units are valid for systemd (the service naming this test's binary).
    let service = std::fs::read_to_string(notify_dir.join("tessera-notify.service")).unwrap();
    assert!(service.contains("ExecStart=/usr/bin/tessera notify $TESSERA_NOTIFY_ARGS"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tessera-notify.service"),
        service.replace(
            "/usr/bin/tessera ",
            &format!("{} ", env!("CARGO_BIN_EXE_tessera")),
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("tessera-notify.timer"), &timer).unwrap();
    verify_units(dir.path());
}

fn verify_units(dir: &Path) {
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.join("tessera-notify.timer"))
        .arg(dir.join("tessera-notify.service"))
        .output()
        .expect("systemd-analyze (Debian's systemd package; scripts/test.sh installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {stderr}"
    );
}
