//! The benchmark behind `gaspi-bench`: gaspi beside its yardsticks, in one run.
//!
//! Each figure is printed as one JSON line,
//! `{"bench":..,"lib":..,"transport":..,"ranks":..,"bytes":..,"median_us":..,"mib_s":..,"iters":..}`
//! (`iters`: the samples behind the median), so scripts can compare `lib: "gaspi"` with its
//! yardsticks for the same bench and size. gaspi lines add `"mode"`: `direct` when this rank
//! reaches every other one through the direct intra-node path, `fabric` when through libfabric
//! (what the runtime reports, whatever `GASPI_INTRANODE` asked for). The yardsticks:
//! * `lib: "raw-libfabric"`: the same pattern written directly against libfabric (see the `raw`
//!   module), with a `"variant"`; the yardstick for the runtime's overhead on the fabric;
//! * `lib: "shm-flag"` and `lib: "memcpy"`: the physical floors of one host, a ping-pong of an
//!   8-byte flag through shared memory and a single-thread copy (see the `floor` module); the
//!   yardsticks of the direct path.
//!
//! The collectives' yardstick is MPI, measured by `bench/mpi/coll.c` (barrier, allreduce: see the
//! `coll` module, whose allreduce also runs on `gaspi-coll`'s team engine, in lines with
//! `lib: "gaspi-coll"` and the `"mode"` of gaspi lines) and `bench/mpi/alltoallv.c` (the sparse alltoallv of `gaspi-coll`: see the
//! `alltoallv` module, whose lines add `"variant"` and `"peers"`) with the same keys, and so is
//! that of the post / start / complete / wait epochs of `gaspi-coll`'s window, measured by
//! `bench/mpi/pscw.c` (see the `pscw` module: `"bench"` is `pscw` for the epoch ping-pong and
//! `pscw_halo` for the halo epoch, whose lines add `"peers"`; the epoch ping-pong's own yardstick
//! is a write_notify ping-pong in the same job, a `pingpong` line), and so is that of GASNet's
//! data-movement collectives on a `gaspi-coll` team, measured by `bench/mpi/gasnet.c` (see the
//! `gasnet` module: `"bench"` names the team's operation, `broadcast` to `exchangev`, on the
//! lines of both sides; gaspi lines add `"algorithm"`, the one the team chose).
//!
//! The gaspi side uses only the runtime's public API; the raw side uses the same fabric layer
//! (`gaspi-fabric`, and thus the same provider setup) as the runtime, with no runtime above it.

#![warn(missing_docs)]

mod alltoallv;
mod api;
mod coll;
mod floor;
mod gasnet;
mod pscw;
mod raw;
mod stamp;

use std::time::Duration;

use gaspi::{local, remote, Context, Notification, ReduceOp, Timeout, GROUP_ALL};

