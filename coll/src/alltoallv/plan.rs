//! Plans and their discovery: [`Alltoallv::get_remote_offsets`], a resumable state machine
//! (registration, barrier, reading the registrations, replying, collecting the replies,
//! resolving the destinations), and the [`Plan`] it yields.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use gaspi::{
    AtomicRequest, Deadline, Notification, NotificationId, Rank, SegmentId, Target, Timeout,
};

use super::layout::SLOT;
use super::Alltoallv;
use crate::barrier::{Barrier, Members};
use crate::error::{Error, Result};

/// Where one of this rank's blocks goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination {
    /// The receiving rank.
    pub rank: Rank,
    /// Its receive segment.
    pub segment: SegmentId,
    /// Where the block goes in that segment.
    pub offset: u64,
    /// The block's size in bytes.
    pub bytes: u64,
}

/// A block this rank receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// The sending rank.
    pub rank: Rank,
    /// Where its block lands in this rank's receive segment.
    pub offset: u64,
    /// The block's size in bytes.
    pub bytes: u64,
}

/// What [`Alltoallv::get_remote_offsets`] found out: where this rank's blocks go, and which
/// blocks land here. Cheap to clone; valid only with the alltoallv that made it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub(super) data: Arc<PlanData>,
}

#[derive(Debug)]
pub(super) struct PlanData {
    /// The alltoallv that made it.
    pub(super) owner: u64,
    /// Its discovery's number on that alltoallv.
    pub(super) seq: u64,
    pub(super) destinations: Vec<Destination>,
    /// Each destination's block as a target range of exactly its size: resolved by the
    /// discovery where the receive segment existed then, else by the first round that
    /// sends there (see [`Alltoallv::get_remote_offsets`]).
    pub(super) targets: Vec<OnceLock<Target>>,
    /// Each destination's member index and control segment.
    pub(super) destination_members: Vec<u32>,
    pub(super) tables: Vec<Target>,
    pub(super) sources: Vec<Source>,
    /// The sources' member indices.
    pub(super) source_members: Vec<u32>,
    pub(super) segment: SegmentId,
    pub(super) first_offset: u64,
    pub(super) required: u64,
}

impl Plan {
    /// This rank's destinations, in the order they were passed.
    pub fn destinations(&self) -> &[Destination] {
        &self.data.destinations
    }

    /// The ranks whose blocks land here, ascending, with where each lands.
    pub fn sources(&self) -> &[Source] {
        &self.data.sources
    }

    /// Destination `rank`, if it is one.
    pub fn destination(&self, rank: Rank) -> Option<&Destination> {
        self.data.destinations.iter().find(|d| d.rank == rank)
    }

    /// Source `rank`, if it is one.
    pub fn source(&self, rank: Rank) -> Option<&Source> {
        let sources = &self.data.sources;
        sources
            .binary_search_by_key(&rank, |s| s.rank)
            .ok()
            .map(|i| &sources[i])
    }

    /// This rank's receive segment.
    pub fn receive_segment(&self) -> SegmentId {
        self.data.segment
    }

    /// Where this rank's receive area begins in its receive segment.
    pub fn first_offset(&self) -> u64 {
        self.data.first_offset
    }

    /// Bytes of receive area needed from the first offset on: the sum of the sources' sizes
    /// (the proposal's `required_buffer_size`).
    pub fn required_size(&self) -> u64 {
        self.data.required
    }
}

/// Whether a receive segment of `size` bytes holds `required` bytes from `first_offset` on,
/// and how many it has there: the rule of the discovery and of every round.
pub(super) fn receive_area(size: u64, first_offset: u64, required: u64) -> (bool, u64) {
    let available = size.saturating_sub(first_offset);
    (first_offset <= size && required <= available, available)
}

/// The error for `rank`'s receive area in `segment` of `segment_size` bytes, whose first
/// offset lies past the segment's end: "too small" with 0 bytes there would read as if
/// nothing were wrong when nothing is required, and would not name the offset.
pub(super) fn area_outside(
    rank: Rank,
    segment: SegmentId,
    first_offset: u64,
    required: u64,
    segment_size: u64,
) -> Error {
    gaspi::Error::OutOfBounds {
        rank,
        segment,
        offset: first_offset,
        size: required,
        segment_size,
    }
    .into()
}

