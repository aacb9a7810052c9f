//! `tessera report`: flag parsing, range selection and output for the weekly report (a module
//! of the binary). Ingests the sources (reaching one period further back for week-over-week),
//! builds a [`ReportRequest`] for [`tessera::report::run`] (the workflow: the advisor with its
//! default thresholds, the tallies, the MIG section, the plan actions' replays) and writes the
//! [`tessera::report::Report`] as a table, Markdown, HTML or JSON to stdout or `--out` (HTML to
//! a terminal is refused, exit 2, naming `--out`). Colour only for a table on a terminal without `NO_COLOR`; a spinner on a terminal
//! while it works; warnings on stderr.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use chrono_tz::Tz;
use clap::{Args, ValueEnum};
use tessera::advisor::Params;
use tessera::deliver;
use tessera::ingest::{fmt_ms, parse_time};
use tessera::output::Format;
use tessera::report::{self, Replays, ReportConfig, ReportRequest, html, render};

use super::source::{
    OwnersArgs, PartProgress, SourceArgs, add_namespace_labels, add_slurm_accounts, job_work,
    load_parts, load_reaching, name_file, parse_interval, parse_tz, part_files, slurm_jobs,
};

/// `--by`: what the report is broken down by instead of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    /// Slurm jobs (processes' `slurm_job_id`): the worst of the period, most unused GPU-hours
    /// first.
    Job,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// Time zone of the hour-of-week heatmap and the off-peak windows (IANA name).
    #[arg(long, default_value = "UTC", value_parser = parse_tz)]
    tz: Tz,
    /// Output format.
    #[arg(long, value_parser = tessera::output::DOCUMENT, default_value_t = Format::Table)]
    format: Format,
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE", conflicts_with = "archive")]
    out: Option<PathBuf>,
    /// Keep the report on a schedule: write its HTML page and its JSON into this folder as
    /// tessera-report-<end>.html and .json (instead of --format/--out), removing the oldest
    /// beyond --keep.
    #[arg(long, value_name = "DIR")]
    archive: Option<PathBuf>,
    /// With --archive: how many reports to keep.
    #[arg(long, value_name = "N", default_value_t = 8, requires = "archive")]
    keep: usize,
    /// Report config (TOML): `[price] gpu_hour = 2.5, kwh = 0.3, currency = "EUR"`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Price of one GPU-hour (overrides the config file; default 2.00).
    #[arg(long = "price.gpu-hour", value_name = "PRICE")]
    price_gpu_hour: Option<f64>,
    /// Price of one kWh (overrides the config file; default 0.15).
    #[arg(long = "price.kwh", value_name = "PRICE")]
    price_kwh: Option<f64>,
    /// How many idle-loaded models (with --by job: jobs) to list.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// The time of a layout change to compare equal periods around (RFC 3339 or YYYY-MM-DD,
    /// inside the range), instead of the changes found in the data.
    #[arg(long = "change-at", value_name = "TIME")]
    change_at: Option<String>,
    /// Instead of the fleet report, the worst Slurm jobs of the period (docs/jobs.md): table,
    /// Markdown or JSON.
    #[arg(long, value_enum)]
    by: Option<By>,
    /// Also make the report's plans (consolidation moves, MIG layouts) from the previous period
    /// and replay them on this one (`tessera replay`, docs/replay.md): verdict, failures, GPUs
    /// freed. Off by default: it plans and replays once more.
    #[arg(long = "out-of-sample")]
    out_of_sample: bool,
    /// The plan (tessera-plan v1) that made a change in the range, with the `prediction` block
    /// `tessera replay --write-prediction` wrote: the report sets the prediction beside what
    /// the change realized and explains a large difference (docs/report.md, "Changes").
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Leave the plan actions unreplayed: by default the consolidation moves and the MIG layout
    /// the Actions propose are replayed on the reported period (`tessera replay`'s model) and
    /// each action carries the verdict (safe, tight, unsafe); this saves that time.
    #[arg(long = "no-replay")]
    no_replay: bool,
    /// The weeks the trend shows, ending at the report's end (idle-loaded and unused GPU-hours,
    /// work utilization and cost per week, and what layout changes saved); 0 leaves it out.
    /// Ingest reads that far back.
    #[arg(long = "trend.weeks", value_name = "N", default_value_t = report::trend::DEFAULT_WEEKS)]
    trend_weeks: usize,
    /// Delivery by mail and chat (docs/report.md, "Delivering the report").
    #[command(flatten)]
    deliver: DeliverArgs,
    /// The teams' contacts (docs/report.md, "Owners").
    #[command(flatten)]
    owners: OwnersArgs,
    /// Your own work counters for the Work per GPU-hour section (TOML: [[work]] entries, each
    /// with unit = "steps" and counter = 'trainer_steps_total{job="trainer"}', a counter
    /// selector whose series carry namespace and pod labels), read from the prometheus:
    /// sources beside the built-in ones (docs/work.md, "Other work").
    #[arg(long = "work-metrics", value_name = "FILE")]
    work_metrics: Option<PathBuf>,
}

