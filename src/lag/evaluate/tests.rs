//! The rules one by one, on the cases Burrow's own evaluator tests check
//! (core/internal/evaluator/caching_test.go, cases 0-15), then the edges around them, the
//! group summary, and properties over arbitrary input.

use super::*;
use crate::lag::window::Commit;

fn entry(offset: i64, timestamp_ms: i64, lag: Option<u64>) -> CommitEntry {
    CommitEntry {
        offset,
        timestamp_ms,
        observed_ms: timestamp_ms,
        lag,
    }
}

/// Commits `step_ms` apart, the first at `step_ms`.
fn spaced(step_ms: i64, commits: &[(i64, Option<u64>)]) -> Vec<CommitEntry> {
    commits
        .iter()
        .zip(1..)
        .map(|(&(offset, lag), i)| entry(offset, i * step_ms, lag))
        .collect()
}

/// One of Burrow's rule cases: the input, what each rule says, and the verdict.
struct Case {
    what: &'static str,
    commits: Vec<CommitEntry>,
    recent: Vec<i64>,
    current_lag: u64,
    now_secs: i64,
    allowed_lag: u64,
    never_within: bool,
    rewind_at: Option<usize>,
    stopped: bool,
    stalled: bool,
    never_decreased: bool,
    recently_caught_up: bool,
    status: Status,
}

impl Case {
    fn check(&self) {
        let what = self.what;
        let commits = &self.commits;
        let now_ms = self.now_secs * 1000;
        let newest = commits.last().map_or(0, |c| c.offset);
        assert_eq!(
            lag_never_within(commits, self.allowed_lag),
            self.never_within,
            "{what}"
        );
        assert_eq!(first_rewind(commits), self.rewind_at, "{what}");
        assert_eq!(stopped(commits, now_ms), self.stopped, "{what}");
        assert_eq!(stalled(commits), self.stalled, "{what}");
        assert_eq!(lag_never_decreased(commits), self.never_decreased, "{what}");
        let caught_up = recently_caught_up(newest, self.recent.iter().copied());
        assert_eq!(caught_up, self.recently_caught_up, "{what}");
        let recent = self.recent.iter().copied();
        let status = judge(commits, recent, self.current_lag, now_ms, self.allowed_lag);
        assert_eq!(status, self.status, "{what}");
    }
}

/// Offsets 1000..5000 every 100 s, lag rising from 0: Burrow cases 0-2.
fn rising_from_zero() -> Vec<CommitEntry> {
    let lags = [0, 50, 100, 150, 200];
    let commits: Vec<(i64, Option<u64>)> = (0..5)
        .map(|i| (1000 + 1000 * i, Some(lags[i as usize])))
        .collect();
    spaced(100_000, &commits)
}

/// Offsets 1000..5000 every 100 s, lag 50..250, never zero: Burrow cases 3 and 8.
fn rising_never_zero() -> Vec<CommitEntry> {
    let commits: Vec<(i64, Option<u64>)> = (0..5)
        .map(|i| (1000 + 1000 * i, Some(50 + 50 * i as u64)))
        .collect();
    spaced(100_000, &commits)
}

/// The same offset every 100 s with the given lags: Burrow cases 4-6 and 13.
fn same_offset(lags: [u64; 5]) -> Vec<CommitEntry> {
    let commits: Vec<(i64, Option<u64>)> = lags.iter().map(|&lag| (1000, Some(lag))).collect();
    spaced(100_000, &commits)
}

/// A drop from 3000 to 2000, then `last`: Burrow cases 7, 14 and 15.
fn dropped_then(last: i64) -> Vec<CommitEntry> {
    let offsets = [1000, 2000, 3000, 2000, last];
    let lags = [100, 150, 200, 1250, 300];
    let commits: Vec<(i64, Option<u64>)> = offsets
        .iter()
        .zip(lags)
        .map(|(&o, l)| (o, Some(l)))
        .collect();
    spaced(100_000, &commits)
}

/// 15 commits a second apart, each one offset further, all with zero lag: Burrow cases 9-10.
fn busy_and_caught_up() -> Vec<CommitEntry> {
    let base = 1_512_224_618_356;
    (0..15)
        .map(|i| entry(792_748_079 + i, base + i * 1000, Some(0)))
        .collect()
}

