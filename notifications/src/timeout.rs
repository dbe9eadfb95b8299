//! Owns the timeout vocabulary of waiting calls: the user-facing [`Timeout`] and the absolute
//! [`Deadline`] it resolves to when a call starts.

use std::time::{Duration, Instant};

/// How long a waiting call may wait for its condition.
///
/// Every waiting call returns [`Error::Timeout`](crate::Error::Timeout) when the timeout
/// expires and leaves all state as it was, so the same call can simply be made again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Timeout {
    /// Wait for as long as it takes.
    Block,
    /// Check the condition, and if it does not hold make one progress attempt and check it
    /// again; never blocks.
    Test,
    /// Wait at most this many milliseconds.
    ///
    /// The call times out no earlier than the given time after it started, and shortly after
    /// it: the delay is the operating system's timer granularity plus scheduling. `Millis(0)`
    /// behaves exactly like [`Timeout::Test`].
    Millis(u64),
}

impl Timeout {
    /// Fixes this timeout to an absolute deadline, counted from now.
    #[must_use]
    pub fn deadline(self) -> Deadline {
        let kind = match self {
            Timeout::Block => Kind::Never,
            Timeout::Test | Timeout::Millis(0) => Kind::Test,
            // A deadline too far away to represent is as good as none.
            Timeout::Millis(ms) => Instant::now()
                .checked_add(Duration::from_millis(ms))
                .map_or(Kind::Never, Kind::At),
        };
        Deadline { kind }
    }
}

impl Timeout {
    /// Like [`deadline`](Self::deadline), but a [`Timeout::Millis`] deadline is counted from
    /// the first time a wait finds its condition unmet ([`wait_until`](crate::wait_until)
    /// starts it then) rather than from now: a wait that succeeds at once never reads the
    /// clock, which costs about as much as the rest of such a wait (tens of nanoseconds in a
    /// VM). The wait times out no earlier than asked, and later only by its first look.
    #[must_use]
    pub fn lazy_deadline(self) -> Deadline {
        match self {
            Timeout::Millis(ms) if ms > 0 => Deadline {
                kind: Kind::After(Duration::from_millis(ms)),
            },
            other => other.deadline(),
        }
    }
}

impl From<Duration> for Timeout {
    /// Converts to [`Timeout::Millis`], rounding up to whole milliseconds so that the wait is
    /// never shorter than asked for.
    fn from(duration: Duration) -> Self {
        let millis = duration.as_nanos().div_ceil(1_000_000);
        Timeout::Millis(u64::try_from(millis).unwrap_or(u64::MAX))
    }
}

/// The point in time at which a waiting call gives up, fixed when the call starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Never,
    Test,
    At(Instant),
    /// This long after [`Deadline::start`] (see [`Timeout::lazy_deadline`]); until then, this
    /// long from whenever it is looked at.
    After(Duration),
}

impl Deadline {
    /// Whether the deadline has passed. A [`Timeout::Test`] deadline has always passed; a
    /// [`Timeout::Block`] deadline never does.
    #[must_use]
    pub fn expired(self) -> bool {
        match self.kind {
            Kind::Never | Kind::After(_) => false,
            Kind::Test => true,
            Kind::At(at) => Instant::now() >= at,
        }
    }

    /// Like [`expired`](Self::expired), against a clock reading the caller already has.
    pub(crate) fn expired_at(self, now: Instant) -> bool {
        match self.kind {
            Kind::Never | Kind::After(_) => false,
            Kind::Test => true,
            Kind::At(at) => now >= at,
        }
    }

    /// Starts a deadline of [`Timeout::lazy_deadline`] now (reading the clock); any other
    /// deadline stays as it is, without a clock reading.
    pub(crate) fn start(&mut self) {
        if let Kind::After(wait) = self.kind {
            *self = Instant::now()
                .checked_add(wait)
                .map_or(Deadline { kind: Kind::Never }, |at| Deadline {
                    kind: Kind::At(at),
                });
        }
    }

    /// Time left until the deadline, zero once it has passed; `None` means forever.
    #[must_use]
    pub fn remaining(self) -> Option<Duration> {
        match self.kind {
            Kind::Never => None,
            Kind::Test => Some(Duration::ZERO),
            Kind::At(at) => Some(at.saturating_duration_since(Instant::now())),
            Kind::After(wait) => Some(wait),
        }
    }

