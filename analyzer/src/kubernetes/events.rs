//! The audit trail tessera leaves in the cluster: one Kubernetes Event (`events.k8s.io/v1`)
//! per change it makes or puts back — a node labelled or relabelled, a workload scaled down or
//! back — regarding the changed object, so `kubectl describe node N` / `kubectl get events`
//! show who changed what and why (reporting controller `tessera.dev/tessera`, the instance is
//! the host tessera ran on); the same change as a line of the local audit log ([`super::audit`]).
//!
//! An Event that cannot be written is a warning on stderr, never a failed change: the change
//! is made and journaled already. What it does not do: aggregate (`series`) or read Events.

use std::io::Write;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

use super::{Kube, KubeError};

pub use super::audit::{CONTROLLER, Change, Regarding};

/// The Event of `change` (truncated to the API server's 1 kB note limit).
pub fn event(change: &Change<'_>, instance: &str) -> Event {
    let r = &change.regarding;
    let mut note = change.note.clone();
    if note.len() > 1024 {
        let mut end = 1021;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    Event {
        metadata: ObjectMeta {
            generate_name: Some("tessera-".into()),
            namespace: Some(r.namespace.clone().unwrap_or_else(|| "default".into())),
            ..ObjectMeta::default()
        },
        action: Some(change.action.to_string()),
        reason: Some(change.reason.to_string()),
        note: Some(note),
        type_: Some(if change.warning { "Warning" } else { "Normal" }.into()),
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        reporting_controller: Some(CONTROLLER.into()),
        reporting_instance: Some(instance.chars().take(128).collect()),
        regarding: Some(ObjectReference {
            api_version: Some(r.api_version.clone()),
            kind: Some(r.kind.clone()),
            namespace: r.namespace.clone(),
            name: Some(r.name.clone()),
            uid: r.uid.clone(),
            ..ObjectReference::default()
        }),
        ..Event::default()
    }
}

/// This host's name (the Events' reporting instance).
pub fn instance() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "tessera".into())
}

/// Write the line of `change` to the local audit log, then its Event; an error names what
/// could not be written (the log line is written even when the Event cannot be).
pub fn record(k: &Kube, change: &Change<'_>) -> Result<(), KubeError> {
    let host = instance();
    let logged = match k.audit_log() {
        Some(path) => super::audit::append(path, change, crate::evidence::now_ms(), &host)
            .map_err(|e| format!("the audit log {}: {e}", path.display())),
        None => Err(
            "no audit log: neither $XDG_STATE_HOME nor $HOME is set (give --audit-log FILE)"
                .to_string(),
        ),
    };
    let ev = event(change, &host);
    let ns = ev.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(k.client(), &ns);
    let sent = k.call(
        &format!(
            "create Event about {} {}",
            change.regarding.kind, change.regarding.name
        ),
        api.create(&PostParams::default(), &ev),
    );
    match (logged, sent) {
        (Ok(()), Ok(_)) => Ok(()),
        (Err(l), Ok(_)) => Err(KubeError::Other(l)),
        (Ok(()), Err(e)) => Err(e),
        (Err(l), Err(e)) => Err(KubeError::Other(format!("{l}; {e}"))),
    }
}

/// A failure to write an Event, said on `err` as a warning (the change is made already).
pub fn warn(result: Result<(), KubeError>, err: &mut dyn Write) {
    if let Err(e) = result {
        let _ = writeln!(
            err,
            "tessera: warning: the change was made, but its audit trail could not be written: {e}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_names_the_object_the_controller_and_fits_the_note_limit() {
        let e = event(
            &Change {
                regarding: Regarding::node("gpu-1"),
                reason: "SharingConfigLabelled",
                action: "Label",
                note: "é".repeat(700),
                warning: false,
            },
            "host",
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(e.reporting_controller.as_deref(), Some(CONTROLLER));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        let r = e.regarding.unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.name.as_deref()),
            (Some("Node"), Some("gpu-1"))
        );
        let note = e.note.unwrap();
        assert!(
            note.len() <= 1024 && note.ends_with("..."),
            "{}",
            note.len()
        );
    }
}