/// `--smtp.tls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SmtpTls {
    /// STARTTLS, required (default port 587).
    Starttls,
    /// TLS from the first byte, SMTPS (default port 465).
    Tls,
    /// No TLS (port 25): a relay on this host or network; no password is sent this way.
    None,
}

/// `--webhook.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WebhookFormat {
    /// Teams for Power Automate hosts (*.logic.azure.com, *.powerplatform.com), else Slack.
    Auto,
    /// Slack's incoming webhooks, and Mattermost's (the same payload).
    Slack,
    /// Microsoft Teams through a Workflows webhook (an Adaptive Card).
    Teams,
}

/// The delivery flags: mail, chat, the sent record, timeouts and retries. Secrets only in files.
#[derive(Debug, Args)]
pub struct DeliverArgs {
    /// Mail the report to this address (repeatable): HTML with a plain-text alternative and the
    /// JSON attached, one message per recipient.
    #[arg(long = "mail-to", value_name = "ADDR", requires_all = ["mail_from", "smtp_host"])]
    mail_to: Vec<String>,
    /// Also mail the owner of each team in the team table (docs/report.md, "Owners") whose
    /// contact is a mail address their team's part of the report: its row, its actions, its
    /// findings (one message per owner); the others are named on stderr.
    #[arg(long = "mail-owners", requires = "mail_to")]
    mail_owners: bool,
    /// The sender of the mail (name@domain or "Name <name@domain>").
    #[arg(long = "mail-from", value_name = "ADDR", requires = "mail_to")]
    mail_from: Option<String>,
    /// SMTP server (submission) to send the mail through.
    #[arg(long = "smtp.host", value_name = "HOST", requires = "mail_to")]
    smtp_host: Option<String>,
    /// SMTP port (default 587 with starttls, 465 with tls, 25 with none).
    #[arg(long = "smtp.port", value_name = "PORT")]
    smtp_port: Option<u16>,
    /// How the SMTP connection is secured.
    #[arg(long = "smtp.tls", value_enum, default_value_t = SmtpTls::Starttls)]
    smtp_tls: SmtpTls,
    /// PEM CA certificates that sign the SMTP server's certificate (they replace the built-in
    /// roots).
    #[arg(long = "smtp.tls.ca-file", value_name = "FILE")]
    smtp_ca_file: Option<PathBuf>,
    /// SMTP user (with --smtp.password-file).
    #[arg(long = "smtp.user", value_name = "USER")]
    smtp_user: Option<String>,
    /// File holding the SMTP password (its last line break ignored); never the password itself.
    #[arg(long = "smtp.password-file", value_name = "FILE")]
    smtp_password_file: Option<PathBuf>,
    /// File holding an incoming webhook's URL (repeatable): the URL is a secret and is never
    /// taken on the command line, printed or recorded.
    #[arg(long = "webhook.url-file", value_name = "FILE")]
    webhook_url_files: Vec<PathBuf>,
    /// The payload of the webhooks.
    #[arg(long = "webhook.format", value_enum, default_value_t = WebhookFormat::Auto)]
    webhook_format: WebhookFormat,
    /// The report's address in the chat message and the mail, `{file}` replaced by the archive's
    /// HTML name (https://reports.example/gpu/{file}).
    #[arg(long, value_name = "URL")]
    link: Option<String>,
    /// The record of what was delivered (JSON), so that a re-run of the same period sends
    /// nothing twice. Default with --archive: DIR/tessera-sent.json.
    #[arg(long = "sent-record", value_name = "FILE")]
    sent_record: Option<PathBuf>,
    /// Timeout of each SMTP command and of each webhook POST.
    #[arg(long = "delivery.timeout", value_name = "DURATION", default_value = "30s", value_parser = parse_interval)]
    timeout: i64,
    /// How many times a delivery that failed in a way that may pass (no connection, a timeout,
    /// HTTP 429 or 5xx, SMTP 4xx) is tried again, after 1 s, 2 s, 4 s and so on
    #[arg(long = "delivery.retries", value_name = "N", default_value_t = 2)]
    retries: u32,
}

