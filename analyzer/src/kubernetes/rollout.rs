//! The one frame of every node-label rollout (`mig apply --via mig-manager`, `share apply`):
//! the forward pass changes nodes and records each node it touched; then, **on every way out**
//! — done, a node that failed or timed out, another client's label, an API error, a stop
//! signal — the frame says why it stopped and which nodes were not started, has every touched
//! node that is not settled put back, prints what could not be put back as commands (exit 3),
//! and prunes the configs no node names, keeping those a label write that may still land names.
//! The commands keep only their decisions and success conditions ([`Rollout`]).
//!
//! Exit codes: 0 every node reached its config; 2 the rollout stopped (with every node put
//! back that could be); 3 something could not be put back or confirmed. What it does not do:
//! write anything itself (the label writes are [`super::labels::write`], the ConfigMap writes
//! [`super::configmap`]), or decide what a node's success is.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the frame needs to know of one node a rollout touched.
pub trait Touched {
    /// The node's name.
    fn node(&self) -> &str;
    /// The config a label write of this node may still set (every answer lost): kept from
    /// pruning.
    fn uncertain_config(&self) -> Option<&str>;
}

/// A command's rollout: its forward pass, its restore and its pruning.
pub trait Rollout {
    type Touched: Touched;
    type Error: std::fmt::Display;
    /// Change the nodes in order, pushing each node touched (before its first write) to
    /// `touched`: `Ok(None)` when every node reached its config, `Ok(Some(why))` when the
    /// rollout stopped (a node did not get there, was refused, or relabelled by another client;
    /// already said on `err`), `Err` on an API error or a stop signal.
    fn forward(
        &mut self,
        touched: &mut Vec<Self::Touched>,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Option<String>, Self::Error>;
    /// Put back every touched node that is not settled (`why`: why the rollout stopped); a stop
    /// signal does not cut it short. Returns the commands for what could not be put back or
    /// confirmed.
    fn restore(
        &mut self,
        touched: &mut [Self::Touched],
        why: &str,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Vec<String>, Self::Error>;
    /// Remove the configs of `prunable` that no node names (a failure is a warning).
    fn prune(
        &mut self,
        prunable: &BTreeSet<String>,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<(), Self::Error>;
    /// An output that cannot be written, as the command's error.
    fn io(e: std::io::Error) -> Self::Error;
}

/// Whether a stop signal (SIGTERM, SIGINT) asked the rollout to stop.
pub fn stopped(flag: &Option<Arc<AtomicBool>>) -> bool {
    flag.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
}

/// Run `r` over the nodes `todo` (their names, in order); see the module docs. Returns the exit
/// code.
pub fn run<R: Rollout>(
    r: &mut R,
    todo: &[String],
    prunable: &BTreeSet<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, R::Error> {
    let mut touched: Vec<R::Touched> = Vec::new();
    let outcome = r.forward(&mut touched, out, err);
    let (mut code, why) = match &outcome {
        Ok(None) => (0, String::new()),
        Ok(Some(why)) => {
            writeln!(err, "tessera: {why}").map_err(R::io)?;
            (2, why.clone())
        }
        Err(e) => {
            writeln!(err, "tessera: {e}").map_err(R::io)?;
            (2, e.to_string())
        }
    };
    let left: Vec<&str> = todo
        .iter()
        .map(String::as_str)
        .filter(|n| !touched.iter().any(|t| t.node() == *n))
        .collect();
    if code != 0 && !left.is_empty() {
        writeln!(err, "tessera: stopped; not started: {}", left.join(", ")).map_err(R::io)?;
    }
    let commands = r.restore(&mut touched, &why, out, err)?;
    if !commands.is_empty() {
        code = 3;
        writeln!(
            err,
            "tessera: not everything tessera changed could be put back or confirmed; run:\n{}",
            commands
                .iter()
                .map(|c| format!("  {c}"))
                .collect::<Vec<_>>()
                .join("\n")
        )
        .map_err(R::io)?;
    }
    // A label that may still land keeps the config it names.
    let prunable: BTreeSet<String> = prunable
        .iter()
        .filter(|k| {
            !touched
                .iter()
                .any(|t| t.uncertain_config() == Some(k.as_str()))
        })
        .cloned()
        .collect();
    r.prune(&prunable, out, err)?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct T {
        node: String,
        uncertain: Option<String>,
        settled: bool,
    }

    impl Touched for T {
        fn node(&self) -> &str {
            &self.node
        }
        fn uncertain_config(&self) -> Option<&str> {
            self.uncertain.as_deref()
        }
    }

    /// Touches `touch` nodes, the last one with an unknown write, then fails; restores what is
    /// not settled, failing for `broken`.
    struct Fake {
        touch: usize,
        fail: bool,
        broken: Option<&'static str>,
        restored: Vec<String>,
        pruned: Option<BTreeSet<String>>,
    }

    impl Rollout for Fake {
        type Touched = T;
        type Error = String;
        fn forward(
            &mut self,
            touched: &mut Vec<T>,
            _: &mut dyn Write,
            _: &mut dyn Write,
        ) -> Result<Option<String>, String> {
            for i in 0..self.touch {
                touched.push(T {
                    node: format!("n{i}"),
                    uncertain: (self.fail && i + 1 == self.touch).then(|| format!("cfg-{i}")),
                    settled: !self.fail || i + 1 < self.touch,
                });
            }
            if self.fail {
                Err("label node: no answer".into())
            } else {
                Ok(None)
            }
        }
        fn restore(
            &mut self,
            touched: &mut [T],
            _: &str,
            _: &mut dyn Write,
            _: &mut dyn Write,
        ) -> Result<Vec<String>, String> {
            let mut commands = Vec::new();
            for t in touched.iter().filter(|t| !t.settled) {
                self.restored.push(t.node.clone());
                if self.broken == Some(t.node.as_str()) {
                    commands.push(format!("kubectl label node {} x-", t.node));
                }
            }
            Ok(commands)
        }
        fn prune(
            &mut self,
            prunable: &BTreeSet<String>,
            _: &mut dyn Write,
            _: &mut dyn Write,
        ) -> Result<(), String> {
            self.pruned = Some(prunable.clone());
            Ok(())
        }
        fn io(e: std::io::Error) -> String {
            e.to_string()
        }
    }

    fn todo() -> Vec<String> {
        (0..4).map(|i| format!("n{i}")).collect()
    }

    #[test]
    fn every_way_out_restores_says_what_was_not_started_and_keeps_uncertain_configs() {
        let prunable: BTreeSet<String> = ["cfg-0", "cfg-1", "old"].map(String::from).into();
        let mut f = Fake {
            touch: 2,
            fail: true,
            broken: Some("n1"),
            restored: Vec::new(),
            pruned: None,
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&mut f, &todo(), &prunable, &mut out, &mut err).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert_eq!(code, 3, "{err}");
        assert!(err.contains("tessera: label node: no answer"), "{err}");
        assert!(err.contains("not started: n2, n3"), "{err}");
        assert!(err.contains("run:\n  kubectl label node n1 x-"), "{err}");
        assert_eq!(f.restored, ["n1"]);
        assert_eq!(
            f.pruned.unwrap(),
            ["cfg-0", "old"].map(String::from).into(),
            "cfg-1 may still be named by a late label"
        );

        let mut f = Fake {
            touch: 4,
            fail: false,
            broken: None,
            restored: Vec::new(),
            pruned: None,
        };
        let mut err = Vec::new();
        let code = run(&mut f, &todo(), &prunable, &mut Vec::new(), &mut err).unwrap();
        assert_eq!(code, 0);
        assert!(err.is_empty());
        assert_eq!(f.pruned.unwrap(), prunable);
    }
}
