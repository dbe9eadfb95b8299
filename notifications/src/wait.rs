//! Owns the spin-then-block wait loop shared by every waiting call of the runtime
//! ([`wait_until`]), and the tuning of how long it spins and how long it sleeps at a time.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::{Deadline, Error, EventCount, Result, Wake};

/// How long a waiter keeps polling before it goes to sleep. Long enough to cover a round trip
/// of a 64 KiB message over loopback tcp (~50 µs), so ping-pong latency does not pay for a
/// sleep and wake-up; short enough that an idle waiter costs next to nothing. Under loom,
/// spinning would only multiply the explored interleavings without testing anything new, so
/// loom goes straight to the blocking path that needs checking.
const SPIN_TIME: Duration = if cfg!(loom) {
    Duration::ZERO
} else {
    Duration::from_micros(200)
};

/// The first part of the spin polls without giving up the core. Yielding on every poll from
/// the start cost 2–3× in 8 B ping-pong latency over tcp (measured: 22 µs instead of 8.6 µs);
/// after this short burst the waiter yields the core at every poll, so ranks sharing a core,
/// and the kernel threads that move loopback traffic, get to run at once. A pause ladder
/// before the first yield (crossbeam's `Backoff::snooze`: 127 pause instructions, about 6 µs)
/// held the core that long past the burst: two ranks that the scheduler put on one core took
/// 27.6 µs per 8 B ping-pong over shm instead of raw libfabric's 22.3 µs, which yields at once.
const HOT_SPIN: Duration = if cfg!(loom) {
    Duration::ZERO
} else {
    Duration::from_micros(20)
};

/// How long a waiter polls before it sleeps when the node is oversubscribed (see
/// [`set_oversubscribed`]): longer, because every poll yields the core, and a rank that sleeps
/// is only woken through its progress thread, a hand-off that costs tens of microseconds when
/// ranks share cores.
const YIELD_SPIN_TIME: Duration = if cfg!(loom) {
    Duration::ZERO
} else {
    Duration::from_millis(2)
};

/// Whether waits yield the core at every poll; see [`set_oversubscribed`].
static OVERSUBSCRIBED: AtomicBool = AtomicBool::new(false);

/// Tells every wait of this process whether the ranks on this node outnumber its cores.
///
/// Then a waiter never polls without yielding: the rank it waits for may need this very core
/// to run, and a hot spin only delays it. It yields between polls from the start (as MPI
/// libraries do when oversubscribed) for up to 2 ms before it sleeps. Measured with 4 ranks on
/// 2 cores over shm, a barrier took 86 µs with the hot spin and 13–20 µs without.
pub fn set_oversubscribed(on: bool) {
    OVERSUBSCRIBED.store(on, Ordering::Relaxed);
}

/// Longest and shortest time a waiter sleeps before it wakes up by itself to drive progress.
///
/// A notification normally wakes the waiter at once (the progress thread calls
/// [`EventCount::notify_all`] whenever it processes events), but an event can sit unnoticed in a
/// completion queue that nobody is reading (no progress thread, or one that is descheduled on an
/// oversubscribed node). The slice bounds how long such an event can wait for the waiter's own
/// progress call. It starts at 1 ms and doubles up to 8 ms while sleeps end without any
/// notification, so a long-idle waiter wakes about 125 times a second (negligible CPU even with
/// many ranks per core), and any notification brings it back to 1 ms.
///
/// Loom does not model time, and a sleep that could end by itself would make a model depend on
/// how fast the checker runs; under loom the slices are endless, so only a notification ends a
/// sleep, which is exactly what the models must prove happens.
const MIN_SLICE: Duration = if cfg!(loom) {
    Duration::MAX
} else {
    Duration::from_millis(1)
};
const MAX_SLICE: Duration = if cfg!(loom) {
    Duration::MAX
} else {
    Duration::from_millis(8)
};

