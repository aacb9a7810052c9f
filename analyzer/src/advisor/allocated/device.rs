//! A held device's columns and entity for the allocated-but-unused judge: reads the columns of
//! a device's rows that `judge` walks ([`DeviceColumns`], in the order they are checked) and
//! makes the device as held by one owner, named by its first row ([`new_device`]).
//!
//! It judges nothing (that is the parent module's `judge`) and reads no frame but the device's.

use super::{DeviceRows, HeldDevice, str_col};
use crate::advisor::{AdvisorError, Entity};
use crate::frames::columns;

/// A device's holder: namespace, pod and Slurm job.
pub(super) type OwnerRef<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>);

/// The columns of a device's rows that [`super::judge`] reads: the device's names, its holders, time,
/// interval and holder count, memory and activity; in MIG mode its instance, uuid and profile,
/// else its model.
pub(super) struct DeviceColumns {
    pub(super) node: columns::Strs,
    pub(super) uuid: columns::Strs,
    pub(super) ns: columns::Strs,
    pub(super) pod: columns::Strs,
    pub(super) job: columns::Strs,
    pub(super) gpu: columns::I64s,
    pub(super) t: columns::I64s,
    pub(super) iv: columns::I64s,
    pub(super) holders: columns::I64s,
    pub(super) mem: columns::F64s,
    pub(super) act: columns::F64s,
    pub(super) gi: Option<columns::I64s>,
    pub(super) mig_uuid: Option<columns::Strs>,
    pub(super) profile: Option<columns::Strs>,
    pub(super) model: Option<columns::Strs>,
}

/// Reads [`DeviceColumns`] from `d`'s frame.
pub(super) fn device_columns(d: &DeviceRows) -> Result<DeviceColumns, AdvisorError> {
    let df = d.df;
    let (node, uuid) = (str_col(df, "node")?, str_col(df, "uuid")?);
    let (ns, pod, job) = (
        str_col(df, "holder_namespace")?,
        str_col(df, "holder_pod")?,
        str_col(df, "holder_slurm_job_id")?,
    );
    let (gpu, t, iv, holders) = (
        columns::i64s(df, "gpu")?,
        columns::i64s(df, "t")?,
        columns::i64s(df, "interval_ms")?,
        columns::i64s(df, "holders")?,
    );
    let (mem, act) = (columns::f64s(df, "mem")?, columns::f64s(df, "act")?);
    let (gi, mig_uuid, profile, model) = if d.kind == "mig" {
        (
            Some(columns::i64s(df, "gpu_instance")?),
            Some(str_col(df, "mig_uuid")?),
            Some(str_col(df, "profile")?),
            None,
        )
    } else {
        (None, None, None, Some(str_col(df, "model")?))
    };
    Ok(DeviceColumns {
        node,
        uuid,
        ns,
        pod,
        job,
        gpu,
        t,
        iv,
        holders,
        mem,
        act,
        gi,
        mig_uuid,
        profile,
        model,
    })
}

/// The device of `d` (named by its first row) as held by `o`, nothing counted yet; `gi0` its
/// MIG instance, `share` its share of the GPU.
pub(super) fn new_device(
    d: &DeviceRows,
    c: &DeviceColumns,
    (gi0, share): (Option<i64>, f64),
    o: OwnerRef,
) -> HeldDevice {
    let first = d.rows[0];
    let mig = d.kind == "mig";
    let mut entity = Entity {
        kind: d.kind.into(),
        node: Some(c.node.get(first).unwrap_or("").to_string()),
        gpu: c.gpu.get(first).map(|g| g as u32),
        uuid: Some(c.uuid.get(first).unwrap_or("").to_string()),
        namespace: o.0.map(str::to_string),
        pod: o.1.map(str::to_string),
        slurm_job: o.2.map(str::to_string),
        ..Entity::default()
    };
    if mig {
        entity.mig_uuid = c
            .mig_uuid
            .as_ref()
            .and_then(|m| m.get(first))
            .map(str::to_string);
        entity.gpu_instance = gi0.map(|g| g as u32);
        entity.model = c
            .profile
            .as_ref()
            .and_then(|p| p.get(first))
            .map(str::to_string);
    } else {
        entity.model = c
            .model
            .as_ref()
            .and_then(|m| m.get(first))
            .map(str::to_string);
    }
    HeldDevice {
        entity,
        share,
        held_ms: 0,
        act_ms: 0.0,
        act_known_ms: 0,
        spans: Vec::new(),
    }
}
