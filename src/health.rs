//! The fault model: which peers are known to be dead, and how the runtime finds out. The
//! watched wait that turns a peer's death into [`Error::RankFailed`] instead of a hang lives
//! with the engine (`engine::deadline`).
//!
//! # Evidence
//! A rank is marked [`State::Corrupt`] only on positive evidence that its process is gone, never
//! because something timed out (a slow or stopped peer is not a dead one):
//!
//! * **Same host**: every rank publishes its pid, the start time of its process (field 22 of
//!   `/proc/self/stat`) and a host identity (boot id and pid namespace) at bootstrap. A peer on
//!   the same host whose `/proc/<pid>/stat` is gone, shows another start time (the pid was
//!   reused) or shows a zombie (`Z`/`X`: the launcher has not reaped it yet) is dead. A look
//!   costs one small file read and needs nothing from the peer.
//! * **Connection loss**: an operation towards a peer that completes with a connection error
//!   (`ECONNRESET`, `ENOTCONN`, `ECONNREFUSED`, `ECONNABORTED`, `EPIPE`) or is cancelled
//!   (`ECANCELED`: the runtime cancels only its own receives, which name no peer, so a
//!   cancelled operation towards a peer was flushed by the provider tearing its connection
//!   down). Measured with libfabric 1.17: over `tcp;ofi_rxm` the operations in flight when a
//!   peer is killed fail this way within milliseconds ("Connection reset by peer", "Operation
//!   canceled"); operations posted *after* that are refused with
//!   `-FI_EAGAIN` for ever (the provider retries the connection internally and never reports
//!   the refusal). `shm` reports nothing at all: writes up to its inject size complete locally
//!   as if delivered, larger writes and reads never complete, and once the dead peer's command
//!   queue is full every post is refused with `-FI_EAGAIN`.
//! * **Another host, over tcp**: a rank's endpoint name is the socket address its provider
//!   listens at for as long as the endpoint is open. Its host refusing a connection there
//!   (`ECONNREFUSED`) means nothing listens any more: the endpoint is closed. Measured with
//!   libfabric 1.17: a killed rank's port is refused within 0.1 ms, a stopped rank's port is
//!   accepted by its kernel. This is the evidence tcp itself gets and hides (its
//!   reconnections are refused and it answers posts with `-FI_EAGAIN`). An ask that is not
//!   answered within [`PROBE_WAIT`] proves nothing.
//! * **[`Context::proc_ping`]**: the same-host look, then an 8-byte RDMA read of the peer's system
//!   region. An answer means healthy, an error completion means dead, no answer in time is
//!   [`Error::Timeout`]. A peer reached directly gets the look only (nothing of it goes
//!   through the fabric), so no read of a ping can be left unanswered by its death. Since
//!   neither provider fails a fresh operation towards a dead peer (see above), a ping of a
//!   dead peer on another host fails through the ask of its host over tcp, and times out over
//!   shm.
//!
//! # Where deaths surface
//! Nothing is posted to a rank known dead: the call fails at once with `RankFailed`. A post the
//! provider keeps refusing looks at the target's health every
//! [`POST_LOOK`](crate::engine::deadline::POST_LOOK). Every wait that depends on other ranks
//! (queue waits, barriers and group commits, segment lookups, pings, passive sends, atomics,
//! waits over notification ranges with named senders) is a [`watched`](Inner::watched) wait:
//! it waits in slices of at most [`CHECK_EVERY`](crate::engine::deadline::CHECK_EVERY) (also
//! under `Timeout::Block`) and looks at the health of the ranks it depends on between slices
//! and when its timeout expires; a death recorded meanwhile ([`Inner::mark_failed`], by the
//! same-host watcher of the `watch` module or a failed operation) wakes every wait of the
//! process and ends its slice at once. So a same-host death is reported within milliseconds
//! (about a second where pidfds are unavailable), one on another host over tcp within about a
//! second, and never later than the caller's timeout plus one look. A timeout is never
//! evidence: a stopped peer makes calls time out, and they work again once it resumes.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gaspi_notifications::Timeout;

use crate::context::{Context, Inner};
use crate::engine::{Handler, Op, Outcome};
use crate::error::{Error, Rank, Result};
use crate::sync::{lock, Mutex};
use crate::system::{layout, SCRATCH_LEN};