/// What a waiting call drives while it waits: the runtime's non-blocking progress step, a
/// hook that learns when the waiter stops polling to sleep, and a way to end the wait early.
///
/// Any `FnMut() -> bool` closure is a `Progress` whose hook does nothing and that never
/// interrupts.
pub trait Progress {
    /// Drives progress once without blocking; returns whether anything happened.
    fn progress(&mut self) -> bool;

    /// Called with `true` just before the waiter sleeps, and with `false` when it wakes up and
    /// polls again. The runtime uses it to hand progress to its progress thread while no user
    /// thread is polling.
    fn sleeping(&mut self, asleep: bool) {
        let _ = asleep;
    }

    /// Whether the wait should end now, its condition unmet, with [`Error::Interrupted`]: what
    /// the caller waits for may never come (the runtime's watched waits end so when a peer's
    /// death was recorded meanwhile, to look at once whether they depend on it).
    ///
    /// Asked whenever the spinning waiter looks at the clock (not on every poll) and whenever
    /// a sleeping one wakes, including by a notification of its event count: whoever makes it
    /// return `true` must then call [`EventCount::notify_all`] on that event count, or a
    /// sleeper notices only at the end of its slice (8 ms at most).
    fn interrupted(&mut self) -> bool {
        false
    }
}

impl<F: FnMut() -> bool> Progress for F {
    fn progress(&mut self) -> bool {
        self()
    }
}

/// Waits until `poll` returns `Some`, driving `progress` while waiting, and returns the value.
///
/// It polls once first; a condition that already holds is returned without calling
/// `progress`. Then each round calls `progress` once (it must not block; it returns whether it
/// did anything, such as reading completions), then `poll` once. When neither succeeds the
/// caller spins with a short hot spin and then yields the core between polls, for about 200 µs
/// in all, then sleeps on `event` in slices of 1 to 8 ms, calling `progress` again after each
/// slice. A round in which `progress` did something
/// restarts the spinning, since more events are likely to follow; so does a sleep that a
/// notification of `event` ended within the spin time without making `poll` succeed (others'
/// events arriving densely: a waiter that slept again would cost each of their notifiers a
/// wake-up system call). A waiter that is notified rarely, or never, goes back to sleep after
/// one more poll. A wait that a thread begins within a spin time of its previous wait running
/// out idle (asleep, or past its spin time when the scheduler held it beyond its deadline
/// before it could sleep) sleeps at once, without spinning: the thread is polling in slices,
/// and an idle waiter would otherwise spin at the start of every slice.
///
/// Whatever makes `poll` succeed must be followed by [`event.notify_all()`](EventCount::notify_all),
/// otherwise a sleeping waiter only notices it at the end of its slice. `progress` may itself
/// notify `event`.
///
/// `progress` may end the wait early (see [`Progress::interrupted`]).
///
/// With a [`Timeout::Test`](crate::Timeout::Test) deadline this makes at most one progress
/// attempt and two polls and never blocks. A [`Timeout`](crate::Timeout) passed as `deadline`
/// starts counting once the first poll found the condition unmet.
///
/// # Errors
///
/// [`Error::Timeout`] when the deadline passes before `poll` succeeds;
/// [`Error::Interrupted`] when `progress` ended it. Nothing is consumed, so the wait can be
/// repeated.
// Never inlined, so that a profile tells the waiting loop from its caller: the callgrind
// harness (`scripts/callgrind-allreduce.sh`) leaves out what this function executes, whose
// instructions grow with the time waited. One call per wait costs nothing beside the loop.
#[inline(never)]
pub fn wait_until<T>(
    event: &EventCount,
    deadline: impl Into<Deadline>,
    mut poll: impl FnMut() -> Option<T>,
    progress: impl Progress,
) -> Result<T> {
    // A condition that already holds needs no progress call and no clock reading, which
    // together cost more than the rest of such a wait.
    if let Some(value) = poll() {
        return Ok(value);
    }
    let deadline = deadline.into();
    let mut spin = Spin::start();
    // A thread whose last wait ran out idle a moment ago is polling in slices (a library
    // moving several things on, a user's loop of short waits): spinning at the start of each
    // slice would keep an idle waiter busy for a spin time per slice, 2 ms of every 32 on an
    // oversubscribed node. Such a wait sleeps at once; a notification brings the spin back.
    if !deadline.is_test()
        && IDLE_SINCE
            .get()
            .is_some_and(|at| at.elapsed() < spin.time())
    {
        spin.skip();
    }
    let outcome = wait_rounds(event, deadline, &mut spin, poll, progress);
    IDLE_SINCE.set(match outcome {
        Err(Error::Timeout) if spin.idle => Some(Instant::now()),
        _ => None,
    });
    outcome
}