/// `Ok` when `rank`'s notification carried `got` = `expected`.
fn check_tag(rank: Rank, expected: u32, got: u32) -> Result<()> {
    if got == expected {
        Ok(())
    } else {
        Err(Error::OutOfStep {
            rank,
            expected,
            got,
        })
    }
}

/// A registration, as written into the destination's slot.
#[derive(Debug, Clone, Copy)]
struct Record {
    rank: Rank,
    /// The destination's index in the source's list (where the reply goes).
    index: u32,
    bytes: u64,
}

impl Record {
    fn encode(self) -> [u8; SLOT as usize] {
        let mut slot = [0u8; SLOT as usize];
        slot[0..4].copy_from_slice(&self.rank.to_le_bytes());
        slot[4..8].copy_from_slice(&self.index.to_le_bytes());
        slot[8..16].copy_from_slice(&self.bytes.to_le_bytes());
        slot
    }

    fn decode(slot: &[u8; SLOT as usize]) -> Record {
        Record {
            rank: u32::from_le_bytes(word4(slot, 0)),
            index: u32::from_le_bytes(word4(slot, 4)),
            bytes: u64::from_le_bytes(word8(slot, 8)),
        }
    }
}

/// A destination's answer to a registration.
#[derive(Debug, Clone, Copy)]
struct Reply {
    segment: SegmentId,
    /// Where the block goes; for a receive area too small, the bytes it needs; for one
    /// outside its segment, its first offset.
    offset: u64,
    /// Bytes of the receive area (meaningful when too small); for one outside its segment,
    /// the segment's size.
    available: u64,
    fits: bool,
    /// The receive segment did not exist yet: the block's target is resolved, and the
    /// area's size checked, when the rounds begin.
    absent: bool,
    /// The receive area's first offset lies past the end of its segment.
    outside: bool,
}

impl Reply {
    fn encode(self) -> [u8; SLOT as usize] {
        let mut slot = [0u8; SLOT as usize];
        slot[0..8].copy_from_slice(&self.offset.to_le_bytes());
        slot[8..16].copy_from_slice(&self.available.to_le_bytes());
        slot[16..20].copy_from_slice(&u32::from(self.segment).to_le_bytes());
        let fit = match (self.outside, self.absent, self.fits) {
            (true, _, _) => FIT_OUTSIDE,
            (false, true, _) => FIT_UNKNOWN,
            (false, false, fits) => u32::from(fits),
        };
        slot[20..24].copy_from_slice(&fit.to_le_bytes());
        slot
    }

    fn decode(slot: &[u8; SLOT as usize]) -> Result<Reply> {
        let segment = u32::from_le_bytes(word4(slot, 16));
        let fit = u32::from_le_bytes(word4(slot, 20));
        if fit > FIT_OUTSIDE {
            return Err(gaspi::Error::Protocol(format!("reply has fit word {fit}")).into());
        }
        Ok(Reply {
            segment: SegmentId::try_from(segment)
                .map_err(|_| gaspi::Error::Protocol(format!("reply names segment {segment}")))?,
            offset: u64::from_le_bytes(word8(slot, 0)),
            available: u64::from_le_bytes(word8(slot, 8)),
            fits: fit == 1 || fit == FIT_UNKNOWN,
            absent: fit == FIT_UNKNOWN,
            outside: fit == FIT_OUTSIDE,
        })
    }
}

/// A reply's fit word for a receive segment that does not exist yet (0: too small, 1: fits).
const FIT_UNKNOWN: u32 = 2;
/// A reply's fit word for a receive area whose first offset lies past its segment's end.
const FIT_OUTSIDE: u32 = 3;

fn word4(slot: &[u8; SLOT as usize], at: usize) -> [u8; 4] {
    let mut w = [0u8; 4];
    w.copy_from_slice(&slot[at..at + 4]);
    w
}

fn word8(slot: &[u8; SLOT as usize], at: usize) -> [u8; 8] {
    let mut w = [0u8; 8];
    w.copy_from_slice(&slot[at..at + 8]);
    w
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Count at each destination, then write the record into the slot it handed out.
    Register,
    Barrier,
    /// Read every registration counted here.
    Read,
    /// Reply to each source.
    Reply,
    /// Wait for every destination's reply.
    Collect,
    /// Resolve each destination's receive segment.
    Resolve,
}

