//! The physical floors of one host, the yardsticks of the direct intra-node path: what two
//! processes sharing memory, and one thread copying, can do with no runtime at all.
//!
//! * `shm-flag` ping-pong: ranks 0 and 1 each own an 8-byte flag word in a shared-memory file
//!   of their own, which the peer maps; a side stores the round's number into the peer's word
//!   (release) and spins on its own (acquire) for the reply, a bare load loop as a C programmer
//!   would write it. The flag is the 8-byte message. Its half round trip is the least an 8-byte
//!   `write_notify` between two processes can take.
//! * `memcpy` streaming: rank 0 copies the message between two buffers of its own, in bursts
//!   timed like the bandwidth bench's (the same count per burst, one source and one target
//!   reused), the least a streamed write through shared memory can take per message.
//!
//! Both use only safe atomics and copies (of `SegmentMemory` and of `memmap2` mappings).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use gaspi::{Context, Timeout};
use gaspi_segments::SegmentMemory;
use memmap2::MmapMut;

use crate::api::{burst_len, pingpong_iterations};
use crate::{swap_cards, Error, Figure, Result, PINGPONG_SIZES};

/// Where a side's flag sits in its file (the file is one page; the two flags live in
/// different files, and so on different cache lines).
const FLAG: u64 = 0;

/// The flag ping-pong of ranks 0 and 1 (other ranks hold none).
pub(crate) struct FlagPair {
    side: Option<FlagSide>,
}

struct FlagSide {
    /// The word the peer writes and this side spins on.
    own: SegmentMemory,
    /// The peer's file, mapped.
    peer: SegmentMemory,
}

impl FlagPair {
    /// Creates each side's flag file and maps the peer's, found through [`swap_cards`].
    pub(crate) fn connect(ctx: &Context) -> Result<FlagPair> {
        if ctx.rank() > 1 {
            ctx.barrier(Timeout::Millis(60_000))?;
            return Ok(FlagPair { side: None });
        }
        let own = SegmentMemory::allocate(4096, "flag-bench")?;
        let path = own
            .shm_path()
            .ok_or_else(|| Error::Check("flag bench: the flag file has no path".into()))?;
        let peer_path = swap_cards(ctx, path.as_os_str().as_bytes())?;
        let peer = SegmentMemory::open(Path::new(OsStr::from_bytes(&peer_path)))?;
        Ok(FlagPair {
            side: Some(FlagSide { own, peer }),
        })
    }

    /// Half round trip of the 8-byte flag, with the warm-up and count of gaspi's.
    pub(crate) fn pingpong(&self, ctx: &Context) -> Result<Option<Figure>> {
        let bytes = PINGPONG_SIZES[0];
        let (warmup, iters) = pingpong_iterations(bytes);
        let mut samples = Vec::with_capacity(iters);
        if let Some(side) = &self.side {
            // The runtime's progress threads poll for a millisecond after the last traffic (the
            // barrier just now); the floor is measured on cores they have left.
            std::thread::sleep(Duration::from_millis(10));
            let first = ctx.rank() == 0;
            for seq in 1..=(warmup + iters) as u64 {
                let start = Instant::now();
                if first {
                    side.peer.write_u64(FLAG, seq)?;
                    side.wait_for(seq)?;
                } else {
                    side.wait_for(seq)?;
                    side.peer.write_u64(FLAG, seq)?;
                }
                if seq as usize > warmup {
                    samples.push(start.elapsed() / 2);
                }
            }
        }
        ctx.barrier(Timeout::Millis(60_000))?;
        let figure = Figure::of(ctx, "pingpong", "shm-flag", bytes, samples);
        Ok(figure.map(|f| Figure {
            transport: "shm".into(),
            ..f
        }))
    }
}

impl FlagSide {
    /// Spins until the own flag reads `seq`.
    fn wait_for(&self, seq: u64) -> Result<()> {
        let start = Instant::now();
        loop {
            // The clock is read only between bursts of polls, so that noticing the flag costs
            // one load. No pause between the loads: a pause instruction (~140 cycles on current
            // x86) delays noticing the flag by up to its length, which slowed the floor and so
            // flattered every ratio to it; the runtime's hot spin does not pause either.
            for _ in 0..64 {
                if self.own.read_u64(FLAG)? == seq {
                    return Ok(());
                }
            }
            let waited = start.elapsed();
            if waited > Duration::from_secs(60) {
                return Err(Error::Check(format!(
                    "flag bench: no flag {seq} within 60 s"
                )));
            }
            // When the peer lost its core (a loaded machine), spinning on would keep it off
            // longer; the runtime's waits yield after the same 20 µs.
            if waited > Duration::from_micros(20) {
                std::thread::yield_now();
            }
        }
    }
}

/// Rank 0's buffers for the `memcpy` floor: the largest message's worth each, page-aligned
/// like segments (a heap buffer's few bytes of offset split every vector load across cache
/// lines, which cost a quarter of the bandwidth at 256 KiB here).
pub(crate) struct Copies {
    src: MmapMut,
    dst: MmapMut,
}

impl Copies {
    /// Buffers of `bytes`, every page written once so that no copy meets a page fault or
    /// reads the kernel's shared zero page.
    pub(crate) fn new(bytes: usize) -> Result<Copies> {
        let buffer = || -> Result<MmapMut> {
            let mut map =
                MmapMut::map_anon(bytes).map_err(|source| Error::Map { bytes, source })?;
            map.fill(1);
            Ok(map)
        };
        Ok(Copies {
            src: buffer()?,
            dst: buffer()?,
        })
    }

    /// One burst of `bytes` copies, as many as a streaming burst has messages; returns the
    /// time per copy. The source gets new contents first (untimed), so every burst moves
    /// fresh data, and the last byte is checked to have arrived.
    pub(crate) fn burst(&mut self, bytes: usize, rep: u32) -> Result<Duration> {
        let (src, dst) = (&mut self.src[..bytes], &mut self.dst[..bytes]);
        let fill = (rep % 250) as u8 + 2;
        src.fill(fill);
        let count = burst_len(bytes);
        let start = Instant::now();
        for _ in 0..count {
            // `black_box` keeps the compiler from merging the copies of the same bytes.
            dst.copy_from_slice(std::hint::black_box(&*src));
            std::hint::black_box(&mut *dst);
        }
        let took = start.elapsed() / count as u32;
        match dst.last() {
            Some(&b) if b != fill => Err(Error::Check(format!(
                "memcpy bench: copied byte is {b}, not {fill}"
            ))),
            _ => Ok(took),
        }
    }
}

/// The `memcpy` figure for `samples` (rank 0 only).
pub(crate) fn memcpy_figure(ctx: &Context, bytes: usize, samples: Vec<Duration>) -> Option<Figure> {
    let figure = Figure::of(ctx, "bandwidth", "memcpy", bytes, samples)?;
    Some(Figure {
        transport: "memory".into(),
        ..figure
    })
}
