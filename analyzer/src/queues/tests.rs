use std::collections::BTreeMap;

use super::*;
use crate::advisor::offpeak::FreeGpus;

const M: &str = "H100";

/// 168 observed hours (a week from Monday 00:00 UTC) of 8 GPUs of one model, `free(h)` free.
fn fleet(free: impl Fn(i64) -> u32) -> (FreeGpus, Profile) {
    let monday = 1_762_128_000_000i64 / 3_600_000; // 2025-11-03T00:00:00Z
    let per_hour = (0..168)
        .map(|i| (monday + i, BTreeMap::from([(M.to_string(), free(i))])))
        .collect();
    let f = FreeGpus::fully_observed(per_hour, BTreeMap::from([(M.to_string(), 8)]));
    let params = crate::advisor::Params {
        offpeak: OffpeakParams {
            min_gpus: crate::advisor::offpeak::MinGpus::Count(2),
            ..OffpeakParams::default()
        },
        ..crate::advisor::Params::default()
    };
    let profile = crate::advisor::offpeak::profile(&f, &params);
    (f, profile)
}

fn demand(f: &FreeGpus, teams: &[(&str, &dyn Fn(i64) -> u32)]) -> TeamDemand {
    let first = *f.cover.keys().next().unwrap();
    let mut d = TeamDemand {
        holders_known: true,
        ..TeamDemand::default()
    };
    for (team, held) in teams {
        let hours = f
            .cover
            .keys()
            .map(|&h| (h, held(h - first)))
            .filter(|x| x.1 > 0);
        d.held
            .insert((team.to_string(), M.to_string()), hours.collect());
    }
    d
}

#[test]
fn serving_is_guaranteed_its_always_on_demand_and_jobs_borrow() {
    // Nights (18:00-09:00) 6 GPUs free; serving holds 2 always, research 4 by day.
    let day = |i: i64| (9..18).contains(&(i % 24));
    let (f, profile) = fleet(|i| if day(i) { 2 } else { 6 });
    let d = demand(
        &f,
        &[
            ("serving", &|_| 2),
            ("research", &|i| if day(i) { 4 } else { 0 }),
        ],
    );
    let o = plan(&d, &f, &profile, &QueueParams::default()).unwrap();
    let team = |n: &str| o.plan.teams.iter().find(|t| t.team == n).unwrap();
    let s = team("serving");
    assert_eq!(s.class, DemandClass::Serving);
    assert_eq!((s.quotas[0].guarantee, s.quotas[0].limit), (2, 2));
    let r = team("research");
    assert_eq!(r.class, DemandClass::JobLike);
    assert_eq!((r.quotas[0].guarantee, r.quotas[0].limit), (0, 4));
    assert_eq!(r.quotas[0].measured.as_ref().unwrap().held_share, 0.375);
    let w = o.plan.offpeak.as_ref().unwrap();
    assert_eq!(
        w.floor,
        vec![ModelGpus {
            model: M.into(),
            gpus: 2
        }]
    );
    assert_eq!(w.windows.len(), 1, "{:?}", w.windows);
    assert_eq!(w.windows[0].start, "18:00");
    assert_eq!(w.windows[0].hours, 15);
    assert_eq!(
        w.windows[0].gpus,
        vec![ModelGpus {
            model: M.into(),
            gpus: 6
        }]
    );
    assert_eq!(w.end, EndOfWindow::Finish);
    assert_eq!(o.plan.check(), Ok(()));
}

#[test]
fn a_class_set_by_hand_wins_and_guarantees_fit_the_fleet() {
    let (f, profile) = fleet(|_| 0);
    let d = demand(&f, &[("a", &|_| 6), ("b", &|_| 5)]);
    let mut p = QueueParams::default();
    let o = plan(&d, &f, &profile, &p).unwrap();
    let g: Vec<u32> = o.plan.teams.iter().map(|t| t.quotas[0].guarantee).collect();
    assert_eq!(g.iter().sum::<u32>(), 8, "{g:?}");
    assert_eq!(g, vec![4, 4]);
    assert!(
        o.notes.iter().any(|n| n.contains("added up to 11 GPUs")),
        "{:?}",
        o.notes
    );
    assert!(o.notes.iter().any(|n| n.contains("no off-peak window")));
    p.classes.insert("b".into(), DemandClass::JobLike);
    let o = plan(&d, &f, &profile, &p).unwrap();
    let b = &o.plan.teams[1];
    assert_eq!(
        (b.class, b.quotas[0].guarantee, b.quotas[0].limit),
        (DemandClass::JobLike, 0, 5)
    );
    assert_eq!(o.plan.teams[0].quotas[0].guarantee, 6);
}

#[test]
fn no_allocation_in_the_data_is_an_error_not_an_empty_plan() {
    let (f, profile) = fleet(|_| 8);
    let err = plan(
        &TeamDemand::default(),
        &f,
        &profile,
        &QueueParams::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("no allocation in the data"),
        "{err}"
    );
}
