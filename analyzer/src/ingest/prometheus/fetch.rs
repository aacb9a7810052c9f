//! Every node group of the `prometheus:` source fetched, `--prometheus.concurrency` at once on
//! scoped threads with a client each; a group the server refuses for a series limit is fetched
//! again as two halves. Each partition's rows are settled (kept or spilled) as it completes.
//!
//! How one group is read is `fetch_range` (`query_range`) or `fetch_remote` (remote read).

use std::path::Path;

use super::assembly::{PartTables, Settled, settle};
use super::client::Client;
use super::discovery::Group;
use super::fetch_range::fetch_group;
use super::fetch_remote::fetch_group_remote;
use super::plan::{FetchErr, Plan, Tallies};
use crate::ingest::IngestError;

/// Fetches every group, `concurrency` at once, each on its own thread with its own client;
/// returns the partitions in node order and the counts. The first error stops the others
/// (after their current group) and is returned. `files`: the spill files other reads wrote
/// before (this read's are numbered after them).
pub(super) fn fetch_all(
    plan: &Plan,
    client: &Client,
    groups: Vec<Group>,
    concurrency: usize,
    spill: Option<&Path>,
    files: usize,
) -> Result<(Vec<(String, Settled)>, Tallies), IngestError> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let written = AtomicUsize::new(files);
    type Done = Result<Vec<(String, Settled)>, IngestError>;
    let results: Mutex<Vec<Option<Done>>> = Mutex::new((0..groups.len()).map(|_| None).collect());
    let tallies: Mutex<Tallies> = Mutex::new(Tallies::default());
    let workers = concurrency.max(1).min(groups.len().max(1));
    std::thread::scope(|sc| {
        for _ in 0..workers {
            sc.spawn(|| {
                let mut client = client.clone();
                client.requests = 0;
                client.bytes = 0;
                let mut t = Tallies::default();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= groups.len() || failed.load(Ordering::SeqCst) {
                        break;
                    }
                    let r = fetch_split(plan, &mut client, &groups[i], &mut t).and_then(|parts| {
                        parts
                            .into_iter()
                            .map(|(key, tables)| {
                                let n = written.fetch_add(1, Ordering::SeqCst);
                                Ok((key, settle(tables, spill, n)?))
                            })
                            .collect()
                    });
                    if r.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    results.lock().expect("results")[i] = Some(r);
                }
                t.requests += client.requests;
                t.bytes += client.bytes;
                tallies.lock().expect("tallies").merge(t);
            });
        }
    });
    let mut out = Vec::new();
    for r in results.into_inner().expect("results").into_iter().flatten() {
        out.extend(r?);
    }
    Ok((out, tallies.into_inner().expect("tallies")))
}

/// Fetches one group; where the server refuses it for a limit that fewer nodes may ease, the
/// two halves of the group instead (each its own partition), named in a warning.
fn fetch_split(
    plan: &Plan,
    client: &mut Client,
    group: &Group,
    t: &mut Tallies,
) -> Result<Vec<(String, PartTables)>, IngestError> {
    let fetched = if plan.remote {
        fetch_group_remote(plan, client, group, t)
    } else {
        fetch_group(plan, client, group, t)
    };
    match fetched {
        Ok(tables) => Ok(vec![(group.key(), tables)]),
        Err(FetchErr::Fatal(e)) => Err(e),
        Err(FetchErr::Nodes(message)) => {
            t.node_splits.get_or_insert((0, message)).0 += 1;
            let (a, b) = group.halves();
            let mut out = fetch_split(plan, client, &a, t)?;
            out.extend(fetch_split(plan, client, &b, t)?);
            Ok(out)
        }
    }
}