fn burrow_cases() -> Vec<Case> {
    let ok_rising = |what, now_secs, stopped, status| Case {
        what,
        commits: rising_from_zero(),
        recent: vec![5200],
        current_lag: 200,
        now_secs,
        allowed_lag: 0,
        never_within: false,
        rewind_at: None,
        stopped,
        stalled: false,
        never_decreased: true,
        recently_caught_up: false,
        status,
    };
    let stalls = |what, lags: [u64; 5], allowed_lag, status| Case {
        what,
        commits: same_offset(lags),
        recent: vec![1000 + lags[4] as i64],
        current_lag: lags[4],
        now_secs: 600,
        allowed_lag,
        never_within: lags[0] > allowed_lag,
        rewind_at: None,
        stopped: false,
        stalled: true,
        never_decreased: true,
        recently_caught_up: false,
        status,
    };
    let rewinds = |what, last, allowed_lag, status| Case {
        what,
        commits: dropped_then(last),
        recent: vec![4300],
        current_lag: 300,
        now_secs: 600,
        allowed_lag,
        never_within: true,
        rewind_at: Some(3),
        stopped: false,
        stalled: false,
        never_decreased: false,
        recently_caught_up: false,
        status,
    };
    let busy = |what, recent, current_lag, recently_caught_up, status| Case {
        what,
        commits: busy_and_caught_up(),
        recent,
        current_lag,
        now_secs: 1_512_224_650,
        allowed_lag: 0,
        never_within: false,
        rewind_at: None,
        stopped: true,
        stalled: false,
        never_decreased: true,
        recently_caught_up,
        status,
    };
    vec![
        ok_rising("0: zero lag in the window: OK", 600, false, Status::Ok),
        ok_rising(
            "1: silent 400 s for a 400 s window is not longer: OK",
            900,
            false,
            Status::Ok,
        ),
        ok_rising(
            "2: silent 500 s > 400 s: STOP despite the early zero lag (#290)",
            1000,
            true,
            Status::Stop,
        ),
        Case {
            what: "3: STOP with lag all along",
            commits: rising_never_zero(),
            recent: vec![5250],
            current_lag: 250,
            now_secs: 1000,
            allowed_lag: 0,
            never_within: true,
            rewind_at: None,
            stopped: true,
            stalled: false,
            never_decreased: true,
            recently_caught_up: false,
            status: Status::Stop,
        },
        stalls(
            "4: same offset but a zero lag in the window: OK",
            [0, 50, 100, 150, 200],
            0,
            Status::Ok,
        ),
        stalls(
            "5: same offset, lag growing: STALL",
            [100, 150, 200, 250, 300],
            0,
            Status::Stall,
        ),
        stalls(
            "6: same offset, lag flat: STALL",
            [100; 5],
            0,
            Status::Stall,
        ),
        rewinds(
            "7: dropped and came back past 3000: OK",
            4000,
            0,
            Status::Ok,
        ),
        Case {
            what: "8: no current lag: OK, however stopped the window looks",
            commits: rising_never_zero(),
            recent: vec![5250],
            current_lag: 0,
            now_secs: 1000,
            allowed_lag: 0,
            never_within: true,
            rewind_at: None,
            stopped: true,
            stalled: false,
            never_decreased: true,
            recently_caught_up: false,
            status: Status::Ok,
        },
        busy(
            "9: caught up in every commit, but new data and silence: STOP (#290)",
            vec![
                792_749_024,
                792_749_000,
                792_748_800,
                792_748_600,
                792_748_500,
            ],
            931,
            false,
            Status::Stop,
        ),
        busy(
            "10: a recent log end at the last commit holds STOP back: OK (#303)",
            vec![792_748_094, 792_748_093, 792_748_093, 792_748_093],
            1,
            true,
            Status::Ok,
        ),
        Case {
            what: "11: case 0 with commits of unknown lag in between: OK",
            commits: spaced(
                50_000,
                &[
                    (1000, Some(0)),
                    (1500, None),
                    (2000, Some(50)),
                    (2500, None),
                    (3000, Some(100)),
                    (3500, None),
                    (4000, Some(150)),
                    (4500, None),
                    (5000, Some(200)),
                    (5500, None),
                ],
            ),
            recent: vec![5700],
            current_lag: 200,
            now_secs: 600,
            allowed_lag: 0,
            never_within: false,
            rewind_at: None,
            stopped: false,
            stalled: false,
            never_decreased: true,
            recently_caught_up: false,
            status: Status::Ok,
        },
        Case {
            what: "12: current lag within allowed_lag: OK although stopped",
            commits: spaced(
                100_000,
                &[(1000, Some(2)), (2000, Some(1)), (2000, Some(1))],
            ),
            recent: vec![2001],
            current_lag: 1,
            now_secs: 550,
            allowed_lag: 1,
            never_within: false,
            rewind_at: None,
            stopped: true,
            stalled: false,
            never_decreased: false,
            recently_caught_up: false,
            status: Status::Ok,
        },
        stalls(
            "13: case 5 with allowed_lag 99: STALL",
            [100, 150, 200, 250, 300],
            99,
            Status::Stall,
        ),
        rewinds("14: case 7 with allowed_lag 99: OK", 4000, 99, Status::Ok),
        rewinds(
            "15: dropped and still below 3000: REWIND",
            2500,
            0,
            Status::Rewind,
        ),
    ]
}

