//! The process's open-files limit, raised to what the system allows.
//!
//! kroute holds two descriptors per client connection (the client's socket and its upstream
//! one) and, for a producer whose batches it routes, up to one more per other broker. Linux
//! starts processes with a soft limit that is often 1024 while the hard limit is far higher:
//! left alone, kroute would fail to accept (`accept failed: Too many open files`) after a
//! few hundred clients. As Go's runtime and many servers do, kroute raises the soft limit to
//! the hard one at start; raising the hard limit needs privileges it should not ask for.

use tracing::info;

/// Descriptors kept for what is not a client connection: listeners, the admin endpoint,
/// kroute's own requests, log and certificate files.
const RESERVED: u64 = 64;

/// Raises the soft open-files limit to the hard one and says what it allows. Returns the limit
/// in force, None if it cannot be read.
pub fn raise(max_connections: usize) -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit through a valid pointer.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = limit.rlim_max;
        }
    }
    let fits = client_connections(limit.rlim_cur);
    info!(
        soft_before = before,
        limit = limit.rlim_cur,
        client_connections = fits,
        "open files limit"
    );
    if max_connections == 0 || max_connections as u64 > fits {
        info!(
            max_connections,
            client_connections = fits,
            "the open files limit, not limits.max_connections, bounds client connections \
             (two descriptors each): raise `ulimit -n` to go further"
        );
    }
    Some(limit.rlim_cur)
}

/// Client connections `limit` descriptors hold, two each, beside the reserved ones.
pub fn client_connections(limit: u64) -> u64 {
    limit.saturating_sub(RESERVED) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current() -> libc::rlimit {
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit through a valid pointer.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut now) }, 0);
        now
    }

    #[test]
    fn the_soft_limit_ends_at_the_hard_one() {
        let hard = current().rlim_max;
        // Start as a login shell often does: a soft limit of 1024 (or lower, if the hard one is).
        let low = libc::rlimit {
            rlim_cur: hard.min(1024),
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads one rlimit through a valid pointer.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
        assert_eq!(raise(10), Some(hard));
        assert_eq!(current().rlim_cur, hard);
        // Raising again changes nothing.
        assert_eq!(raise(10), Some(hard));
    }

    #[test]
    fn two_descriptors_per_client_connection_beside_the_reserve() {
        assert_eq!(client_connections(20_000), 9_968);
        assert_eq!(client_connections(1024), 480);
        assert_eq!(client_connections(10), 0);
    }
}