/// A discovery in progress on this rank.
pub(super) struct Discovery<'c> {
    receive: SegmentId,
    first_offset: u64,
    sends: Vec<(Rank, u64)>,
    seq: u64,
    step: Step,
    requests: Vec<Option<AtomicRequest<'c>>>,
    /// The slot each destination handed out.
    slots: Vec<Option<u32>>,
    barrier: Barrier,
    /// The registrations read here, with their slots.
    incoming: Vec<(Record, u32)>,
    /// Replies posted so far, in `incoming` order (sorted by then).
    replied: usize,
    /// Whether this rank's receive area holds every source's block.
    fits: bool,
    /// Whether this rank's receive segment did not exist when its registrations were read.
    absent: bool,
    /// The size of this rank's receive segment, when `first_offset` lies past its end.
    outside: Option<u64>,
    required: u64,
    available: u64,
    replies: Vec<Option<Reply>>,
    targets: Vec<Option<Target>>,
}

impl Discovery<'_> {
    fn bank(&self) -> u32 {
        (self.seq % 2) as u32
    }

    fn tag(&self) -> u32 {
        crate::tag(self.seq)
    }
}

impl<'c> Alltoallv<'c> {
    /// `gaspi_get_remote_offsets`. Collective over the group: every member calls it (also one
    /// that sends nothing), in the same order as its other discoveries on this object.
    ///
    /// `sends` are this rank's destinations `(rank, bytes)` — every rank knows only its own.
    /// `receive` and `first_offset` say where this rank's receive area begins. Returns the
    /// [`Plan`]: for each destination, the segment and offset to write to; for this rank, the
    /// sources in ascending rank with the offsets their blocks land at, packed in rank order
    /// from `first_offset`, and the size needed.
    ///
    /// The receive segment need not exist yet: as the proposal has it, a discovery may tell
    /// the size to create it with ([`Plan::required_size`] from `first_offset` on). Create it
    /// (collectively, as `segment_create` is) before the first round; each round checks it
    /// ([`round`](Self::round)), and a block towards it is resolved when it is first sent.
    /// A receive segment that exists is checked here already.
    ///
    /// Every wait keeps to `timeout`; after [`gaspi::Error::Timeout`], call again with the
    /// same arguments to continue.
    ///
    /// # Errors
    /// [`Error::ReceiveAreaTooSmall`] when this rank's receive segment cannot hold its
    /// sources' blocks from `first_offset` on (naming the size needed), or a destination's
    /// cannot (naming that rank; the discovery is over either way, and the others are told
    /// too); [`gaspi::Error::OutOfBounds`] instead when the first offset (this rank's, or a
    /// destination's, naming that rank) lies past the end of its receive segment, naming the
    /// offset and the segment's size; [`Error::DuplicateDestination`]; [`Error::DiscoveryInProgress`] when a
    /// discovery with other arguments timed out; [`Error::OutOfStep`] when members' calls
    /// do not match; from the runtime: [`gaspi::Error::UnknownSegment`] when a destination's
    /// receive segment was deleted since its reply, [`gaspi::Error::NotInGroup`] for a
    /// destination outside the group,
    /// [`gaspi::Error::Timeout`], [`gaspi::Error::RankFailed`].
    pub fn get_remote_offsets(
        &mut self,
        receive: SegmentId,
        first_offset: u64,
        sends: &[(Rank, u64)],
        timeout: Timeout,
    ) -> Result<Plan> {
        let deadline = timeout.deadline();
        let mut discovery = match self.discovery.take() {
            Some(d)
                if d.receive == receive && d.first_offset == first_offset && d.sends == sends =>
            {
                d
            }
            Some(d) => {
                self.discovery = Some(d);
                return Err(Error::DiscoveryInProgress);
            }
            None => self.begin_discovery(receive, first_offset, sends)?,
        };
        match self.discover(&mut discovery, deadline) {
            Err(e) if e.is_timeout() => {
                self.discovery = Some(discovery);
                Err(e)
            }
            other => other,
        }
    }