#[test]
fn burrows_rule_cases() {
    for case in burrow_cases() {
        case.check();
    }
}

// ---- edges of the rules ----

fn window(capacity: usize, commits: &[CommitEntry]) -> CommitWindow {
    CommitWindow::from_entries(capacity, commits)
}

fn log_end_at(offsets: &[(i64, i64)]) -> LogEnd {
    let mut log_end = LogEnd::new(10, 60);
    for &(offset, at) in offsets {
        log_end.record(offset, at);
    }
    log_end
}

fn partition<'a>(commits: &'a CommitWindow, log_end: Option<&'a LogEnd>) -> PartitionInput<'a> {
    PartitionInput {
        topic: "t",
        partition: 0,
        owner: "/10.0.0.1",
        client_id: "c-1",
        commits,
        log_end,
    }
}

fn status_at(commits: &CommitWindow, log_end: &LogEnd, params: &Params, now_ms: i64) -> Status {
    evaluate_partition(&partition(commits, Some(log_end)), params, now_ms).status
}

#[test]
fn now_is_cut_to_whole_seconds_as_in_burrow() {
    let commits = window(5, &rising_from_zero());
    let log_end = log_end_at(&[(5200, 500_000)]);
    let params = Params::default();
    // 400.999 s of silence for a 400 s window is 400 s in whole seconds: not longer.
    assert_eq!(status_at(&commits, &log_end, &params, 900_999), Status::Ok);
    assert_eq!(
        status_at(&commits, &log_end, &params, 901_000),
        Status::Stop
    );
}

#[test]
fn a_single_commit_with_lag_is_ok_until_a_minute_of_silence() {
    // Burrow's rules on a window of one are vacuous (it spans 0 s; one offset is "always the
    // same"): Burrow says STALL at once and STOP a second later. kroute waits for a pace.
    let commits = window(10, &[entry(100, 10_000, Some(50))]);
    let log_end = log_end_at(&[(150, 9_000)]);
    let params = Params::default();
    for now in [10_999, 11_000, 10_000 + FIRST_COMMIT_GRACE_MS] {
        assert_eq!(
            status_at(&commits, &log_end, &params, now),
            Status::Ok,
            "{now}"
        );
    }
    let late = 10_000 + FIRST_COMMIT_GRACE_MS + 1_000;
    assert_eq!(status_at(&commits, &log_end, &params, late), Status::Stop);
}

#[test]
fn only_the_first_drop_is_looked_at() {
    // 3000 -> 2000 recovers (3500), so the later 3500 -> 3000 is never considered.
    let commits = spaced(
        100_000,
        &[
            (1000, Some(500)),
            (3000, Some(400)),
            (2000, Some(1500)),
            (3500, Some(300)),
            (3000, Some(900)),
        ],
    );
    assert_eq!(first_rewind(&commits), Some(2));
    assert!(rewind_recovered(&commits, 2));
    assert_eq!(judge(&commits, [3900], 900, 600_000, 0), Status::Ok);
}

#[test]
fn a_rewind_recovers_on_reaching_the_offset_before_the_drop() {
    let commits = spaced(
        100_000,
        &[(3000, Some(10)), (2000, Some(20)), (3000, Some(30))],
    );
    assert!(rewind_recovered(&commits, 1));
    let commits = spaced(
        100_000,
        &[(3000, Some(10)), (2000, Some(20)), (2999, Some(30))],
    );
    assert!(!rewind_recovered(&commits, 1));
    assert_eq!(judge(&commits, [3029], 30, 400_000, 0), Status::Rewind);
}

