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

impl From<Timeout> for Deadline {
    /// [`Timeout::deadline`]: counted from now.
    fn from(timeout: Timeout) -> Self {
        timeout.deadline()
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
}

impl Deadline {
    /// Whether the deadline has passed. A [`Timeout::Test`] deadline has always passed; a
    /// [`Timeout::Block`] deadline never does.
    #[must_use]
    pub fn expired(self) -> bool {
        match self.kind {
            Kind::Never => false,
            Kind::Test => true,
            Kind::At(at) => Instant::now() >= at,
        }
    }

    /// Like [`expired`](Self::expired), against a clock reading the caller already has.
    pub(crate) fn expired_at(self, now: Instant) -> bool {
        match self.kind {
            Kind::Never => false,
            Kind::Test => true,
            Kind::At(at) => now >= at,
        }
    }

    /// Time left until the deadline, zero once it has passed; `None` means forever.
    #[must_use]
    pub fn remaining(self) -> Option<Duration> {
        match self.kind {
            Kind::Never => None,
            Kind::Test => Some(Duration::ZERO),
            Kind::At(at) => Some(at.saturating_duration_since(Instant::now())),
        }
    }

    /// What is left of this deadline, as the timeout of the next wait of a call made of
    /// several waits (so that together they keep to the call's timeout): `Block` for none,
    /// `Test` once it has passed, else the milliseconds left, rounded up.
    #[must_use]
    pub fn left(self) -> Timeout {
        match self.kind {
            Kind::Never => Timeout::Block,
            Kind::Test => Timeout::Test,
            Kind::At(at) => match at.saturating_duration_since(Instant::now()) {
                left if left.is_zero() => Timeout::Test,
                left => Timeout::from(left),
            },
        }
    }

    /// The earlier of this deadline and `other`, without reading the clock: a test deadline
    /// comes before every other, one that never comes after every other. For a call that
    /// waits until the first of two deadlines (its own, and one of its machinery's) and
    /// would otherwise read the clock to compare the time left of one with the other.
    #[must_use]
    pub fn earlier(self, other: Deadline) -> Deadline {
        let kind = match (self.kind, other.kind) {
            (Kind::Test, _) | (_, Kind::Test) => Kind::Test,
            (Kind::Never, kind) | (kind, Kind::Never) => kind,
            (Kind::At(a), Kind::At(b)) => Kind::At(a.min(b)),
        };
        Deadline { kind }
    }

    /// Whether this deadline comes from [`Timeout::Test`] (or `Millis(0)`): check once, never
    /// block.
    #[must_use]
    pub fn is_test(self) -> bool {
        self.kind == Kind::Test
    }

    /// This deadline capped at `max` from the moment the slice is resolved (turned into a
    /// [`Deadline`]), not from now: a wait that takes a slice resolves it only when it has to
    /// wait, so one whose condition already holds never reads the clock.
    #[must_use]
    pub fn slice(self, max: Duration) -> Slice {
        Slice {
            deadline: self,
            max,
        }
    }

    /// The earlier of this deadline and `max` from now; `max` too long to represent leaves the
    /// deadline as it is.
    pub(crate) fn capped(self, max: Duration) -> Deadline {
        let Some(cap) = Instant::now().checked_add(max) else {
            return self;
        };
        let kind = match self.kind {
            Kind::Never => Kind::At(cap),
            Kind::Test => Kind::Test,
            Kind::At(at) => Kind::At(at.min(cap)),
        };
        Deadline { kind }
    }
}

/// A [`Deadline`] capped at a maximum wait counted from when it is resolved (see
/// [`Deadline::slice`]): what a wait that must look up from time to time (at the health of
/// the peers it waits for, say) passes to each of its waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    deadline: Deadline,
    max: Duration,
}

impl From<Slice> for Deadline {
    fn from(slice: Slice) -> Self {
        slice.deadline.capped(slice.max)
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
    fn slices_cap_from_when_they_are_resolved() {
        let max = Duration::from_millis(50);
        let block = Timeout::Block.deadline().slice(max);
        std::thread::sleep(Duration::from_millis(20));
        // Resolved now, not when sliced: a full 50 ms from here.
        let left = Deadline::from(block).remaining().expect("capped");
        assert!(left > Duration::from_millis(40) && left <= max);
        // A nearer deadline stays the limit; a test stays a test.
        let near = Timeout::Millis(5).deadline();
        let left = Deadline::from(near.slice(max)).remaining().expect("finite");
        assert!(left <= Duration::from_millis(5));
        assert!(Deadline::from(Timeout::Test.deadline().slice(max)).is_test());
    }

    #[test]
    fn the_earlier_deadline_is_picked_without_the_clock() {
        let (never, test) = (Timeout::Block.deadline(), Timeout::Test.deadline());
        let near = Timeout::Millis(5).deadline();
        let far = Timeout::Millis(60_000).deadline();
        assert_eq!(near.earlier(far), near);
        assert_eq!(far.earlier(near), near);
        assert_eq!(never.earlier(far), far);
        assert_eq!(far.earlier(never), far);
        assert_eq!(never.earlier(never), never);
        assert!(test.earlier(never).is_test());
        assert!(far.earlier(test).is_test());
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
    fn waits_share_what_is_left() {
        assert_eq!(Timeout::Block.deadline().left(), Timeout::Block);
        assert_eq!(Timeout::Test.deadline().left(), Timeout::Test);
        assert_eq!(Timeout::Millis(0).deadline().left(), Timeout::Test);
        let deadline = Timeout::Millis(50).deadline();
        assert!(matches!(deadline.left(), Timeout::Millis(ms) if (1..=50).contains(&ms)));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(deadline.left(), Timeout::Test);
        let huge = Timeout::Millis(u64::MAX).deadline().left();
        assert!(
            matches!(huge, Timeout::Block | Timeout::Millis(1_000_000..)),
            "{huge:?}"
        );
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
