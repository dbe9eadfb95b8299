//! One caller's timeout spread over the several waits a call makes: the deadline is fixed when
//! the call starts, and each wait gets what is left of it.

use std::time::{Duration, Instant};

use gaspi::Timeout;

/// A call's timeout, fixed when the call started.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Budget {
    Block,
    Test,
    Until(Instant),
}

impl Budget {
    pub(crate) fn start(timeout: Timeout) -> Budget {
        match timeout {
            Timeout::Block => Budget::Block,
            Timeout::Test | Timeout::Millis(0) => Budget::Test,
            // A deadline too far away to represent is as good as none.
            Timeout::Millis(ms) => Instant::now()
                .checked_add(Duration::from_millis(ms))
                .map_or(Budget::Block, Budget::Until),
        }
    }

    /// The timeout of the next wait: what is left, so that all waits of a call together keep
    /// to the caller's timeout. Once it has passed, waits only check (`Millis(0)` is `Test`).
    pub(crate) fn left(self) -> Timeout {
        match self {
            Budget::Block => Timeout::Block,
            Budget::Test => Timeout::Test,
            Budget::Until(at) => Timeout::from(at.saturating_duration_since(Instant::now())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_share_one_deadline() {
        assert_eq!(Budget::start(Timeout::Block).left(), Timeout::Block);
        assert_eq!(Budget::start(Timeout::Test).left(), Timeout::Test);
        assert_eq!(Budget::start(Timeout::Millis(0)).left(), Timeout::Test);
        let budget = Budget::start(Timeout::Millis(50));
        assert!(matches!(budget.left(), Timeout::Millis(ms) if (1..=50).contains(&ms)));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(budget.left(), Timeout::Millis(0));
    }

    #[test]
    fn huge_timeouts_neither_overflow_nor_expire() {
        let left = Budget::start(Timeout::Millis(u64::MAX)).left();
        assert!(
            matches!(left, Timeout::Block | Timeout::Millis(1_000_000..)),
            "{left:?}"
        );
    }
}
