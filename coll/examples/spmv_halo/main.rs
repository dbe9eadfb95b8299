//! Sparse matrix-vector products with a halo exchange: Jacobi iterations of a 9-point stencil
//! on a periodic grid split into blocks among the ranks (see `matrix.rs`), each iteration's
//! halo exchanged through the sparse alltoallv. Run with
//! `gaspirun -n 4 spmv_halo [--width W] [--height H] [--px PX] [--iterations K]`.
//!
//! A rank sends each rank whose rows read some of its values exactly those values, and
//! nothing to the others: the plan is made once ([`Alltoallv::get_remote_offsets`]) and
//! serves every iteration. Each iteration posts every block, computes the rows that read no
//! halo while the blocks travel, then takes arrivals one by one, copying each source's values
//! out, resetting the source and computing the rows whose halo is then complete. There is no
//! barrier between iterations: a source's next block waits for the reset of its last.
//!
//! Every rank compares its values after the last iteration with [`Grid::serial`] (equal to
//! the bit) and prints `data spmv_halo rank R: grid=WxH; ranks=PXxPY; iterations=K;
//! rows=..; sources=a/b/.. (or none); halo_values=..; arrivals=..; interior=..; mismatches=..;
//! digest=..; elapsed_ms=..` (`halo_values`: values received per iteration; `interior`: rows
//! computed before any halo arrived; `digest`: its values, from which the test judges it). It
//! exits non-zero on a mismatch.

#![forbid(unsafe_code)]

#[allow(dead_code)] // Each example uses its part of the support.
#[path = "../support/mod.rs"]
mod support;

#[allow(dead_code)] // The example uses part of the shared data.
#[path = "../support/data.rs"]
mod data;
mod matrix;

use std::process::ExitCode;
use std::time::Instant;

use gaspi::{Context, Rank, GROUP_ALL};
use gaspi_coll::{Alltoallv, Collectives, Plan};
use matrix::Grid;
use support::{during, from_bytes, to_bytes, Options, Outcome, RECEIVE, SOURCE, TIMEOUT};

fn main() -> ExitCode {
    support::main_of("spmv_halo", run)
}

/// The halo a rank reads from one source.
struct Halo {
    source: Rank,
    /// Where its values go in [`Local::values`].
    first: usize,
    /// The local rows that read some of them.
    rows: Vec<usize>,
}

/// A rank's part of the problem: its rows, and where each value they read is found here.
struct Local {
    grid: Grid,
    /// The points whose rows this rank computes, ascending.
    rows: Vec<usize>,
    /// The current values: those of `rows`, then the halo values of every source in turn.
    values: Vec<f64>,
    /// The position in `values` of every point this rank reads (others are never read).
    position: Vec<usize>,
    halos: Vec<Halo>,
    /// Rows that read no halo.
    interior: Vec<usize>,
    /// For each row, how many sources it reads from.
    sources_read: Vec<usize>,
}

impl Local {
    fn new(grid: Grid, me: Rank, ranks: Rank) -> Local {
        let rows = grid.rows(me);
        let mut position = vec![usize::MAX; grid.len()];
        for (k, &i) in rows.iter().enumerate() {
            position[i] = k;
        }
        let mut halos = Vec::new();
        let mut end = rows.len();
        for source in 0..ranks {
            let points = grid.halo(me, source);
            if points.is_empty() {
                continue;
            }
            for (g, &i) in points.iter().enumerate() {
                position[i] = end + g;
            }
            let first = end;
            end += points.len();
            let reads = |&i: &usize| {
                grid.neighbours(i)
                    .iter()
                    .any(|&j| (first..end).contains(&position[j]))
            };
            let readers = (0..rows.len()).filter(|k| reads(&rows[*k])).collect();
            halos.push(Halo {
                source,
                first,
                rows: readers,
            });
        }
        let mut sources_read = vec![0; rows.len()];
        for halo in &halos {
            for &k in &halo.rows {
                sources_read[k] += 1;
            }
        }
        let interior = (0..rows.len()).filter(|&k| sources_read[k] == 0).collect();
        Local {
            grid,
            rows,
            values: vec![0.0; end],
            position,
            halos,
            interior,
            sources_read,
        }
    }

    /// Row `k`'s value after this iteration, from the current values.
    fn step(&self, k: usize) -> f64 {
        self.grid
            .jacobi_row(self.rows[k], |j| self.values[self.position[j]])
    }
}

/// What one iteration's halo exchange needs.
struct Exchange<'a> {
    ctx: &'a Context,
    a2a: &'a Alltoallv<'a>,
    plan: &'a Plan,
    /// The points each destination of the plan reads, in the plan's order.
    sends: Vec<Vec<usize>>,
    /// Where each destination's values are packed in [`SOURCE`].
    offsets: Vec<u64>,
}