/// A rank's process is looked at no more often than this, however many calls ask: a caller that
/// polls with `Timeout::Test` must not turn into a stream of `/proc` reads.
const LOOK_AGAIN_AFTER: Duration = Duration::from_millis(100);

/// A peer on another host is asked whether it still listens no more often than this: each ask
/// is a connection its provider accepts and drops (a warning in its libfabric log).
const PROBE_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// How long an ask may hold up the caller: a host that refuses answers within a round trip; no
/// answer is no evidence.
const PROBE_WAIT: Duration = Duration::from_millis(50);

/// The socket address a tcp endpoint's name holds (`sockaddr_in` or `sockaddr_in6`): where its
/// provider accepts connections for as long as the endpoint is open.
pub(crate) fn listener(name: &[u8]) -> Option<SocketAddr> {
    let family = i32::from(u16::from_ne_bytes(name.get(..2)?.try_into().ok()?));
    let port = u16::from_be_bytes(name.get(2..4)?.try_into().ok()?);
    match (family, name.len()) {
        (libc::AF_INET, 16) => {
            let ip: [u8; 4] = name[4..8].try_into().ok()?;
            Some(SocketAddr::from((Ipv4Addr::from(ip), port)))
        }
        (libc::AF_INET6, 28) => {
            let ip: [u8; 16] = name[8..24].try_into().ok()?;
            Some(SocketAddr::from((Ipv6Addr::from(ip), port)))
        }
        _ => None,
    }
}

/// What a rank knows about a peer, as GASPI's state vector names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// No evidence of a failure.
    Healthy,
    /// The peer's process is known to be gone: no communication with it is possible.
    Corrupt,
}

/// A process, identified well enough to tell from this host whether it still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Process {
    /// Boot id and pid namespace, hashed; equal hosts see the same pids. 0: unknown.
    host: u64,
    pid: u32,
    /// Start time in clock ticks since boot; tells a reused pid apart.
    start: u64,
}

/// Bytes of a [`Process`] in the bootstrap card.
pub(crate) const PROCESS_BYTES: usize = 20;

impl Process {
    /// This process. Where `/proc` cannot tell, the host is unknown and peers never look at us
    /// locally (they rely on the fabric's evidence).
    pub(crate) fn current() -> Process {
        let pid = std::process::id();
        let host = host_identity();
        let start = proc_stat(pid).and_then(|s| s.start);
        match (host, start) {
            (Some(host), Some(start)) => Process { host, pid, start },
            _ => Process {
                host: 0,
                pid,
                start: 0,
            },
        }
    }

    pub(crate) fn to_bytes(self) -> [u8; PROCESS_BYTES] {
        let mut b = [0u8; PROCESS_BYTES];
        b[..8].copy_from_slice(&self.host.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..].copy_from_slice(&self.start.to_le_bytes());
        b
    }

    pub(crate) fn from_bytes(b: &[u8; PROCESS_BYTES]) -> Process {
        let word = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 8];
            w[..r.len()].copy_from_slice(&b[r]);
            u64::from_le_bytes(w)
        };
        Process {
            host: word(0..8),
            pid: word(8..12) as u32,
            start: word(12..20),
        }
    }

    /// Whether `other` runs on this process's host (both hosts known and equal).
    pub(crate) fn same_host(&self, other: &Process) -> bool {
        self.host != 0 && self.host == other.host
    }

    /// How many of `processes` run on the same host as `me` (counting `me`; 1 when the host
    /// is unknown).
    pub(crate) fn neighbours(me: Process, processes: &[Process]) -> usize {
        if me.host == 0 {
            return 1;
        }
        processes.iter().filter(|p| p.host == me.host).count()
    }

    /// Its pid.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Why this process is known to be gone, if it is. Only meaningful on its own host.
    pub(crate) fn gone(&self) -> Option<String> {
        let pid = self.pid;
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some(format!("its process {pid} no longer exists"))
            }
            // Unreadable for another reason (a restricted /proc): no evidence either way.
            Err(_) => None,
            Ok(text) => {
                let stat = parse_stat(&text)?;
                if stat.start != Some(self.start) {
                    Some(format!(
                        "its process {pid} is gone (the pid now belongs to another process)"
                    ))
                } else if matches!(stat.state, 'Z' | 'X') {
                    Some(format!("its process {pid} has ended"))
                } else {
                    None
                }
            }
        }
    }
}

/// The fields of `/proc/<pid>/stat` the fault model reads.
struct Stat {
    state: char,
    start: Option<u64>,
}

