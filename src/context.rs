//! The context: one rank's membership in the job, and everything it owns.
//!
//! [`Context::init`] bootstraps through PMI (exchanging endpoint names and system-region keys),
//! opens the libfabric endpoint, starts the progress thread and synchronises all ranks once over
//! the fabric. A `Context` is `Send + Sync`: share it by reference (scoped threads, rayon) or in
//! an `Arc`, and call any operation from any thread. [`Context::finalize`] is collective and
//! leaves no thread or registration behind; dropping a context without finalizing releases the
//! same resources without synchronising with the other ranks.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use gaspi_fabric::Region;
use gaspi_notifications::{EventCount, NotificationTable, Timeout};
use gaspi_pmi::PmiClient;
use gaspi_segments::SegmentMemory;

use crate::allreduce::ReduceArea;
use crate::atomic::Atomics;
use crate::config::{Config, Intranode};
use crate::direct::{Direct, Published, SharedTable, Slot};
use crate::engine::lookup::Descriptor;
use crate::engine::lookup::Descriptors;
use crate::engine::thread::ProgressThread;
use crate::engine::{Endpoint, Engine};
use crate::error::{Error, Rank, Result};
use crate::group::{Groups, GROUP_ALL};
use crate::health::{Health, Process, PROCESS_BYTES};
use crate::library::{Libraries, Mailbox};
use crate::outbox::Outbox;
use crate::passive::Passive;
use crate::queue::Queues;
use crate::segment::Segments;
use crate::system::{layout, System, SystemAddress};
use crate::watch::Watcher;
use crate::wire::MAX_RANKS;

/// Keys requested for the registrations made at init; later ones come from
/// [`Segments::next_key`].
const SYSTEM_KEY: u64 = 1;
const PASSIVE_KEY: u64 = 2;
const GROUP_ALL_KEY: u64 = 3;

/// State shared by all handles and the progress thread.
pub(crate) struct Inner {
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    pub(crate) config: Config,
    /// The sizes of notified writes that split ([`crate::rma::split_sizes`]).
    pub(crate) split_sizes: Option<std::ops::RangeInclusive<u64>>,
    /// Whether waits yield at every poll (see [`Context::oversubscribed`]).
    oversubscribed: bool,
    pub(crate) engine: Engine,
    pub(crate) segments: Segments,
    pub(crate) descriptors: Descriptors,
    pub(crate) queues: Queues,
    /// Bumped after every batch of completions, lookups, replies and deaths; waiters on
    /// anything but notifications sleep on it.
    pub(crate) events: EventCount,
    /// Shared by every notification table: notified on every notification set, by this
    /// process or (the direct path) another on the host. The doorbell of `direct`.
    pub(crate) arrivals: Arc<EventCount>,
    pub(crate) system_notifications: NotificationTable,
    /// The direct intra-node path: this rank's directory and the ranks it maps.
    pub(crate) direct: Direct,
    pub(crate) groups: Groups,
    pub(crate) health: Health,
    pub(crate) passive: Arc<Passive>,
    pub(crate) atomics: Atomics,
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) libraries: Libraries,
    /// Rendezvous messages waiting for their rendezvous.
    pub(crate) mailbox: Mailbox,
    /// Set by finalize: library handles that outlive the context's finalize refuse to work.
    pub(crate) closed: AtomicBool,
    /// Set once finalize's first barrier is over: a finalize called again after a timeout
    /// continues with the second (see `Context::exit_barrier`).
    pub(crate) leaving: AtomicBool,
    pmi: Mutex<Option<PmiClient>>,
    pub(crate) system: System,
    // Last: every registration above refers to its domain (each also keeps the domain open).
    pub(crate) ep: Endpoint,
}