/// Why a benchmark run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A call of the runtime failed.
    #[error(transparent)]
    Gaspi(#[from] gaspi::Error),
    /// A collective of `gaspi-coll` failed.
    #[error(transparent)]
    Coll(#[from] gaspi_coll::Error),
    /// A raw libfabric call failed.
    #[error(transparent)]
    Fabric(#[from] gaspi_fabric::Error),
    /// Segment memory of the raw side failed.
    #[error(transparent)]
    Segment(#[from] gaspi_segments::Error),
    /// The buffers of the memcpy floor could not be mapped.
    #[error("memcpy floor: cannot map {bytes} bytes: {source}")]
    Map {
        /// Size of the mapping asked for.
        bytes: usize,
        /// Why the kernel refused it.
        source: std::io::Error,
    },
    /// The command line or the job does not fit the benchmark.
    #[error("{0}")]
    Usage(String),
    /// A measured operation produced a wrong result, or none in time.
    #[error("{0}")]
    Check(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Ping-pong sizes (bytes).
pub(crate) const PINGPONG_SIZES: [usize; 5] = [8, 64, 512, 4096, 65536];
/// Streaming sizes (bytes).
pub(crate) const BANDWIDTH_SIZES: [usize; 4] = [65536, 262_144, 1 << 20, 4 << 20];
/// Bursts per streaming size and side.
const BANDWIDTH_REPS: u32 = 9;
/// Segment size used by both sides: the largest message plus room for flags and cards.
pub(crate) const BUFFER: usize = (8 << 20) + 4096;

/// One measured figure.
#[derive(Debug, Clone)]
pub(crate) struct Figure {
    pub bench: &'static str,
    pub lib: &'static str,
    pub transport: String,
    pub ranks: u32,
    pub bytes: usize,
    pub median: Duration,
    pub iters: usize,
    /// Which raw pattern produced a raw-libfabric figure, or which alltoallv.
    pub variant: Option<&'static str>,
    /// How many ranks each rank sends to, in an alltoallv or halo figure.
    pub peers: Option<u32>,
    /// Which path a gaspi figure's operations took (see [`mode`]).
    pub mode: Option<&'static str>,
    /// The algorithm a team collective ran (`Handle::algorithm`).
    pub algorithm: Option<&'static str>,
}

impl Figure {
    /// Rank 0's figure of `samples`, over the context's transport; none on other ranks, which
    /// measure only to keep rank 0 company, or without samples.
    pub(crate) fn of(
        ctx: &Context,
        bench: &'static str,
        lib: &'static str,
        bytes: usize,
        samples: Vec<Duration>,
    ) -> Option<Figure> {
        if ctx.rank() != 0 || samples.is_empty() {
            return None;
        }
        Some(Figure {
            bench,
            lib,
            transport: transport(ctx),
            ranks: ctx.size(),
            bytes,
            iters: samples.len(),
            median: median(samples),
            variant: None,
            peers: None,
            mode: None,
            algorithm: None,
        })
    }

    fn json(&self) -> String {
        let us = self.median.as_secs_f64() * 1e6;
        let mib_s = if us > 0.0 {
            self.bytes as f64 / (1 << 20) as f64 / (us / 1e6)
        } else {
            0.0
        };
        let optional = |key: &str, value: Option<&str>| {
            value
                .map(|v| format!(",\"{key}\":\"{v}\""))
                .unwrap_or_default()
        };
        let variant = optional("variant", self.variant);
        let peers = self
            .peers
            .map(|p| format!(",\"peers\":{p}"))
            .unwrap_or_default();
        let mode = optional("mode", self.mode);
        let algorithm = optional("algorithm", self.algorithm);
        format!(
            "{{\"bench\":\"{}\",\"lib\":\"{}\",\"transport\":\"{}\",\"ranks\":{},\"bytes\":{},\"median_us\":{:.3},\"mib_s\":{:.1},\"iters\":{}{variant}{peers}{mode}{algorithm}}}",
            self.bench, self.lib, self.transport, self.ranks, self.bytes, us, mib_s, self.iters
        )
    }
}

/// Median of a non-empty sample (the caller measures at least one iteration).
pub(crate) fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// The largest of the ranks' medians of `samples` (collective over all ranks; a rank without
/// samples counts as 0).
pub(crate) fn slowest_median(ctx: &Context, samples: &[Duration]) -> Result<Duration> {
    let mine = median(samples.to_vec()).as_secs_f64();
    let mut slowest = [0.0];
    let timeout = Timeout::Millis(60_000);
    ctx.allreduce(GROUP_ALL, &[mine], &mut slowest, ReduceOp::Max, timeout)?;
    // The largest of durations' seconds: finite and not negative, as from_secs_f64 requires.
    Ok(Duration::from_secs_f64(slowest[0]))
}

/// The transport name used in the JSON lines: the user-facing provider name.
fn transport(ctx: &Context) -> String {
    ctx.config().provider.clone()
}

/// The path this rank's operations towards the others take: `direct` when it reaches all of
/// them through the direct intra-node path, `fabric` when none, `mixed` otherwise (ranks on
/// several hosts).
pub(crate) fn mode(ctx: &Context) -> &'static str {
    let me = ctx.rank();
    let others = (0..ctx.size()).filter(|&r| r != me);
    let direct = others.clone().filter(|&r| ctx.reaches_directly(r)).count();
    match direct {
        0 => "fabric",
        d if d == others.count() => "direct",
        _ => "mixed",
    }
}

/// Where ranks 0 and 1 exchange the cards of the yardsticks, in the gaspi segment.
const CARD: u64 = (BUFFER - 4096) as u64;
const CARD_NOTIFICATION: u32 = 2;

/// Gives `card` (not empty) to the peer among ranks 0 and 1 and returns the peer's, through the
/// gaspi context: a bootstrap convenience, the yardsticks' measured traffic never goes this
/// way. Ranks 0 and 1 call it together while every other rank calls `barrier`; the barrier it
/// ends with lets the next exchange reuse the same place.
pub(crate) fn swap_cards(ctx: &Context, card: &[u8]) -> Result<Vec<u8>> {
    let timeout = Timeout::Millis(60_000);
    ctx.segment_write(api::SEGMENT, CARD, card)?;
    ctx.write_notify(
        local(api::SEGMENT, CARD),
        remote(1 - ctx.rank(), api::SEGMENT, CARD + 2048),
        card.len() as u64,
        Notification {
            id: CARD_NOTIFICATION,
            value: card.len() as u32,
        },
        0,
    )?;
    let id = ctx.notify_waitsome(api::SEGMENT, CARD_NOTIFICATION, 1, timeout)?;
    let len = ctx.notify_reset(api::SEGMENT, id)? as usize;
    let mut peer_card = vec![0u8; len];
    ctx.segment_read(api::SEGMENT, CARD + 2048, &mut peer_card)?;
    ctx.wait(0, timeout)?;
    ctx.barrier(timeout)?;
    Ok(peer_card)
}

/// Every benchmark, in the order `all` runs them.
const BENCHES: [&str; 7] = [
    "pingpong",
    "bandwidth",
    "barrier",
    "allreduce",
    "alltoallv",
    "pscw",
    "gasnet",
];

/// What one run measures.
struct Choice {
    benches: Vec<&'static str>,
    gaspi_side: bool,
    yardsticks: bool,
    /// The most timed rounds of an alltoallv, pscw or gasnet figure.
    max_rounds: usize,
}

impl Choice {
    fn parse(args: &[String]) -> Result<Choice> {
        let mut choice = Choice {
            benches: Vec::new(),
            gaspi_side: true,
            yardsticks: true,
            max_rounds: usize::MAX,
        };
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            match arg.as_str() {
                "--only" => match rest.next().map(String::as_str) {
                    Some("gaspi") => choice.yardsticks = false,
                    Some("yardsticks") => choice.gaspi_side = false,
                    other => {
                        return Err(Error::Usage(format!(
                            "--only takes gaspi or yardsticks, not {other:?}"
                        )))
                    }
                },
                "--max-rounds" => match rest.next().map(|n| n.parse()) {
                    Some(Ok(n)) if n > 0 => choice.max_rounds = n,
                    _ => {
                        return Err(Error::Usage(
                            "--max-rounds takes a number of rounds above 0".into(),
                        ))
                    }
                },
                "all" => choice.benches.extend(BENCHES),
                name => match BENCHES.iter().find(|&&b| b == name) {
                    Some(&bench) => choice.benches.push(bench),
                    None => {
                        return Err(Error::Usage(format!(
                            "unknown benchmark {name:?}: use {} or all",
                            BENCHES.join(", ")
                        )))
                    }
                },
            }
        }
        if choice.benches.is_empty() {
            choice.benches.extend(BENCHES);
        }
        Ok(choice)
    }

    fn wants(&self, bench: &str) -> bool {
        self.benches.contains(&bench)
    }
}

/// Runs the benchmarks named in `args` (`pingpong`, `bandwidth`, `barrier`, `allreduce`,
/// `alltoallv`, `pscw`, `gasnet`, or `all`, the default) and prints their figures on rank 0.
/// `--only gaspi` or `--only yardsticks` (raw libfabric, the flag ping-pong and memcpy)
/// measures one side of the point-to-point benchmarks; `--max-rounds N` caps the timed rounds
/// of each alltoallv, pscw and gasnet figure (for oversubscribed hosts; gasnet's figures of
/// larger blocks make proportionally fewer). Ranks beyond the first two take part in the
/// point-to-point benchmarks only to synchronise; the collectives and the epochs run on every
/// rank.
///
/// # Errors
///
/// [`Error::Usage`] for a bad command line or a job of one rank; any failure of a measured
/// operation or of its check.
pub fn run(args: &[String]) -> Result<()> {
    let choice = Choice::parse(args)?;
    let ctx = Context::init()?;
    if ctx.size() < 2 {
        return Err(Error::Usage(
            "gaspi-bench needs at least 2 ranks: gaspirun -n 2 gaspi-bench".into(),
        ));
    }
    let mut figures = Vec::new();
    if choice.wants("pingpong") || choice.wants("bandwidth") {
        figures.extend(point_to_point(&ctx, &choice)?);
    }
    if choice.wants("barrier") {
        figures.extend(coll::barrier(&ctx)?);
    }
    if choice.wants("allreduce") {
        for &bytes in &coll::ALLREDUCE_SIZES {
            figures.extend(coll::allreduce(&ctx, bytes)?);
        }
        figures.extend(coll::team_allreduces(&ctx)?);
    }
    if ["alltoallv", "pscw", "gasnet"]
        .iter()
        .any(|b| choice.wants(b))
    {
        // One namespace for all: a context registers it once at a time.
        let coll = gaspi_coll::Collectives::new(&ctx)?;
        if choice.wants("alltoallv") {
            let mut bench = alltoallv::Bench::new(&ctx, &coll)?;
            for variant in alltoallv::VARIANTS {
                for &bytes in &alltoallv::SIZES {
                    figures.extend(bench.figure(variant, bytes, choice.max_rounds)?);
                }
            }
        }
        if choice.wants("pscw") {
            let mut bench = pscw::Bench::new(&ctx, &coll)?;
            for &bytes in &pscw::SIZES {
                figures.extend(bench.write_notify(bytes, choice.max_rounds)?);
                figures.extend(bench.pingpong(bytes, choice.max_rounds)?);
            }
            for &bytes in &pscw::SIZES {
                figures.extend(bench.halo(bytes, choice.max_rounds)?);
            }
        }
        if choice.wants("gasnet") {
            let mut bench = gasnet::Bench::new(&ctx, &coll)?;
            for op in gasnet::OPS {
                for &bytes in &gasnet::SIZES {
                    figures.extend(bench.figure(op, bytes, choice.max_rounds)?);
                }
            }
        }
    }
    for f in &figures {
        println!("{}", f.json());
    }
    Ok(ctx.finalize(Timeout::Millis(60_000))?)
}

/// Ping-pong and streaming between ranks 0 and 1, gaspi and its yardsticks side by side.
fn point_to_point(ctx: &Context, choice: &Choice) -> Result<Vec<Figure>> {
    ctx.segment_create(api::SEGMENT, BUFFER as u64, Timeout::Millis(60_000))?;
    let raw = raw::RawPair::connect(ctx)?;
    let mut figures = Vec::new();
    if choice.wants("pingpong") {
        if choice.yardsticks {
            let flag = floor::FlagPair::connect(ctx)?;
            figures.extend(flag.pingpong(ctx)?);
        }
        for &bytes in &PINGPONG_SIZES {
            if choice.gaspi_side {
                figures.extend(api::pingpong(ctx, bytes)?);
            }
            if choice.yardsticks {
                figures.extend(raw.pingpong(ctx, bytes)?);
            }
        }
    }
    if choice.wants("bandwidth") {
        let largest = BANDWIDTH_SIZES[BANDWIDTH_SIZES.len() - 1];
        let mut copies = match choice.yardsticks && ctx.rank() == 0 {
            true => Some(floor::Copies::new(largest)?),
            false => None,
        };
        for &bytes in &BANDWIDTH_SIZES {
            // Bursts alternate between the sides, so that a machine whose speed drifts (a
            // shared VM does) affects all alike.
            let (mut ours, mut theirs, mut copied) = (Vec::new(), Vec::new(), Vec::new());
            for rep in 0..BANDWIDTH_REPS {
                if choice.gaspi_side {
                    ours.extend(api::bandwidth_burst(ctx, bytes, rep)?);
                }
                if choice.yardsticks {
                    theirs.extend(raw.bandwidth_burst(ctx, bytes, rep)?);
                }
                if let Some(copies) = &mut copies {
                    copied.push(copies.burst(bytes, rep)?);
                }
            }
            if choice.gaspi_side {
                figures.extend(api::figure(ctx, "bandwidth", bytes, ours));
            }
            if choice.yardsticks {
                figures.extend(raw::figure(ctx, "bandwidth", bytes, theirs, "write+flag"));
                figures.extend(floor::memcpy_figure(ctx, bytes, copied));
            }
        }
    }
    Ok(figures)
}