#[test]
fn stop_outranks_rewind_and_rewind_outranks_stall() {
    let commits = spaced(
        100_000,
        &[(3000, Some(10)), (2000, Some(20)), (2000, Some(30))],
    );
    assert_eq!(judge(&commits, [2030], 30, 400_000, 0), Status::Rewind);
    assert_eq!(judge(&commits, [2030], 30, 600_000, 0), Status::Stop);
}

#[test]
fn commits_without_a_known_lag_count_only_for_offsets_and_times() {
    // No lag known anywhere (commits made before kroute knew the log end, which Burrow would
    // have dropped): the lag rules have nothing to judge, so neither WARN nor STALL, where a
    // vacuous "never within allowed" would call a consumer that just started slow or stalled.
    let moving = spaced(100_000, &[(1000, None), (2000, None), (3000, None)]);
    assert_eq!(judge(&moving, [3500], 500, 300_000, 0), Status::Ok);
    let still = spaced(100_000, &[(1000, None), (1000, None), (1000, None)]);
    assert_eq!(judge(&still, [1500], 500, 300_000, 0), Status::Ok);
    // STOP needs no lag: still judged.
    assert_eq!(judge(&still, [1500], 500, 600_000, 0), Status::Stop);
    // One known lag going down between unknown ones: OK.
    let mixed = spaced(100_000, &[(1000, Some(90)), (2000, None), (3000, Some(80))]);
    assert_eq!(judge(&mixed, [3500], 500, 300_000, 0), Status::Ok);
}

#[test]
fn lag_rising_with_progress_is_warn() {
    let commits = spaced(
        30_000,
        &[
            (100, Some(10)),
            (200, Some(10)),
            (300, Some(40)),
            (400, Some(90)),
        ],
    );
    assert_eq!(judge(&commits, [500], 100, 120_000, 0), Status::Warn);
}

#[test]
fn a_window_below_minimum_complete_is_ok_whatever_it_shows() {
    // Burrow's testgroup2 window: half full, stopped.
    let commits = window(10, &rising_never_zero());
    let log_end = log_end_at(&[(5250, 500_000)]);
    let strict = Params {
        minimum_complete: 0.6,
        ..Params::default()
    };
    assert_eq!(
        status_at(&commits, &log_end, &strict, 1_000_000),
        Status::Ok
    );
    let at_threshold = Params {
        minimum_complete: 0.5,
        ..Params::default()
    };
    assert_eq!(
        status_at(&commits, &log_end, &at_threshold, 1_000_000),
        Status::Stop
    );
}

#[test]
fn a_log_end_behind_the_commit_is_no_lag() {
    let commits = window(5, &rising_never_zero());
    let log_end = log_end_at(&[(4000, 500_000)]);
    assert_eq!(current_lag(&commits, Some(&log_end)), 0);
    assert_eq!(
        status_at(&commits, &log_end, &Params::default(), 1_000_000),
        Status::Ok
    );
}

#[test]
fn an_unknown_topic_has_no_current_lag_and_no_time_lag() {
    let commits = window(5, &rising_never_zero());
    let status = evaluate_partition(&partition(&commits, None), &Params::default(), 1_000_000);
    assert_eq!(status.status, Status::Ok);
    assert_eq!(status.current_lag, 0);
    assert_eq!(status.time_lag, TimeLag::Unknown);
}

#[test]
fn an_empty_window_is_ok_incomplete_and_lagless() {
    let commits = CommitWindow::new(10, 0);
    let log_end = log_end_at(&[(100, 0), (200, 1_000)]);
    let status = evaluate_partition(
        &partition(&commits, Some(&log_end)),
        &Params::default(),
        5_000,
    );
    assert_eq!(status.status, Status::Ok);
    assert_eq!(status.complete, 0.0);
    assert_eq!((status.start, status.end), (None, None));
    assert_eq!(status.current_lag, 0);
    assert_eq!(status.time_lag, TimeLag::Unknown);
}

// ---- the group ----

/// Burrow's test storage: log end 4321, commits 1000, 1100, ... 10 s apart from 100 s ago, in a
/// window of 10; `testgroup` made 10 of them, `testgroup2` 5.
fn burrow_fixture_group(commits_made: i64) -> (CommitWindow, LogEnd, i64) {
    let now_ms = 1_700_000_000_000;
    let start = now_ms - 100_000;
    let log_end = log_end_at(&[(4321, start - 1_000)]);
    let mut commits = CommitWindow::new(10, 0);
    for i in 0..commits_made {
        let at = start + i * 10_000;
        let commit = Commit {
            offset: 1000 + i * 100,
            timestamp_ms: at,
            observed_ms: at,
        };
        commits.record(commit, log_end.latest().map(|e| e.offset));
    }
    (commits, log_end, now_ms)
}