fn proc_stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_stat(text: &str) -> Option<Stat> {
    // Field 2, the command name in parentheses, may contain anything; fields 3.. follow it.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 was the state; field 22 is the start time.
    let start = fields.nth(22 - 4).and_then(|f| f.parse().ok());
    Some(Stat { state, start })
}

/// Processes with equal identities see each other's pids: same kernel boot, same pid namespace.
///
/// `GASPI_HOST_ID`, when set, is mixed in: processes of one machine with different values
/// take each other for ranks on other hosts (no same-host look, no direct path). It exists so
/// that tests can run a job of several "hosts" on one machine.
fn host_identity() -> Option<u64> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let pidns = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let fake = std::env::var("GASPI_HOST_ID").unwrap_or_default();
    let identity = boot
        .trim()
        .as_bytes()
        .iter()
        .chain(b"/")
        .chain(pidns.as_os_str().as_encoded_bytes())
        .chain(b"/")
        .chain(fake.as_bytes())
        .copied();
    Some(crate::fnv::fnv1a(identity) | 1)
}

/// Whether an error completion of an operation towards a peer says the connection to it is
/// gone. `err` is the libfabric error (equal to the errno for these). The provider's own code
/// is no help: tcp fills it with whatever `errno` the flushing thread last saw (seen in CI: a
/// cancellation by a killed peer carrying `ENOENT`), so a cancellation counts whatever it says.
pub(crate) fn is_connection_loss(err: i32) -> bool {
    matches!(
        err,
        libc::ECONNRESET
            | libc::ENOTCONN
            | libc::ECONNREFUSED
            | libc::ECONNABORTED
            | libc::EPIPE
            | libc::ECANCELED
    )
}

/// This rank's knowledge of every rank's health.
pub(crate) struct Health {
    me: Rank,
    corrupt: Box<[AtomicBool]>,
    /// Whether any rank is marked: the check on every post is one load while all are healthy.
    any: AtomicBool,
    /// How many ranks are marked: a watched wait that saw it change looks at its ranks at once.
    deaths: AtomicU32,
    /// Why each marked rank is dead, and the order it was marked in (its number of earlier
    /// marks).
    reasons: Mutex<HashMap<Rank, (usize, String)>>,
    /// The processes of peers on this host (`None`: elsewhere, or unknown).
    local: Vec<Option<Process>>,
    /// When each rank was last looked at (its process, or its host asked), in ms since `epoch`,
    /// plus one (0: never).
    looked: Box<[AtomicU64]>,
    /// Where each peer on another host accepts connections (tcp only).
    listeners: Vec<Option<SocketAddr>>,
    epoch: Instant,
    /// The ping towards each rank whose call timed out, for the next call to continue.
    pub(crate) pings: Mutex<HashMap<Rank, Arc<Ping>>>,
}

impl Health {
    /// `processes[r]` is what rank `r` published at bootstrap.
    /// `listeners[r]` is where rank `r`'s provider accepts connections, if it does.
    pub(crate) fn new(
        me: Rank,
        processes: &[Process],
        listeners: Vec<Option<SocketAddr>>,
    ) -> Health {
        let own = processes.get(me as usize).copied();
        let local = processes
            .iter()
            .enumerate()
            .map(|(r, p)| {
                let same_host = own.is_some_and(|own| own.host != 0 && own.host == p.host);
                (same_host && r != me as usize).then_some(*p)
            })
            .collect::<Vec<_>>();
        let n = processes.len();
        // Peers on this host are looked at through /proc, and this rank is not asked about.
        let listeners = listeners
            .into_iter()
            .zip(&local)
            .enumerate()
            .map(|(r, (l, p))| l.filter(|_| p.is_none() && r != me as usize))
            .chain(std::iter::repeat(None))
            .take(n)
            .collect();
        Health {
            me,
            corrupt: (0..n).map(|_| AtomicBool::new(false)).collect(),
            any: AtomicBool::new(false),
            deaths: AtomicU32::new(0),
            reasons: Mutex::new(HashMap::new()),
            local,
            looked: (0..n).map(|_| AtomicU64::new(0)).collect(),
            listeners,
            epoch: Instant::now(),
            pings: Mutex::new(HashMap::new()),
        }
    }

