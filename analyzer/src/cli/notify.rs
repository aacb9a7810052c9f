//! `tessera notify`: flag parsing and printing for sending findings to Alertmanager (a module of
//! the binary; `docs/notify.md`). Ingests the sources, runs the advisor as `tessera analyze` does
//! (its default thresholds), then hands the analysis to [`tessera::notify::run`]: one alert per
//! finding, tessera's alerts that are no longer findings resolved, all in one POST. `--dry-run`
//! prints the alerts as the POST's JSON body and contacts nothing (no `--alertmanager.url` needed). Data on stdout (the alerts sent
//! and resolved), the summary and warnings on stderr. Exit 0 sent (or nothing to send, or dry
//! run), 2 bad input or nothing sent (stale evidence included: `--evidence.max-age`), 3 the POST
//! failed after Alertmanager may have stored part of it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Result, bail};
use chrono_tz::Tz;
use clap::{Args, ValueEnum};
use tessera::advisor::Severity;
use tessera::notify::{self, AlertOptions, ClientOptions, NotifyRequest, alerts};
use tessera::report;

use super::source::{
    OwnersArgs, SourceArgs, ThresholdArgs, add_namespace_labels, add_slurm_accounts,
    analyze_sources, parse_basic_auth, parse_interval, parse_tz,
};

/// `--min-severity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MinSeverity {
    Info,
    Warning,
    Critical,
}

/// `--alertmanager.tls.*`: Prometheus' `tls_config` names (`ca_file`, `cert_file`, `key_file`).
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// PEM file of the CA certificates that sign an https:// Alertmanager's certificate (they
    /// replace the built-in roots), as Prometheus' tls_config ca_file.
    #[arg(long = "alertmanager.tls.ca-file", value_name = "FILE")]
    tls_ca_file: Option<PathBuf>,
    /// PEM client certificate to present to Alertmanager (with --alertmanager.tls.key-file).
    #[arg(
        long = "alertmanager.tls.cert-file",
        value_name = "FILE",
        requires = "tls_key_file"
    )]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate (with --alertmanager.tls.cert-file).
    #[arg(
        long = "alertmanager.tls.key-file",
        value_name = "FILE",
        requires = "tls_cert_file"
    )]
    tls_key_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct NotifyArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// Time zone of schedules and hour-of-week profiles (IANA name, e.g. Europe/Berlin).
    #[arg(long, default_value = "UTC", value_parser = parse_tz)]
    tz: Tz,
    /// Run only these detectors (repeatable; default all). Only their alerts are resolved.
    #[arg(long = "detector")]
    detectors: Vec<String>,
    #[command(flatten)]
    thresholds: ThresholdArgs,

    /// Alertmanager's base URL (a path prefix is kept: http://host/alertmanager). Required
    /// unless --dry-run.
    #[arg(
        long = "alertmanager.url",
        value_name = "URL",
        required_unless_present = "dry_run"
    )]
    alertmanager_url: Option<String>,
    /// Timeout of each request to Alertmanager (no retries: the next scheduled run is the retry).
    #[arg(long = "alertmanager.timeout", default_value = "30s", value_parser = parse_interval)]
    alertmanager_timeout: i64,
    /// File holding a bearer token for Alertmanager.
    #[arg(long = "alertmanager.bearer-token-file", value_name = "FILE")]
    bearer_token_file: Option<PathBuf>,
    /// Basic auth for Alertmanager: user and a file holding the password.
    #[arg(long = "alertmanager.basic-auth", value_name = "USER:PASSWORD_FILE", value_parser = parse_basic_auth)]
    basic_auth: Option<(String, PathBuf)>,
    /// TLS of an https:// Alertmanager (boxed: the flags are many and rarely given).
    #[command(flatten)]
    tls: Box<TlsArgs>,
    /// `--evidence.max-age` (default 1h: the oldest end of the analysed data a run fires and
    /// resolves on; older, or more than 5m in the future, nothing is sent: exit 2) and
    /// `--allow-stale-evidence`.
    #[command(flatten)]
    evidence: tessera::evidence::EvidenceArgs,
    /// How long a sent alert stays firing without being sent again (`endsAt` = now + TTL). Must
    /// be longer than the interval between runs (twice it, or more), or alerts resolve between
    /// runs and fire again.
    #[arg(long, default_value = "2h", value_parser = parse_interval)]
    ttl: i64,
    /// Print the alerts that would be sent (the POST's JSON body) and contact nothing.
    #[arg(long)]
    dry_run: bool,
    /// The alerts' generatorURL: `{id}` and `{detector}` are replaced by the finding's
    /// (https://reports.example/tessera.html#{id}). Default: tessera://finding/<id>.
    #[arg(long = "generator-url", value_name = "URL")]
    generator_url: Option<String>,
    /// Least severity sent.
    #[arg(long = "min-severity", value_enum, default_value_t = MinSeverity::Warning)]
    min_severity: MinSeverity,
    /// A constant label added to every alert and to the filter that finds tessera's alerts
    /// (repeatable): NAME=VALUE, e.g. cluster=prod-1 when several tessera share an Alertmanager.
    #[arg(long = "label", value_name = "NAME=VALUE")]
    labels: Vec<String>,
    /// Price of one GPU-hour for the `cost` annotation (overrides the config file; default 2.00).
    #[arg(long = "price.gpu-hour", value_name = "PRICE")]
    price_gpu_hour: Option<f64>,
    /// Report config (TOML) with `[price] gpu_hour`, `currency` (as `tessera report --config`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The teams' contacts: each alert of a team with one gets an `owner` label.
    #[command(flatten)]
    owners: OwnersArgs,
}