#[test]
fn burrows_testgroup_is_ok() {
    let (commits, log_end, now_ms) = burrow_fixture_group(10);
    let group = evaluate_group(
        &[partition(&commits, Some(&log_end))],
        &Params::default(),
        now_ms,
    );
    assert_eq!(group.status, Status::Ok);
    assert_eq!(group.complete, 1.0);
    assert_eq!(group.partitions.len(), 1);
    assert_eq!(group.total_lag, 2421);
    assert_eq!(group.not_ok().count(), 0, "/status lists no OK partition");
    assert_eq!(group.maxlag().map(|p| p.current_lag), Some(2421));
}

#[test]
fn burrows_incomplete_testgroup2_is_err() {
    let (commits, log_end, now_ms) = burrow_fixture_group(5);
    let group = evaluate_group(
        &[partition(&commits, Some(&log_end))],
        &Params::default(),
        now_ms,
    );
    assert_eq!(group.status, Status::Err);
    assert_eq!(group.complete, 0.0);
    assert_eq!(group.total_lag, 2921);
    let only = &group.partitions[0];
    assert_eq!((only.status, only.complete), (Status::Stop, 0.5));
    let maxlag = group
        .maxlag()
        .map(|p| (p.start.map(|s| s.offset), p.end.map(|e| e.offset)));
    assert_eq!(maxlag, Some((Some(1000), Some(1400))));
    assert_eq!(group.not_ok().count(), 1);
}

fn judged(status: Status, current_lag: u64, complete: f32) -> PartitionStatus {
    PartitionStatus {
        topic: "t".into(),
        partition: 0,
        owner: String::new(),
        client_id: String::new(),
        status,
        start: None,
        end: None,
        current_lag,
        complete,
        time_lag: TimeLag::Unknown,
    }
}

/// The group summary of already judged partitions, through the real evaluation: each
/// partition gets a window that the rules judge as `status`.
fn group_of(statuses: &[Status]) -> Status {
    let lags = |l: [u64; 3]| l.map(Some);
    let windows: Vec<(Vec<CommitEntry>, i64)> = statuses
        .iter()
        .map(|status| match status {
            Status::Warn => (
                spaced(
                    100_000,
                    &[(100, Some(10)), (200, Some(20)), (300, Some(30))],
                ),
                340,
            ),
            Status::Stall => (spaced(100_000, &lags([10, 10, 10]).map(|l| (100, l))), 110),
            Status::Rewind => (
                spaced(
                    100_000,
                    &[(300, Some(10)), (200, Some(20)), (250, Some(30))],
                ),
                280,
            ),
            _ => (
                spaced(100_000, &[(100, Some(0)), (200, Some(0)), (300, Some(0))]),
                300,
            ),
        })
        .collect();
    let commits: Vec<CommitWindow> = windows.iter().map(|(c, _)| window(3, c)).collect();
    let log_ends: Vec<LogEnd> = windows
        .iter()
        .map(|(_, end)| log_end_at(&[(*end, 300_000)]))
        .collect();
    let inputs: Vec<PartitionInput> = commits
        .iter()
        .zip(&log_ends)
        .map(|(c, l)| partition(c, Some(l)))
        .collect();
    let group = evaluate_group(&inputs, &Params::default(), 350_000);
    let got: Vec<Status> = group.partitions.iter().map(|p| p.status).collect();
    assert_eq!(got, statuses, "the fixtures judge as intended");
    group.status
}

#[test]
fn the_group_is_its_worst_partition_with_errors_as_err() {
    assert_eq!(group_of(&[Status::Ok, Status::Ok]), Status::Ok);
    assert_eq!(group_of(&[Status::Ok, Status::Warn]), Status::Warn);
    assert_eq!(
        group_of(&[Status::Warn, Status::Stall, Status::Ok]),
        Status::Err
    );
    assert_eq!(group_of(&[Status::Rewind, Status::Warn]), Status::Err);
}