thread_local! {
    /// When this thread's last wait ran out idle (see [`Spin::idle`]); `None` once a wait
    /// ended otherwise.
    static IDLE_SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The rounds of [`wait_until`] after its first poll.
fn wait_rounds<T>(
    event: &EventCount,
    deadline: Deadline,
    spin: &mut Spin,
    mut poll: impl FnMut() -> Option<T>,
    mut progress: impl Progress,
) -> Result<T> {
    let mut slice = MIN_SLICE;
    loop {
        let progressed = progress.progress();
        if let Some(value) = poll() {
            return Ok(value);
        }
        if deadline.is_test() {
            return Err(Error::Timeout);
        }
        let step = if progressed {
            // More events are likely to follow: spin afresh.
            spin.restart(deadline)
        } else {
            spin.snooze(deadline)
        };
        match step {
            Step::Spin => {}
            Step::Looked => {
                if progress.interrupted() {
                    return Err(Error::Interrupted);
                }
            }
            Step::Expired => return Err(Error::Timeout),
            Step::Sleep => {
                // Taken only now, since a spinning round needs no key, and before one more
                // look: whatever changes the condition after that look also moves the
                // generation past this key and ends the sleep.
                let key = event.prepare();
                if let Some(value) = poll() {
                    return Ok(value);
                }
                progress.sleeping(true);
                spin.idle = true;
                let asleep = Instant::now();
                // Asked with the condition, after this thread counts as a sleeper: whoever
                // interrupts and then notifies either is seen here or wakes the sleep.
                let woken = event.wait(key, deadline.capped(slice), || {
                    poll()
                        .map(Ok)
                        .or_else(|| progress.interrupted().then_some(Err(Error::Interrupted)))
                });
                progress.sleeping(false);
                let notified = match woken {
                    Wake::Ready(outcome) => return outcome,
                    Wake::Notified => true,
                    Wake::TimedOut => false,
                };
                slice = if notified {
                    MIN_SLICE
                } else {
                    slice.saturating_mul(2).min(MAX_SLICE)
                };
                if notified && asleep.elapsed() < spin.time() {
                    // Woken within a spin time by a notification that was not ours: others'
                    // notifications are arriving densely (a peer streaming into another
                    // range, say). Sleeping again would make each of them pay a wake-up
                    // system call (~0.7 µs, against a few tens of ns for a direct
                    // write_notify to a polling waiter), so poll again for a spin time, as
                    // after progress: the notifiers then find no sleeper.
                    if let Step::Expired = spin.restart(deadline) {
                        return Err(Error::Timeout);
                    }
                } else {
                    // Look at the clock on the next round: the deadline may have passed while
                    // asleep, and the spin time certainly has, so an idle waiter (or one woken
                    // rarely) goes back to sleep after one more poll instead of spinning again.
                    spin.look_next();
                }
            }
        }
    }
}

/// What the spinning phase says after one pause.
enum Step {
    /// Poll again.
    Spin,
    /// Poll again; the clock was read (and neither the spin time nor the deadline is over).
    Looked,
    /// The spin time is over: sleep.
    Sleep,
    /// The deadline has passed.
    Expired,
}

/// Polls between two looks at the clock during the hot spin, where a poll takes tens of
/// nanoseconds: a clock reading (about 25 ns here) every eighth poll was still a tenth of the
/// loop, and 32 polls are about a microsecond, against a hot spin of 20 µs. Past the hot spin
/// every poll yields the core and looks at the clock after it: a yield can cost the waiter a
/// whole time slice of another process on a busy core, so spacing the looks let a `Millis(3)`
/// wait pinned beside a busy loop take 44 ms (8 yields before a look), where a clock reading
/// beside a yield costs next to nothing. Under loom, where spinning is off, every pause looks,
/// so a model goes straight to the sleep it checks.
const HOT_CLOCK_EVERY: u32 = if cfg!(loom) { 1 } else { 32 };

/// The bounded spinning phase of a wait.
struct Spin {
    /// When the spin began; `None` until the first look at the clock (which sets it), so that
    /// restarting a spin costs no clock reading. A wait's first pause looks (see
    /// [`start`](Self::start)).
    started: Option<Instant>,
    polls: u32,
    hot: bool,
    /// Yield at every poll and spin for [`YIELD_SPIN_TIME`] (see [`set_oversubscribed`]).
    yielding: bool,
    /// The wait's condition stayed unmet for a whole spin time: it slept at least once, or the
    /// look at the clock that found the spin time over found the deadline passed too. The
    /// latter is a loaded core holding the waiter past a short deadline while it yielded in its
    /// spin; it counts as a sleep, since otherwise every wait of a thread polling in slices on
    /// such a core would spin afresh, and hardly any would reach its sleep.
    idle: bool,
}

impl Spin {
    /// A spin whose first pause looks at the clock, so that the hot spin lasts [`HOT_SPIN`]
    /// from the wait's first unmet round. Begun at the next look instead, as a restart is, it
    /// ran [`HOT_CLOCK_EVERY`] polls longer, several microseconds where each poll reads a
    /// completion queue (both ranks of a ping-pong sharing one core hold it that much longer
    /// per message); the one clock reading falls while the awaited message is in flight.
    fn start() -> Self {
        let mut spin = Self {
            started: None,
            polls: 0,
            hot: true,
            yielding: OVERSUBSCRIBED.load(Ordering::Relaxed),
            idle: false,
        };
        spin.look_next();
        spin
    }

    /// Ends the spin before it began: the next look at the clock (the next pause) says sleep.
    fn skip(&mut self) {
        // `None` only within a spin time of the clock's origin: then the spin just runs.
        self.started = Instant::now().checked_sub(self.time());
        self.look_next();
    }

    /// Begins the spin again, hot, as of the next look at the clock, and says whether it
    /// looked and whether the deadline has passed ([`Step::Spin`], [`Step::Looked`] or
    /// [`Step::Expired`]). The call counts towards that look as a pause does: a wait that
    /// restarts on every round, or every other one (others' completions streaming in while
    /// its own condition stays unmet), still looks at the clock and ends at its deadline.
    fn restart(&mut self, deadline: Deadline) -> Step {
        self.started = None;
        self.hot = true;
        self.polls += 1;
        if self.polls < HOT_CLOCK_EVERY {
            return Step::Spin;
        }
        self.polls = 0;
        if deadline.expired_at(Instant::now()) {
            Step::Expired
        } else {
            Step::Looked
        }
    }

    /// How long this spin polls before it sleeps.
    fn time(&self) -> Duration {
        if self.yielding {
            YIELD_SPIN_TIME
        } else {
            SPIN_TIME
        }
    }

    /// Makes the next [`snooze`](Self::snooze) look at the clock.
    fn look_next(&mut self) {
        self.polls = HOT_CLOCK_EVERY - 1;
    }

    /// Pauses briefly: not at all first (the hot spin), then by yielding the core (so ranks
    /// sharing it still run). Every [`HOT_CLOCK_EVERY`] calls while hot, and at every call
    /// that yields, it looks at the clock to end the spin or notice the deadline.
    #[inline]
    fn snooze(&mut self, deadline: Deadline) -> Step {
        // Most rounds of the hot spin end here, inline: the call to the rest cost a third as
        // much as the poll of a short range.
        if self.hot && !self.yielding && self.polls + 1 < HOT_CLOCK_EVERY {
            self.polls += 1;
            return Step::Spin;
        }
        self.snooze_and_look(deadline)
    }

    /// [`snooze`](Self::snooze) beyond the hot spin's rounds without a look at the clock.
    #[inline(never)]
    fn snooze_and_look(&mut self, deadline: Deadline) -> Step {
        self.polls += 1;
        let mut step = Step::Spin;
        if self.polls >= HOT_CLOCK_EVERY || self.yielding || !self.hot {
            self.polls = 0;
            let now = Instant::now();
            let spun = now.saturating_duration_since(*self.started.get_or_insert(now));
            let spent = spun >= self.time();
            if deadline.expired_at(now) {
                self.idle |= spent;
                return Step::Expired;
            }
            if spent {
                return Step::Sleep;
            }
            self.hot = spun < HOT_SPIN;
            step = Step::Looked;
        }
        // Hot: poll again at once. A pause instruction costs ~140 cycles on current x86, a
        // large share of a shared-memory round trip, and the poll itself paces the loop. Past
        // the hot spin (or from the start when yielding), give the core away at every poll.
        if self.yielding || !self.hot {
            std::thread::yield_now();
        }
        step
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Timeout;
    use std::cell::Cell;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn the_callers_progress_alone_completes_the_wait() {
        let event = EventCount::new();
        let events = Cell::new(0_u32);
        let value = wait_until(
            &event,
            Timeout::Block.deadline(),
            || (events.get() >= 3).then_some(events.get()),
            || {
                events.set(events.get() + 1);
                true
            },
        );
        assert_eq!(value, Ok(3));
    }

    #[test]
    fn a_wait_that_keeps_progressing_for_others_still_times_out() {
        // Progress on every round that never meets the condition: completions of others'
        // operations streaming in (a peer writing into another range through the fabric).
        // The stream stops after 5 s, so that a wait blind to its deadline ends too.
        let event = EventCount::new();
        let begun = Instant::now();
        let result = wait_until(
            &event,
            Timeout::Millis(20),
            || None::<()>,
            || begun.elapsed() < Duration::from_secs(5),
        );
        assert_eq!(result, Err(Error::Timeout));
        let took = begun.elapsed();
        assert!(took < Duration::from_secs(2), "took {took:?}");
    }

    #[test]
    fn a_wait_right_after_one_that_ran_out_idle_does_not_spin() {
        let event = EventCount::new();
        let rounds = Cell::new(0_u32);
        let wait = || {
            wait_until(
                &event,
                Timeout::Millis(3),
                || None::<()>,
                || {
                    rounds.set(rounds.get() + 1);
                    false
                },
            )
        };
        assert_eq!(wait(), Err(Error::Timeout));
        rounds.set(0);
        assert_eq!(wait(), Err(Error::Timeout));
        // One round before each sleep of 1, 2 (and what is left of 3) ms, against thousands
        // of rounds in a spin.
        assert!(rounds.get() <= 8, "{} rounds", rounds.get());
    }

    #[test]
    fn a_wait_right_after_one_held_past_its_deadline_in_its_spin_does_not_spin() {
        // The first wait's second round keeps the thread beyond the deadline, as a loaded core
        // that runs other processes does to a waiter yielding in its spin: the wait runs out
        // at its next look at the clock, past its spin time, without having slept.
        let event = EventCount::new();
        let rounds = Cell::new(0_u32);
        let wait = |timeout, held| {
            wait_until(
                &event,
                timeout,
                || None::<()>,
                || {
                    rounds.set(rounds.get() + 1);
                    if rounds.get() == 2 {
                        std::thread::sleep(held);
                    }
                    false
                },
            )
        };
        assert_eq!(
            wait(Timeout::Millis(50), Duration::from_millis(60)),
            Err(Error::Timeout)
        );
        rounds.set(0);
        assert_eq!(
            wait(Timeout::Millis(3), Duration::ZERO),
            Err(Error::Timeout)
        );
        // As after a wait that slept: one round before each sleep.
        assert!(rounds.get() <= 8, "{} rounds", rounds.get());
    }

    /// Progress that never moves anything and interrupts once `stop` is set.
    struct Stoppable<'a> {
        stop: &'a AtomicBool,
        progressing: bool,
    }

    impl Progress for Stoppable<'_> {
        fn progress(&mut self) -> bool {
            self.progressing
        }
        fn interrupted(&mut self) -> bool {
            self.stop.load(Ordering::Acquire)
        }
    }

    /// Waits with a 20 s timeout on a condition that never holds while another thread
    /// interrupts after 50 ms (notifying `event`); returns the outcome and how long it took.
    fn interrupted_wait(progressing: bool) -> (Result<()>, Duration) {
        let event = Arc::new(EventCount::new());
        let stop = Arc::new(AtomicBool::new(false));
        let interrupter = {
            let (event, stop) = (Arc::clone(&event), Arc::clone(&stop));
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                stop.store(true, Ordering::Release);
                event.notify_all();
            })
        };
        let start = Instant::now();
        let progress = Stoppable {
            stop: &stop,
            progressing,
        };
        let result = wait_until(&event, Timeout::Millis(20_000), || None, progress);
        let took = start.elapsed();
        interrupter.join().expect("the interrupter does not panic");
        (result, took)
    }

    #[test]
    fn an_interruption_ends_a_sleeping_wait() {
        let (result, took) = interrupted_wait(false);
        assert_eq!(result, Err(Error::Interrupted));
        assert!(took < Duration::from_secs(5), "took {took:?}");
    }

    #[test]
    fn an_interruption_ends_a_wait_that_keeps_progressing() {
        // Never sleeps: others' completions keep it spinning.
        let (result, took) = interrupted_wait(true);
        assert_eq!(result, Err(Error::Interrupted));
        assert!(took < Duration::from_secs(5), "took {took:?}");
    }

    #[test]
    fn a_wait_descheduled_in_its_spin_ends_one_round_past_its_deadline() {
        // A deadline within the spin time, past the hot spin: from then on every round holds
        // the thread 1 ms, as a yield does where another process takes the core for a time
        // slice. The wait must look at the clock after every such round and end at the first
        // past its deadline. (Looking every 8th round, it made 1 to 7 more; it passed by
        // chance, when its looks fell right, with a chance of 1 in 4 per wait, so 1 in 1024
        // for the 5 waits.)
        const HELD_FROM: Duration = Duration::from_micros(100);
        const LIMIT: Duration = Duration::from_micros(150);
        assert!(HOT_SPIN < HELD_FROM && LIMIT < SPIN_TIME);
        let event = EventCount::new();
        for _ in 0..5 {
            // Not within a spin time of the last wait, which ran out idle: this one spins.
            std::thread::sleep(Duration::from_millis(1));
            let late = Cell::new(0_u32);
            let begun = Instant::now();
            let result = wait_until(
                &event,
                Timeout::Block.deadline().slice(LIMIT),
                || None::<()>,
                || {
                    let at = begun.elapsed();
                    if at >= LIMIT {
                        late.set(late.get() + 1);
                    }
                    if at >= HELD_FROM {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    false
                },
            );
            assert_eq!(result, Err(Error::Timeout));
            assert!(
                late.get() <= 1,
                "{} rounds began past the deadline",
                late.get()
            );
        }
    }

    #[test]
    fn a_condition_that_holds_returns_without_progress() {
        let event = EventCount::new();
        let progress_calls = Cell::new(0);
        let result = wait_until(
            &event,
            Timeout::Millis(1_000),
            || Some(7),
            || {
                progress_calls.set(progress_calls.get() + 1);
                true
            },
        );
        assert_eq!(result, Ok(7));
        assert_eq!(progress_calls.get(), 0);
    }

    #[test]
    fn test_deadline_progresses_once_and_polls_twice() {
        let event = EventCount::new();
        let (progress_calls, poll_calls) = (Cell::new(0), Cell::new(0));
        let start = Instant::now();
        let result: Result<()> = wait_until(
            &event,
            Timeout::Test.deadline(),
            || {
                poll_calls.set(poll_calls.get() + 1);
                None
            },
            || {
                progress_calls.set(progress_calls.get() + 1);
                false
            },
        );
        assert!(start.elapsed() < Duration::from_millis(1));
        assert_eq!(result, Err(Error::Timeout));
        // Once before progress (the condition may already hold), once after it.
        assert_eq!((progress_calls.get(), poll_calls.get()), (1, 2));
    }

    #[test]
    fn a_notification_from_another_thread_ends_a_blocking_wait() {
        let event = Arc::new(EventCount::new());
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let (event, flag) = (Arc::clone(&event), Arc::clone(&flag));
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                flag.store(true, Ordering::Release);
                event.notify_all();
            })
        };
        let result = wait_until(
            &event,
            Timeout::Block.deadline(),
            || flag.load(Ordering::Acquire).then_some("set"),
            || false,
        );
        setter.join().expect("the setter does not panic");
        assert_eq!(result, Ok("set"));
    }

    #[test]
    fn dense_foreign_notifications_keep_the_waiter_polling() {
        struct Sleeps<'a>(&'a Cell<u32>);
        impl Progress for Sleeps<'_> {
            fn progress(&mut self) -> bool {
                false
            }
            fn sleeping(&mut self, asleep: bool) {
                if asleep {
                    self.0.set(self.0.get() + 1);
                }
            }
        }
        let event = Arc::new(EventCount::new());
        let stop = Arc::new(AtomicBool::new(false));
        // Notifies as fast as it can, for a condition the waiter does not look at.
        let notifier = {
            let (event, stop) = (Arc::clone(&event), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    event.notify_all();
                    std::hint::spin_loop();
                }
            })
        };
        let sleeps = Cell::new(0);
        let wait = Duration::from_millis(100);
        let start = Instant::now();
        let result: Result<()> = wait_until(
            &event,
            Timeout::Millis(100).deadline(),
            || None,
            Sleeps(&sleeps),
        );
        let elapsed = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        notifier.join().expect("the notifier does not panic");
        assert_eq!(result, Err(Error::Timeout));
        assert!(elapsed >= wait);
        // Every sleep but the first follows a spin time of polling, or a sleep of at least a
        // spin time; a waiter that slept again after each notification would sleep thousands
        // of times.
        let bound = elapsed.as_micros() / SPIN_TIME.as_micros() + 1;
        assert!(
            u128::from(sleeps.get()) <= bound,
            "{} sleeps in {elapsed:?}, at most {bound} expected",
            sleeps.get()
        );
    }

    #[test]
    fn an_idle_wait_sleeps_instead_of_spinning() {
        let event = EventCount::new();
        let progress_calls = Cell::new(0_u32);
        let result: Result<()> = wait_until(
            &event,
            Timeout::Millis(200).deadline(),
            || None,
            || {
                progress_calls.set(progress_calls.get() + 1);
                false
            },
        );
        assert_eq!(result, Err(Error::Timeout));
        // 200 µs of spinning (the first 20 µs without pauses, so a few thousand calls of this
        // empty closure) and ~30 sleep slices; a busy loop would make millions of calls.
        assert!(
            progress_calls.get() < 20_000,
            "{} progress calls in 200 ms",
            progress_calls.get()
        );
    }
}
