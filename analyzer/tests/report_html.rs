//! The HTML report in a real browser: headless Chromium (Debian package `chromium`) loads the file
//! written by `tessera report --format html` on the demo history, and the test checks the DOM after
//! load — every chart's SVG is there with data marks — that nothing was logged to the console
//! (checked against a control page that does log, so the check itself is known to work), that the
//! file needs no network, that list lines are real lists (the MIG recommendation's GPUs, the
//! data-quality notes: `<ul>`/`<li>`, never a paragraph starting with a Markdown "- "), and saves
//! a screenshot under `target/tmp/report-html/`. Chromium missing is a failure, not a skip.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chromium() -> PathBuf {
    let names = ["chromium", "chromium-browser", "google-chrome"];
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "headless Chromium not found in PATH (tried {names:?}): install Debian's `chromium` (apt-get install -y chromium)"
    );
}

/// Runs headless Chromium on a file with `extra` flags; returns (stdout, console lines).
fn browse(file: &Path, profile: &Path, extra: &[&str]) -> (String, Vec<String>) {
    let url = format!("file://{}", file.display());
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(&url)
        .output()
        .expect("start chromium");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed on {url}: {stderr}");
    // Console messages of any level are logged as `INFO:CONSOLE(line)] "message", source: …`.
    let console = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    (String::from_utf8_lossy(&out.stdout).into_owned(), console)
}

/// The HTML of a text section: from after its `<h2>` to the next `<h2>`.
fn section<'a>(dom: &'a str, title: &str) -> &'a str {
    let h = format!("<h2>{title}</h2>");
    let start = dom
        .find(&h)
        .unwrap_or_else(|| panic!("section {title} missing"))
        + h.len();
    let rest = dom[start..].trim_start();
    &rest[..rest.find("<h2>").unwrap_or(rest.len())]
}

fn count(dom: &str, svg_id: &str, class: &str) -> usize {
    let start = dom
        .find(&format!("id=\"{svg_id}\""))
        .unwrap_or_else(|| panic!("chart {svg_id} missing from the DOM"));
    let end = start + dom[start..].find("</svg>").expect("svg closed");
    dom[start..end]
        .matches(&format!("class=\"{class}\""))
        .count()
}

