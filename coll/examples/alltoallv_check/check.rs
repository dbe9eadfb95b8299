//! What the scenarios share: one rank's side of an exchange ([`Setup`]), the blocks of a round
//! ([`Received`]), and how results are written on the data line ([`Report`], [`outcome`],
//! the layouts of a plan).

use std::collections::BTreeMap;
use std::fmt::Display;

use gaspi::{Context, Rank, SegmentId, Timeout};
use gaspi_coll::{Alltoallv, Error, Plan, Round};

use crate::plan::{self, Digest, Pattern, SENTINEL};
use crate::{Outcome, TIMEOUT};

/// The `key=value` pairs of one data line.
#[derive(Default)]
pub struct Report(Vec<(String, String)>);

impl Report {
    pub fn put(&mut self, key: &str, value: impl Display) {
        self.0.push((key.to_owned(), value.to_string()));
    }

    /// Prints the line `data <scenario> rank <me>: ...`.
    pub fn print(&self, scenario: &str, me: Rank) {
        let pairs: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("data {scenario} rank {me}: {}", pairs.join("; "));
    }
}

/// What a call returned, as the tests compare it: `Ok`, or the error's variant with its fields
/// (`NotArrived(2)`, `ReceiveAreaTooSmall(0/4/192/64)`, `RankFailed(3)`, ...).
pub fn outcome<T>(result: &Result<T, Error>) -> String {
    let Err(e) = result else {
        return "Ok".into();
    };
    match e {
        Error::Gaspi(gaspi::Error::Timeout) => "Timeout".into(),
        Error::Gaspi(gaspi::Error::RankFailed { rank, .. }) => format!("RankFailed({rank})"),
        Error::Gaspi(gaspi::Error::UnknownSegment { rank, segment }) => {
            format!("UnknownSegment({rank}/{segment})")
        }
        Error::Gaspi(gaspi::Error::OutOfBounds {
            rank,
            segment,
            offset,
            size,
            segment_size,
        }) => format!("OutOfBounds({rank}/{segment}/{offset}/{size}/{segment_size})"),
        Error::ReceiveAreaTooSmall {
            rank,
            segment,
            required,
            available,
        } => format!("ReceiveAreaTooSmall({rank}/{segment}/{required}/{available})"),
        Error::DuplicateDestination { rank } => format!("DuplicateDestination({rank})"),
        Error::DiscoveryInProgress => "DiscoveryInProgress".into(),
        Error::AlltoallvInProgress { group } => format!("AlltoallvInProgress({group})"),
        Error::ForeignPlan => "ForeignPlan".into(),
        Error::UnknownDestination { rank } => format!("UnknownDestination({rank})"),
        Error::AlreadySent { rank } => format!("AlreadySent({rank})"),
        Error::SourceOffsets { expected, got } => format!("SourceOffsets({expected}/{got})"),
        Error::Unsent { rank } => format!("Unsent({rank})"),
        Error::RoundEnded { number } => format!("RoundEnded({number})"),
        Error::UnknownSource { rank } => format!("UnknownSource({rank})"),
        Error::NotArrived { rank } => format!("NotArrived({rank})"),
        Error::AlreadyReset { rank } => format!("AlreadyReset({rank})"),
        Error::OutOfStep {
            rank,
            expected,
            got,
        } => format!("OutOfStep({rank}/{expected}/{got})"),
        // Anything else, kept readable on the data line (whose separators it must not hold).
        other => format!("other({other})").replace([';', '='], " "),
    }
}

/// One rank's side of an exchange: its destinations, where its blocks are read from, and where
/// its receive area is.
pub struct Setup {
    /// `(rank, bytes)` as passed to `get_remote_offsets`.
    pub sends: Vec<(Rank, u64)>,
    /// Where each block of `sends` is read from in `source`.
    pub offsets: Vec<u64>,
    pub source: SegmentId,
    pub receive: SegmentId,
    pub first_offset: u64,
}

impl Setup {
    /// Creates (collectively) the receive segments `receive_ids` and the source segment
    /// `source` for this rank's side of `pattern` in case `case` (which places the receive
    /// area, see [`plan::first_offset`]). This rank receives into `receive_ids[me % 2]`, sized
    /// for its blocks from the first offset on plus [`plan::TAIL`] and filled with
    /// [`SENTINEL`].
    pub fn create(
        ctx: &Context,
        receive_ids: [SegmentId; 2],
        source: SegmentId,
        pattern: Pattern,
        case: usize,
    ) -> Outcome<Setup> {
        let (me, n) = (ctx.rank(), ctx.size());
        let sends = plan::sends(pattern, n, me);
        let first_offset = plan::first_offset(case, me);
        let receive = receive_ids[(me % 2) as usize];
        let area = first_offset + plan::incoming(pattern, n, me) + plan::TAIL;
        for id in receive_ids {
            // The id another rank receives into exists here too, but holds nothing.
            let size = if id == receive { area } else { 1 };
            ctx.segment_create(id, size, TIMEOUT)?;
        }
        ctx.segment_write(receive, 0, &vec![SENTINEL; to_usize(area)?])?;
        let (offsets, size) = plan::source_offsets(&sends);
        ctx.segment_create(source, size, TIMEOUT)?;
        Ok(Setup {
            sends,
            offsets,
            source,
            receive,
            first_offset,
        })
    }

    /// This side without the destination `rank`: the same segments and offsets for the other
    /// blocks.
    pub fn without(&self, rank: Rank) -> Setup {
        let (sends, offsets) = self
            .sends
            .iter()
            .zip(&self.offsets)
            .filter(|((target, _), _)| *target != rank)
            .unzip();
        Setup {
            sends,
            offsets,
            ..*self
        }
    }