#[test]
fn a_group_without_partitions_is_ok_and_zero_complete() {
    // Burrow's TopicDeleted case: the group is known, its only topic is gone.
    let group = evaluate_group(&[], &Params::default(), 0);
    assert_eq!(group.status, Status::Ok);
    assert_eq!(group.complete, 0.0);
    assert!(group.partitions.is_empty());
    assert!(group.maxlag().is_none());
    assert_eq!(group.total_lag, 0);
}

#[test]
fn maxlag_is_the_first_of_the_largest() {
    let partitions = vec![
        judged(Status::Ok, 5, 1.0),
        judged(Status::Ok, 9, 1.0),
        judged(Status::Ok, 9, 1.0),
    ];
    assert_eq!(first_largest_lag(&partitions), Some(1));
    let zeros = vec![judged(Status::Ok, 0, 1.0), judged(Status::Ok, 0, 1.0)];
    assert_eq!(first_largest_lag(&zeros), Some(0));
    assert_eq!(first_largest_lag(&[]), None);
}

#[test]
fn complete_counts_full_partitions_and_total_lag_saturates() {
    let full = window(2, &spaced(1_000, &[(10, Some(0)), (10, Some(0))]));
    let half = window(2, &spaced(1_000, &[(i64::MIN, Some(0))]));
    let huge = log_end_at(&[(i64::MAX, 0)]);
    let inputs = [partition(&full, Some(&huge)), partition(&half, Some(&huge))];
    let group = evaluate_group(&inputs, &Params::default(), 2_000);
    assert_eq!(group.complete, 0.5);
    assert_eq!(group.total_lag, u64::MAX);
}

#[test]
fn not_found_is_burrows_answer_for_an_unknown_group() {
    let group = GroupStatus::not_found();
    assert_eq!(group.status, Status::NotFound);
    assert_eq!(group.complete, 1.0);
    assert!(group.partitions.is_empty() && group.maxlag().is_none());
    assert_eq!(group.total_lag, 0);
}

#[test]
fn the_group_time_lag_is_its_worst_known_partition() {
    let log_end = log_end_at(&[(0, 0), (1000, 100_000)]);
    let behind = window(3, &[entry(500, 90_000, Some(500))]);
    let caught_up = window(3, &[entry(1000, 99_000, Some(0))]);
    let never = CommitWindow::new(3, 0);
    let inputs = [
        partition(&caught_up, Some(&log_end)),
        partition(&never, Some(&log_end)),
        partition(&behind, Some(&log_end)),
    ];
    let group = evaluate_group(&inputs, &Params::default(), 100_000);
    // Offset 500 was the log end at 50 s: 50 s behind at 100 s.
    assert_eq!(group.max_time_lag.seconds(), Some(50.0));
    assert_eq!(group.partitions[0].time_lag, TimeLag::CaughtUp);
}

