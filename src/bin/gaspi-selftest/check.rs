//! Verification helpers shared by the scenarios: the failure type, test patterns and byte
//! comparison that says where and how data differed.

use std::fmt::Display;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

/// A failed check, with a message precise enough to debug from a job log.
#[derive(Debug)]
pub struct Failure(pub String);

/// Result of a scenario step.
pub type Outcome<T = ()> = Result<T, Failure>;

/// Returns a [`Failure`] with the formatted message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err($crate::check::Failure(format!($($message)+)));
        }
    };
}
pub(crate) use ensure;

/// Attaches what the rank was doing to a runtime error.
pub trait Doing<T> {
    /// Maps an error to a [`Failure`] naming the step, which is only formatted on error.
    fn doing<D: Display>(self, step: impl FnOnce() -> D) -> Outcome<T>;
}

impl<T> Doing<T> for gaspi::Result<T> {
    fn doing<D: Display>(self, step: impl FnOnce() -> D) -> Outcome<T> {
        self.map_err(|e| Failure(format!("{}: {e}", step())))
    }
}

/// The threads of a rank that share one piece of work: the first one that fails stops the
/// others (instead of leaving them waiting for what will never come), and one deadline bounds
/// them all.
pub struct Crew {
    failed: AtomicBool,
    limit: Duration,
    deadline: Instant,
}

impl Crew {
    /// A crew whose work must be done within `limit` from now.
    pub fn new(limit: Duration) -> Crew {
        Crew {
            failed: AtomicBool::new(false),
            limit,
            deadline: Instant::now() + limit,
        }
    }

    /// Whether another thread failed; a failure, saying `what` was not done, once the deadline
    /// has passed.
    pub fn should_stop<D: Display>(&self, what: impl FnOnce() -> D) -> Outcome<bool> {
        if self.failed.load(Ordering::Acquire) {
            return Ok(true);
        }
        ensure!(
            Instant::now() < self.deadline,
            "{}: not done after {:?}",
            what(),
            self.limit
        );
        Ok(false)
    }

    /// Runs a thread's work; a failure stops every other thread of the crew.
    pub fn guarded<T>(&self, work: impl FnOnce() -> Outcome<T>) -> Outcome<T> {
        let result = work();
        if result.is_err() {
            self.failed.store(true, Ordering::Release);
        }
        result
    }

    /// The outcome of a thread of the crew (`who`), a panic included.
    pub fn join<T>(handle: ScopedJoinHandle<'_, Outcome<T>>, who: impl Display) -> Outcome<T> {
        handle
            .join()
            .unwrap_or_else(|_| Err(Failure(format!("{who} panicked"))))
    }
}

/// What a scenario observed, for the test harness to judge: `key=value` pairs, printed on one
/// line `data <scenario> rank R: key=value; key=value` after the `ok` line. Values are
/// observations (counts, digests, error variants, elapsed milliseconds), never verdicts: the
/// tests compare them with what they expect.
#[derive(Debug, Default)]
pub struct Data(Vec<(String, String)>);

impl Data {
    /// Records `value` under `key` (characters that would break the line are replaced).
    pub fn put(&mut self, key: &str, value: impl Display) {
        let clean = |s: String| s.replace([';', '=', '\n'], "_");
        self.0
            .push((clean(key.to_owned()), clean(value.to_string())));
    }

    /// Adds what `other` recorded (a thread's observations), after this one's.
    pub fn append(&mut self, other: Data) {
        self.0.extend(other.0);
    }

    /// Records how a call ended: `Ok`, or its error in the form of [`describe`].
    pub fn outcome<T>(&mut self, key: &str, result: &gaspi::Result<T>) {
        self.put(key, outcome(result));
    }

