//! The yardstick: the benchmark's patterns written directly against libfabric.
//!
//! Two ranks open their own endpoint (same provider, same hints as the runtime), register one
//! buffer and busy-poll their completion queue — no queues, tables, checks or progress thread.
//! Ping-pong is measured in both ways a notification can be carried, and the faster per size is
//! what the runtime is compared against:
//! * `writedata`: one `fi_writedata`, the notification as remote CQ data;
//! * `write+flag`: `fi_write` of the payload, then a 4-byte flag write (ordered by
//!   `FI_ORDER_RMA_WAW`), the target polling the flag in memory while driving progress.
//!
//! Streaming uses `write+flag`: a burst of plain writes, then one flag.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gaspi::{Context, Timeout};
use gaspi_fabric::{Endpoint, Event, Posted, Region, RemoteTarget};
use gaspi_segments::SegmentMemory;

use crate::api::pingpong_iterations;
use crate::{swap_cards, Error, Figure, Result, BUFFER};

/// Where each side's flag word sits in its raw buffer.
const FLAG: u64 = (BUFFER - 64) as u64;
/// Writes in flight while streaming: the runtime's default queue depth, for a like comparison.
const WINDOW: usize = 1024;

/// One side of the raw pair (ranks 0 and 1; other ranks hold none).
pub(crate) struct RawPair {
    side: Option<Side>,
}

struct Side {
    // Field order is drop order: the endpoint closes before the region it wrote from goes.
    /// Operations are posted untracked (no record), as a C program would post them.
    ep: Endpoint<()>,
    region: Arc<Region>,
    peer: RemoteTarget,
    /// Writes posted and not yet completed locally; every completion read, wherever, counts.
    in_flight: Cell<usize>,
}

