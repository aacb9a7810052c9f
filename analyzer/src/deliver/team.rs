//! A team's part of the report, for the mail to its owner (`--mail-owners`): the report's fleet
//! context (the period, the fleet, nodes and models, the charts, the trend, the data-quality
//! notes) with only the rows of the owner's teams — their team-table rows, the actions whose
//! workloads are theirs (`Action::teams`), their idle-loaded models and allocated-but-unused
//! devices, the consolidation steps of their actions — and nothing that names another team's
//! workloads (the MIG section, the changes' per-team comparisons, the next steps and the
//! out-of-sample replays are left out). Pure: it selects rows of a [`Report`] already made; the
//! renderers lay it out as they lay out the whole report.
//!
//! What it does not do: render, send, or decide who owns what (`crate::owners`).

use crate::output::escape::printable;
use crate::report::Report;

/// The report cut to the rows of `teams` (see the module doc).
pub fn report(r: &Report, teams: &[String]) -> Report {
    let mine = |t: &str| teams.iter().any(|x| x == t);
    let mine_opt = |t: &Option<String>| t.as_deref().is_some_and(mine);
    let mut out = r.clone();
    out.teams.rows.retain(|row| mine(&row.team));
    out.teams.nobody = None;
    out.actions.retain(|a| a.teams.iter().any(|t| mine(t)));
    for (i, a) in out.actions.iter_mut().enumerate() {
        a.rank = i + 1;
    }
    let findings: Vec<&String> = out.actions.iter().flat_map(|a| &a.findings).collect();
    out.idle_models.retain(|m| mine_opt(&m.team));
    out.allocated_unused.retain(|d| mine_opt(&d.team));
    out.consolidation
        .retain(|c| findings.iter().any(|f| **f == c.finding_id));
    out.mig = None;
    out.changes = None;
    out.next_steps.clear();
    out.out_of_sample = None;
    out.plans.clear();
    out
}

/// The teams as the mail names them: "serving", "serving and research".
pub fn names(teams: &[String]) -> String {
    let t: Vec<String> = teams.iter().map(|t| printable(t).into_owned()).collect();
    match t.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The subject of a team's mail: "tessera GPU report for serving, `<period>`: `<its saving>`".
pub fn subject(team_report: &Report, teams: &[String]) -> String {
    printable(&format!(
        "tessera GPU report for {}, {}: {}",
        names(teams),
        super::content::period(team_report),
        super::content::headline_saving(team_report)
    ))
    .into_owned()
}

/// The plain-text alternative of a team's mail: what it is, the link to the whole report, then
/// the team's part in Markdown.
pub fn plain_text(team_report: &Report, teams: &[String], link: Option<&str>) -> String {
    let head = format!(
        "This is the part of the weekly GPU report for {}: its rows, its actions and its findings \
         (the fleet's figures for context).\n\n",
        names(teams)
    );
    format!("{head}{}", super::plain_text(team_report, link))
}
