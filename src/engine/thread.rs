//! The progress thread: drives progress while no user thread waits.
//!
//! Both providers we target (tcp via `ofi_rxm`, and shm) need the application to drive data
//! progress: a write into a rank only lands while that rank is inside libfabric. Waiting user
//! threads poll themselves (see [`handoff`](super::handoff)); this thread covers the time when
//! none does. It sleeps on the provider's wait object ([`Endpoint::wait`]) and wakes when
//! traffic arrives, so writes land while all user threads compute; where the provider has no
//! wait object it polls with an exponential sleep (50 µs to 1 ms). While this rank's own
//! operations are in flight, or traffic arrived within the last [`FLOWING`], it polls
//! (yielding the core) instead, since data only moves while somebody drives the provider: a streaming
//! receiver pulls each chunk as it comes instead of paying a wake-up per socket event. While a
//! user thread posts, it stands aside in short naps instead ([`POSTING_NAP`]), driving the
//! provider at least every [`POSTING_NAPS`] naps.
//!
//! [`Endpoint::wait`]: gaspi_fabric::Endpoint::wait

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::context::Inner;

/// The background progress thread of a context.
pub(crate) struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    inner: Arc<Inner>,
}

impl ProgressThread {
    pub(crate) fn start(inner: Arc<Inner>) -> crate::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let inner = Arc::clone(&inner);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("gaspi-progress-{}", inner.rank))
                .spawn(move || run(&inner, &stop))
                .map_err(|e| crate::Error::io("spawning the progress thread", e))?
        };
        Ok(ProgressThread {
            stop,
            handle: Some(handle),
            inner,
        })
    }
}

/// How long the progress thread stands aside, at most, before looking again whether a user
/// thread still polls.
const STAND_ASIDE: Duration = Duration::from_millis(1);

/// How long the progress thread polls without seeing any progress before it sleeps in the
/// provider instead: an operation towards a dead or stopped peer may not complete for a long
/// time (shm), and polling for it would take a core for good; a rank whose traffic stopped is
/// idle.
const STALL: Duration = Duration::from_millis(10);

/// How long the progress thread sleeps in the provider's wait object at a time.
const SLEEP_MS: i32 = 100;

/// A sleep in the wait object that ends sooner than this was ended by traffic.
const EARLY_WAKE: Duration = Duration::from_millis(50);

/// How long the progress thread stands aside at a time, instead of polling, while user
/// threads post: both in the provider at once contend for its locks (over tcp a futex wait and
/// wake per message, measured), and a user thread that posts drives the provider itself.
const POSTING_NAP: Duration = Duration::from_micros(100);

/// How many naps in a row (see [`POSTING_NAP`]) the progress thread takes at most before it
/// drives the provider again while user threads post, so at least once a millisecond: a thread
/// that posts now and then does not wait for what it posted, and what is in flight moves only
/// while somebody drives. Counted rather than timed: a nap ends early only when a poller goes
/// to sleep, and the count costs no clock reading per round.
const POSTING_NAPS: u32 = 10;

/// How long after the last traffic the progress thread keeps polling although none of this
/// rank's operations are in flight: long enough to cover the gaps between the chunks of a
/// stream, short enough that a rank receiving now and then does not keep a core busy.
const FLOWING: Duration = Duration::from_millis(1);

fn run(inner: &Inner, stop: &AtomicBool) {
    const MAX_SLEEP: Duration = Duration::from_millis(1);
    let mut sleep = Duration::from_micros(50);
    let mut stalled_since: Option<Instant> = None;
    // When the provider last reported anything.
    let mut last_traffic: Option<Instant> = None;
    // The endpoint's post count when this thread last drove the provider, and the naps taken
    // since.
    let mut posts_seen = inner.ep.posts();
    let mut naps = 0;
    while !stop.load(Ordering::Acquire) {
        if inner.engine.handoff.stand_aside(Some(STAND_ASIDE)) {
            continue;
        }
        let pending =
            inner.engine.in_flight.load(Ordering::Acquire) > 0 || inner.engine.has_retries();
        if !pending {
            stalled_since = None;
        }
        let stalled = stalled_since.is_some_and(|since| since.elapsed() > STALL);
        let flowing = last_traffic.is_some_and(|at| at.elapsed() <= FLOWING);
        let progressed = if (pending && !stalled) || flowing {
            // Operations are in flight or traffic is flowing, and with manual progress data
            // moves only while somebody drives the provider: sleeping in the wait object
            // between socket events cost 30% of streaming bandwidth (measured, tcp and shm).
            // Poll, yielding the core; but stand aside while a user thread posts.
            let posts = inner.ep.posts();
            if posts != posts_seen && naps < POSTING_NAPS {
                posts_seen = posts;
                naps += 1;
                inner.engine.handoff.nap(POSTING_NAP);
                continue;
            }
            let progressed = inner.progress();
            if !progressed {
                if pending {
                    stalled_since.get_or_insert_with(Instant::now);
                }
                std::thread::yield_now();
            }
            progressed
        } else if inner.ep.cq_waitable() {
            // A bounded sleep rather than an infinite one: a stop request is also signalled,
            // but the bound keeps shutdown prompt even if a provider misses the signal. A
            // sleep that ends early without a completion was ended by socket traffic (the
            // chunks of a large write arriving produce no completion until the last): that
            // is traffic too, and polling pulls the rest without a wake-up per chunk.
            let slept = Instant::now();
            inner.progress_blocking(SLEEP_MS) || slept.elapsed() < EARLY_WAKE
        } else if inner.progress() {
            sleep = Duration::from_micros(50);
            true
        } else {
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(MAX_SLEEP);
            false
        };
        // What this thread's own handlers and retries posted is no user thread's.
        posts_seen = inner.ep.posts();
        naps = 0;
        if progressed {
            stalled_since = None;
            last_traffic = Some(Instant::now());
        }
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.inner.ep.signal();
        if let Some(handle) = self.handle.take() {
            // A panic in the progress thread has already been reported by the panic hook;
            // there is nothing more to do with it while shutting down.
            let _ = handle.join();
        }
    }
}