impl Exchange<'_> {
    /// One Jacobi step of `local`, `next` holding its new values until the step ends;
    /// returns the blocks that arrived.
    fn iterate(&self, local: &mut Local, next: &mut [f64]) -> Outcome<u64> {
        for (points, &offset) in self.sends.iter().zip(&self.offsets) {
            let values: Vec<f64> = points
                .iter()
                .map(|&i| local.values[local.position[i]])
                .collect();
            self.ctx.segment_write(SOURCE, offset, &to_bytes(&values))?;
        }
        let round = self.a2a.round(self.plan, SOURCE)?;
        round.send_all(&self.offsets)?;
        for &k in &local.interior {
            next[k] = local.step(k);
        }
        let mut sources_left = local.sources_read.clone();
        let mut arrivals = 0;
        while let Some(source) = round.next_arrival(TIMEOUT)? {
            arrivals += 1;
            let (halo, area) = local
                .halos
                .iter()
                .position(|h| h.source == source)
                .zip(self.plan.source(source))
                .ok_or_else(|| format!("rank {source} arrived but is no source"))?;
            let mut bytes = vec![0u8; usize::try_from(area.bytes)?];
            self.ctx.segment_read(RECEIVE, area.offset, &mut bytes)?;
            round.reset(source)?;
            let first = local.halos[halo].first;
            let values = from_bytes(&bytes);
            local.values[first..first + values.len()].copy_from_slice(&values);
            for &k in &local.halos[halo].rows {
                sources_left[k] -= 1;
                if sources_left[k] == 0 {
                    next[k] = local.step(k);
                }
            }
        }
        round.finish(TIMEOUT)?;
        let rows = local.rows.len();
        local.values[..rows].copy_from_slice(next);
        Ok(arrivals)
    }
}

fn run(args: &[String]) -> Outcome<()> {
    let options = Options::parse(args, &["width", "height", "px", "iterations"])?;
    let width = options.get("width", matrix::WIDTH)?;
    let height = options.get("height", matrix::HEIGHT)?;
    let px = options.get("px", 0)?;
    let iterations = options.get("iterations", matrix::ITERATIONS)?;
    let ctx = Context::init()?;
    let (me, n) = (ctx.rank(), ctx.size());
    let grid = Grid::new(width, height, n, (px > 0).then_some(px)).ok_or_else(|| match px {
        0 => format!("a {width}x{height} grid cannot be split among {n} ranks"),
        _ => format!("a {width}x{height} grid cannot be split among {n} ranks, {px} across"),
    })?;
    let mut local = Local::new(grid, me, n);

    // What each destination reads of this rank's values, packed in destination order.
    let sends: Vec<(Rank, Vec<usize>)> = (0..n)
        .map(|reader| (reader, grid.halo(reader, me)))
        .filter(|(_, points)| !points.is_empty())
        .collect();
    let blocks: Vec<(Rank, u64)> = sends
        .iter()
        .map(|(reader, points)| (*reader, 8 * points.len() as u64))
        .collect();
    let (offsets, sent) = support::packed(blocks.iter().map(|&(_, bytes)| bytes));
    let halo_values = local.values.len() - local.rows.len();
    // A segment is never empty, even on a rank with no neighbours.
    ctx.segment_create(SOURCE, sent.max(8), TIMEOUT)?;
    ctx.segment_create(RECEIVE, (8 * halo_values as u64).max(8), TIMEOUT)?;
    let coll = Collectives::new(&ctx)?;
    let mut a2a = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    let plan = a2a.get_remote_offsets(RECEIVE, 0, &blocks, TIMEOUT)?;
    let expected: Vec<(Rank, u64)> = local
        .halos
        .iter()
        .map(|h| (h.source, 8 * grid.halo(me, h.source).len() as u64))
        .collect();
    let planned: Vec<(Rank, u64)> = plan.sources().iter().map(|s| (s.rank, s.bytes)).collect();
    if planned != expected {
        return Err(format!("the plan's sources {planned:?}, expected {expected:?}").into());
    }

    let exchange = Exchange {
        ctx: &ctx,
        a2a: &a2a,
        plan: &plan,
        sends: sends.into_iter().map(|(_, points)| points).collect(),
        offsets,
    };
    let start = Instant::now();
    let mut next = vec![0.0; local.rows.len()];
    let mut arrivals = 0u64;
    for k in 1..=iterations {
        arrivals += exchange
            .iterate(&mut local, &mut next)
            .map_err(during(format_args!("iteration {k}")))?;
    }
    let elapsed = start.elapsed();

    let serial = grid.serial(iterations);
    let mine = &local.values[..local.rows.len()];
    let mismatches = local
        .rows
        .iter()
        .zip(mine)
        .filter(|&(&i, value)| value.to_bits() != serial[i].to_bits())
        .count();
    let sources: Vec<String> = local.halos.iter().map(|h| h.source.to_string()).collect();
    let sources = if sources.is_empty() {
        "none".to_owned()
    } else {
        sources.join("/")
    };
    println!(
        "data spmv_halo rank {me}: grid={width}x{height}; ranks={}x{}; iterations={iterations}; \
         rows={}; sources={}; halo_values={halo_values}; arrivals={arrivals}; interior={}; \
         mismatches={mismatches}; digest={}; elapsed_ms={}",
        grid.px,
        grid.py,
        local.rows.len(),
        sources,
        local.interior.len(),
        Grid::digest(mine.iter().copied()).hex(),
        elapsed.as_millis()
    );
    drop(a2a);
    drop(coll);
    ctx.finalize(TIMEOUT)?;
    if mismatches > 0 {
        return Err(format!("{mismatches} values differ from the serial iterations").into());
    }
    Ok(())
}
