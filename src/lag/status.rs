//! The verdicts, with the numbers and names Burrow gives them.
//!
//! One enum serves partitions and groups, as in Burrow: a partition is OK, WARN, STOP, STALL or
//! REWIND; a group is OK, WARN or ERR (its worst partition, with the three errors folded into
//! ERR), or NOTFOUND when nothing is known of it. The order of the variants is the order of
//! badness, so "worst" is `max`.

use std::fmt;

/// A partition's or a group's status. The discriminants are Burrow's `StatusConstant` values
/// (core/protocol/evaluator.go), which its API and alerting use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// The group is not known (never a partition's status).
    NotFound = 0,
    /// Keeping up, or too little history to say otherwise.
    Ok = 1,
    /// Committing, but the lag never went down in the window: the consumer is slower than the
    /// producers.
    Warn = 2,
    /// A group with a partition in STOP, STALL or REWIND (never a partition's status).
    Err = 3,
    /// Lag, and no commit for longer than the window spans.
    Stop = 4,
    /// Lag, and every commit in the window is the same offset.
    Stall = 5,
    /// The committed offset went backwards and has not come back.
    Rewind = 6,
}

impl Status {
    /// Every status, in order of badness.
    pub const ALL: [Status; 7] = [
        Status::NotFound,
        Status::Ok,
        Status::Warn,
        Status::Err,
        Status::Stop,
        Status::Stall,
        Status::Rewind,
    ];

    /// Burrow's number for the status (NOTFOUND 0 ... REWIND 6).
    pub fn code(self) -> i32 {
        self as i32
    }

    /// Burrow's name for the status, as its JSON carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::NotFound => "NOTFOUND",
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Err => "ERR",
            Status::Stop => "STOP",
            Status::Stall => "STALL",
            Status::Rewind => "REWIND",
        }
    }

    /// The number Telegraf's burrow input stores as `status_code` (its `mapStatusToCode`: OK 1,
    /// NOT_FOUND 2, WARN 3, ERR 4, STOP 5, STALL 6, anything else 0). Dashboards built on
    /// Telegraf, like the ones in seed 002, use these numbers, not Burrow's. Telegraf matches
    /// the string "NOT_FOUND" while Burrow sends "NOTFOUND", so a missing group arrives there as
    /// 0, and so does REWIND; this reproduces that.
    pub fn telegraf_code(self) -> i32 {
        match self {
            Status::Ok => 1,
            Status::Warn => 3,
            Status::Err => 4,
            Status::Stop => 5,
            Status::Stall => 6,
            Status::NotFound | Status::Rewind => 0,
        }
    }

    /// What a partition's status contributes to its group's: the errors a partition can be in
    /// (STOP, STALL, REWIND) all count as ERR, so a group is only ever OK, WARN or ERR.
    pub fn for_group(self) -> Status {
        self.min(Status::Err)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_are_burrows() {
        let expected = [
            (0, "NOTFOUND"),
            (1, "OK"),
            (2, "WARN"),
            (3, "ERR"),
            (4, "STOP"),
            (5, "STALL"),
            (6, "REWIND"),
        ];
        for (status, (code, name)) in Status::ALL.iter().zip(expected) {
            assert_eq!(status.code(), code);
            assert_eq!(status.as_str(), name);
            assert_eq!(status.to_string(), name);
        }
    }

    #[test]
    fn telegraf_numbers_differ_from_burrows() {
        let telegraf: Vec<i32> = Status::ALL.iter().map(|s| s.telegraf_code()).collect();
        assert_eq!(telegraf, [0, 1, 3, 4, 5, 6, 0]);
    }

    #[test]
    fn partition_errors_fold_into_err_for_the_group() {
        assert_eq!(Status::Ok.for_group(), Status::Ok);
        assert_eq!(Status::Warn.for_group(), Status::Warn);
        for error in [Status::Stop, Status::Stall, Status::Rewind] {
            assert_eq!(error.for_group(), Status::Err);
        }
    }
}