/// The targets, checked and their secret files read before any data is.
struct Delivery {
    mailer: Option<deliver::mail::Mailer>,
    webhooks: Vec<deliver::webhook::Webhook>,
    record: PathBuf,
    timeout: std::time::Duration,
    retries: u32,
    link: Option<String>,
}

impl DeliverArgs {
    /// `None` when nothing is to be delivered.
    fn delivery(&self, archive: Option<&std::path::Path>) -> Result<Option<Delivery>> {
        if self.mail_to.is_empty() && self.webhook_url_files.is_empty() {
            if self.link.is_some() || self.sent_record.is_some() {
                bail!("--link and --sent-record go with --mail-to or --webhook.url-file");
            }
            return Ok(None);
        }
        let timeout = std::time::Duration::from_millis(self.timeout.unsigned_abs());
        let mailer = match (&self.smtp_host, &self.mail_from) {
            (Some(host), Some(from)) if !self.mail_to.is_empty() => {
                Some(deliver::mail::Mailer::new(&deliver::mail::MailOptions {
                    host: host.clone(),
                    port: self.smtp_port,
                    tls: match self.smtp_tls {
                        SmtpTls::Starttls => deliver::mail::TlsMode::StartTls,
                        SmtpTls::Tls => deliver::mail::TlsMode::Tls,
                        SmtpTls::None => deliver::mail::TlsMode::None,
                    },
                    ca_file: self.smtp_ca_file.clone(),
                    user: self.smtp_user.clone(),
                    password_file: self.smtp_password_file.clone(),
                    from: from.clone(),
                    to: self.mail_to.clone(),
                    timeout,
                })?)
            }
            _ => None,
        };
        let format = match self.webhook_format {
            WebhookFormat::Auto => None,
            WebhookFormat::Slack => Some(deliver::webhook::Format::Slack),
            WebhookFormat::Teams => Some(deliver::webhook::Format::Teams),
        };
        let webhooks = self
            .webhook_url_files
            .iter()
            .map(|p| deliver::webhook::Webhook::from_file(p, format))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(l) = &self.link {
            deliver::webhook::check_link(l)?;
        }
        let record = match (&self.sent_record, archive) {
            (Some(p), _) => p.clone(),
            (None, Some(dir)) => dir.join("tessera-sent.json"),
            (None, None) => bail!(
                "delivering needs --sent-record FILE (or --archive DIR, which keeps it as DIR/tessera-sent.json): the record keeps a re-run from sending twice"
            ),
        };
        Ok(Some(Delivery {
            mailer,
            webhooks,
            record,
            timeout,
            retries: self.retries,
            link: self.link.clone(),
        }))
    }
}

fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// Runs `tessera report`; the exit code: 0, or 3 when the report was made but a delivery failed.
pub fn run(args: ReportArgs) -> Result<u8> {
    // Bad delivery flags and unreadable secret files are found before any data is read.
    let delivery = args.deliver.delivery(args.archive.as_deref())?;
    let file_owners = args.owners.file()?;
    let work_metrics = match &args.work_metrics {
        Some(p) => tessera::work::declared::load(p)?,
        None => Vec::new(),
    };
    let tz: Tz = args.tz;
    let config = match &args.config {
        Some(p) => Some((p.as_path(), ReportConfig::load(p)?)),
        None => None,
    };
    let prices = report::prices(
        config.as_ref().map(|(p, c)| (*p, c)),
        args.price_gpu_hour,
        args.price_kwh,
    )?;
    if args.top == 0 {
        bail!("bad --top 0: expected at least 1");
    }
    if args.format == Format::Html
        && args.out.is_none()
        && args.archive.is_none()
        && std::io::stdout().is_terminal()
    {
        bail!(
            "--format html writes a page, not terminal text: give --out report.html (or redirect: > report.html)"
        );
    }
    if args.by == Some(By::Job) {
        if args.change_at.is_some() {
            bail!("--change-at compares the fleet around a change; it does not apply to --by job");
        }
        if delivery.is_some() {
            bail!("--by job prints the worst jobs; delivery sends the weekly report: not together");
        }
        return by_job(&args, &work_metrics).map(|()| 0);
    }
    let plan = match &args.plan {
        Some(p) => {
            let file = p.display().to_string();
            let parsed = tessera_core::mig::plan::TesseraPlan::from_file(p)?;
            Some(
                tessera::changes::predicted::PlanPrediction::from_plan(
                    &parsed,
                    &file,
                    &args
                        .src
                        .sources
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>(),
                )
                .map_err(anyhow::Error::msg)?,
            )
        }
        None => None,
    };
    let change_at = match &args.change_at {
        Some(v) => Some(
            parse_time(v, chrono::Utc::now().timestamp_millis())
                .with_context(|| format!("bad --change-at {v:?}"))?,
        ),
        None => None,
    };

    // One range rule for every command (tessera::range); ingest reaches one period further
    // back so the previous period can be compared, and the frames stay whole for it.
    if args.trend_weeks > report::trend::MAX_WEEKS {
        bail!(
            "bad --trend.weeks {}: expected 0 to {}",
            args.trend_weeks,
            report::trend::MAX_WEEKS
        );
    }
    let loaded = load_reaching(
        &args.src,
        args.trend_weeks as i64 * report::trend::WEEK_MS,
        "reporting",
    )?;
    let Some(range) = loaded.range else {
        bail!("no rows in the sources for the chosen range: nothing to report");
    };
    let gpu_rows = loaded.gpu_rows();
    let (parts, ingest_report) = (loaded.parts, loaded.report);
    let files = part_files(&parts);
    let named = |e: anyhow::Error| name_file(e, &files);
    let frames: Vec<&tessera::frames::Frames> = parts.iter().map(|p| &p.frames).collect();
    let bar = PartProgress::new(parts.len(), gpu_rows);
    bar.set("analysing", 0);
    // The apply journals beside history sources: evidence of layout changes.
    let mut journal = Vec::new();
    for src in &args.src.sources {
        if src.scheme() == "history" {
            let dir = src.location();
            let (runs, warnings) = tessera::changes::journal::beside(std::path::Path::new(dir));
            journal.extend(runs);
            for w in warnings {
                eprintln!("tessera: warning: {w}");
            }
        }
    }
    let mut owners = file_owners;
    add_namespace_labels(&mut owners, &args.src, range.until);
    let jobs = slurm_jobs(&mut owners, &frames);
    add_slurm_accounts(&mut owners, jobs);
    for n in &owners.notes {
        eprintln!("tessera: warning: {n}");
    }
    // The trend's weeks too: their changes are judged by work per GPU-hour.
    let watch = tessera::timing::Stopwatch::start("report");
    let work = super::source::work_rows(
        &args.src,
        tessera::range::TimeRange {
            since: range.since - report::trend::trend_reach_ms(range, args.trend_weeks),
            until: range.until,
        },
        &work_metrics,
    );
    watch.lap("work counters read");
    let request = ReportRequest {
        range,
        ingest: &ingest_report,
        sources: args.src.sources.iter().map(|s| s.to_string()).collect(),
        prices,
        tz,
        top: args.top,
        change_at,
        journal,
        plan,
        trend_weeks: args.trend_weeks,
        first_ts: ingest_report.time_range().map(|(first, _)| first),
        range_flags: args.src.range_flags(),
        owners,
        work,
        work_metrics,
        replays: if args.out_of_sample {
            Replays::OutOfSample
        } else if args.no_replay {
            Replays::None
        } else {
            Replays::InSample
        },
    };
    let r = report::run(&frames, request, &|phase, n| bar.set(phase, n))
        .map_err(|e| named(e.into()))?;
    bar.finish();
    if let Some(dir) = &args.archive {
        archive(&r, dir, args.keep)?;
    } else {
        let color = args.format == Format::Table
            && args.out.is_none()
            && std::io::stdout().is_terminal()
            && !no_color();
        let text = match args.format {
            Format::Table | Format::Text => render::render_table(&r, color),
            Format::Markdown => render::render_markdown(&r),
            Format::Html => html::render_html(&r),
            Format::Json => tessera::output::json::document(&r)?,
        };
        write_out(args.out.as_deref(), &text)?;
    }
    match delivery {
        Some(mut d) => {
            if args.deliver.mail_owners {
                mail_owners(&r, &mut d);
            }
            deliver_report(&r, &d)
        }
        None => Ok(0),
    }
}

