//! Each team's GPU demand per UTC hour and GPU model in one partition ([`TeamDemand`]): the
//! whole GPUs a namespace held by allocation (`holders` > 0, `holder_namespace`) at some point of
//! the hour — what a queue's quota admits — added up across partitions with
//! [`TeamDemand::merge`] (partitions hold disjoint GPUs).
//!
//! A GPU in MIG mode (`mig_enabled`, or MIG instance rows) is left out (a queue's quota of MIG slices is per MIG profile, which this
//! plan does not make); the teams that held one are named so that the plan can say so. Rows
//! without holders are unknown allocation, never "held by nobody".
//!
//! A GPU a Slurm job holds (`holder_slurm_job_id`, no namespace) counts for the job's account
//! when the caller gives the jobs' accounts (`sacct`, `queue plan --slurm-accounts`), else for
//! no team.
//!
//! This module does not judge demand (that is `plan`) or ask `sacct` (the command does).

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::*;

use super::QueueError;
use crate::advisor::offpeak::UNKNOWN_MODEL;
use crate::frames::Frames;
use crate::frames::columns::ts_ms;

const HOUR_MS: i64 = 3_600_000;

/// GPUs held per team, model and UTC hour.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TeamDemand {
    /// (team, model) → hour index since the epoch → GPUs held at some point of the hour.
    pub held: BTreeMap<(String, String), BTreeMap<i64, u32>>,
    /// Whether any row said who holds its GPU (else allocation is unknown everywhere).
    pub holders_known: bool,
    /// Teams that held GPUs in MIG mode (left out).
    pub mig_teams: BTreeSet<String>,
}

impl TeamDemand {
    pub fn merge(&mut self, other: TeamDemand) {
        for (k, hours) in other.held {
            let e = self.held.entry(k).or_default();
            for (h, n) in hours {
                *e.entry(h).or_default() += n;
            }
        }
        self.holders_known |= other.holders_known;
        self.mig_teams.extend(other.mig_teams);
    }
}

/// `(node, uuid, has_instances)` of the GPUs with MIG instance rows: in MIG mode even where
/// their own rows lack `mig_enabled` (sources that do not export it).
fn instances(frames: &Frames) -> Result<LazyFrame, QueueError> {
    let mut mig_rows = frames.mig.clone();
    Ok(if mig_rows.collect_schema()?.get("uuid").is_some() {
        mig_rows
            .select([col("node"), col("uuid")])
            .unique(None, UniqueKeepStrategy::Any)
            .with_column(lit(true).alias("has_instances"))
    } else {
        DataFrame::empty_with_schema(&Schema::from_iter([
            Field::new("node".into(), DataType::String),
            Field::new("uuid".into(), DataType::String),
            Field::new("has_instances".into(), DataType::Boolean),
        ]))
        .lazy()
    })
}

/// `rows` with what names a row's team, and that expression: the holder's namespace, else the
/// account of the Slurm job holding the GPU (`accounts`).
fn with_teams(
    mut rows: LazyFrame,
    schema: &Schema,
    accounts: &BTreeMap<String, String>,
) -> Result<(LazyFrame, Expr), QueueError> {
    let mut team = col("holder_namespace").cast(DataType::String);
    if !accounts.is_empty() && schema.get("holder_slurm_job_id").is_some() {
        let (jobs, names): (Vec<&str>, Vec<&str>) = accounts
            .iter()
            .map(|(j, a)| (j.as_str(), a.as_str()))
            .unzip();
        let map = df!("_job" => jobs, "_account" => names)?.lazy();
        rows = rows
            .with_column(
                col("holder_slurm_job_id")
                    .cast(DataType::String)
                    .alias("_job"),
            )
            .join(
                map,
                [col("_job")],
                [col("_job")],
                JoinArgs::new(JoinType::Left),
            );
        team = coalesce(&[team, col("_account")]);
    }
    Ok((rows, team))
}

/// One partition's demand; `accounts`: Slurm job id → account (the team of the GPUs the job
/// holds).
pub fn team_demand(
    frames: &Frames,
    accounts: &BTreeMap<String, String>,
) -> Result<TeamDemand, QueueError> {
    let mut gpu = frames.gpu.clone();
    let schema = gpu.collect_schema()?;
    if schema.get("holders").is_none() || schema.get("holder_namespace").is_none() {
        return Ok(TeamDemand::default());
    }
    let mig = if schema.get("mig_enabled").is_some() {
        col("mig_enabled")
            .cast(DataType::Boolean)
            .fill_null(lit(false))
    } else {
        lit(false)
    };
    // ts > 0, so truncation is floor: a row ending at ts is in the hour of ts − 1 ms.
    let hour =
        ((ts_ms() - lit(1i64)).cast(DataType::Float64) / lit(HOUR_MS as f64)).cast(DataType::Int64);
    let rows = gpu.join(
        instances(frames)?,
        [col("node"), col("uuid")],
        [col("node"), col("uuid")],
        JoinArgs::new(JoinType::Left),
    );
    let (rows, team) = with_teams(rows, &schema, accounts)?;
    let rows = rows
        .select([
            col("node"),
            col("uuid"),
            col("model").cast(DataType::String),
            hour.alias("hour"),
            col("holders").cast(DataType::Int64).alias("holders"),
            team.alias("team"),
            mig.or(col("has_instances").fill_null(lit(false)))
                .alias("mig"),
        ])
        // A GPU's model: its first known one, in every row (as the off-peak profile counts it).
        .with_column(
            col("model")
                .drop_nulls()
                .first()
                .over([col("node"), col("uuid")])?
                .fill_null(lit(UNKNOWN_MODEL))
                .alias("model"),
        );
    let known = rows
        .clone()
        .select([col("holders").is_not_null().any(true).alias("known")])
        .collect()?;
    let held = rows
        .filter(col("holders").gt(lit(0i64)).and(col("team").is_not_null()))
        .group_by([col("team"), col("model"), col("hour"), col("mig")])
        .agg([(col("node") + lit("/") + col("uuid"))
            .n_unique()
            .cast(DataType::UInt32)
            .alias("gpus")])
        .collect()?;
    let mut out = TeamDemand {
        holders_known: known.column("known")?.bool()?.get(0).unwrap_or(false),
        ..TeamDemand::default()
    };
    let (team, model) = (held.column("team")?.str()?, held.column("model")?.str()?);
    let (hour, mig, gpus) = (
        held.column("hour")?.i64()?,
        held.column("mig")?.bool()?,
        held.column("gpus")?.u32()?,
    );
    for i in 0..held.height() {
        let (Some(t), Some(m), Some(h), Some(n)) =
            (team.get(i), model.get(i), hour.get(i), gpus.get(i))
        else {
            continue;
        };
        if mig.get(i).unwrap_or(false) {
            out.mig_teams.insert(t.to_string());
            continue;
        }
        *out.held
            .entry((t.to_string(), m.to_string()))
            .or_default()
            .entry(h)
            .or_default() += n;
    }
    Ok(out)
}