    /// `get_remote_offsets` with this rank's arguments.
    pub fn discover(&self, a2a: &mut Alltoallv<'_>, timeout: Timeout) -> Result<Plan, Error> {
        a2a.get_remote_offsets(self.receive, self.first_offset, &self.sends, timeout)
    }

    /// Writes this rank's blocks of round `number` into the source segment.
    pub fn load(&self, ctx: &Context, number: u64) -> Outcome {
        let me = ctx.rank();
        for (&(target, bytes), &offset) in self.sends.iter().zip(&self.offsets) {
            ctx.segment_write(self.source, offset, &plan::block(number, me, target, bytes))?;
        }
        Ok(())
    }

    /// Reads the block of `source` that round `number` delivered, and checks that it holds
    /// what `source` sent.
    pub fn take(&self, ctx: &Context, plan: &Plan, number: u64, source: Rank) -> Outcome<Vec<u8>> {
        let me = ctx.rank();
        let Some(from) = plan.source(source) else {
            return Err(format!("round {number}: rank {source}, not a source, arrived").into());
        };
        let mut got = vec![0; to_usize(from.bytes)?];
        ctx.segment_read(self.receive, from.offset, &mut got)?;
        let want = plan::block(number, source, me, from.bytes);
        if let Some(at) = got.iter().zip(&want).position(|(g, w)| g != w) {
            return Err(format!(
                "round {number}: the block of rank {source} ({} bytes at {}) differs from byte \
                 {at} on: {:#04x}, sent {:#04x}",
                from.bytes, from.offset, got[at], want[at]
            )
            .into());
        }
        Ok(got)
    }

    /// Adds the bytes before and after the receive area of `plan` to `digest`.
    pub fn digest_guards(&self, ctx: &Context, plan: &Plan, digest: &mut Digest) -> Outcome {
        let mut head = vec![0; to_usize(self.first_offset)?];
        ctx.segment_read(self.receive, 0, &mut head)?;
        let mut tail = vec![0; to_usize(plan::TAIL)?];
        let end = self.first_offset + plan.required_size();
        ctx.segment_read(self.receive, end, &mut tail)?;
        digest.add(&head);
        digest.add(&tail);
        Ok(())
    }
}

/// Blocks received in one round, by source, digested in ascending order of source.
#[derive(Default)]
pub struct Received(BTreeMap<Rank, Vec<u8>>);

impl Received {
    /// Records the block of `source`; a second block from it in the round is an error.
    pub fn add(&mut self, number: u64, source: Rank, block: Vec<u8>) -> Outcome {
        if self.0.insert(source, block).is_some() {
            return Err(format!("round {number}: rank {source} was handed out twice").into());
        }
        Ok(())
    }

    /// Checks that every source of `plan`, and no other, was received, and adds the blocks to
    /// `digest`.
    pub fn finish(self, number: u64, plan: &Plan, digest: &mut Digest) -> Outcome {
        let got: Vec<Rank> = self.0.keys().copied().collect();
        let want: Vec<Rank> = plan.sources().iter().map(|s| s.rank).collect();
        if got != want {
            return Err(format!("round {number}: received from {got:?}, sources {want:?}").into());
        }
        for block in self.0.values() {
            digest.add(block);
        }
        Ok(())
    }
}

/// Takes the arrivals of round `number` until none is left, checking and resetting each, then
/// finishes the round.
pub fn take_all(
    ctx: &Context,
    round: &Round<'_>,
    setup: &Setup,
    plan: &Plan,
    number: u64,
) -> Outcome<Received> {
    let mut received = Received::default();
    while let Some(source) = round.next_arrival(TIMEOUT)? {
        received.add(number, source, setup.take(ctx, plan, number, source)?)?;
        round.reset(source)?;
    }
    round.finish(TIMEOUT)?;
    Ok(received)
}

/// Round `number` of `plan` on `a2a` in one go: begins it, sends every block and takes every
/// arrival (see [`take_all`]). The blocks carry the data of round `data` of the scenario.
pub fn whole_round(
    ctx: &Context,
    a2a: &Alltoallv<'_>,
    setup: &Setup,
    plan: &Plan,
    number: u64,
    data: u64,
) -> Outcome<Received> {
    let round = a2a.round(plan, setup.source)?;
    check_number(&round, number)?;
    round.send_all(&setup.offsets)?;
    take_all(ctx, &round, setup, plan, data)
}

/// Checks that a round handle belongs to round `number` of the alltoallv.
pub fn check_number(round: &Round<'_>, number: u64) -> Outcome {
    if round.number() != number {
        return Err(format!("round {number} has number {}", round.number()).into());
    }
    Ok(())
}

/// `sources` of a plan as `rank@offset+bytes,...` (`none` when empty).
pub fn sources_layout(plan: &Plan) -> String {
    list(
        plan.sources()
            .iter()
            .map(|s| format!("{}@{}+{}", s.rank, s.offset, s.bytes)),
    )
}

/// `destinations` of a plan as `rank@segment:offset+bytes,...` (`none` when empty).
pub fn destinations_layout(plan: &Plan) -> String {
    list(
        plan.destinations()
            .iter()
            .map(|d| format!("{}@{}:{}+{}", d.rank, d.segment, d.offset, d.bytes)),
    )
}

/// The items joined with commas, `none` when there are none.
pub fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        "none".into()
    } else {
        items.join(",")
    }
}

fn to_usize(bytes: u64) -> Outcome<usize> {
    Ok(usize::try_from(bytes)?)
}