    /// Checks the arguments of a new discovery and sets it up.
    fn begin_discovery(
        &mut self,
        receive: SegmentId,
        first_offset: u64,
        sends: &[(Rank, u64)],
    ) -> Result<Discovery<'c>> {
        let mut seen = HashSet::with_capacity(sends.len());
        for &(rank, _) in sends {
            if crate::index_in(&self.ranks, rank).is_none() {
                return Err(gaspi::Error::NotInGroup {
                    group: self.group,
                    rank,
                }
                .into());
            }
            if !seen.insert(rank) {
                return Err(Error::DuplicateDestination { rank });
            }
        }
        self.discoveries += 1;
        Ok(Discovery {
            receive,
            first_offset,
            sends: sends.to_vec(),
            seq: self.discoveries,
            step: Step::Register,
            requests: vec![None; sends.len()],
            slots: vec![None; sends.len()],
            barrier: Barrier::new(self.discoveries),
            incoming: Vec::new(),
            replied: 0,
            fits: false,
            absent: false,
            outside: None,
            required: 0,
            available: 0,
            replies: vec![None; sends.len()],
            targets: vec![None; sends.len()],
        })
    }

    fn discover(&self, d: &mut Discovery<'c>, deadline: Deadline) -> Result<Plan> {
        loop {
            match d.step {
                Step::Register => {
                    self.register(d, deadline)?;
                    d.step = Step::Barrier;
                }
                Step::Barrier => {
                    let members = Members {
                        ctx: self.ctx,
                        ranks: &self.ranks,
                        me: self.me,
                        segment: &self.control,
                        base: self.layout.barrier(),
                        batch: &self.batch,
                    };
                    d.barrier
                        .run(&members, |rank, dl| self.control_target(rank, dl), deadline)?;
                    d.step = Step::Read;
                }
                Step::Read => {
                    self.read_registrations(d, deadline)?;
                    d.step = Step::Reply;
                }
                Step::Reply => {
                    self.reply(d, deadline)?;
                    d.step = Step::Collect;
                }
                Step::Collect => {
                    self.collect(d, deadline)?;
                    d.step = Step::Resolve;
                }
                Step::Resolve => return self.resolve(d, deadline),
            }
        }
    }

    /// Counts this rank at each destination and writes its record into the slot handed out.
    fn register(&self, d: &mut Discovery<'c>, deadline: Deadline) -> Result<()> {
        let bank = d.bank();
        let me = self.ctx.rank();
        for (i, &(rank, bytes)) in d.sends.iter().enumerate() {
            if d.requests[i].is_some() || d.slots[i].is_some() {
                continue;
            }
            let target = self.control_target(rank, deadline)?;
            let index = i as u32;
            let record = Record {
                rank: me,
                index,
                bytes,
            };
            // Staged in the reply slot, which the reply overwrites only after the barrier.
            self.control
                .write(self.layout.reply_slot(index), &record.encode())?;
            let counter = self.layout.counter(bank);
            d.requests[i] = Some(self.ctx.atomic_fetch_add_at(&target, counter, 1, None)?);
        }
        for i in 0..d.sends.len() {
            let Some(request) = &d.requests[i] else {
                continue;
            };
            let rank = d.sends[i].0;
            let k = request.wait(deadline.left())?;
            let k = u32::try_from(k)
                .ok()
                .filter(|&k| k < self.layout.members())
                .ok_or_else(|| {
                    gaspi::Error::Protocol(format!(
                        "rank {rank} counted registration {k} in a group of {}",
                        self.ranks.len()
                    ))
                })?;
            d.requests[i] = None;
            d.slots[i] = Some(k);
            let target = self.control_target(rank, deadline)?;
            self.batch.write_notify(
                &self.control,
                self.layout.reply_slot(i as u32),
                &target,
                self.layout.record(bank, k),
                SLOT,
                Notification {
                    id: self.layout.reg(bank, k),
                    value: d.tag(),
                },
            )?;
        }
        self.batch.wait(deadline.left())?;
        Ok(())
    }

    /// Reads every registration counted here (all were, once the barrier is over).
    fn read_registrations(&self, d: &mut Discovery<'c>, deadline: Deadline) -> Result<()> {
        let bank = d.bank();
        let mut word = [0u8; 8];
        self.control.read(self.layout.counter(bank), &mut word)?;
        let count = u64::from_le_bytes(word);
        if count > u64::from(self.layout.members()) {
            return Err(gaspi::Error::Protocol(format!(
                "{count} registrations counted in a group of {}",
                self.ranks.len()
            ))
            .into());
        }
        // `count` fits in u32: it is at most the group's size.
        let ids: Vec<NotificationId> = (0..count as u32)
            .filter(|&k| d.incoming.iter().all(|&(_, taken)| taken != k))
            .map(|k| self.layout.reg(bank, k))
            .collect();
        let tag = d.tag();
        // The senders are unknown until their records are read; their writes completed
        // before they entered the barrier, so the wait is short.
        self.wait_each(&ids, deadline, |id, value| {
            let k = id - self.layout.reg(bank, 0);
            let mut slot = [0u8; SLOT as usize];
            self.control.read(self.layout.record(bank, k), &mut slot)?;
            let record = Record::decode(&slot);
            check_tag(record.rank, tag, value)?;
            d.incoming.push((record, k));
            Ok(())
        })?;
        // Reset for the discovery after next, which uses this bank again: no member can
        // count here before this member has left the next barrier.
        self.control.write(self.layout.counter(bank), &[0u8; 8])?;
        d.incoming.sort_by_key(|(record, _)| record.rank);
        let mut required = 0u64;
        for (record, _) in &d.incoming {
            required = required.saturating_add(record.bytes);
        }
        d.required = required;
        // A receive segment made after the discovery, of the size it tells, is checked
        // when the rounds begin.
        match self.ctx.segment_size(d.receive) {
            Ok(size) => {
                (d.fits, d.available) = receive_area(size, d.first_offset, required);
                d.outside = (d.first_offset > size).then_some(size);
            }
            Err(gaspi::Error::UnknownSegment { .. }) => (d.absent, d.fits) = (true, true),
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Replies to each source: where its block goes, or that the area is too small.
    fn reply(&self, d: &mut Discovery<'c>, deadline: Deadline) -> Result<()> {
        let bank = d.bank();
        let mut offset = d.first_offset;
        for (n, &(record, k)) in d.incoming.iter().enumerate() {
            let at = offset;
            offset = offset.saturating_add(record.bytes);
            if n < d.replied {
                continue;
            }
            let source = self.control_target(record.rank, deadline)?;
            let reply = match d.outside {
                Some(size) => Reply {
                    segment: d.receive,
                    offset: d.first_offset,
                    available: size,
                    fits: false,
                    absent: false,
                    outside: true,
                },
                None => Reply {
                    segment: d.receive,
                    offset: if d.fits { at } else { d.required },
                    available: d.available,
                    fits: d.fits,
                    absent: d.absent,
                    outside: false,
                },
            };
            // The record is read: its slot stages the reply.
            let slot = self.layout.record(bank, k);
            self.control.write(slot, &reply.encode())?;
            self.batch.write_notify(
                &self.control,
                slot,
                &source,
                self.layout.reply_slot(record.index),
                SLOT,
                Notification {
                    id: self.layout.reply(record.index),
                    value: d.tag(),
                },
            )?;
            d.replied = n + 1;
        }
        Ok(())
    }

    /// Waits for every destination's reply, and for this rank's replies to complete.
    fn collect(&self, d: &mut Discovery<'c>, deadline: Deadline) -> Result<()> {
        let ids: Vec<NotificationId> = (0..d.sends.len())
            .filter(|&i| d.replies[i].is_none())
            .map(|i| self.layout.reply(i as u32))
            .collect();
        let tag = d.tag();
        self.wait_each(&ids, deadline, |id, value| {
            let i = id - self.layout.reply(0);
            check_tag(d.sends[i as usize].0, tag, value)?;
            let mut slot = [0u8; SLOT as usize];
            self.control.read(self.layout.reply_slot(i), &mut slot)?;
            d.replies[i as usize] = Some(Reply::decode(&slot)?);
            Ok(())
        })?;
        self.batch.wait(deadline.left())?;
        Ok(())
    }

    /// Resolves each destination's block as a target and makes the plan.
    fn resolve(&self, d: &mut Discovery<'c>, deadline: Deadline) -> Result<Plan> {
        if let Some(size) = d.outside {
            let me = self.ctx.rank();
            return Err(area_outside(
                me,
                d.receive,
                d.first_offset,
                d.required,
                size,
            ));
        }
        if !d.fits {
            return Err(Error::ReceiveAreaTooSmall {
                rank: self.ctx.rank(),
                segment: d.receive,
                required: d.required,
                available: d.available,
            });
        }
        let mut destinations = Vec::with_capacity(d.sends.len());
        let mut destination_members = Vec::with_capacity(d.sends.len());
        let mut tables = Vec::with_capacity(d.sends.len());
        for (i, &(rank, bytes)) in d.sends.iter().enumerate() {
            let reply = d.replies[i].ok_or_else(|| {
                gaspi::Error::Protocol(format!("no reply from rank {rank} was kept"))
            })?;
            if reply.outside {
                // The destination's required size is not in its reply: its first offset is
                // what is wrong.
                let (offset, size) = (reply.offset, reply.available);
                return Err(area_outside(rank, reply.segment, offset, 0, size));
            }
            if !reply.fits {
                return Err(Error::ReceiveAreaTooSmall {
                    rank,
                    segment: reply.segment,
                    required: reply.offset,
                    available: reply.available,
                });
            }
            if d.targets[i].is_none() && !reply.absent {
                let whole = self.ctx.target(rank, reply.segment, deadline.left())?;
                d.targets[i] = Some(whole.range(reply.offset, bytes)?);
            }
            destinations.push(Destination {
                rank,
                segment: reply.segment,
                offset: reply.offset,
                bytes,
            });
            destination_members.push(self.member(rank)?);
            tables.push(self.control_target(rank, deadline)?);
        }
        let mut sources = Vec::with_capacity(d.incoming.len());
        let mut source_members = Vec::with_capacity(d.incoming.len());
        let mut offset = d.first_offset;
        for (record, _) in &d.incoming {
            sources.push(Source {
                rank: record.rank,
                offset,
                bytes: record.bytes,
            });
            // As in the replies: with the receive segment not made yet, the counts are
            // unchecked, and the rounds refuse an area they overflow.
            offset = offset.saturating_add(record.bytes);
            source_members.push(self.member(record.rank)?);
        }
        self.exchange()
            .sources
            .extend(sources.iter().map(|s| s.rank));
        Ok(Plan {
            data: Arc::new(PlanData {
                owner: self.id,
                seq: d.seq,
                destinations,
                targets: (d.targets.iter())
                    .map(|t| t.map_or_else(OnceLock::new, OnceLock::from))
                    .collect(),
                destination_members,
                tables,
                sources,
                source_members,
                segment: d.receive,
                first_offset: d.first_offset,
                required: d.required,
            }),
        })
    }

    /// Waits until each of the control table's notifications `ids` is set, taking each and
    /// calling `take` with its id and value, in any order. Every member's health is
    /// watched, not only the senders': the discovery is collective, and a live sender may
    /// itself wait for a dead member (a destination replies only once it heard from all its
    /// sources), or be a source not known yet, whose registration never comes.
    fn wait_each(
        &self,
        ids: &[NotificationId],
        deadline: Deadline,
        mut take: impl FnMut(NotificationId, u32) -> Result<()>,
    ) -> Result<()> {
        let mut left: Vec<NotificationId> = ids.to_vec();
        while !left.is_empty() {
            let ranges: Vec<_> = left.iter().map(|&id| self.control.range(id, 1)).collect();
            let got = self.ctx.notify_wait_any(&ranges, &self.ranks, deadline)?;
            let id = left.swap_remove(got.range);
            let value = self.control.notify_reset(id)?;
            take(id, value)?;
        }
        Ok(())
    }

    /// The member index of `rank`.
    pub(super) fn member(&self, rank: Rank) -> Result<u32> {
        crate::index_in(&self.ranks, rank).ok_or_else(|| {
            gaspi::Error::NotInGroup {
                group: self.group,
                rank,
            }
            .into()
        })
    }
}
