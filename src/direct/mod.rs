//! The direct intra-node path: ranks on one host read and write each other's segments
//! themselves, through shared memory, instead of through the fabric.
//!
//! # What is shared
//! Every rank keeps a *directory* in a shared-memory file whose path it publishes at
//! bootstrap. It holds the rank's doorbell, the [`EventCount`] that every notification table of
//! the rank notifies and its waiters sleep on (a futex, so a writer in another process wakes
//! them), and one entry per segment, library segment, allreduce area and the system table: the
//! fabric descriptor, the path of the memory's file (none for bound user memory, which no other
//! process can map) and the path of the notification table's file. Notification tables live in
//! shared-memory files in both modes ([`Intranode`](crate::Intranode)), so fabric arrivals and
//! direct writers publish into the same words and a waiter watches one place, whichever path
//! the data took.
//!
//! # Entries and their lifetime
//! An entry's state word is 0 until first published, odd (`generation << 1 | 1`) while present
//! and even once withdrawn. The owner makes the state even, writes the fields, then stores the
//! next odd state with Release; a reader loads the state (Acquire), the fields, and the state
//! again, and takes the fields only when both loads agree (a seqlock). A peer maps a segment
//! the first time it uses it and remembers the state it saw; every operation compares it with
//! the directory's (one Acquire load), so a deleted segment is [`Error::UnknownSegment`] at the
//! next operation and a re-created one is mapped anew: a stale mapping is never written
//! through once the owner has withdrawn it. A mapping outlives the owner's deletion or death
//! (the pages stay until the last mapping goes), so a write racing either is lost, never a
//! crash.
//!
//! A peer that withdraws an entry also counts a *sweep* in the directory of every rank it
//! reaches directly; a rank that finds its count moved (one load of its own directory, at each
//! completion-queue read and each waiting call) drops its mappings whose entries changed. So
//! the memory of a deleted segment is released on every rank of the host at its next progress,
//! not only when it touches that segment again or finalizes (a 256 MiB segment stayed in a
//! writer's `Shmem` until then); a mapping that another thread of the rank is inside then goes
//! at the first progress after (see [`Direct::sweep`]).
//!
//! # Ordering
//! A direct write copies the data, then stores the notification with Release
//! ([`NotificationTable::set`]); the owner's waiters load it with Acquire, so the data is
//! visible before the notification, as on the fabric. A direct operation is complete when the
//! call returns. A queue that has carried fabric operations towards a same-host rank (writes
//! into its bound memory) sends everything after them towards that rank through the fabric as
//! well, so that a notification never overtakes a write posted before it.

mod ops;

use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use gaspi_notifications::{EventCount, NotificationTable, Timeout};
use gaspi_segments::{Loan, SegmentMemory, SharedWords, Slots};

use crate::engine::lookup::{DescKey, Descriptor};
use crate::error::{Error, Rank, Result};
use crate::timed_lock::TimedMutex;
use crate::wire::Table;

/// `count` zeroed words in a new file named after `name`, which other processes of the host
/// map.
pub(crate) fn allocate_words(rank: Rank, count: usize, name: &str) -> Result<Arc<SharedWords>> {
    SharedWords::allocate(count, name)
        .map(Arc::new)
        .map_err(Error::segment(rank, 0))
}

/// A notification table in shared memory, with the file that holds it.
pub(crate) struct SharedTable {
    pub(crate) table: NotificationTable,
    pub(crate) words: Arc<SharedWords>,
}

impl SharedTable {
    /// A new table of `len` notifications of this rank, notifying `event` on every set.
    pub(crate) fn new(rank: Rank, len: u32, name: &str, event: &Arc<EventCount>) -> Result<Self> {
        let words = allocate_words(rank, NotificationTable::words_for(len).max(1), name)?;
        let table = NotificationTable::in_words(len, words.clone(), Arc::clone(event))
            .ok_or_else(|| Error::Protocol("a new table file is too short".into()))?;
        Ok(SharedTable { table, words })
    }
}

/// Which entry of a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    /// A segment, library segment or allreduce area.
    Desc(DescKey),
    /// The system notification table (barriers).
    System,
}