impl NotifyArgs {
    fn request(&self) -> Result<NotifyRequest> {
        let mut extra = BTreeMap::new();
        for spec in &self.labels {
            let (k, v) = alerts::check_extra_label(spec)?;
            if extra.insert(k.clone(), v).is_some() {
                bail!("bad --label {spec:?}: {k} is given twice");
            }
        }
        if let Some(u) = &self.generator_url {
            alerts::check_generator_url(u)?;
        }
        if self.ttl < 60_000 {
            bail!("bad --ttl: expected at least 1m, and longer than the interval between runs");
        }
        let config = match &self.config {
            Some(p) => Some((p.as_path(), report::ReportConfig::load(p)?)),
            None => None,
        };
        let prices = report::prices(
            config.as_ref().map(|(p, c)| (*p, c)),
            self.price_gpu_hour,
            None,
        )?;
        let timeout = std::time::Duration::from_millis(self.alertmanager_timeout.unsigned_abs());
        let req = NotifyRequest {
            alerts: AlertOptions {
                min_severity: match self.min_severity {
                    MinSeverity::Info => Severity::Info,
                    MinSeverity::Warning => Severity::Warning,
                    MinSeverity::Critical => Severity::Critical,
                },
                ttl_ms: self.ttl,
                generator_url: self.generator_url.clone(),
                extra_labels: extra,
                gpu_hour_price: prices.gpu_hour,
                currency: prices.currency,
                owners: self.owners.file()?,
            },
            client: ClientOptions {
                // Only a dry run goes without a URL, and it contacts nothing.
                url: self.alertmanager_url.clone().unwrap_or_default(),
                timeout,
                bearer_token_file: self.bearer_token_file.clone(),
                basic_auth: self.basic_auth.clone(),
                tls: notify::TlsFiles {
                    ca_file: self.tls.tls_ca_file.clone(),
                    cert_file: self.tls.tls_cert_file.clone(),
                    key_file: self.tls.tls_key_file.clone(),
                },
            },
            dry_run: self.dry_run,
            max_evidence_age_ms: self.evidence.max_age(notify::DEFAULT_MAX_EVIDENCE_AGE_MS),
        };
        // A bad URL or an unreadable token file is bad input, found before any data is read.
        if self.alertmanager_url.is_some() {
            notify::Client::new(&req.client)?;
        }
        Ok(req)
    }
}

/// One alert as a line: what it is, its id, severity and team (escaped by the output layer).
fn line(verb: &str, a: &notify::Alert) -> String {
    use tessera::output::{Col, Columns, Table};
    let l = |k: &str| a.labels.get(k).map(String::as_str).unwrap_or("-");
    let row = Table {
        header: Vec::new(),
        rows: vec![vec![
            verb.to_string(),
            l("alertname").to_string(),
            l("finding_id").to_string(),
            format!("severity={}", l("severity")),
            format!("team={}", l("team")),
        ]],
    };
    let mut s = row.columns(&Columns {
        indent: "",
        cols: &[Col::left(8), Col::left(24), Col::left(36), Col::left(0)],
        trim_end: false,
    });
    s.pop();
    s
}

/// Runs `tessera notify`; the exit code: 0, or 3 when the POST may have been applied.
pub fn run(args: NotifyArgs) -> Result<u8> {
    let mut req = args.request()?;
    let params = args.thresholds.params(args.tz)?;
    let analysis = analyze_sources(&args.src, &params, &args.detectors, false)?;

    let now = chrono::Utc::now().timestamp_millis();
    // The namespaces' labels as they are now: the owners alerts go to.
    add_namespace_labels(&mut req.alerts.owners, &args.src, now);
    let jobs = analysis
        .findings
        .iter()
        .filter_map(|f| f.entity.slurm_job.clone());
    add_slurm_accounts(&mut req.alerts.owners, jobs);
    for n in &req.alerts.owners.notes {
        eprintln!("tessera: warning: {n}");
    }
    let outcome = match notify::run(&analysis, &req, now) {
        Ok(o) => o,
        Err(e) if e.maybe_applied() => {
            eprintln!("tessera: {e}");
            return Ok(3);
        }
        Err(e) => return Err(e.into()),
    };
    if req.dry_run {
        print!("{}", tessera::output::json::document(&outcome.firing)?);
        let to = match &args.alertmanager_url {
            Some(u) => format!(" to {}", notify::redact_url(u)),
            None => String::new(),
        };
        eprintln!(
            "dry run: {} alert(s) would be sent{to}; nothing was sent (resolutions need Alertmanager's alerts and are not computed)",
            outcome.firing.len(),
        );
        return Ok(0);
    }
    for a in &outcome.firing {
        println!("{}", line("firing", a));
    }
    for a in &outcome.resolved {
        println!("{}", line("resolved", a));
    }
    if outcome.sent {
        eprintln!(
            "sent {} firing alert(s) ({} new, {} renewed, until now + --ttl) and {} resolution(s) to {} in one POST",
            outcome.firing.len(),
            outcome.firing.len() - outcome.renewed,
            outcome.renewed,
            outcome.resolved.len(),
            notify::redact_url(&req.client.url)
        );
    } else {
        eprintln!(
            "no finding at or above --min-severity and no tessera alert to resolve: nothing sent"
        );
    }
    Ok(0)
}