#[test]
fn html_report_renders_in_headless_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let html = tmp.path().join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "report",
            "--source",
            "history:fixtures/demo-history",
            "--tz",
            "Europe/Berlin",
            "--format",
            "html",
            "--out",
        ])
        .arg(&html)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&html).unwrap();
    // Self-contained: nothing to fetch.
    for needle in ["src=", "href=", "url(", "@import", "http://", "https://"] {
        assert!(!text.contains(needle), "the HTML references {needle}");
    }

    // The control page proves the console check sees console output.
    let control = tmp.path().join("control.html");
    std::fs::write(
        &control,
        "<html><body><script>console.error('control-marker')</script></body></html>",
    )
    .unwrap();
    let (_, console) = browse(&control, &tmp.path().join("p0"), &["--dump-dom"]);
    assert!(
        console.iter().any(|l| l.contains("control-marker")),
        "the console check did not see the control page's error: {console:?}"
    );

    let (dom, console) = browse(&html, &tmp.path().join("p1"), &["--dump-dom"]);
    assert!(console.is_empty(), "console output: {console:#?}");
    assert!(
        dom.contains("<h1>tessera report"),
        "DOM: {}",
        &dom[..dom.len().min(500)]
    );
    // Monday 00:00 UTC to Friday 00:00 UTC is Monday 01:00 to Friday 01:00 in Berlin: 96 cells.
    assert_eq!(count(&dom, "chart-heatmap", "cell"), 96);
    assert_eq!(count(&dom, "chart-gpu-activity", "bin"), 8 * 10);
    assert_eq!(count(&dom, "chart-gpu-activity", "mean"), 8);
    // research, nlp, vision hold idle memory (the demo's idle models).
    assert_eq!(count(&dom, "chart-idle-teams", "bar"), 3);
    assert_eq!(count(&dom, "chart-free-timeline", "hour"), 96);
    assert!(count(&dom, "chart-free-timeline", "offpeak") > 0);
    // Every chart has its two axis titles and a legend; in Berlin time nothing says UTC, and the
    // free-capacity caption names only the marks drawn (issue 55).
    for id in [
        "chart-heatmap",
        "chart-gpu-activity",
        "chart-idle-teams",
        "chart-free-timeline",
    ] {
        assert_eq!(count(&dom, id, "axis-title"), 2, "{id}");
    }
    assert_eq!(
        dom.matches("<p class=\"legend\">").count(),
        4,
        "a legend per chart"
    );
    assert!(!dom.contains("UTC"), "UTC in a Berlin report");
    assert!(dom.contains("<h2>Free capacity (Europe/Berlin)</h2>"));
    let free = section(&dom, "Free capacity (Europe/Berlin)");
    assert_eq!(
        free.contains("dashed"),
        count(&dom, "chart-free-timeline", "baseline") > 0,
        "{free}"
    );
    assert!(free.contains("green bands"), "{free}");
    assert!(dom.contains(
        "<h1>tessera report: Mon 2 Nov 01:00 – Fri 6 Nov 01:00 2026, Europe/Berlin</h1>"
    ));
    assert!(dom.contains("MIG layouts would run"));
    assert!(dom.contains("<code>tessera mig plan --source history:"));
    assert!(dom.contains(" -o plan.yaml</code>"));
    // The next steps: one list item per command, each in <code>.
    let next = section(&dom, "Next steps");
    assert!(next.contains("<li>"), "{next}");
    assert!(
        next.contains("<code>tessera replay --plan plan.yaml --source history:"),
        "{next}"
    );
    assert!(
        dom.contains("<li>[status] lab-b/GPU3"),
        "data-quality notes are a list"
    );
    // The MIG recommendation: its summary is a paragraph (saying why whole GPUs stay out of MIG
    // mode), its GPUs and unplaced workloads one <ul> of <li>; no Markdown list marker leaks.
    let mig = section(&dom, "MIG recommendation");
    assert!(
        mig.starts_with("<p>MIG layouts would run")
            && mig.contains(
                "4 GPUs each run one workload that needs the whole GPU: left out of MIG mode (MIG would only cost peer-to-peer and profiling)."
            ),
        "{mig}"
    );
    let list = &mig[mig.find("<ul>").unwrap_or_else(|| panic!("no list: {mig}"))..];
    let list = &list[..list.find("</ul>").expect("list closed")];
    assert_eq!(list.matches("<li>").count(), 7, "{list}");
    assert!(
        list.contains("<li>lab-a/GPU0 (H100-80GB): 3g.40gb@0 [serving/chat-api-7d9f8c-x2k4p]")
            && list.contains(
                "<li>lab-b/GPU0 (A100-80GB): whole GPU, MIG off [research/jupyter-alice]</li>"
            )
            && list.contains("<li>lab-a/GPU3 (H100-80GB): kept whole, MIG off [slurm-81234]</li>"),
        "{list}"
    );
    assert!(!mig.contains("7g.80gb@"), "no full-GPU MIG instance: {mig}");
    for marker in ["<p>- ", "<li>- ", "<td>- "] {
        assert!(
            !dom.contains(marker),
            "a Markdown list marker leaks: {marker}"
        );
    }
    assert!(
        !dom.contains("<p>`") && !dom.contains("<li>`"),
        "backticks leak"
    );

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-html");
    std::fs::create_dir_all(&shots).unwrap();
    let png = shots.join("report.png");
    let _ = std::fs::remove_file(&png);
    let (_, console) = browse(
        &html,
        &tmp.path().join("p2"),
        &[
            "--window-size=1200,3600",
            "--hide-scrollbars",
            &format!("--screenshot={}", png.display()),
        ],
    );
    assert!(console.is_empty(), "console output: {console:#?}");
    let bytes = std::fs::read(&png).expect("screenshot written");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 50_000,
        "a real PNG"
    );
    eprintln!("screenshot: {}", png.display());
}

/// A layout change in the HTML: the before/after chart (five pairs of bars, before and after)
/// renders in Chromium without console output, and the change's events are a list.
#[test]
fn the_before_after_chart_of_a_planted_change_renders_in_headless_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let hist = tmp.path().join("history");
    let html = tmp.path().join("change.html");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(args)
            .current_dir(root())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "simulate",
        "--scenario",
        "fixtures/scenarios/consolidation.toml",
        "--days",
        "4",
        "--sample-interval",
        "60s",
        "--history.interval",
        "5m",
        "--out",
        hist.to_str().unwrap(),
    ]);
    let src = format!("history:{}", hist.display());
    run(&[
        "report",
        "--source",
        &src,
        "--format",
        "html",
        "--out",
        html.to_str().unwrap(),
    ]);
    let (dom, console) = browse(&html, &tmp.path().join("p1"), &["--dump-dom"]);
    assert!(console.is_empty(), "console output: {console:#?}");
    assert_eq!(count(&dom, "chart-change", "bar before"), 5);
    assert_eq!(count(&dom, "chart-change", "bar after"), 5);
    let change = section(&dom, "Change at 2026-11-04T13:00:00.000Z");
    assert!(change.contains("<table>") && change.contains("<td>GPUs in use (mean)</td>"));
    let list = &change[change.find("<ul>").expect("events as a list")..];
    assert!(
        list.contains("<li>2026-11-04T13:00:00.000Z gpu-a/GPU0: MIG mode on"),
        "{list}"
    );

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-html");
    std::fs::create_dir_all(&shots).unwrap();
    let png = shots.join("change.png");
    let _ = std::fs::remove_file(&png);
    let (_, console) = browse(
        &html,
        &tmp.path().join("p2"),
        &[
            "--window-size=1200,3000",
            "--hide-scrollbars",
            &format!("--screenshot={}", png.display()),
        ],
    );
    assert!(console.is_empty(), "console output: {console:#?}");
    assert!(
        std::fs::read(&png)
            .expect("screenshot")
            .starts_with(b"\x89PNG")
    );
    eprintln!("screenshot: {}", png.display());
}