impl Slot {
    pub(crate) fn of_table(table: Table) -> Slot {
        match table {
            Table::User(id) => Slot::Desc(DescKey::Segment(id)),
            Table::Library(id) => Slot::Desc(DescKey::Library(id)),
            Table::System => Slot::System,
        }
    }

    fn index(self) -> usize {
        match self {
            Slot::Desc(DescKey::Segment(id)) => usize::from(id),
            Slot::Desc(DescKey::Library(id)) => 256 + usize::from(id),
            Slot::System => 512,
            Slot::Desc(DescKey::Area(group)) => 513 + usize::from(group),
        }
    }

    /// First word of the entry.
    fn at(self) -> usize {
        HEADER + self.index() * ENTRY_WORDS
    }
}

/// Where the doorbell (an [`EventCount`]) sits in a directory.
const DOORBELL: usize = 0;
/// Where a directory counts the entries its owner withdrew or replaced (after the doorbell's
/// two words): a reader that finds the count as it was when it resolved a target knows, with
/// one load, that the target's entry is still the one published.
const WITHDRAWALS: usize = 2;
/// Where a directory counts the withdrawals that other ranks told its owner of, so that it
/// drops its mappings of what they withdrew (see [`Direct::sweep`]).
const SWEEPS: usize = 3;
/// How long a thread that finds a sweep under way waits for it to end: a sweep takes
/// microseconds, a few time slices at most on a busy core.
const SWEEP_WAIT: Timeout = Timeout::Millis(100);
/// Words before the first entry.
const HEADER: usize = 16;
/// User segments, library segments, the system table, allreduce areas.
const ENTRIES: usize = 256 + 256 + 1 + 256;
/// Words a path takes: its length in bytes, then the bytes.
const PATH_WORDS: usize = 64;
/// Longest path an entry holds; a longer one is not published (the fabric path remains).
const MAX_PATH: usize = (PATH_WORDS - 1) * 4;
/// Entry fields, as word offsets.
const STATE: usize = 0;
const NOTIFICATIONS: usize = 1;
const BASE: usize = 2;
const KEY: usize = 4;
const SIZE: usize = 6;
const INCARNATION: usize = 8;
const DATA_PATH: usize = 9;
const TABLE_PATH: usize = DATA_PATH + PATH_WORDS;
const ENTRY_WORDS: usize = TABLE_PATH + PATH_WORDS;
const DIRECTORY_WORDS: usize = HEADER + ENTRIES * ENTRY_WORDS;

/// What an owner publishes about one of its segments.
pub(crate) struct Published<'a> {
    pub(crate) descriptor: Descriptor,
    /// The memory's file, if other processes can map it.
    pub(crate) data: Option<&'a Path>,
    /// The notification table's file.
    pub(crate) table: Option<&'a Path>,
}

/// An entry as a reader found it.
struct Entry {
    state: u32,
    descriptor: Descriptor,
    data: Option<PathBuf>,
    table: Option<PathBuf>,
}

fn store_u64(words: &[AtomicU32], at: usize, value: u64) {
    words[at].store(value as u32, Ordering::Relaxed);
    words[at + 1].store((value >> 32) as u32, Ordering::Relaxed);
}

fn load_u64(words: &[AtomicU32], at: usize) -> u64 {
    u64::from(words[at].load(Ordering::Relaxed))
        | (u64::from(words[at + 1].load(Ordering::Relaxed)) << 32)
}

/// Stores `path` (or none) at `at`; a path too long for an entry is stored as none.
fn store_path(words: &[AtomicU32], at: usize, path: Option<&Path>) {
    let bytes = path.map_or(&[][..], |p| p.as_os_str().as_encoded_bytes());
    let bytes = if bytes.len() > MAX_PATH {
        &[][..]
    } else {
        bytes
    };
    words[at].store(bytes.len() as u32, Ordering::Relaxed);
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let mut word = [0u8; 4];
        word[..chunk.len()].copy_from_slice(chunk);
        words[at + 1 + i].store(u32::from_le_bytes(word), Ordering::Relaxed);
    }
}