    /// Marks `rank` dead (the first reason is kept). Returns whether it was healthy before.
    fn mark(&self, rank: Rank, reason: String) -> bool {
        let Some(flag) = self.corrupt.get(rank as usize) else {
            return false;
        };
        let mut reasons = self.reasons.lock().unwrap_or_else(|e| e.into_inner());
        if flag.load(Ordering::Acquire) {
            return false;
        }
        let order = reasons.len();
        reasons.insert(rank, (order, reason));
        flag.store(true, Ordering::Release);
        self.any.store(true, Ordering::Release);
        // Release: a waiter that sees the new count sees the mark.
        self.deaths.fetch_add(1, Ordering::Release);
        true
    }

    /// How many ranks have been marked dead so far; see [`Inner::watching`].
    #[inline]
    pub(crate) fn deaths(&self) -> u32 {
        self.deaths.load(Ordering::Acquire)
    }

    /// `RankFailed` for `rank` if it is marked dead.
    ///
    /// Inlined: every operation asks, and while no rank has failed the answer is one load
    /// (the error, with its reason, is built out of line).
    #[inline]
    pub(crate) fn known(&self, rank: Rank) -> Option<Error> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.known_marked(rank)
    }

    /// [`known`](Self::known) once some rank has been marked.
    #[cold]
    fn known_marked(&self, rank: Rank) -> Option<Error> {
        if !self.corrupt.get(rank as usize)?.load(Ordering::Acquire) {
            return None;
        }
        let reasons = self.reasons.lock().unwrap_or_else(|e| e.into_inner());
        Some(Error::RankFailed {
            rank,
            reason: reasons
                .get(&rank)
                .map(|(_, r)| r.clone())
                .unwrap_or_default(),
        })
    }

    /// Of `ranks` marked dead, the one marked first (see [`first_failed`](Self::first_failed)).
    ///
    /// Inlined, as [`known`](Self::known), for every watched wait's look before it starts:
    /// called, the look cost ~20 instructions while no rank has failed.
    #[inline]
    pub(crate) fn first_known(&self, ranks: impl Iterator<Item = Rank>) -> Option<Error> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.first_known_marked(ranks)
    }

    /// [`first_known`](Self::first_known) once some rank has been marked.
    #[cold]
    fn first_known_marked(&self, ranks: impl Iterator<Item = Rank>) -> Option<Error> {
        let first = ranks
            .filter(|&r| self.known(r).is_some())
            .min_by_key(|&r| self.marked_order(r))?;
        self.known(first)
    }

    /// Every other rank on this host, with its process.
    pub(crate) fn neighbours(&self) -> Vec<(Rank, Process)> {
        self.local
            .iter()
            .enumerate()
            .filter_map(|(r, p)| Some((r as Rank, (*p)?)))
            .collect()
    }

    /// Whether the same-host look says `rank`'s process is gone (at most one look per rank per
    /// [`LOOK_AGAIN_AFTER`], unless `fresh`); marks it if so.
    pub(crate) fn look(&self, rank: Rank, fresh: bool) -> Option<Error> {
        if let Some(e) = self.known(rank) {
            return Some(e);
        }
        let Some(process) = self.local.get(rank as usize).copied().flatten() else {
            return self.probe(rank);
        };
        if !self.due(rank, LOOK_AGAIN_AFTER, fresh) {
            return None;
        }
        let reason = process.gone()?;
        self.mark(rank, reason);
        self.known(rank)
    }

    /// Whether a look at `rank` is due (`every` has passed since the last one, or it is
    /// `fresh`), starting it if so. A rank is looked at either on this host or by asking its
    /// host, never both, so one clock per rank serves both kinds.
    fn due(&self, rank: Rank, every: Duration, fresh: bool) -> bool {
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let looked = &self.looked[rank as usize];
        let last = looked.load(Ordering::Acquire);
        // Only a look that happens moves the clock: callers that ask more often than the limit
        // (`Timeout::Test` polling) must still get a look every `every`.
        if !fresh && last != 0 && now - last < every.as_millis() as u64 {
            return false;
        }
        looked.store(now, Ordering::Release);
        true
    }

    /// Whether the host of `rank`, a peer elsewhere, refuses a connection to its provider's
    /// listening address (at most one ask per rank per [`PROBE_AGAIN_AFTER`]); marks it if so.
    /// A stopped process keeps its listening socket, and its host completes the connection for
    /// it; only a closed endpoint (a process gone) is refused.
    fn probe(&self, rank: Rank) -> Option<Error> {
        let addr = self.listeners.get(rank as usize).copied().flatten()?;
        // Never fresh: an ask costs a connection (and may wait), unlike a look at /proc.
        if !self.due(rank, PROBE_AGAIN_AFTER, false) {
            return None;
        }
        match TcpStream::connect_timeout(&addr, PROBE_WAIT) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                self.mark(
                    rank,
                    format!("its host refuses connections to its endpoint at {addr}: the endpoint is closed"),
                );
                self.known(rank)
            }
            _ => None,
        }
    }

    /// Of `ranks` known dead or found dead by a same-host look, the one whose death was seen
    /// first: a peer that merely exited after a failure (it finalized, or gave up) is also
    /// gone by then, and naming it instead would blame the wrong rank.
    pub(crate) fn first_failed(&self, ranks: impl Iterator<Item = Rank>) -> Option<Error> {
        let first = ranks
            .filter(|&r| r != self.me && self.look(r, false).is_some())
            .min_by_key(|&r| self.marked_order(r))?;
        self.known(first)
    }

    /// When `rank` was marked dead, as the number of ranks marked before it.
    fn marked_order(&self, rank: Rank) -> usize {
        let reasons = self.reasons.lock().unwrap_or_else(|e| e.into_inner());
        reasons.get(&rank).map_or(usize::MAX, |(order, _)| *order)
    }

    /// One entry per rank.
    pub(crate) fn states(&self) -> Vec<State> {
        self.corrupt
            .iter()
            .map(|c| {
                if c.load(Ordering::Acquire) {
                    State::Corrupt
                } else {
                    State::Healthy
                }
            })
            .collect()
    }
}

