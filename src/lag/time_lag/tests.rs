//! The table's bookkeeping, each lookup case, a worked example, and the properties: never a
//! panic, never negative or infinite, monotone in the offset lag.

use super::*;

fn table(points: &[(i64, i64)]) -> OffsetTimeTable {
    let mut table = OffsetTimeTable::new(60);
    for &(offset, time_ms) in points {
        table.add(offset, time_ms);
    }
    table
}

fn behind(seconds: f64, basis: Basis) -> TimeLag {
    TimeLag::Behind { seconds, basis }
}

fn offsets_and_times(table: &OffsetTimeTable) -> Vec<(i64, i64)> {
    table.points().map(|p| (p.offset, p.time_ms)).collect()
}

// ---- the table ----

#[test]
fn points_must_move_forward_in_time_and_not_back_in_offset() {
    let mut table = OffsetTimeTable::new(10);
    assert_eq!(table.add(100, 1_000), Added::Inserted);
    assert_eq!(table.add(200, 1_000), Added::OutOfOrder);
    assert_eq!(table.add(200, 500), Added::OutOfOrder);
    assert_eq!(table.add(90, 2_000), Added::Regressed);
    assert_eq!(table.add(100, 2_000), Added::Inserted);
    assert_eq!(offsets_and_times(&table), [(100, 1_000), (100, 2_000)]);
}

#[test]
fn a_stretch_of_one_offset_is_kept_as_its_first_and_last_point() {
    let mut table = OffsetTimeTable::new(10);
    table.add(100, 0);
    table.add(200, 1_000);
    table.add(200, 2_000);
    assert_eq!(table.add(200, 3_000), Added::Extended);
    assert_eq!(table.add(200, 4_000), Added::Extended);
    assert_eq!(table.add(300, 5_000), Added::Inserted);
    assert_eq!(
        offsets_and_times(&table),
        [(100, 0), (200, 1_000), (200, 4_000), (300, 5_000)]
    );
}

#[test]
fn a_full_table_drops_its_oldest_point() {
    let mut table = OffsetTimeTable::new(3);
    for i in 0..5 {
        table.add(i * 10, i * 1_000);
    }
    assert_eq!(
        offsets_and_times(&table),
        [(20, 2_000), (30, 3_000), (40, 4_000)]
    );
    assert_eq!(OffsetTimeTable::new(0).capacity, 2);
    table.clear();
    assert!(table.is_empty());
}

// ---- lookups ----

#[test]
fn without_two_points_the_lag_is_unknown_not_zero() {
    assert_eq!(table(&[]).time_lag(0, 10_000), TimeLag::Unknown);
    assert_eq!(table(&[(100, 0)]).time_lag(50, 10_000), TimeLag::Unknown);
    // At the log end nothing is estimated: caught up, even with one point.
    assert_eq!(table(&[(100, 0)]).time_lag(100, 10_000), TimeLag::CaughtUp);
}

#[test]
fn at_or_past_the_newest_log_end_is_caught_up() {
    let table = table(&[(0, 0), (100, 10_000)]);
    assert_eq!(table.time_lag(100, 50_000), TimeLag::CaughtUp);
    assert_eq!(table.time_lag(150, 50_000), TimeLag::CaughtUp);
    assert_eq!(TimeLag::CaughtUp.seconds(), Some(0.0));
}

#[test]
fn inside_the_table_the_time_is_interpolated() {
    let table = table(&[(100, 0), (200, 10_000), (400, 12_000)]);
    // 150 was the log end at 5 s; 300 at 11 s.
    assert_eq!(
        table.time_lag(150, 12_000),
        behind(7.0, Basis::Interpolated)
    );
    assert_eq!(
        table.time_lag(300, 12_000),
        behind(1.0, Basis::Interpolated)
    );
    assert_eq!(
        table.time_lag(100, 12_000),
        behind(12.0, Basis::Interpolated)
    );
}

#[test]
fn on_a_stretch_where_the_log_end_stood_still_the_last_moment_counts() {
    // The log end stood at 200 from 1 s to 3 s: message 200 was written after 3 s.
    let table = table(&[(100, 0), (200, 1_000), (200, 3_000), (300, 4_000)]);
    assert_eq!(table.time_lag(200, 4_000), behind(1.0, Basis::Interpolated));
    assert_eq!(table.time_lag(150, 4_000), behind(3.5, Basis::Interpolated));
}

#[test]
fn below_the_table_the_overall_rate_extrapolates() {
    // 1000 messages in 10 s from the oldest to the newest point: offset 500 is 5 s before the
    // oldest point, at 5 s, so 15 s behind at 20 s (the middle point's faster rate is unused).
    let table = table(&[(1_000, 10_000), (1_500, 12_000), (2_000, 20_000)]);
    assert_eq!(
        table.time_lag(500, 20_000),
        behind(15.0, Basis::Extrapolated)
    );
}