fn load_path(words: &[AtomicU32], at: usize) -> Option<PathBuf> {
    let len = (words[at].load(Ordering::Relaxed) as usize).min(MAX_PATH);
    if len == 0 {
        return None;
    }
    let mut bytes: Vec<u8> = (0..len.div_ceil(4))
        .flat_map(|i| words[at + 1 + i].load(Ordering::Relaxed).to_le_bytes())
        .collect();
    bytes.truncate(len);
    Some(PathBuf::from(String::from_utf8(bytes).ok()?))
}

/// Reads the entry at `slot` of `words`: `None` while absent, retrying while it changes.
fn read_entry(words: &[AtomicU32], slot: Slot) -> Option<Entry> {
    let at = slot.at();
    loop {
        let state = words[at + STATE].load(Ordering::Acquire);
        if state & 1 == 0 {
            return None;
        }
        let entry = Entry {
            state,
            descriptor: Descriptor {
                base: load_u64(words, at + BASE),
                key: load_u64(words, at + KEY),
                size: load_u64(words, at + SIZE),
                notifications: words[at + NOTIFICATIONS].load(Ordering::Relaxed),
                incarnation: words[at + INCARNATION].load(Ordering::Relaxed),
            },
            data: load_path(words, at + DATA_PATH),
            table: load_path(words, at + TABLE_PATH),
        };
        // Orders the field loads before the second look at the state (the seqlock's check).
        fence(Ordering::Acquire);
        if words[at + STATE].load(Ordering::Relaxed) == state {
            return Some(entry);
        }
    }
}

/// A segment of a peer on this host, mapped.
pub(crate) struct PeerSegment {
    /// The directory state it was mapped under.
    state: u32,
    pub(crate) descriptor: Descriptor,
    /// Its memory, when the owner's memory can be mapped.
    pub(crate) memory: Option<SegmentMemory>,
    /// Its notification table.
    pub(crate) table: Option<NotificationTable>,
}

/// A peer's directory, mapped.
struct PeerDirectory {
    words: Arc<SharedWords>,
    doorbell: Arc<EventCount>,
}

/// A rank on this host.
struct Peer {
    path: PathBuf,
    /// Mapped on first use; `None` when it cannot be (the peer is then reached by the fabric).
    directory: OnceLock<Option<PeerDirectory>>,
    /// Mapped segments, indexed by [`Slot::index`]: read on every direct operation, so
    /// without locks.
    segments: Slots<PeerSegment>,
    /// The system table, once mapped: published once at startup and never replaced, so it
    /// is kept here for good and reached without even the epoch pin of a loan (one locked
    /// instruction off every system notification: barrier rounds, group commits).
    system: OnceLock<Arc<PeerSegment>>,
}

impl Peer {
    fn directory(&self) -> Option<&PeerDirectory> {
        self.directory
            .get_or_init(|| {
                let words = Arc::new(SharedWords::open(&self.path).ok()?);
                if words.words().len() < DIRECTORY_WORDS {
                    return None;
                }
                let doorbell = Arc::new(EventCount::in_words(words.clone(), DOORBELL)?);
                Some(PeerDirectory { words, doorbell })
            })
            .as_ref()
    }