impl Inner {
    /// Marks `rank` dead on positive evidence and wakes every waiter of this process (every
    /// wait sleeps on `events` or, for notifications, on `arrivals`), so that the watched waits
    /// end their slice (see [`watching`](Inner::watching)) and those depending on it fail at
    /// once.
    pub(crate) fn mark_failed(&self, rank: Rank, reason: String) {
        if rank != self.rank && self.health.mark(rank, reason) {
            self.events.notify_all();
            self.arrivals.notify_all();
        }
    }

    /// `RankFailed` if a look says `rank` is dead (rate-limited; see [`LOOK_AGAIN_AFTER`]).
    pub(crate) fn look(&self, rank: Rank) -> Option<Error> {
        self.health.look(rank, false)
    }
}

/// A ping in flight: the landing slot its read fills, and whether (and when) it was
/// answered.
pub(crate) struct Ping {
    slot: u16,
    answered: Mutex<Option<(std::result::Result<(), String>, Instant)>>,
}

/// How long the answer to a ping whose call timed out still answers the next call towards
/// that rank (a loop of `proc_ping(rank, Test)` is answered by the read its first call
/// posted; an older answer is not taken for the rank's present state).
const PING_ANSWER_FRESH: Duration = Duration::from_secs(1);

impl Handler for Ping {
    fn complete(&self, inner: &Inner, rank: Option<Rank>, outcome: Outcome<'_>) {
        inner.system.landing.give(self.slot);
        if let (Err(f), Some(rank)) = (outcome, rank) {
            // The system region stays registered for the peer's whole life: any failure to
            // read it means the peer's runtime is gone.
            inner.mark_failed(rank, format!("a ping failed: {}", f.message));
        }
        *lock(&self.answered) = Some((outcome.map_err(|f| f.message.clone()), Instant::now()));
    }
}

impl Context {
    /// This rank's view of every rank's health, indexed by rank (GASPI's `state_vec_get`).
    ///
    /// It holds what has been detected so far (by failed operations, watched waits and
    /// [`proc_ping`](Self::proc_ping)); it does not look at anything itself. A rank once marked
    /// [`State::Corrupt`] stays so.
    pub fn state_vec(&self) -> Vec<State> {
        self.inner.health.states()
    }

    /// Of `ranks`, the one this rank learnt of first as dead, as the
    /// [`Error::RankFailed`] that calls involving it return; `None` while none of them is
    /// known dead (ranks out of range included).
    ///
    /// Like [`state_vec`](Self::state_vec) it reports what was detected so far and looks at
    /// nothing itself. While no rank is known dead it costs one load, so a library can ask on
    /// every call: a collective of a team with a member known dead fails at once, as the
    /// runtime's barrier does, instead of completing on the members that happen not to need
    /// the dead one.
    pub fn known_failure(&self, ranks: impl IntoIterator<Item = Rank>) -> Option<Error> {
        self.inner.health.first_known(ranks.into_iter())
    }