    /// Runs `call`, records how it ended under `key` (as [`outcome`](Self::outcome) does) and
    /// how long it took under `<key>_ms`; returns its result and that duration, for the
    /// scenarios that also bound it themselves.
    pub fn timed<T>(
        &mut self,
        key: &str,
        call: impl FnOnce() -> gaspi::Result<T>,
    ) -> (gaspi::Result<T>, Duration) {
        let start = Instant::now();
        let result = call();
        let took = start.elapsed();
        self.outcome(key, &result);
        self.put(&format!("{key}_ms"), took.as_millis());
        (result, took)
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `key=value; ...` line.
    pub fn line(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Prints the data line of `scenario` for `rank` now and flushes it, for a rank that will
    /// not live to report at the end (it exits, aborts or is killed).
    pub fn print_now(&self, scenario: &str, rank: u32) {
        println!("data {scenario} rank {rank}: {}", self.line());
        // The line must leave before the process does; a closed stdout has no reader anyway.
        let _ = std::io::Write::flush(&mut std::io::stdout());
    }
}

/// The state vector as one letter per rank: `H` healthy, `C` corrupt.
pub fn states(ctx: &gaspi::Context) -> String {
    ctx.state_vec()
        .iter()
        .map(|s| match s {
            gaspi::State::Healthy => 'H',
            gaspi::State::Corrupt => 'C',
        })
        .collect()
}

/// Microseconds on the host's monotonic clock (`CLOCK_MONOTONIC`), which every process of the
/// host reads alike: one rank's reading compares with another's (unlike an `Instant`, which
/// cannot leave its process).
pub fn monotonic_us() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // Non-negative on the monotonic clock (time since boot).
    now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000
}

/// The fields of a `/proc/<pid>/stat` line from field 3, the state, on. They follow the command
/// name in parentheses, which may hold anything, spaces and ')' included: hence the last ')'.
pub fn stat_fields(stat: &str) -> Option<std::str::SplitAsciiWhitespace<'_>> {
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_ascii_whitespace())
}

/// `Ok`, or the error of `result` as [`describe`] writes it.
pub fn outcome<T>(result: &gaspi::Result<T>) -> String {
    match result {
        Ok(_) => "Ok".to_owned(),
        Err(e) => describe(e),
    }
}

/// An error as the tests match it: the variant and its identifying fields, e.g.
/// `RankFailed(3)`, `UnknownSegment(1,9)`, `OutOfBounds(1,0,4096,1,4096)`, `Timeout`.
pub fn describe(e: &gaspi::Error) -> String {
    use gaspi::Error as E;
    match e {
        E::Timeout => "Timeout".into(),
        E::FinalizeTimeout(_) => "FinalizeTimeout".into(),
        E::RankFailed { rank, .. } => format!("RankFailed({rank})"),
        E::OperationFailed { rank, .. } => format!("OperationFailed({rank})"),
        E::UnknownSegment { rank, segment } => format!("UnknownSegment({rank},{segment})"),
        E::OutOfBounds {
            rank,
            segment,
            offset,
            size,
            segment_size,
        } => format!("OutOfBounds({rank},{segment},{offset},{size},{segment_size})"),
        E::InvalidRank { rank, size } => format!("InvalidRank({rank},{size})"),
        E::InvalidQueue { queue, count } => format!("InvalidQueue({queue},{count})"),
        E::QueueFull { queue, depth } => format!("QueueFull({queue},{depth})"),
        E::BatchFull { depth } => format!("BatchFull({depth})"),
        E::InvalidNotification {
            rank, segment, id, ..
        } => {
            format!("InvalidNotification({rank},{segment},{id})")
        }
        E::ZeroNotificationValue { rank, id } => format!("ZeroNotificationValue({rank},{id})"),
        E::CollectiveInProgress { group, .. } => format!("CollectiveInProgress({group})"),
        E::CollectiveMismatch { group, rank } => format!("CollectiveMismatch({group},{rank})"),
        E::GroupMismatch { group } => format!("GroupMismatch({group})"),
        E::NotInGroup { group, rank } => format!("NotInGroup({group},{rank})"),
        E::InvalidMemberIndex {
            group,
            index,
            members,
        } => format!("InvalidMemberIndex({group},{index},{members})"),
        E::LibraryExists { name } => format!("LibraryExists({name})"),
        E::LibraryBusy { library, .. } => format!("LibraryBusy({library})"),
        E::LibraryMismatch { library, rank } => format!("LibraryMismatch({library},{rank})"),
        E::LibraryDisagreement { library, rank } => {
            format!("LibraryDisagreement({library},{rank})")
        }
        E::LibrarySegment {
            size,
            notifications,
            ..
        } => format!("LibrarySegment({size},{notifications})"),
        E::LibraryRefused { library, rank } => format!("LibraryRefused({library},{rank})"),
        E::NotInScope { rank } => format!("NotInScope({rank})"),
        E::DuplicateTeamMember { rank } => format!("DuplicateTeamMember({rank})"),
        E::Misaligned {
            rank,
            segment,
            offset,
        } => format!("Misaligned({rank},{segment},{offset})"),
        other => {
            // The variant's name: what its Debug form starts with.
            let debug = format!("{other:?}");
            debug
                .split([' ', '(', '{'])
                .next()
                .unwrap_or("Error")
                .to_owned()
        }
    }
}

