//! The `tessera` commands the outputs suggest ("write the plan with `tessera mig plan …`"),
//! built in one place so that each runs as printed: the sources as the user gave them, and every
//! argument quoted for a POSIX shell where it needs it (docs/report.md, "Next steps").
//!
//! Pure: strings in, a command line out. It runs nothing and does not check that a file it
//! names exists (the command before it in the same output writes it).

use std::borrow::Cow;

/// `arg` as one word of a POSIX shell: as it is when it holds only characters no shell treats
/// specially, else in single quotes (a `'` inside written `'\''`).
pub fn quote(arg: &str) -> Cow<'_, str> {
    let plain = !arg.is_empty()
        && arg.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '-' | '_' | '.' | '/' | ':' | ',' | '@' | '+' | '=' | '%')
        });
    if plain {
        Cow::Borrowed(arg)
    } else {
        Cow::Owned(format!("'{}'", arg.replace('\'', r"'\''")))
    }
}

/// `--source S` for each source, in the order given.
pub fn source_flags(sources: &[String]) -> String {
    sources
        .iter()
        .map(|s| format!("--source {}", quote(s)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The user's range flags (`--since 7d`, `--until …`), each word quoted, for the commands that
/// read the same data as the output that prints them (plans and replays); empty when none.
pub fn range_words(range: &[String]) -> String {
    range
        .iter()
        .map(|w| quote(w).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The words joined by one space, empty ones (no sources) left out.
fn words(w: &[&str]) -> String {
    w.iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

/// `tessera mig plan --source … [--since …] -o OUT`: the MIG plan of the range the output read
/// (the sources' last 7 days when `range` is empty).
pub fn mig_plan(sources: &[String], range: &[String], out: &str) -> String {
    words(&[
        "tessera mig plan",
        &source_flags(sources),
        &range_words(range),
        "-o",
        &quote(out),
    ])
}

/// `tessera mig apply PLAN --config CONFIG`: the dry run of a plan's config on the node it runs
/// on (the steps; `--yes` changes the node).
pub fn mig_apply(plan: &str, config: &str) -> String {
    words(&[
        "tessera mig apply",
        &quote(plan),
        "--config",
        &quote(config),
    ])
}

/// `tessera analyze --source … --plan-out OUT`: the consolidation moves as a plan file.
pub fn consolidation_plan(sources: &[String], range: &[String], out: &str) -> String {
    words(&[
        "tessera analyze",
        &source_flags(sources),
        &range_words(range),
        "--plan-out",
        &quote(out),
    ])
}

/// `tessera replay --plan PLAN --source …`: the plan replayed on the sources' last 7 days.
pub fn replay(plan: &str, sources: &[String], range: &[String]) -> String {
    words(&[
        "tessera replay --plan",
        &quote(plan),
        &source_flags(sources),
        &range_words(range),
    ])
}

/// `tessera share VERB --plan PLAN --source …` (`plan`: the configs and why; `apply`: its dry
/// run against the cluster).
pub fn share(verb: &str, plan: &str, sources: &[String]) -> String {
    words(&[
        "tessera share",
        verb,
        "--plan",
        &quote(plan),
        &source_flags(sources),
    ])
}

/// `tessera scale-down --source … --namespace NS`: the dry run of scaling the namespace's idle
/// workloads to zero (`--yes` scales them).
pub fn scale_down(sources: &[String], namespace: &str) -> String {
    words(&[
        "tessera scale-down",
        &source_flags(sources),
        "--namespace",
        &quote(namespace),
    ])
}

/// `tessera notify --source … --dry-run`: the alerts the findings make, sent nowhere.
pub fn notify_dry_run(sources: &[String]) -> String {
    words(&["tessera notify", &source_flags(sources), "--dry-run"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_stay_and_others_are_single_quoted() {
        assert_eq!(
            quote("history:/var/lib/tessera/history"),
            "history:/var/lib/tessera/history"
        );
        assert_eq!(
            quote("prometheus:http://p:9090"),
            "prometheus:http://p:9090"
        );
        assert_eq!(quote("history:/data/my fleet"), "'history:/data/my fleet'");
        assert_eq!(quote("history:/x/*"), "'history:/x/*'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn every_source_is_given() {
        let s = vec!["history:/a".to_string(), "csv:/b c.csv".to_string()];
        assert_eq!(
            mig_plan(&s, &[], "plan.yaml"),
            "tessera mig plan --source history:/a --source 'csv:/b c.csv' -o plan.yaml"
        );
        assert_eq!(
            replay("plan.yaml", &s, &[]),
            "tessera replay --plan plan.yaml --source history:/a --source 'csv:/b c.csv'"
        );
        assert_eq!(
            mig_apply("plan.yaml", "day"),
            "tessera mig apply plan.yaml --config day"
        );
        // No source (a report built without one): no empty word.
        assert_eq!(mig_plan(&[], &[], "p.yaml"), "tessera mig plan -o p.yaml");
        // The user's range, quoted where it needs it, after the sources.
        let range = ["--since".to_string(), "2026-11-02 00:00".to_string()];
        assert_eq!(
            consolidation_plan(&s[..1], &range, "c.yaml"),
            "tessera analyze --source history:/a --since '2026-11-02 00:00' --plan-out c.yaml"
        );
    }
}