    /// Checks whether `rank` is alive and reachable: on the same host by looking at its process
    /// (on another host over tcp by asking its host whether its endpoint still listens), then
    /// with an 8-byte RDMA read of its system region, bounded by `timeout`.
    ///
    /// A peer reached on the direct intra-node path
    /// ([`Intranode::Direct`](crate::Intranode::Direct)) is reached through this host's
    /// memory, so the look at its process is the whole check: it returns at once, `Ok` while
    /// the process lives (also while it is stopped, which the fabric's read would report as
    /// [`Error::Timeout`]).
    ///
    /// # Errors
    /// [`Error::InvalidRank`]; [`Error::RankFailed`] when it is dead (it is then marked in
    /// [`state_vec`](Self::state_vec)); [`Error::Timeout`] when no answer came in time, which
    /// marks nothing: a peer that is slow, stopped or unreachable is not known to be dead.
    /// The next call towards that rank continues the read rather than posting another (and
    /// takes its answer if it came within the last second), so a loop of `Timeout::Test`
    /// calls completes.
    pub fn proc_ping(&self, rank: Rank, timeout: Timeout) -> Result<()> {
        self.check_rank(rank)?;
        if rank == self.rank() {
            return Ok(());
        }
        let inner = &self.inner;
        if let Some(e) = inner.health.look(rank, true) {
            return Err(e);
        }
        // A peer reached directly is reached through this host's memory, not the fabric: the
        // look at its process just found it alive, so it is reachable. No read goes out, so
        // none can stall this rank's later ones (over shm a read towards a peer that dies
        // before answering never completes, and reads complete in order).
        if inner.direct.reaches(rank) {
            return Ok(());
        }
        let deadline = timeout.deadline();
        // A ping whose call timed out is continued while in flight (or answered lately), so
        // that calls again with `Test` (or a timeout shorter than the round trip) complete:
        // a new read each call would never be answered within one.
        let pending = lock(&inner.health.pings).remove(&rank).filter(|p| {
            lock(&p.answered)
                .as_ref()
                .is_none_or(|(_, at)| at.elapsed() < PING_ANSWER_FRESH)
        });
        let ping = match pending {
            Some(ping) => ping,
            None => self.post_ping(rank, deadline)?,
        };
        // A failed ping marks the rank (and wakes us): stop waiting at once.
        let answered = match inner.watched_until(
            || std::iter::once(rank),
            deadline,
            || lock(&ping.answered).as_ref().map(|(a, _)| a.clone()),
        ) {
            Ok(answered) => answered,
            Err(Error::Timeout) => {
                lock(&inner.health.pings).insert(rank, ping);
                return Err(Error::Timeout);
            }
            Err(e) => return Err(e),
        };
        match (answered, inner.health.known(rank)) {
            (_, Some(dead)) => Err(dead),
            (Ok(()), None) => Ok(()),
            (Err(reason), None) => Err(Error::OperationFailed { rank, reason }),
        }
    }