/// A scenario's result: a summary for people, and data for the tests.
#[derive(Debug, Default)]
pub struct Report {
    pub summary: String,
    pub data: Data,
}

impl From<String> for Report {
    fn from(summary: String) -> Self {
        Report {
            summary,
            data: Data::default(),
        }
    }
}

/// A 64-bit mixer (splitmix64): neighbouring inputs give unrelated outputs, so patterns of
/// different seeds, and different words of one pattern, never resemble each other.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seed made from the identifying parts of a message (sender, case, size, sequence...).
pub fn seed(parts: &[u64]) -> u64 {
    parts.iter().fold(0x5eed, |acc, &p| mix(acc ^ p))
}

/// Fills `buf` with the pattern of `seed`: byte `i` depends on the seed and on `i / 8`.
pub fn fill_pattern(seed: u64, buf: &mut [u8]) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let word = mix(seed ^ (i as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// Inverts every bit, turning a pattern into a poison that differs from it in every byte.
pub fn invert(buf: &mut [u8]) {
    buf.iter_mut().for_each(|b| *b = !*b);
}

/// Compares `got` with `want`; on a difference, names the first differing offset, the bytes
/// there and how many bytes differ in total.
pub fn compare(what: impl Display, got: &[u8], want: &[u8]) -> Outcome {
    if got == want {
        return Ok(());
    }
    if got.len() != want.len() {
        return Err(Failure(format!(
            "{what}: got {} bytes, expected {}",
            got.len(),
            want.len()
        )));
    }
    let mut diffs = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| g != w);
    let first = diffs.next();
    let more = diffs.count();
    match first {
        Some((at, (g, w))) => Err(Failure(format!(
            "{what}: {} of {} bytes differ; first at offset {at}: got {g:#04x}, expected {w:#04x}",
            more + 1,
            want.len()
        ))),
        None => Ok(()),
    }
}

/// Waits (up to `timeout`) for notification 0 of `segment`, resets it, and checks `what`:
/// that it carried `value` and that the bytes at `offset` are `want`.
pub fn take_arrival(
    ctx: &gaspi::Context,
    timeout: gaspi::Timeout,
    segment: gaspi::SegmentId,
    (value, offset): (u32, u64),
    want: &[u8],
    what: impl Display,
) -> Outcome {
    let id = ctx
        .notify_waitsome(segment, 0, 1, timeout)
        .doing(|| format!("waiting for {what}"))?;
    let got_value = ctx
        .notify_reset(segment, id)
        .doing(|| format!("resetting the notification of {what}"))?;
    ensure!(
        got_value == value,
        "{what}: notification {id} carried {got_value}, want {value}"
    );
    let mut got = vec![0; want.len()];
    ctx.segment_read(segment, offset, &mut got)
        .doing(|| format!("reading {what}"))?;
    compare(&what, &got, want)
}

/// `n` bytes in a human unit, for summaries.
pub fn human(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1 << 20)),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / f64::from(1 << 10)),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_depend_on_seed_and_position() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        fill_pattern(seed(&[1, 2]), &mut a);
        fill_pattern(seed(&[2, 1]), &mut b);
        assert_ne!(a, b);
        assert_ne!(a[..8], a[8..16]);
        let mut short = vec![0u8; 13];
        fill_pattern(seed(&[1, 2]), &mut short);
        assert_eq!(short, a[..13]);
    }

    #[test]
    fn poison_differs_in_every_byte() {
        let mut a = vec![0u8; 100];
        fill_pattern(7, &mut a);
        let mut p = a.clone();
        invert(&mut p);
        assert!(a.iter().zip(&p).all(|(x, y)| x != y));
    }

    #[test]
    fn compare_locates_the_first_difference() {
        let want = [1u8, 2, 3, 4];
        assert!(compare("same", &want, &want).is_ok());
        let Err(Failure(msg)) = compare("case", &[1, 9, 3, 8], &want) else {
            panic!("a difference must be reported");
        };
        assert!(msg.contains("2 of 4 bytes differ"), "{msg}");
        assert!(msg.contains("offset 1"), "{msg}");
        assert!(compare("len", &[1], &want).is_err());
    }
}