    /// Whether this deadline comes from [`Timeout::Test`] (or `Millis(0)`): check once, never
    /// block.
    #[must_use]
    pub fn is_test(self) -> bool {
        self.kind == Kind::Test
    }

    /// The earlier of this deadline and `max` from now; `max` too long to represent leaves the
    /// deadline as it is.
    pub(crate) fn capped(self, max: Duration) -> Deadline {
        let now = Instant::now();
        let Some(cap) = now.checked_add(max) else {
            let mut started = self;
            started.start();
            return started;
        };
        let kind = match self.kind {
            Kind::Never => Kind::At(cap),
            Kind::Test => Kind::Test,
            Kind::At(at) => Kind::At(at.min(cap)),
            Kind::After(wait) => Kind::At(now.checked_add(wait).map_or(cap, |at| at.min(cap))),
        };
        Deadline { kind }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn test_deadline_has_always_expired_and_never_blocks() {
        let deadline = Timeout::Test.deadline();
        assert!(deadline.is_test());
        assert!(deadline.expired());
        assert_eq!(deadline.remaining(), Some(Duration::ZERO));
        assert!(Timeout::Millis(0).deadline().is_test());
    }

    #[test]
    fn block_deadline_never_expires() {
        let deadline = Timeout::Block.deadline();
        assert!(!deadline.is_test());
        assert!(!deadline.expired());
        assert_eq!(deadline.remaining(), None);
    }

    #[test]
    fn millis_deadline_counts_down() {
        let deadline = Timeout::Millis(10_000).deadline();
        assert!(!deadline.expired());
        let left = deadline
            .remaining()
            .expect("a finite timeout has a finite remainder");
        assert!(left <= Duration::from_secs(10) && left > Duration::from_secs(9));

        let passed = Timeout::Millis(1).deadline();
        std::thread::sleep(Duration::from_millis(2));
        assert!(passed.expired());
        assert_eq!(passed.remaining(), Some(Duration::ZERO));
    }

    #[test]
    fn huge_millis_neither_overflows_nor_expires() {
        let deadline = Timeout::Millis(u64::MAX).deadline();
        assert!(!deadline.expired());
        let year = Duration::from_secs(365 * 24 * 3600);
        assert!(!matches!(deadline.remaining(), Some(left) if left <= year));
        let capped = deadline.capped(Duration::MAX);
        assert!(!matches!(capped.remaining(), Some(left) if left <= year));
    }

    #[test]
    fn duration_rounds_up_to_whole_millis() {
        assert_eq!(
            Timeout::from(Duration::from_micros(1500)),
            Timeout::Millis(2)
        );
        assert_eq!(Timeout::from(Duration::from_millis(7)), Timeout::Millis(7));
        assert_eq!(Timeout::from(Duration::ZERO), Timeout::Millis(0));
        assert_eq!(Timeout::from(Duration::MAX), Timeout::Millis(u64::MAX));
    }

    #[test]
    fn lazy_deadline_counts_from_its_start() {
        assert!(Timeout::Millis(0).lazy_deadline().is_test());
        assert!(Timeout::Test.lazy_deadline().is_test());
        assert_eq!(Timeout::Block.lazy_deadline().remaining(), None);
        let mut lazy = Timeout::Millis(5).lazy_deadline();
        std::thread::sleep(Duration::from_millis(10));
        assert!(!lazy.expired(), "not started: the 5 ms have not begun");
        lazy.start();
        assert!(!lazy.expired());
        assert!(lazy
            .remaining()
            .is_some_and(|left| left <= Duration::from_millis(5)));
        std::thread::sleep(Duration::from_millis(6));
        assert!(lazy.expired());
        let capped = Timeout::Millis(60_000)
            .lazy_deadline()
            .capped(Duration::from_millis(1));
        assert!(capped
            .remaining()
            .is_some_and(|left| left <= Duration::from_millis(1)));
        let mut huge = Timeout::Millis(u64::MAX).lazy_deadline();
        huge.start();
        assert!(!huge.expired());
    }

    #[test]
    fn capped_takes_the_earlier_deadline() {
        let slice = Duration::from_millis(5);
        let never = Timeout::Block.deadline().capped(slice);
        assert!(never.remaining().is_some_and(|left| left <= slice));
        let soon = Timeout::Millis(1)
            .deadline()
            .capped(Duration::from_secs(60));
        assert!(soon
            .remaining()
            .is_some_and(|left| left <= Duration::from_millis(1)));
        assert!(Timeout::Test.deadline().capped(slice).is_test());
    }
}