/// A rank's handle on the job: segments, notifications, queues and one-sided operations.
///
/// All methods take `&self` and may be called from many threads at once.
pub struct Context {
    // Declared before `inner` so the threads stop before the shared state can go away.
    progress: Option<ProgressThread>,
    watcher: Option<Watcher>,
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("rank", &self.inner.rank)
            .field("size", &self.inner.size)
            .field("provider", &self.inner.ep.caps().provider)
            .finish()
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Bytes of a card before the endpoint name: system region base and key, the process, then
/// the values of [`AGREED`].
const CARD_HEAD: usize = 16 + PROCESS_BYTES + 4 * AGREED.len();

/// A setting's value in a configuration.
type Setting = fn(&Config) -> u32;

/// A setting's value as its variable spells it, for the error that names it.
type Shown = fn(u32) -> String;

/// The settings every rank of a job must have alike, by variable: each card carries them, and
/// a rank that finds another's different fails to join, naming both (otherwise a passive
/// message one rank sends and the other cannot take breaks the connection over tcp, which
/// then takes a live rank for a dead one).
const AGREED: [(&str, Setting, Shown); 7] = [
    ("GASPI_NOTIFICATIONS", |c| c.notifications, number),
    ("GASPI_PASSIVE_MAX_BYTES", |c| c.passive_max_bytes, number),
    // At most 16 MiB (validated).
    (
        "GASPI_REDUCE_CHUNK",
        |c| u32::try_from(c.reduce_chunk).unwrap_or(u32::MAX),
        number,
    ),
    ("GASPI_MAX_GROUPS", |c| u32::from(c.max_groups), number),
    // A rank through the fabric and a peer on its host going direct reach one word by paths
    // that do not order against each other: a write complete at the fabric rank may still be
    // on its way while the direct peer reads the word at once (the self-test's `atomics`
    // lost lock-guarded increments in 10 of 19 runs over tcp and shm, in neither mode alone).
    (
        "GASPI_INTRANODE",
        |c| u32::from(c.intranode == Intranode::Fabric),
        |v| if v == 0 { "direct" } else { "fabric" }.to_string(),
    ),
    // It opens the endpoint otherwise: over shm through the fabric, a job of 2 with it on one
    // rank only failed its first write (`Input/output error`) or timed out, 4 of 4 runs.
    (
        "GASPI_FORCE_UNORDERED",
        |c| u32::from(c.force_unordered),
        number,
    ),
    // Provider atomics and those the target's progress engine executes do not exclude each
    // other on one word (see `Config::atomics`): a rank of each kind would race.
    ("GASPI_ATOMICS", |c| u32::from(c.atomics), number),
];

fn number(value: u32) -> String {
    value.to_string()
}

/// What a rank publishes at bootstrap.
struct Card {
    /// Its endpoint name.
    name: Vec<u8>,
    region: SystemAddress,
    /// Its process (see `health`).
    process: Process,
    /// Its directory for the direct path (see `direct`), if it has one.
    directory: Option<PathBuf>,
    /// Its values of the settings of [`AGREED`].
    agreed: [u32; AGREED.len()],
    /// The provider its endpoint was opened with, as libfabric names it: endpoints of other
    /// providers cannot reach each other, so every rank must have the same.
    provider: String,
}

/// Encodes a card: the fixed head, the name's length (2 bytes), the name, the provider's
/// length (1 byte), the provider (at most 255 bytes of it), the directory path.
fn encode_card(card: &Card) -> String {
    let path = card
        .directory
        .as_deref()
        .map_or(&[][..], |p| p.as_os_str().as_encoded_bytes());
    let provider = &card.provider.as_bytes()[..card.provider.len().min(255)];
    let mut bytes =
        Vec::with_capacity(CARD_HEAD + 3 + card.name.len() + provider.len() + path.len());
    bytes.extend_from_slice(&card.region.base.to_le_bytes());
    bytes.extend_from_slice(&card.region.key.to_le_bytes());
    bytes.extend_from_slice(&card.process.to_bytes());
    for value in card.agreed {
        bytes.extend_from_slice(&value.to_le_bytes());
    }
    bytes.extend_from_slice(&(card.name.len() as u16).to_le_bytes());
    bytes.extend_from_slice(&card.name);
    bytes.push(provider.len() as u8);
    bytes.extend_from_slice(provider);
    bytes.extend_from_slice(path);
    to_hex(&bytes)
}

fn decode_card(rank: Rank, card: &str) -> Result<Card> {
    let malformed = || Error::bootstrap("get", format!("malformed address card of rank {rank}"));
    let bytes = from_hex(card)
        .filter(|b| b.len() > CARD_HEAD + 2)
        .ok_or_else(malformed)?;
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    };
    let region = SystemAddress {
        base: word(0),
        key: word(1),
    };
    let mut process = [0u8; PROCESS_BYTES];
    process.copy_from_slice(&bytes[16..16 + PROCESS_BYTES]);
    let mut agreed = [0u32; AGREED.len()];
    for (i, value) in agreed.iter_mut().enumerate() {
        let at = 16 + PROCESS_BYTES + 4 * i;
        *value = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    }
    let name_len = usize::from(u16::from_le_bytes([bytes[CARD_HEAD], bytes[CARD_HEAD + 1]]));
    let rest = &bytes[CARD_HEAD + 2..];
    if name_len == 0 || name_len > rest.len() {
        return Err(malformed());
    }
    let (name, rest) = rest.split_at(name_len);
    let (&provider_len, rest) = rest.split_first().ok_or_else(malformed)?;
    if usize::from(provider_len) > rest.len() {
        return Err(malformed());
    }
    let (provider, path) = rest.split_at(usize::from(provider_len));
    let directory = (!path.is_empty())
        .then(|| String::from_utf8(path.to_vec()).map(PathBuf::from))
        .transpose()
        .map_err(|_| malformed())?;
    Ok(Card {
        name: name.to_vec(),
        region,
        process: Process::from_bytes(&process),
        directory,
        agreed,
        provider: String::from_utf8_lossy(provider).into_owned(),
    })
}