    /// The segment at `slot` as `directory` (this peer's, mapped) describes it: `None` when
    /// it is absent; mapped anew when its entry changed.
    #[inline(always)]
    fn segment(&self, directory: &PeerDirectory, slot: Slot) -> Option<Loan<'_, PeerSegment>> {
        let state = directory.words.words()[slot.at() + STATE].load(Ordering::Acquire);
        let cached = self.segments.get(slot.index());
        match cached.filter(|s| s.state == state) {
            Some(segment) => Some(segment),
            None => self.remap(directory, slot),
        }
    }

    /// Maps the segment at `slot` as the directory describes it now, replacing the mapping
    /// kept for it; `None` (and nothing kept) when it is absent.
    #[cold]
    #[inline(never)]
    fn remap(&self, directory: &PeerDirectory, slot: Slot) -> Option<Loan<'_, PeerSegment>> {
        let Some(entry) = read_entry(directory.words.words(), slot) else {
            self.keep(slot, None);
            return None;
        };
        let memory = entry.data.and_then(|p| SegmentMemory::open(&p).ok());
        let table = entry.table.and_then(|p| {
            let words = Arc::new(SharedWords::open(&p).ok()?);
            let len = entry.descriptor.notifications;
            NotificationTable::in_words(len, words, Arc::clone(&directory.doorbell))
        });
        self.keep(
            slot,
            Some(Arc::new(PeerSegment {
                state: entry.state,
                descriptor: entry.descriptor,
                memory,
                table,
            })),
        );
        // What is kept now: this mapping, or one that a racing thread made of the same entry
        // or of a newer one; either is current.
        self.segments.get(slot.index())
    }

    /// Keeps `segment` (or nothing) as the mapping of `slot`.
    fn keep(&self, slot: Slot, segment: Option<Arc<PeerSegment>>) {
        self.keep_at(slot.index(), segment);
    }

    fn keep_at(&self, index: usize, segment: Option<Arc<PeerSegment>>) {
        // Every slot's index is below ENTRIES, the table's length: replace cannot fail.
        let _ = self.segments.replace(index, segment);
    }

    /// Drops every mapping whose entry in the directory is no longer the one it was mapped
    /// under (withdrawn or replaced): its pages go now, and the next use maps the entry anew.
    /// A mapping another thread is using stays alive for that use (see `Slots`). Returns how
    /// many dropped mappings (of this call or earlier ones) such uses still hold.
    fn drop_stale(&self) -> usize {
        let Some(Some(directory)) = self.directory.get() else {
            return 0;
        };
        let words = directory.words.words();
        for index in (0..ENTRIES).filter(|&i| self.segments.is_occupied(i)) {
            let state = words[HEADER + index * ENTRY_WORDS + STATE].load(Ordering::Acquire);
            let stale = self
                .segments
                .get(index)
                .is_some_and(|mapped| mapped.state != state);
            if stale {
                self.keep_at(index, None);
            }
        }
        self.segments.release_retired()
    }
}

/// A peer reached directly, with its directory: looked up once per operation.
pub(crate) struct Reached<'a> {
    peer: &'a Peer,
    directory: &'a PeerDirectory,
}

impl<'a> Reached<'a> {
    /// The peer's segment at `slot`: `None` when it has no such segment.
    #[inline(always)]
    pub(crate) fn segment(&self, slot: Slot) -> Option<Loan<'a, PeerSegment>> {
        self.peer.segment(self.directory, slot)
    }
}

/// This rank's directory and the peers it reaches directly.
pub(crate) struct Direct {
    own: Arc<SharedWords>,
    /// This rank's doorbell: every notification table of the rank notifies it.
    pub(crate) doorbell: Arc<EventCount>,
    /// Indexed by rank: `Some` for a peer on this host reached directly.
    peers: Box<[Option<Peer>]>,
    /// Whether any of `peers` is `Some`.
    enabled: bool,
    /// The count of sweeps in this rank's directory that [`sweep`](Self::sweep) last
    /// completed: every mapping it dropped was released.
    swept: AtomicU32,
    /// Held while sweeping, so that a thread that finds a sweep to do while another does it
    /// waits for that one to end (see [`sweep`](Self::sweep)).
    sweeping: TimedMutex<()>,
}

impl Direct {
    /// Creates this rank's directory (before bootstrap: its path goes into the card).
    pub(crate) fn new(rank: Rank) -> Result<Direct> {
        let own = allocate_words(rank, DIRECTORY_WORDS, "directory")?;
        let doorbell = EventCount::in_words(own.clone(), DOORBELL)
            .ok_or_else(|| Error::Protocol("the directory file is too short".into()))?;
        Ok(Direct {
            own,
            doorbell: Arc::new(doorbell),
            peers: Box::new([]),
            enabled: false,
            swept: AtomicU32::new(0),
            sweeping: TimedMutex::new(()),
        })
    }

    /// The directory's path, for the bootstrap card.
    pub(crate) fn path(&self) -> Option<&Path> {
        self.own.path()
    }

    /// Sets the ranks reached directly: `paths[r]` for every rank `r` on this host, this rank
    /// included (so that its operations on its own segments are ordered with its peers' direct
    /// ones: everything on a word of the host goes through the same memory).
    pub(crate) fn connect(&mut self, paths: Vec<Option<PathBuf>>) {
        self.peers = paths
            .into_iter()
            .map(|path| {
                let path = path?;
                Some(Peer {
                    path,
                    directory: OnceLock::new(),
                    segments: Slots::new(ENTRIES),
                    system: OnceLock::new(),
                })
            })
            .collect();
        self.enabled = self.peers.iter().any(Option::is_some);
    }