impl RawPair {
    /// Opens the raw endpoints of ranks 0 and 1 and exchanges their addresses (see
    /// [`swap_cards`]).
    pub(crate) fn connect(ctx: &Context) -> Result<RawPair> {
        let me = ctx.rank();
        if me > 1 {
            ctx.barrier(Timeout::Millis(60_000))?;
            return Ok(RawPair { side: None });
        }
        let ep = Endpoint::open(&ctx.config().provider, false, ctx.config().atomics, 4096)?;
        let region = Region::register(&ep, SegmentMemory::allocate(BUFFER, "raw-bench")?, 1)?;
        let mut card = Vec::new();
        card.extend_from_slice(&region.base().to_le_bytes());
        card.extend_from_slice(&region.key().to_le_bytes());
        card.extend_from_slice(&ep.name()?);
        let peer_card = swap_cards(ctx, &card)?;
        if peer_card.len() <= 16 {
            return Err(Error::Check("raw bench: short address card".into()));
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&peer_card[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        ep.insert_peers(&[peer_card[16..].to_vec()])?;
        let peer = RemoteTarget {
            rank: 0,
            addr: word(0),
            key: word(1),
        };
        Ok(RawPair {
            side: Some(Side {
                ep,
                region,
                peer,
                in_flight: Cell::new(0),
            }),
        })
    }

    /// Raw ping-pong in both notification styles.
    pub(crate) fn pingpong(&self, ctx: &Context, bytes: usize) -> Result<Vec<Figure>> {
        let (warmup, iters) = pingpong_iterations(bytes);
        let mut figures = Vec::new();
        for variant in ["writedata", "write+flag"] {
            let mut samples = Vec::with_capacity(iters);
            if let Some(side) = &self.side {
                let first = ctx.rank() == 0;
                for i in 0..(warmup + iters) as u64 {
                    let seq = i + 1;
                    let start = Instant::now();
                    if first {
                        side.send(bytes, seq, variant)?;
                        side.receive(seq, variant)?;
                    } else {
                        side.receive(seq, variant)?;
                        side.send(bytes, seq, variant)?;
                    }
                    if i as usize >= warmup {
                        samples.push(start.elapsed() / 2);
                    }
                }
                side.drain()?;
                // Clear the flag so the next run's sequence numbers start from a known state.
                side.region.memory().write_u64(FLAG, 0)?;
            }
            ctx.barrier(Timeout::Millis(60_000))?;
            figures.extend(figure(ctx, "pingpong", bytes, samples, variant));
        }
        Ok(figures)
    }

    /// One raw burst: plain writes, then a flag write behind them (ordered by the provider),
    /// acknowledged by a flag write back. Rank 0 gets the time per message.
    pub(crate) fn bandwidth_burst(
        &self,
        ctx: &Context,
        bytes: usize,
        rep: u32,
    ) -> Result<Option<Duration>> {
        let count = super::api::burst_len(bytes);
        // Flag values of bursts never repeat within a run and never meet ping-pong's (below
        // 4,000): they are compared as 32-bit words.
        let seq = 1_000_000 + u64::from(rep) + 100 * (bytes as u64 >> 16);
        let mut sample = None;
        if let Some(side) = &self.side {
            if ctx.rank() == 0 {
                let start = Instant::now();
                for _ in 0..count {
                    while side.in_flight.get() >= WINDOW {
                        side.poll_local()?;
                    }
                    side.post(|| side.write_payload(bytes, None))?;
                    side.in_flight.set(side.in_flight.get() + 1);
                }
                side.flag(seq)?;
                side.receive(seq, "write+flag")?;
                sample = Some(start.elapsed() / count as u32);
                while side.in_flight.get() > 0 {
                    side.poll_local()?;
                }
            } else {
                side.receive(seq, "write+flag")?;
                side.flag(seq)?;
            }
            side.drain()?;
        }
        ctx.barrier(Timeout::Millis(60_000))?;
        Ok(sample)
    }
}

impl Side {
    fn target(&self, offset: u64) -> RemoteTarget {
        RemoteTarget {
            addr: self.peer.addr + offset,
            ..self.peer
        }
    }

    fn post(&self, mut attempt: impl FnMut() -> Result<Posted>) -> Result<()> {
        while attempt()? == Posted::Again {
            self.poll_local()?;
        }
        Ok(())
    }

    /// Reads completions, retires the local ones from `in_flight`, and returns whether a
    /// remote event carrying `data` was among them.
    fn poll_for(&self, data: Option<u64>) -> Result<bool> {
        let (mut seen, mut failed) = (false, None);
        self.ep.poll(|event| match event {
            Event::Remote { data: d } => seen |= Some(d) == data,
            Event::Untracked { failure: None, .. } => {
                self.in_flight.set(self.in_flight.get().saturating_sub(1));
            }
            Event::Untracked {
                failure: Some(f), ..
            }
            | Event::Failed { failure: f, .. } => failed = Some(f.message),
            Event::Done(()) | Event::Received { .. } => {}
        })?;
        match failed {
            Some(message) => Err(Error::Check(format!(
                "raw bench operation failed: {message}"
            ))),
            None => Ok(seen),
        }
    }

    fn poll_local(&self) -> Result<()> {
        self.poll_for(None).map(drop)
    }

    /// Posts a write of the first `bytes` of the buffer to the peer, with `data` as CQ data.
    fn write_payload(&self, bytes: usize, data: Option<u64>) -> Result<Posted> {
        let payload = self.region.slice(0, bytes as u64)?;
        // SAFETY: the region is owned by self, which outlives every write: the benchmark
        // drains its completions (`drain`, `in_flight`) before the pair is dropped, and the
        // payload bytes are never modified while it runs.
        Ok(unsafe { self.ep.write_untracked(payload, self.peer, data, 0)? })
    }

    fn send(&self, bytes: usize, seq: u64, variant: &str) -> Result<()> {
        if variant == "writedata" {
            self.post(|| self.write_payload(bytes, Some(seq)))
        } else {
            self.post(|| self.write_payload(bytes, None))?;
            self.flag(seq)
        }
    }

    /// Writes `seq` into the peer's flag word, behind every write posted before it.
    fn flag(&self, seq: u64) -> Result<()> {
        let flag = (seq as u32).to_le_bytes();
        // SAFETY: a benchmark pair's peer neither fails nor stops while it runs.
        self.post(|| Ok(unsafe { self.ep.inject_untracked(&flag, self.target(FLAG), None)? }))
    }

    fn receive(&self, seq: u64, variant: &str) -> Result<()> {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(60);
        loop {
            let remote = self.poll_for(Some(seq))?;
            let arrived = if variant == "writedata" {
                remote
            } else {
                self.region.memory().read_u64(FLAG).unwrap_or(0) as u32 == seq as u32
            };
            if arrived {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Check(format!(
                    "raw bench: no notification {seq} within 60 s"
                )));
            }
            // On a machine with as many busy ranks as cores, a long pure spin starves the
            // kernel's softirq thread that moves loopback TCP data (4 ms stalls, measured);
            // yielding after a short burst keeps the yardstick at its best.
            if start.elapsed() > Duration::from_micros(20) {
                std::thread::yield_now();
            }
        }
    }

    /// Waits briefly for stray local completions so the next bench starts from an empty queue.
    fn drain(&self) -> Result<()> {
        let until = Instant::now() + Duration::from_millis(5);
        while Instant::now() < until {
            self.poll_local()?;
        }
        Ok(())
    }
}

/// The raw figure of `variant` for `samples` (rank 0 only).
pub(crate) fn figure(
    ctx: &Context,
    bench: &'static str,
    bytes: usize,
    samples: Vec<Duration>,
    variant: &'static str,
) -> Option<Figure> {
    let figure = Figure::of(ctx, bench, "raw-libfabric", bytes, samples)?;
    Some(Figure {
        variant: Some(variant),
        ..figure
    })
}