/// The first setting of [`AGREED`], or the provider, in which a card differs from this
/// rank's, as the error that fails the join.
fn disagreement(rank: Rank, cards: &[Card]) -> Option<Error> {
    let own_card = cards.get(rank as usize)?;
    let own = own_card.agreed;
    cards.iter().zip(0..).find_map(|(card, other)| {
        if card.provider != own_card.provider {
            // Else an address of the other provider is refused by this rank's address vector
            // (shm beside tcp) or taken and never answered, failing the join after
            // GASPI_OP_TIMEOUT_MS with a bare timeout (sockets or udp beside tcp).
            return Some(Error::Config(format!(
                "GASPI_PROVIDER gives {:?} on rank {other} but {:?} on rank {rank}: every \
                 rank of the job must have the same",
                card.provider, own_card.provider
            )));
        }
        let i = (0..AGREED.len()).find(|&i| card.agreed[i] != own[i])?;
        let (name, _, show) = AGREED[i];
        Some(Error::Config(format!(
            "{name} is {} on rank {other} but {} on rank {rank}: every rank of the job must \
             have the same",
            show(card.agreed[i]),
            show(own[i])
        )))
    })
}

impl Context {
    /// Joins the job with the configuration from the environment ([`Config::from_env`]).
    ///
    /// Started by `gaspirun`, `mpiexec.hydra` or `srun --mpi=pmi2`, the process learns its rank
    /// through PMI; started alone, it is rank 0 of a job of one.
    ///
    /// A process joins its job once: under a launcher, a second `init` (while the first
    /// context lives, or after it was finalized or dropped) fails with [`Error::Bootstrap`], as
    /// PMI allows one connection per process. Started alone, each `init` makes a job of one of
    /// its own, independent of the others.
    ///
    /// # Errors
    /// As for [`init_with`](Self::init_with), and [`Error::Config`] for a bad `GASPI_*`
    /// variable.
    pub fn init() -> Result<Context> {
        Self::init_with(Config::from_env()?)
    }