    /// Posts an 8-byte read of `rank`'s system region into a landing slot.
    fn post_ping(&self, rank: Rank, deadline: gaspi_notifications::Deadline) -> Result<Arc<Ping>> {
        let inner = &self.inner;
        let slot = inner.watched_until(
            || std::iter::once(rank),
            deadline,
            || inner.system.landing.take(),
        )?;
        let ping = Arc::new(Ping {
            slot,
            answered: Mutex::new(None),
        });
        let source = inner.system.target(rank, layout::SCRATCH);
        let landing = match inner.system.landing(slot, SCRATCH_LEN) {
            Ok(landing) => landing,
            Err(e) => {
                inner.system.landing.give(slot);
                return Err(e);
            }
        };
        let op = Op::to(rank, Arc::clone(&ping) as Arc<dyn Handler>);
        if let Err(e) =
            inner.post_until(rank, deadline, op, |op| inner.ep.read(landing, source, op))
        {
            inner.system.landing.give(slot);
            return Err(e);
        }
        Ok(ping)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_state_and_start_time() {
        let line = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 200 18446744073709551615";
        let stat = parse_stat(line).expect("parses");
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.start, Some(987_654));
        let zombie =
            parse_stat("7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55").expect("zombie");
        assert_eq!((zombie.state, zombie.start), ('Z', Some(55)));
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn this_process_is_alive_and_a_missing_one_is_gone() {
        let me = Process::current();
        assert_ne!(me.host, 0, "/proc identifies this host");
        assert_eq!(Process::from_bytes(&me.to_bytes()), me);
        assert_eq!(me.gone(), None);
        let reused = Process {
            start: me.start + 1,
            ..me
        };
        assert!(reused.gone().is_some_and(|r| r.contains("another process")));
        let missing = Process {
            pid: u32::MAX - 1,
            ..me
        };
        assert!(missing
            .gone()
            .is_some_and(|r| r.contains("no longer exists")));
    }

    #[test]
    fn a_zombie_is_gone() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("starting true");
        let process = Process {
            pid: child.id(),
            ..Process::current()
        };
        let stat = loop {
            let stat = proc_stat(child.id()).expect("an unreaped child stays in /proc");
            if stat.state == 'Z' {
                break stat;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let process = Process {
            start: stat.start.expect("start time"),
            ..process
        };
        assert!(process.gone().is_some_and(|r| r.contains("has ended")));
        child.wait().expect("reaping");
        assert!(process.gone().is_some());
    }

    #[test]
    fn connection_errors_are_evidence_and_others_are_not() {
        assert!(is_connection_loss(libc::ECONNRESET));
        assert!(is_connection_loss(libc::EPIPE));
        assert!(is_connection_loss(libc::ECANCELED));
        assert!(!is_connection_loss(libc::EACCES));
        assert!(!is_connection_loss(libc::ETIMEDOUT));
        assert!(!is_connection_loss(libc::EAGAIN));
    }

    #[test]
    fn a_tcp_name_is_its_listening_address() {
        let mut v4 = [0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&4242u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[192, 0, 2, 2]);
        assert_eq!(listener(&v4), "192.0.2.2:4242".parse().ok());
        let mut v6 = [0u8; 28];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&80u16.to_be_bytes());
        v6[23] = 1;
        assert_eq!(listener(&v6), "[::1]:80".parse().ok());
        assert_eq!(listener(&v4[..8]), None);
        assert_eq!(listener(b"fi_shm://1234"), None);
    }

    #[test]
    fn frequent_looks_still_find_a_death() {
        let me = Process::current();
        let missing = Process {
            pid: u32::MAX - 1,
            ..me
        };
        let health = Health::new(0, &[me, missing], vec![]);
        // A first look happened just now (and found nothing, as if the peer were alive then).
        health.looked[1].store(
            health.epoch.elapsed().as_millis() as u64 + 1,
            Ordering::Release,
        );
        let start = Instant::now();
        let mut found = None;
        while found.is_none() && start.elapsed() < LOOK_AGAIN_AFTER * 5 {
            found = health.first_failed(0..2);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            matches!(found, Some(Error::RankFailed { rank: 1, .. })),
            "callers asking every 5 ms must get a look every {LOOK_AGAIN_AFTER:?}"
        );
    }

    #[test]
    fn the_death_seen_first_is_named_not_the_lowest_rank() {
        let p = Process::current();
        let health = Health::new(0, &[p, p, p], vec![]);
        assert!(health.mark(2, "killed".into()));
        // Rank 1 went away later, e.g. it finalized after rank 2's death.
        assert!(health.mark(1, "exited".into()));
        assert!(matches!(
            health.first_failed(0..3),
            Some(Error::RankFailed { rank: 2, .. })
        ));
        assert!(matches!(
            health.first_known(0..3),
            Some(Error::RankFailed { rank: 2, .. })
        ));
        assert!(health.first_failed(0..1).is_none());
    }

    #[test]
    fn marks_are_kept_with_their_first_reason() {
        let p = Process::current();
        let health = Health::new(0, &[p, p, p], vec![]);
        assert_eq!(health.states(), vec![State::Healthy; 3]);
        assert!(health.known(2).is_none());
        assert!(health.mark(2, "first".into()));
        assert!(!health.mark(2, "second".into()));
        assert!(!health.mark(7, "out of range".into()));
        assert!(matches!(
            health.first_known(0..3),
            Some(Error::RankFailed { rank: 2, ref reason }) if reason == "first"
        ));
        assert_eq!(
            health.states(),
            vec![State::Healthy, State::Healthy, State::Corrupt]
        );
    }
}