/// `--mail-owners`: the owners of the report's teams added as recipients of their teams' part
/// of the report (`deliver::team`); a contact that is not a mail address is named on stderr and
/// skipped.
fn mail_owners(r: &report::Report, d: &mut Delivery) {
    let Some(mailer) = d.mailer.as_mut() else {
        return;
    };
    for t in &r.teams.rows {
        let Some(owner) = &t.owner else { continue };
        if let Err(e) = mailer.add_owner(owner, &t.team) {
            eprintln!(
                "tessera: warning: team {}'s owner is not mailed: {e}",
                tessera::output::escape::printable(&t.team)
            );
        }
    }
}

/// `--archive DIR --keep N`: the HTML page and the JSON written, the oldest removed.
fn archive(r: &report::Report, dir: &std::path::Path, keep: usize) -> Result<()> {
    let json = tessera::output::json::document(r)?;
    let a = report::archive::write(dir, &r.until, &html::render_html(r), &json, keep)?;
    eprintln!(
        "tessera: wrote {} and {}{}",
        a.html.display(),
        a.json.display(),
        if a.removed.is_empty() {
            String::new()
        } else {
            format!("; removed {} older file(s)", a.removed.len())
        }
    );
    Ok(())
}

/// Delivers the report to every target (`tessera::deliver::run`) and says how each fared on
/// stderr; 3 when one failed (or was delivered and could not be recorded).
fn deliver_report(r: &report::Report, d: &Delivery) -> Result<u8> {
    let json = tessera::output::json::document(r)?;
    let req = deliver::DeliveryRequest {
        mailer: d.mailer.as_ref(),
        webhooks: &d.webhooks,
        record: &d.record,
        retry: deliver::retry::Retry {
            retries: d.retries,
            ..Default::default()
        },
        timeout: d.timeout,
        link: d.link.as_deref(),
    };
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let outcomes = match deliver::run(r, &html::render_html(r), &json, &req, &now) {
        Ok(o) => o,
        Err(e) if e.partly_done() => {
            eprintln!("tessera: {e}");
            return Ok(3);
        }
        Err(e) => return Err(e.into()),
    };
    let mut failed = 0;
    for o in &outcomes {
        match &o.outcome {
            deliver::Outcome::Sent { attempts } => eprintln!(
                "tessera: delivered: {}{}",
                o.target,
                if *attempts > 1 {
                    format!(" (attempt {attempts})")
                } else {
                    String::new()
                }
            ),
            deliver::Outcome::AlreadySent { at } => eprintln!(
                "tessera: already delivered at {at} (recorded in {}): {}; not sent again",
                d.record.display(),
                o.target
            ),
            deliver::Outcome::Failed { reason, attempts } => {
                failed += 1;
                eprintln!(
                    "tessera: error: not delivered after {attempts} attempt(s): {}: {reason}",
                    o.target
                );
            }
        }
    }
    if failed > 0 {
        eprintln!(
            "tessera: {failed} of {} deliveries failed (not recorded: a re-run sends only those)",
            outcomes.len()
        );
        return Ok(3);
    }
    Ok(0)
}
/// `--by job`: every job of the range summarised (`tessera::jobs`), the worst `--top` printed,
/// each with its work per GPU-hour where the sources count it (`declared`: the user's own
/// counters).
fn by_job(args: &ReportArgs, declared: &[tessera::work::WorkMetric]) -> Result<()> {
    if args.archive.is_some() {
        bail!("--by job prints the worst jobs; --archive keeps the weekly report: not together");
    }
    if args.format == Format::Html {
        bail!("--by job writes a table, Markdown or JSON (--format table|markdown|json), not HTML");
    }
    let owners = args.owners.file()?;
    let (parts, range, _) = load_parts(&args.src)?;
    let Some(range) = range else {
        bail!("no rows in the sources for the chosen range: no job to report");
    };
    let (from, to) = (fmt_ms(range.since), fmt_ms(range.until));
    let files = part_files(&parts);
    let params = Params::default();
    let mut jobs = std::collections::BTreeMap::new();
    for p in &parts {
        let part = tessera::jobs::rows_by_job(&p.frames, None, &params)
            .map_err(|e| name_file(e.into(), &files))?;
        tessera::jobs::merge_jobs(&mut jobs, part);
    }
    let total = jobs.len();
    let mut worst = tessera::jobs::worst(&jobs, args.top);
    let mut owners = owners;
    add_slurm_accounts(&mut owners, worst.iter().map(|j| j.job.clone()));
    for n in &owners.notes {
        eprintln!("tessera: warning: {n}");
    }
    for j in &mut worst {
        j.owner = owners.of(None, Some(&j.job)).map(str::to_string);
        // Its work per GPU-hour, as `tessera job` reads it (docs/jobs.md "Work").
        let rows = &jobs[&j.job];
        let found = job_work(
            &args.src,
            &j.job,
            &tessera::jobs::work::spans(rows),
            declared,
        );
        tessera::jobs::work::set(j, rows, found);
    }
    let text = match args.format {
        Format::Json => tessera::output::json::document(&serde_json::json!({
            "version": tessera::jobs::JOB_JSON_VERSION,
            "by": "job",
            "range": { "from": from, "to": to },
            "jobs_seen": total,
            "jobs": worst,
        }))?,
        Format::Markdown => format!(
            "# Worst Slurm jobs, {from} .. {to}\n\n{total} job(s) with GPU processes; the {} \
             with the most unused GPU-hours:\n\n{}",
            worst.len(),
            tessera::jobs::render_worst(&worst, true)
        ),
        _ => format!(
            "Worst Slurm jobs, {from} .. {to}: {total} job(s) with GPU processes\n\n{}",
            tessera::jobs::render_worst(&worst, false)
        ),
    };
    write_out(args.out.as_deref(), &text)
}

/// Writes the report to `--out` (saying so on stderr) or to stdout.
fn write_out(out: Option<&std::path::Path>, text: &str) -> Result<()> {
    match out {
        Some(p) => {
            tessera_core::files::replace(p, text.as_bytes())?;
            eprintln!("tessera: wrote {}", p.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}