    /// Joins the job with an explicit configuration. Every rank must pass an equal one.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration; [`Error::Bootstrap`] when the PMI
    /// conversation fails; [`Error::ProviderUnavailable`] / [`Error::Fabric`] when the
    /// provider cannot be opened; [`Error::InitTimeout`] when the other ranks do not meet this
    /// one within [`Config::op_timeout`], or [`Error::Limit`] instead when this process has no
    /// file descriptor left by then or runs out of them while connecting (its peers'
    /// connections need them, and so does watching each peer on this host: one each).
    pub fn init_with(config: Config) -> Result<Context> {
        config.validate()?;
        let mut pmi = PmiClient::from_env()?;
        let (rank, size) = pmi.as_ref().map_or((0, 1), |p| (p.rank(), p.size()));
        if size > MAX_RANKS {
            return Err(Error::Config(format!(
                "a job of {size} ranks exceeds the {MAX_RANKS} gaspi supports"
            )));
        }
        if let Some(pmi) = pmi.as_mut() {
            // Before any shared-memory file exists: a launcher that started this process
            // through a wrapper (a shell, a script) knows the wrapper's pid, not this one, and
            // learns here whose files to remove should this rank die.
            pmi.put(&gaspi_pmi::pid_key(rank), &std::process::id().to_string())?;
        }
        let cq_size = (config.queue_depth as usize * config.queues as usize).max(1024);
        let ep = Endpoint::open(
            &config.provider,
            config.force_unordered,
            config.atomics,
            cq_size,
        )?;

        let system_memory = SegmentMemory::allocate(layout::SIZE as usize, "system")
            .map_err(Error::segment(rank, 0))?;
        let system_region = Region::register(&ep, system_memory, SYSTEM_KEY)?;
        let passive = Passive::new(
            &ep,
            config.passive_max_bytes as usize,
            crate::library::internal_room(size),
            PASSIVE_KEY,
        )?;
        let all_area = ReduceArea::new(
            &ep,
            rank,
            GROUP_ALL,
            size,
            config.reduce_chunk,
            GROUP_ALL_KEY,
        )?;
        let own_region = SystemAddress {
            base: system_region.base(),
            key: system_region.key(),
        };

        let mut direct = Direct::new(rank)?;
        // Published before the bootstrap exchange, whose barrier then guarantees that a peer's
        // first barrier notification finds this table.
        let arrivals = Arc::clone(&direct.doorbell);
        let system_table = SharedTable::new(
            rank,
            u32::from(config.max_groups) * crate::dissemination::SLOTS_PER_GROUP,
            "system-table",
            &arrivals,
        )?;
        direct.publish(
            Slot::System,
            Some(Published {
                descriptor: Descriptor {
                    base: 0,
                    key: 0,
                    size: 0,
                    notifications: system_table.table.len(),
                    incarnation: 0,
                },
                data: None,
                table: system_table.words.path(),
            }),
        );
        let own_card = Card {
            name: ep.name()?,
            region: own_region,
            process: Process::current(),
            directory: direct.path().map(PathBuf::from),
            agreed: AGREED.map(|(_, value, _)| value(&config)),
            provider: ep.caps().provider.clone(),
        };
        let cards = match pmi.as_mut() {
            Some(pmi) => {
                pmi.put(&format!("gaspi-card-{rank}"), &encode_card(&own_card))?;
                pmi.barrier()?;
                (0..size)
                    .map(|r| decode_card(r, &pmi.get(r, &format!("gaspi-card-{r}"))?))
                    .collect::<Result<Vec<_>>>()?
            }
            None => vec![own_card],
        };
        if let Some(e) = disagreement(rank, &cards) {
            return Err(e);
        }
        let own_process = cards[rank as usize].process;
        let processes: Vec<Process> = cards.iter().map(|c| c.process).collect();
        let peers: Vec<SystemAddress> = cards.iter().map(|c| c.region).collect();
        if config.intranode == Intranode::Direct {
            direct.connect(
                cards
                    .iter()
                    .map(|c| {
                        c.directory
                            .clone()
                            .filter(|_| own_process.same_host(&c.process))
                    })
                    .collect(),
            );
        }
        let names: Vec<Vec<u8>> = cards.into_iter().map(|c| c.name).collect();
        ep.insert_peers(&names)?;
        let listeners = if ep.caps().provider.starts_with("tcp") {
            names.iter().map(|n| crate::health::listener(n)).collect()
        } else {
            Vec::new()
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let oversubscribed = config
            .oversubscribed
            .unwrap_or_else(|| Process::neighbours(own_process, &processes) > cores);
        gaspi_notifications::set_oversubscribed(oversubscribed);

        let split_sizes = crate::rma::split_sizes(&config, ep.caps());
        let inner = Arc::new(Inner {
            rank,
            size,
            split_sizes,
            engine: Engine::default(),
            segments: Segments::new(),
            descriptors: Descriptors::new(size),
            queues: Queues::new(config.queues, config.queue_depth, size),
            events: EventCount::new(),
            system_notifications: system_table.table,
            arrivals,
            direct,
            groups: Groups::new(config.max_groups, size, all_area),
            health: Health::new(rank, &processes, listeners),
            oversubscribed,
            passive,
            atomics: Atomics::default(),
            outbox: Outbox::new(),
            libraries: Libraries::default(),
            mailbox: Mailbox::default(),
            closed: AtomicBool::new(false),
            leaving: AtomicBool::new(false),
            pmi: Mutex::new(pmi),
            system: System::new(system_region, peers),
            ep,
            config,
        });
        // Only providers that need the application to drive data progress get a thread.
        let progress = if inner.config.progress_thread && inner.ep.caps().manual_progress {
            Some(ProgressThread::start(Arc::clone(&inner))?)
        } else {
            None
        };
        let watcher = Watcher::start(&inner, inner.health.neighbours());
        let ctx = Context {
            progress,
            watcher,
            inner,
        };
        ctx.inner.passive.post_all(&ctx.inner);
        ctx.publish_area(&*ctx.inner.groups.committed(GROUP_ALL)?)?;
        // The first fabric-level barrier proves every endpoint reachable before user code runs.
        // Its timeout is not the caller's, and init cannot be called again: a bare `Timeout`
        // would neither say what timed out nor which setting to raise.
        let op_timeout = ctx.inner.config.op_timeout;
        let timeout_ms = u64::try_from(op_timeout.as_millis()).unwrap_or(u64::MAX);
        ctx.barrier(Timeout::from(op_timeout))
            .map_err(|e| match e {
                Error::Timeout => descriptors_short(ctx.inner.rank, ctx.inner.size, timeout_ms)
                    .unwrap_or(Error::InitTimeout { timeout_ms }),
                other => descriptors_out(ctx.inner.rank, ctx.inner.size, other),
            })?;
        Ok(ctx)
    }

    /// This rank, in `0..size()`.
    pub fn rank(&self) -> Rank {
        self.inner.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> u32 {
        self.inner.size
    }

    /// Drives the provider once without blocking: completes what it reports, delivers arrived
    /// notifications, and posts operations that waited for room. Returns whether the
    /// completion queue reported anything.
    ///
    /// Every waiting call already drives progress, and a progress thread does while nobody
    /// waits (see the crate documentation); a library that polls its own conditions (a
    /// non-blocking collective's `test`) calls this in between.
    pub fn progress(&self) -> bool {
        self.inner.progress()
    }

    /// Whether this rank's node runs more of the job's ranks than it has cores
    /// ([`Config::oversubscribed`], decided at init unless set): waits then yield the core at
    /// every poll instead of spinning.
    pub fn oversubscribed(&self) -> bool {
        self.inner.oversubscribed
    }

    /// Whether operations towards `rank` take the direct intra-node path: it runs on this host
    /// and [`Config::intranode`] is [`Intranode::Direct`]. Such operations are done by the
    /// calling thread and complete when the call returns (they occupy no room on a queue),
    /// except towards segments of bound user memory, which keep the fabric.
    pub fn reaches_directly(&self, rank: Rank) -> bool {
        self.inner.direct.reaches(rank)
    }

    /// The configuration this context runs with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The libfabric provider in use, as libfabric names it (e.g. `tcp;ofi_rxm`, `shm`).
    pub fn provider(&self) -> &str {
        &self.inner.ep.caps().provider
    }

    /// Whether the provider granted write-after-write ordering, which `notify` and
    /// `write_list_notify` use to order their notification after earlier writes (see the crate
    /// documentation for the mechanism when it is not granted).
    pub fn ordered_writes(&self) -> bool {
        self.inner.ep.caps().ordered_writes
    }

    /// Ends this rank's participation: waits for all ranks (collective, bounded by `timeout`),
    /// stops the progress thread and releases every registration and the endpoint.
    ///
    /// First it waits until this rank's operations through the fabric have completed, those
    /// never waited for included (writes on any queue, a dropped batch's, non-blocking atomics,
    /// passive sends): leaving the job with them in flight cut them off, and a peer took the
    /// rank that left for a dead one. It does not report how they ended: an operation that
    /// failed (towards a segment the peer lacks, say) is reported by the `wait` of its queue
    /// (or its batch's or request's), as GASPI's `gaspi_wait` reports it, and one never
    /// waited for is not reported at all: `finalize` then returns `Ok` (the failure concerns
    /// data this rank no longer waits on, and refusing to end for it would leave the job
    /// hanging on a program that never looks). Call `wait` on every queue used before
    /// `finalize` to learn of such failures. Then two barriers of every rank. The first names any
    /// rank that died before it; after the second, each rank leaves while others may still be
    /// in it, so its waits watch only the partner each round waits for: a rank that finished
    /// finalize and left the job is not taken for a dead one.
    ///
    /// On timeout nothing is released: [`Error::FinalizeTimeout`] hands the context back, and
    /// calling `finalize` on it again continues the same synchronisation. When a rank has died
    /// (see the `health` module), the synchronisation cannot complete: `finalize` returns
    /// [`Error::RankFailed`] naming it (at once if it is known dead, else within milliseconds
    /// for a peer on this host) and releases everything as a drop does, so the process can exit
    /// normally.
    ///
    /// An [`allreduce`](Self::allreduce) of `GROUP_ALL` that timed out and is in flight is
    /// judged by the first barrier: until every rank is in it, `finalize` returns
    /// [`Error::FinalizeRefused`] with [`Error::CollectiveInProgress`] when its timeout
    /// passes (finish the allreduce, which partners may wait for, then call `finalize` again:
    /// it continues); once every rank is in it, the run is given up, since no rank can take a
    /// step of it any more (its partners failed it, with [`Error::CollectiveMismatch`] say).
    /// With [`Timeout::Block`], a partner still waiting in that
    /// allreduce and never calling `finalize` keeps this call waiting too: finish a timed-out
    /// allreduce before a blocking `finalize`.
    ///
    /// # Errors
    /// [`Error::FinalizeTimeout`]; [`Error::FinalizeRefused`], which hands the context back
    /// too, while a collective of `GROUP_ALL` that timed out is in flight (finish it first;
    /// an allreduce as said above), or with [`Error::CollectiveMismatch`] naming a rank that called another collective of
    /// `GROUP_ALL` meanwhile (a `barrier`, say; the members can then agree again, e.g. both
    /// call `finalize`); [`Error::RankFailed`]; [`Error::Bootstrap`] when the PMI finalize
    /// fails.
    pub fn finalize(self, timeout: Timeout) -> Result<()> {
        match self.exit_barrier(timeout.deadline()) {
            Ok(()) => {}
            Err(Error::Timeout) => return Err(Error::FinalizeTimeout(Box::new(self))),
            Err(
                reason @ (Error::CollectiveInProgress { .. } | Error::CollectiveMismatch { .. }),
            ) => {
                return Err(Error::FinalizeRefused {
                    reason: Box::new(reason),
                    ctx: Box::new(self),
                })
            }
            Err(e) => return Err(e),
        }
        let pmi = self.inner.take_pmi();
        drop(self);
        Ok(pmi.map_or(Ok(()), PmiClient::finalize)?)
    }

    pub(crate) fn check_rank(&self, rank: Rank) -> Result<()> {
        self.inner.check_rank(rank)
    }
}

impl Inner {
    /// The PMI connection, once: whoever takes it (finalize or drop) finalizes it.
    fn take_pmi(&self) -> Option<PmiClient> {
        self.pmi.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub(crate) fn check_rank(&self, rank: Rank) -> Result<()> {
        if rank >= self.size {
            return Err(Error::InvalidRank {
                rank,
                size: self.size,
            });
        }
        Ok(())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        // Peers may still be writing into this rank's segments (writes they did not wait for
        // before their finalize): their memory stays mapped until the endpoint is closed.
        self.inner.ep.keep_memory_until_closed();
        // Stop the progress thread before the endpoint closes.
        self.progress.take();
        self.watcher.take();
        // Posted receives hold their buffers until they complete: cancel them first.
        self.inner.passive.withdraw(&self.inner);
        // Leaving deliberately, even without the collective finalize, is not a crash: tell the
        // launcher, which otherwise treats this rank as dead once the process exits.
        if let Some(pmi) = self.inner.take_pmi() {
            // Nothing useful can be done with a failure while dropping.
            let _ = pmi.finalize();
        }
    }
}

/// The error of an init whose first barrier timed out while this process has fewer file
/// descriptors free than it has peers, or `None` while it has enough. Over tcp a connection
/// to each peer takes a descriptor on both sides, and libfabric keeps retrying to accept one
/// it has no descriptor for rather than failing, so a timeout is all the barrier sees, on the
/// rank that ran out and on the peers it never answered (measured: 4 ranks over tcp through
/// the fabric with `ulimit -n 16` timed out after `GASPI_OP_TIMEOUT_MS`, naming no cause).
fn descriptors_short(rank: Rank, size: u32, timeout_ms: u64) -> Option<Error> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current?;
    // Reading the directory takes a descriptor itself: with none left, none are free.
    let open = match std::fs::read_dir("/proc/self/fd") {
        Ok(entries) => u64::try_from(entries.count()).map_or(limit, |n| n.saturating_sub(1)),
        Err(e) if e.raw_os_error() == Some(libc::EMFILE) => limit,
        Err(_) => return None,
    };
    let free = limit.saturating_sub(open);
    let peers = u64::from(size) - 1;
    (free < peers).then(|| {
        Error::Limit(format!(
            "rank {rank}: {free} of the {limit} file descriptors the process may open \
             (RLIMIT_NOFILE) are free, fewer than one for each of its {peers} peers' \
             connections, and Context::init did not meet every rank within {timeout_ms} ms; \
             raise `ulimit -n`"
        ))
    })
}

/// The error of init's first barrier when the provider itself ran out of file descriptors
/// (`EMFILE` from a connection it opened on the spot): the bare libfabric error named neither
/// this rank nor the limit to raise, while the same shortage met as a timeout did.
fn descriptors_out(rank: Rank, size: u32, e: Error) -> Error {
    match e {
        Error::Fabric { call, code, .. } if code == libc::EMFILE => {
            let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
                .current
                .map_or_else(|| "unlimited".to_owned(), |l| l.to_string());
            Error::Limit(format!(
                "rank {rank}: the {limit} file descriptors the process may open \
                 (RLIMIT_NOFILE) ran out while Context::init connected to its {} peers \
                 (libfabric {call}: Too many open files); raise `ulimit -n`",
                size - 1
            ))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_running_out_at_init_name_the_rank_and_the_limit() {
        let e = descriptors_out(
            5,
            32,
            Error::Fabric {
                call: "fi_writemsg(FI_INJECT)",
                code: libc::EMFILE,
                message: "Too many open files".into(),
            },
        );
        let Error::Limit(text) = e else {
            panic!("not a Limit: {e:?}");
        };
        assert!(text.starts_with("rank 5: "), "{text}");
        assert!(text.contains("RLIMIT_NOFILE"), "{text}");
        assert!(text.contains("its 31 peers"), "{text}");
        assert!(text.contains("fi_writemsg(FI_INJECT)"), "{text}");
        assert!(text.contains("ulimit -n"), "{text}");
        let other = descriptors_out(
            5,
            32,
            Error::Fabric {
                call: "fi_writemsg(FI_INJECT)",
                code: libc::ECONNREFUSED,
                message: "Connection refused".into(),
            },
        );
        assert!(matches!(other, Error::Fabric { code, .. } if code == libc::ECONNREFUSED));
    }

    #[test]
    fn cards_round_trip() {
        let region = SystemAddress {
            base: 0xdead_beef_0000,
            key: 7,
        };
        let process = Process::current();
        for directory in [None, Some(PathBuf::from("/dev/shm/gaspi-directory-1-0"))] {
            let card = Card {
                name: b"\x01\x02name".to_vec(),
                region,
                process,
                directory: directory.clone(),
                agreed: [65_536, 16, 1 << 20, 32, 1, 0, 0],
                provider: "tcp;ofi_rxm".into(),
            };
            let back = decode_card(3, &encode_card(&card)).expect("decodes");
            assert_eq!(back.agreed, card.agreed);
            assert_eq!(back.provider, "tcp;ofi_rxm");
            assert_eq!(back.name, b"\x01\x02name");
            assert_eq!(
                (back.region.base, back.region.key),
                (region.base, region.key)
            );
            assert_eq!(back.process, process);
            assert_eq!(back.directory, directory);
        }
        assert!(decode_card(3, "abc").is_err());
        assert!(decode_card(3, "zz").is_err());
    }
}