#[test]
fn a_log_end_that_never_moved_gives_the_tables_age_as_a_lower_bound() {
    let table = table(&[(500, 10_000), (500, 20_000), (500, 40_000)]);
    assert_eq!(table.time_lag(400, 45_000), behind(35.0, Basis::AtLeast));
}

#[test]
fn a_clock_behind_the_table_gives_zero_not_negative() {
    let table = table(&[(0, 10_000), (100, 20_000)]);
    assert_eq!(table.time_lag(90, 5_000), behind(0.0, Basis::Interpolated));
}

#[test]
fn a_paused_consumer_is_as_far_behind_as_its_pause() {
    // A producer writes 100 messages a second, polled every 5 s; the consumer read everything
    // up to t = 60 s and was paused since. At t = 90 s it is 30 s behind.
    let mut table = OffsetTimeTable::new(60);
    for poll in 0..=18 {
        let at = poll * 5_000;
        table.add(at / 10, at);
    }
    let committed = 6_000;
    let lag = table.time_lag(committed, 90_000).seconds();
    assert_eq!(lag, Some(30.0));
}

#[test]
fn a_groups_time_lag_is_the_largest_known() {
    let lags = [
        TimeLag::Unknown,
        behind(3.0, Basis::Interpolated),
        TimeLag::CaughtUp,
        behind(8.0, Basis::AtLeast),
        behind(5.0, Basis::Extrapolated),
    ];
    assert_eq!(TimeLag::max_of(&lags), behind(8.0, Basis::AtLeast));
    assert_eq!(TimeLag::max_of(&[TimeLag::Unknown]), TimeLag::Unknown);
    assert_eq!(TimeLag::max_of(&[]), TimeLag::Unknown);
    assert_eq!(
        TimeLag::max_of(&[TimeLag::Unknown, TimeLag::CaughtUp]),
        TimeLag::CaughtUp
    );
}

// ---- properties ----

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Points as a poller produces them (mostly forward, sometimes flat, sometimes stale or
    /// lower), or arbitrary extremes.
    fn feed() -> impl Strategy<Value = Vec<(i64, i64)>> {
        let steps = prop::collection::vec((0..500i64, -200..5_000i64), 0..40).prop_map(|steps| {
            let (mut offset, mut time) = (1_000i64, 1_000_000i64);
            steps
                .into_iter()
                .map(|(d_offset, d_time)| {
                    offset += d_offset % 3 * (d_offset / 3);
                    time += d_time;
                    (offset, time)
                })
                .collect()
        });
        prop_oneof![
            steps,
            prop::collection::vec((any::<i64>(), any::<i64>()), 0..20),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 2000,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// The table stays ordered and bounded whatever it is fed.
        #[test]
        fn the_table_stays_ordered_and_bounded(capacity in 0..10usize, points in feed()) {
            let mut table = OffsetTimeTable::new(capacity);
            for (offset, time_ms) in points {
                table.add(offset, time_ms);
                prop_assert!(table.len() <= capacity.max(2));
                let all: Vec<&Point> = table.points().collect();
                for pair in all.windows(2) {
                    prop_assert!(pair[0].time_ms < pair[1].time_ms);
                    prop_assert!(pair[0].offset <= pair[1].offset);
                }
            }
        }

        /// A smaller committed offset (a larger offset lag) never gets a smaller time lag,
        /// and no lag is negative, infinite or NaN.
        #[test]
        fn time_lag_is_monotone_in_offset_lag(
            capacity in 2..10usize,
            points in feed(),
            committed in prop::collection::vec(prop_oneof![any::<i64>(), 0..20_000i64], 1..8),
            now_ms in prop_oneof![any::<i64>(), 1_000_000..1_300_000i64],
        ) {
            let mut table = OffsetTimeTable::new(capacity);
            for (offset, time_ms) in points {
                table.add(offset, time_ms);
            }
            let mut committed = committed;
            committed.sort_unstable();
            let lags: Vec<TimeLag> = committed.iter().map(|&c| table.time_lag(c, now_ms)).collect();
            for lag in &lags {
                if let Some(s) = lag.seconds() {
                    prop_assert!(s.is_finite() && s >= 0.0, "{lag:?}");
                } else {
                    prop_assert!(table.len() < 2);
                }
            }
            let known: Vec<f64> = lags.iter().filter_map(TimeLag::seconds).collect();
            for pair in known.windows(2) {
                prop_assert!(pair[0] >= pair[1], "{committed:?} -> {lags:?}");
            }
        }
    }
}
