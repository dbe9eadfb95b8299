//! Rounds of the sparse alltoallv with blocks of 8 B, for instruction counts under callgrind
//! (`scripts/callgrind-alltoallv.sh` runs it), and checked: `cg_alltoallv late|there ROUNDS`.
//!
//! Every rank sends 8 bytes to every other rank (the bench's `dense` variant) in `ROUNDS`
//! rounds of the proposal's form after 20 rounds of warm-up: `alltoallv` until `Complete`,
//! each arrival reset as soon as it is reported, no barrier between rounds. The counted rounds
//! go through [`round_call`], which the script's callgrind collects alone (the warm-up goes
//! around it). Each block carries its round, sender and receiver; after each round every
//! block received is checked, and a wrong one fails the rank with a message naming it. Each
//! rank reports `data cg_alltoallv rank R: rounds=N; blocks=ok`.
//! * `late`: every rank but 0 sleeps 2 ms before each round, so that rank 0 begins first and
//!   waits for its sources' blocks;
//! * `there`: rank 0 sleeps 2 ms before each round, so that its sources' blocks are there when
//!   it begins.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use gaspi::{Context, Rank, SegmentId, Timeout, GROUP_ALL};
use gaspi_coll::{Alltoallv, Collectives, Plan, Status};

type Outcome<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const TIMEOUT: Timeout = Timeout::Millis(60_000);
/// Where blocks land, and where they are sent from.
const RECEIVE: SegmentId = 1;
const SOURCE: SegmentId = 2;
/// Bytes per block: a small block, which goes through its slot in the control segment.
const BYTES: u64 = 8;
/// Rounds before those counted: targets resolved, slots touched.
const WARMUP: u64 = 20;
/// How long the rank that comes late sleeps before each round.
const LATE: Duration = Duration::from_millis(2);

/// One round in the proposal's form, each arrival reset at once; not inlined, so that
/// callgrind can collect it alone.
#[inline(never)]
fn round_call(a2a: &Alltoallv<'_>, plan: &Plan, offsets: &[u64]) -> gaspi_coll::Result<()> {
    round(a2a, plan, offsets)
}

fn round(a2a: &Alltoallv<'_>, plan: &Plan, offsets: &[u64]) -> gaspi_coll::Result<()> {
    loop {
        match a2a.alltoallv(plan, SOURCE, offsets, TIMEOUT)? {
            Status::Arrived(source) => a2a.alltoallv_reset(&[source])?,
            Status::Complete => return Ok(()),
        }
    }
}

/// What the block from `sender` to `receiver` carries in round `round`.
fn stamp(round: u64, sender: Rank, receiver: Rank) -> [u8; 8] {
    ((round << 32) | (u64::from(sender) << 16) | u64::from(receiver)).to_le_bytes()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.as_slice() {
        [mode, rounds] => match (mode.as_str(), rounds.parse::<u64>()) {
            ("late", Ok(rounds)) => run(true, rounds),
            ("there", Ok(rounds)) => run(false, rounds),
            _ => Err("usage: cg_alltoallv late|there ROUNDS".into()),
        },
        _ => Err("usage: cg_alltoallv late|there ROUNDS".into()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cg_alltoallv: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(late: bool, rounds: u64) -> Outcome<()> {
    let ctx = Context::init()?;
    let (me, size) = (ctx.rank(), ctx.size());
    let peers: Vec<Rank> = (0..size).filter(|&r| r != me).collect();
    let area = BYTES * u64::from(size).max(2);
    for segment in [RECEIVE, SOURCE] {
        ctx.segment_create(segment, area, TIMEOUT)?;
    }
    let coll = Collectives::new(&ctx)?;
    let mut a2a = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    let sends: Vec<(Rank, u64)> = peers.iter().map(|&p| (p, BYTES)).collect();
    let plan = a2a.get_remote_offsets(RECEIVE, 0, &sends, TIMEOUT)?;
    let offsets: Vec<u64> = (0..peers.len() as u64).map(|i| i * BYTES).collect();
    let sleeps = (me != 0) == late;
    ctx.barrier(TIMEOUT)?;
    for r in 1..=WARMUP + rounds {
        for (d, &offset) in plan.destinations().iter().zip(&offsets) {
            ctx.segment_write(SOURCE, offset, &stamp(r, me, d.rank))?;
        }
        if r > WARMUP {
            if sleeps {
                std::thread::sleep(LATE);
            }
            round_call(&a2a, &plan, &offsets)?;
        } else {
            round(&a2a, &plan, &offsets)?;
        }
        // A block of the next round is copied into the area only once this round's was
        // reset and the next round handed it out: the area holds this round's blocks.
        for s in plan.sources() {
            let mut got = [0u8; 8];
            ctx.segment_read(RECEIVE, s.offset, &mut got)?;
            if got != stamp(r, s.rank, me) {
                return Err(format!(
                    "rank {me}: round {r}: the block from rank {} reads {:#x}, want {:#x}",
                    s.rank,
                    u64::from_le_bytes(got),
                    u64::from_le_bytes(stamp(r, s.rank, me))
                )
                .into());
            }
        }
    }
    ctx.barrier(TIMEOUT)?;
    println!("data cg_alltoallv rank {me}: rounds={rounds}; blocks=ok");
    drop(a2a);
    drop(coll);
    ctx.finalize(TIMEOUT)?;
    Ok(())
}