    /// Whether any rank (this one included) is reached directly: false in fabric mode.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether `rank` is reached directly.
    #[inline]
    pub(crate) fn reaches(&self, rank: Rank) -> bool {
        self.peer(rank).is_some()
    }

    /// How many entries `rank` withdrew from its directory or replaced so far, when it is
    /// reached directly: one load. Read before an entry is, a count that has not changed
    /// since says the entry has not either.
    pub(crate) fn withdrawals(&self, rank: Rank) -> Option<u32> {
        let words = self.peer(rank)?.directory.words.words();
        Some(words[WITHDRAWALS].load(Ordering::Acquire))
    }

    /// `rank`, when it is reached directly (its directory is mapped).
    #[inline(always)]
    fn peer(&self, rank: Rank) -> Option<Reached<'_>> {
        let peer = self.peers.get(rank as usize)?.as_ref()?;
        let directory = peer.directory()?;
        Some(Reached { peer, directory })
    }

    /// Publishes `entry` (or its absence) at `slot` of this rank's directory.
    pub(crate) fn publish(&self, slot: Slot, entry: Option<Published<'_>>) {
        let words = self.own.words();
        let at = slot.at();
        let old = words[at + STATE].load(Ordering::Relaxed);
        let generation = (old >> 1).wrapping_add(1);
        // Even: readers retry or see it absent while the fields change.
        words[at + STATE].store(generation << 1, Ordering::Release);
        if old & 1 == 1 {
            // Counted after the entry is withdrawn: a reader that sees the new count and then
            // looks the entry up finds it withdrawn or newer, never the one it replaces.
            words[WITHDRAWALS].fetch_add(1, Ordering::Release);
            self.tell_peers_to_sweep();
        }
        fence(Ordering::Release);
        let Some(entry) = entry else {
            return;
        };
        let d = entry.descriptor;
        words[at + NOTIFICATIONS].store(d.notifications, Ordering::Relaxed);
        store_u64(words, at + BASE, d.base);
        store_u64(words, at + KEY, d.key);
        store_u64(words, at + SIZE, d.size);
        words[at + INCARNATION].store(d.incarnation, Ordering::Relaxed);
        store_path(words, at + DATA_PATH, entry.data);
        store_path(words, at + TABLE_PATH, entry.table);
        words[at + STATE].store(generation << 1 | 1, Ordering::Release);
    }

    /// Counts a sweep in the directory of every rank reached directly, this one included:
    /// each drops its mappings of entries withdrawn so far at its next [`sweep`](Self::sweep).
    /// Counted after the withdrawal (Release), so a rank that sees the count sees it.
    fn tell_peers_to_sweep(&self) {
        for peer in self.peers.iter().flatten() {
            if let Some(directory) = peer.directory() {
                directory.words.words()[SWEEPS].fetch_add(1, Ordering::Release);
            }
        }
    }

    /// Drops this rank's mappings of entries that their owners withdrew or replaced, when a
    /// peer told of one since the last sweep: one load of this rank's own directory otherwise.
    /// Called at every completion-queue read and every waiting call, never on the path of a
    /// transfer.
    ///
    /// When it returns, every withdrawal told before the call has been swept and its mapping
    /// released, by this thread or another, unless a thread of this rank was inside an
    /// operation on it (a loan of the mapping, or any epoch pin taken before the drop): that
    /// mapping goes at the first call after the operation ends.
    #[inline]
    pub(crate) fn sweep(&self) {
        if !self.enabled {
            return;
        }
        let told = self.own.words()[SWEEPS].load(Ordering::Acquire);
        if told != self.swept.load(Ordering::Relaxed) {
            self.sweep_told();
        }
    }

    #[cold]
    #[inline(never)]
    fn sweep_told(&self) {
        // A second thread waits here for a sweep under way rather than leave with its
        // mappings still there: `swept` moves only at the end. Only for a while: a sweep runs
        // releases deferred by any table of the process, and should one of their destructors
        // wait for something this thread holds, the next call sweeps instead.
        let Some(_sweeping) = self.sweeping.lock_until(SWEEP_WAIT.deadline()) else {
            return;
        };
        let told = self.own.words()[SWEEPS].load(Ordering::Acquire);
        if told == self.swept.load(Ordering::Relaxed) {
            return;
        }
        let held: usize = self.peers.iter().flatten().map(Peer::drop_stale).sum();
        // A withdrawal told after `told` was read moves the count again and is swept by the
        // next call. One that an operation still holds keeps the count unswept, so that the
        // next call tries its release again (each call a directory scan and a few pins, until
        // the operation ends).
        if held == 0 {
            self.swept.store(told, Ordering::Relaxed);
        }
    }

    /// The segment at `slot` of `rank`: `None` when `rank` is not reached directly,
    /// `Some(None)` when it has no such segment.
    // Inline, the answer for a rank not reached directly (every rank in fabric mode) is a
    // bounds check and a load; called, it cost a transfer's descriptor look-up as much again.
    #[inline]
    pub(crate) fn segment(&self, rank: Rank, slot: Slot) -> Option<Option<Loan<'_, PeerSegment>>> {
        self.peer(rank).map(|reached| reached.segment(slot))
    }

    /// The system table of `rank`, mapped: `None` when `rank` is not reached directly or has
    /// not published its system table yet.
    pub(crate) fn system(&self, rank: Rank) -> Option<&PeerSegment> {
        let peer = self.peers.get(rank as usize)?.as_ref()?;
        if let Some(system) = peer.system.get() {
            return Some(system);
        }
        // Mapped (or found mapped) as any slot, then kept: a racing thread keeps the same.
        self.peer(rank)?.segment(Slot::System)?;
        let mapped = peer.segments.get_arc(Slot::System.index())?;
        Some(peer.system.get_or_init(|| mapped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_withdraw() {
        let own = Direct::new(0).expect("directory");
        let path = own.path().expect("a file").to_path_buf();
        let mut peer = Direct::new(1).expect("directory");
        peer.connect(vec![Some(path), None]);
        assert!(peer.reaches(0));
        assert!(!peer.reaches(1));
        let slot = Slot::Desc(DescKey::Segment(3));
        assert!(matches!(peer.segment(0, slot), Some(None)));
        let memory = SegmentMemory::allocate(4096, "direct-test").expect("memory");
        let table = SharedTable::new(0, 100, "direct-test-table", &own.doorbell).expect("table");
        let descriptor = Descriptor {
            base: 1,
            key: 2,
            size: 4096,
            notifications: 100,
            incarnation: 7,
        };
        own.publish(
            slot,
            Some(Published {
                descriptor,
                data: memory.shm_path(),
                table: table.words.path(),
            }),
        );
        let seen = peer.segment(0, slot).flatten().expect("present");
        assert_eq!(seen.descriptor, descriptor);
        let mapped = seen.memory.as_ref().expect("mapped");
        mapped.write(10, b"hi").expect("write");
        let mut got = [0u8; 2];
        memory.read(10, &mut got).expect("read");
        assert_eq!(&got, b"hi");
        seen.table.as_ref().expect("table").set(7, 9).expect("set");
        assert_eq!(table.table.get(7), Ok(9));
        assert_eq!(peer.withdrawals(0), Some(0));
        own.publish(slot, None);
        assert!(matches!(peer.segment(0, slot), Some(None)));
        // Withdrawing an absent entry changes nothing a target could name.
        own.publish(slot, None);
        assert_eq!(peer.withdrawals(0), Some(1));
        assert_eq!(peer.withdrawals(1), None);
        assert!(peer.segment(1, slot).is_none());
    }

    #[test]
    fn long_paths_are_not_published() {
        let words: Vec<AtomicU32> = (0..PATH_WORDS).map(|_| AtomicU32::new(0)).collect();
        let long = PathBuf::from("x".repeat(MAX_PATH + 1));
        store_path(&words, 0, Some(&long));
        assert_eq!(load_path(&words, 0), None);
        let fits = PathBuf::from("/dev/shm/gaspi-seg1-42-7");
        store_path(&words, 0, Some(&fits));
        assert_eq!(load_path(&words, 0), Some(fits));
    }
}
