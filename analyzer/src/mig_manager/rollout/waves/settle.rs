//! How the nodes of one wave ended, said and recorded: success (uncordoned when tessera
//! cordoned), a label another client set (left as it is, the rollout stops), a failure or a
//! timeout (rolled back by the restore); and the event a label change records.
//!
//! It does not change labels or wait (the parent module does).

use std::collections::BTreeMap;
use std::io::Write;

use super::super::super::render::NodeLayout;
use super::super::super::{CONFIG_LABEL, Cluster, NodeView};
use super::super::{Request, RolloutError, io};
use super::{Active, Ending, TouchedNode, describe, secs};
use crate::kubernetes::events;

/// Says how each node of the wave ended (`endings`, of the `active` ones) and marks its
/// [`TouchedNode`]; the first node that stops the rollout is kept in `stopped`.
pub(super) fn settle_endings(
    c: &mut dyn Cluster,
    r: &Request,
    (endings, active): (BTreeMap<String, Ending>, &BTreeMap<String, Active>),
    touched: &mut [TouchedNode],
    stopped: &mut Option<String>,
    (out, err): (&mut dyn Write, &mut dyn Write),
) -> Result<(), RolloutError> {
    for (name, ending) in endings {
        let t = touched
            .iter_mut()
            .find(|t| t.node.name == name)
            .expect("an active node was touched");
        match &ending {
            Ending::Success => {
                writeln!(
                    out,
                    "node {name}: success: {} applied in {}",
                    t.layout.config,
                    secs(active[&name].started.elapsed())
                )
                .map_err(io)?;
                t.settled = true;
                if t.cordoned {
                    c.set_unschedulable(&name, false)?;
                    t.cordoned = false;
                    writeln!(out, "node {name}: uncordoned").map_err(io)?;
                }
            }
            Ending::Replaced { .. } => {
                // Another actor owns the label now: leave it as they left it.
                writeln!(
                    err,
                    "tessera: node {name}: {} while tessera waited for {}; stopping, the node's label is left as it is",
                    describe(&ending, r.timeout),
                    t.layout.config
                )
                .map_err(io)?;
                t.labelled = false;
                stopped.get_or_insert(format!("node {name}: {}", describe(&ending, r.timeout)));
            }
            Ending::Failed | Ending::TimedOut(_) => {
                t.ending = Some(describe(&ending, r.timeout));
                writeln!(
                    err,
                    "tessera: node {name}: {} with {CONFIG_LABEL}={}; rolling back",
                    describe(&ending, r.timeout),
                    t.layout.config
                )
                .map_err(io)?;
                stopped.get_or_insert(format!("node {name}: {}", describe(&ending, r.timeout)));
            }
        }
    }
    Ok(())
}

/// Records `node`'s label change to `layout`'s config as a Kubernetes event; a failure to
/// record is only warned about.
pub(super) fn announce_label(
    c: &mut dyn Cluster,
    r: &Request,
    node: &NodeView,
    layout: &NodeLayout,
    err: &mut dyn Write,
) {
    let change = events::Change {
        regarding: events::Regarding::node(&node.name),
        reason: "MigConfigLabelled",
        action: "Label",
        note: format!(
            "tessera mig apply --via mig-manager: {CONFIG_LABEL} {} -> {} ({})",
            node.config().unwrap_or("(unset)"),
            layout.config,
            r.source
        ),
        warning: false,
    };
    events::warn(c.event(&change), err);
}