// ---- properties ----

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn commit_entry() -> impl Strategy<Value = CommitEntry> {
        (any::<i64>(), any::<i64>(), prop::option::of(any::<u64>()))
            .prop_map(|(offset, timestamp_ms, lag)| entry(offset, timestamp_ms, lag))
    }

    /// Mostly small, ordered-ish values so real verdicts occur, plus arbitrary extremes.
    fn small_entry() -> impl Strategy<Value = CommitEntry> {
        (0..50i64, 0..50i64, prop::option::of(0..20u64))
            .prop_map(|(offset, at, lag)| entry(offset * 10, at * 1_000, lag))
    }

    fn any_window() -> impl Strategy<Value = (usize, Vec<CommitEntry>)> {
        let entries = prop_oneof![
            prop::collection::vec(commit_entry(), 0..12),
            prop::collection::vec(small_entry(), 0..12),
        ];
        (0..12usize, entries)
    }

    fn any_log_end() -> impl Strategy<Value = Option<Vec<(i64, i64)>>> {
        let readings = prop_oneof![
            prop::collection::vec((any::<i64>(), any::<i64>()), 0..8),
            prop::collection::vec((0..600i64, 0..60_000i64), 0..8),
        ];
        prop::option::of(readings)
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 2000,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Any input: no panic, only the statuses Burrow can give, and a summary that agrees
        /// with its partitions.
        #[test]
        fn any_group_gets_a_consistent_verdict(
            groups in prop::collection::vec((any_window(), any_log_end()), 0..6),
            allowed_lag in prop_oneof![Just(0u64), any::<u64>()],
            minimum_complete in 0.0f32..1.2,
            now_ms in prop_oneof![any::<i64>(), 0..100_000i64],
        ) {
            let commits: Vec<CommitWindow> = groups.iter().map(|((cap, e), _)| window(*cap, e)).collect();
            let log_ends: Vec<Option<LogEnd>> = groups
                .iter()
                .map(|(_, readings)| readings.as_ref().map(|r| log_end_at(r)))
                .collect();
            let inputs: Vec<PartitionInput> = commits
                .iter()
                .zip(&log_ends)
                .map(|(c, l)| partition(c, l.as_ref()))
                .collect();
            let params = Params { allowed_lag, minimum_complete };
            let group = evaluate_group(&inputs, &params, now_ms);

            let partition_statuses = [Status::Ok, Status::Warn, Status::Stop, Status::Stall, Status::Rewind];
            for p in &group.partitions {
                prop_assert!(partition_statuses.contains(&p.status));
                prop_assert!((0.0..=1.0).contains(&p.complete));
                if let Some(s) = p.time_lag.seconds() {
                    prop_assert!(s.is_finite() && s >= 0.0);
                }
            }
            prop_assert!([Status::Ok, Status::Warn, Status::Err].contains(&group.status));
            let worst = group.partitions.iter().map(|p| p.status.for_group()).fold(Status::Ok, Status::max);
            prop_assert_eq!(group.status, worst);
            prop_assert!((0.0..=1.0).contains(&group.complete));
            let sum = group.partitions.iter().fold(0u64, |s, p| s.saturating_add(p.current_lag));
            prop_assert_eq!(group.total_lag, sum);
            let largest = group.partitions.iter().map(|p| p.current_lag).max();
            prop_assert_eq!(group.maxlag().map(|p| p.current_lag), largest);
        }

        /// Fed commit by commit, a window stays bounded and in time order.
        #[test]
        fn a_fed_window_stays_bounded_and_ordered(
            capacity in 0..8usize,
            min_distance_ms in prop_oneof![Just(0i64), any::<i64>(), 0..5_000i64],
            feed in prop::collection::vec((any::<i64>(), 0..20_000i64, prop::option::of(any::<i64>())), 0..40),
        ) {
            let mut commits = CommitWindow::new(capacity, min_distance_ms);
            for (offset, timestamp_ms, log_end) in feed {
                commits.record(Commit { offset, timestamp_ms, observed_ms: timestamp_ms }, log_end);
                prop_assert!(commits.entries().len() <= commits.capacity());
                prop_assert!(commits.entries().windows(2).all(|p| p[0].timestamp_ms <= p[1].timestamp_ms));
            }
        }
    }
}

fn reading(offset: i64, timestamp_ms: i64) -> EndOffset {
    EndOffset {
        offset,
        timestamp_ms,
    }
}

#[test]
fn a_caught_up_reading_holds_stop_back_only_until_new_records_wait_longer_than_the_window() {
    // Commits at the log end once a second (1..5 s), then none while the topic grows: read
    // caught up at 5 s, with records to read from 10 s on. The window spans 4 s.
    let commits = spaced(
        1_000,
        &[
            (100, Some(0)),
            (200, Some(0)),
            (300, Some(0)),
            (400, Some(0)),
            (500, Some(0)),
        ],
    );
    let recent = [
        reading(400, 4_000),
        reading(500, 5_000),
        reading(900, 10_000),
        reading(1400, 20_000),
    ];
    // 14 s: new records waited 4 s (not longer than the span): still held back, as in Burrow.
    assert_eq!(
        stop_guards(&recent, &commits, 14_000),
        [400, 500, 900, 1400]
    );
    assert_eq!(
        judge(
            &commits,
            stop_guards(&recent, &commits, 14_000),
            900,
            14_000,
            0
        ),
        Status::Ok
    );
    // 15 s: they waited 5 s: the caught-up readings no longer count, and the silence (10 s)
    // is longer than the span: STOP (Burrow would wait until those readings age out).
    assert_eq!(stop_guards(&recent, &commits, 15_000), [900, 1400]);
    assert_eq!(
        judge(
            &commits,
            stop_guards(&recent, &commits, 15_000),
            900,
            15_000,
            0
        ),
        Status::Stop
    );
    // Still caught up at the newest reading (an idle topic): always held back.
    let idle = [reading(500, 5_000), reading(500, 60_000)];
    assert_eq!(stop_guards(&idle, &commits, 600_000), [500, 500]);
}
