//! A distributed 2-D FFT whose transpose is the alltoallv, pipelined on both sides: each
//! outgoing block is sent the moment it is computed, and each arriving block is transformed
//! the moment it lands, by 4 threads per rank that share one [`Round`]. Run with
//! `gaspirun -n 4 fft_transpose [--n N] [--reps R] [--threads T]` (`N` a multiple of the
//! number of ranks; 1024 by default).
//!
//! # The algorithm
//! With `P` ranks and `N = P b`, rank `q` holds the input rows `q + P m` (`m < b`) and ends
//! with the result's columns `p + P k` (`k < b`) for `p = q`. Both FFTs of length `N` are
//! split so that every block of the transpose can be computed, and used, on its own
//! (`w_L = exp(-2 pi i / L)`):
//!
//! * Rows, on the sender (decimation in frequency): for destination `p`, each local row `x`
//!   is folded to `y[m] = w_N^(m p) sum_j x[m + b j] w_P^(j p)` and transformed with an FFT
//!   of length `b`, giving the row's values at exactly `p`'s columns. The `b` x `b` block of
//!   destination `p` is complete, and sent, without waiting for any other destination's.
//! * Columns, on the receiver (decimation in time): source `q` holds every `P`-th element of
//!   each column, from `q` on, so each column of its block is transformed with an FFT of
//!   length `b` (periodic in the output index `u` with period `b`) and added into
//!   `X[t + b s] += w_P^(q s) w_N^(q t) Z_q[t]`: when the last block is added, the columns
//!   are done.
//!
//! # The pipeline
//! The work is cut into jobs small enough for blocks to leave one after the other: a block's
//! rows come in chunks, and the columns in as many stripes, `2 x threads` of each. The threads
//! of a rank share one [`Round`] and, in this order of preference, take a block that has
//! arrived (queue its stripes), compute the next chunk of rows (destinations from the next
//! rank on, this rank's own block last; the thread that completes a block sends it), add a
//! queued stripe of an arrived block into the result (read straight out of the receive
//! segment, row by row, and added under the stripe's lock; the thread that adds a block's last
//! stripe resets its source), or wait for the next arrival. Rows are computed in the thread's
//! own memory, as the FFT needs them, and written into the source segment; arrived blocks are
//! never copied out whole.
//!
//! Every rank checks every result against a plain rustfft 2-D FFT of the same input (see
//! `signal.rs`) and exits non-zero when one differs by more than 1e-9 relative to the size
//! of the values.
//!
//! # What it measures
//! Each repetition runs, every rank starting after a barrier and timed by the slowest rank:
//! *communication alone* (the exchange of precomputed blocks, copies in and out of the
//! segments included), *computation alone* (every FFT of this rank on the blocks the exchange
//! delivered, no communication), *wait-for-all* (every block computed, then all sent, then the
//! round finished, then every block used) and *pipelined* (as above). Rank 0 prints the
//! medians in a summary and as `{"bench":"pipelining","value":X,...}`, with `X` = pipelined
//! over the larger of communication alone and computation alone: 1 is perfect overlap. Where
//! the threads outnumber the cores (4 ranks of 4 threads on 2 cores), moving the blocks
//! (copies, on one host) takes the same cores as the arithmetic, and a rank that waits leaves
//! its cores to the others: no schedule then beats the sum of the two, and `X` shows what
//! the pipeline's finer jobs cost rather than what it gains.
//!
//! Every rank prints `data fft_transpose rank R: n=..; ranks=..; threads=..; columns=..;
//! reps=..; arrivals=..; rel_err=..; weighted_re=..; weighted_im=..; energy=..`: blocks taken
//! by the pipelined rounds' threads, the largest error of any result, and the checksum of its
//! last pipelined result (see [`Checksum`]), from which the test judges it.

#![forbid(unsafe_code)]

#[allow(dead_code)] // Each example uses its part of the support.
#[path = "../support/mod.rs"]
mod support;

#[allow(dead_code)] // The example uses part of the shared data.
#[path = "../support/data.rs"]
mod data;
mod signal;

use std::hint::black_box;
use std::ops::Range;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use gaspi::{Context, Rank, ReduceOp, Segment, Timeout, GROUP_ALL};
use gaspi_coll::{Alltoallv, Collectives, Plan, Round};
use rustfft::num_complex::Complex64;
use rustfft::{Fft, FftPlanner};
use signal::Checksum;
use support::{during, joined, Options, Outcome, RECEIVE, SOURCE, TIMEOUT, TIMEOUT_MS};

/// Repetitions of each measurement, unless `--reps` says otherwise.
const REPS: usize = 5;
/// Threads per rank, unless `--threads` says otherwise.
const THREADS: usize = 4;
/// How far a result may be from the reference, relative to the size of the values.
const TOLERANCE: f64 = 1e-9;
/// Bytes of a value in a segment: blocks go in and out of segments as the values' memory
/// (`bytemuck`), with no conversion; every rank of a job runs on one architecture.
const VALUE: usize = size_of::<Complex64>();

fn main() -> ExitCode {
    support::main_of("fft_transpose", run)
}

fn run(args: &[String]) -> Outcome<()> {
    let options = Options::parse(args, &["n", "reps", "threads"])?;
    let n = options.get("n", signal::N)?;
    let reps = options.count("reps", REPS)?;
    let threads = options.count("threads", THREADS)?;
    let ctx = Context::init()?;
    let (me, ranks) = (ctx.rank(), ctx.size());
    if n == 0 || !n.is_multiple_of(ranks as usize) {
        let n = options.describe("n", n);
        return Err(format!("{n}: not a positive multiple of the {ranks} ranks").into());
    }
    let tf = Transform::new(n, ranks as usize, me as usize, threads);
    let block_bytes = (VALUE * tf.b * tf.b) as u64;
    ctx.segment_create(SOURCE, block_bytes * u64::from(ranks), TIMEOUT)?;
    ctx.segment_create(RECEIVE, block_bytes * u64::from(ranks), TIMEOUT)?;
    let coll = Collectives::new(&ctx)?;
    let mut a2a = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    let sends: Vec<(Rank, u64)> = (0..ranks).map(|dest| (dest, block_bytes)).collect();
    let plan = a2a.get_remote_offsets(RECEIVE, 0, &sends, TIMEOUT)?;
    let exchange = Exchange {
        ctx: &ctx,
        a2a: &a2a,
        plan: &plan,
        tf: &tf,
        offsets: (0..u64::from(ranks))
            .map(|dest| dest * block_bytes)
            .collect(),
    };

    let columns: Vec<usize> = (0..tf.b).map(|k| tf.me + tf.ranks * k).collect();
    let reference = signal::reference(n, &columns);
    let outgoing: Vec<Vec<Complex64>> = (0..tf.ranks)
        .map(|dest| tf.outgoing(dest, 0..tf.b))
        .collect();
    let mut times: [Vec<f64>; 4] = Default::default();
    let mut worst = 0.0f64;
    let mut arrivals = 0;
    let mut last = Vec::new();
    for rep in 1..=reps {
        let at = |what: &str| during(format!("repetition {rep}: {what}"));
        let (incoming, communication) =
            timed(&ctx, || exchange.communication(&outgoing)).map_err(at("communication"))?;
        let (computed, computation) =
            timed(&ctx, || exchange.computation(&incoming)).map_err(at("computation"))?;
        let (waited, wait_for_all) =
            timed(&ctx, || exchange.wait_for_all()).map_err(at("wait-for-all"))?;
        let ((pipelined, taken), overlapped) =
            timed(&ctx, || exchange.pipelined()).map_err(at("pipelined"))?;
        arrivals += taken;
        for result in [computed, waited, pipelined] {
            last = result.into_columns()?;
            worst = worst.max(relative_error(&last, &reference));
        }
        let mine = [communication, computation, wait_for_all, overlapped];
        let mut slowest = [0.0; 4];
        ctx.allreduce(GROUP_ALL, &mine, &mut slowest, ReduceOp::Max, TIMEOUT)?;
        for (series, time) in times.iter_mut().zip(slowest) {
            series.push(time);
        }
    }

    let checksum = Checksum::of(&columns, &last);
    println!(
        "data fft_transpose rank {me}: n={n}; ranks={ranks}; threads={threads}; columns={}; \
         reps={reps}; arrivals={arrivals}; rel_err={worst:e}; weighted_re={}; weighted_im={}; \
         energy={}",
        tf.b, checksum.weighted.re, checksum.weighted.im, checksum.energy
    );
    // Every rank's error, so that rank 0's summary speaks for the job.
    let mut job_worst = [0.0];
    ctx.allreduce(GROUP_ALL, &[worst], &mut job_worst, ReduceOp::Max, TIMEOUT)?;
    // Only a job whose every result is within the tolerance is reported as verified.
    if me == 0 && job_worst[0] <= TOLERANCE {
        summary(n, ranks, threads, reps, job_worst[0], &times);
    }
    drop(a2a);
    drop(coll);
    ctx.finalize(TIMEOUT)?;
    if worst > TOLERANCE {
        return Err(format!("a result is {worst:e} away from the reference").into());
    }
    if job_worst[0] > TOLERANCE {
        return Err(format!(
            "another rank's result is {:e} away from the reference",
            job_worst[0]
        )
        .into());
    }
    Ok(())
}

/// Rank 0's report: the medians, for a human and as a JSON line.
fn summary(n: usize, ranks: Rank, threads: usize, reps: usize, error: f64, times: &[Vec<f64>; 4]) {
    let [communication, computation, wait_for_all, pipelined] = times.clone().map(median);
    let value = pipelined / communication.max(computation);
    let ms = |seconds: f64| seconds * 1e3;
    println!(
        "fft_transpose: {n}x{n} complex 2-D FFT on {ranks} ranks x {threads} threads, every \
         result verified (largest relative error {error:.1e})"
    );
    println!(
        "  pipelined {:.1} ms, wait-for-all {:.1} ms; communication alone {:.1} ms, computation \
         alone {:.1} ms (medians of {reps}, slowest rank)",
        ms(pipelined),
        ms(wait_for_all),
        ms(communication),
        ms(computation)
    );
    println!(
        "  pipelined / max(communication, computation) = {value:.2} (1 is perfect overlap; \
         wait-for-all gives {:.2})",
        wait_for_all / communication.max(computation)
    );
    println!(
        "{{\"bench\":\"pipelining\",\"value\":{value:.4},\"n\":{n},\"ranks\":{ranks},\
         \"threads\":{threads},\"reps\":{reps},\"pipelined_ms\":{:.3},\"wait_for_all_ms\":{:.3},\
         \"communication_ms\":{:.3},\"computation_ms\":{:.3}}}",
        ms(pipelined),
        ms(wait_for_all),
        ms(communication),
        ms(computation)
    );
}

/// Runs `work` once every rank is there; returns its result and this rank's time in seconds.
fn timed<T>(ctx: &Context, work: impl FnOnce() -> Outcome<T>) -> Outcome<(T, f64)> {
    ctx.barrier(TIMEOUT)?;
    let start = Instant::now();
    let result = work()?;
    Ok((result, start.elapsed().as_secs_f64()))
}

fn median(mut series: Vec<f64>) -> f64 {
    series.sort_by(f64::total_cmp);
    series.get(series.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The largest difference between `result` and `reference`, relative to the largest value
/// (infinite when their shapes differ).
fn relative_error(result: &[Vec<Complex64>], reference: &[Vec<Complex64>]) -> f64 {
    let shape = |columns: &[Vec<Complex64>]| columns.iter().map(Vec::len).collect::<Vec<_>>();
    if shape(result) != shape(reference) {
        return f64::INFINITY;
    }
    let values = result.iter().flatten().zip(reference.iter().flatten());
    // A NaN would slip through `max`: it counts as infinitely far.
    let distance = |(a, b): (&Complex64, &Complex64)| match (a - b).norm() {
        d if d.is_nan() => f64::INFINITY,
        d => d,
    };
    let error = values.map(distance).fold(0.0, f64::max);
    let scale = reference
        .iter()
        .flatten()
        .map(|v| v.norm())
        .fold(0.0, f64::max);
    error / scale.max(f64::MIN_POSITIVE)
}

/// A rank's share of the transform: its input rows and the arithmetic of both sides, in
/// chunks of rows and stripes of columns.
struct Transform {
    n: usize,
    ranks: usize,
    me: usize,
    /// Rows per rank, and columns: `n / ranks`.
    b: usize,
    /// Chunks of rows of a block, and stripes of columns.
    chunks: usize,
    /// This rank's input rows `me + ranks m`, one after the other.
    rows: Vec<Complex64>,
    /// `w_n^k` for `k < n`.
    twiddles: Vec<Complex64>,
    /// The FFT of length `b` both sides use.
    fft: Arc<dyn Fft<f64>>,
    threads: usize,
}

impl Transform {
    fn new(n: usize, ranks: usize, me: usize, threads: usize) -> Transform {
        let b = n / ranks;
        let rows = (0..b)
            .flat_map(|m| (0..n).map(move |c| signal::input(me + ranks * m, c)))
            .collect();
        let twiddles = (0..n)
            .map(|k| Complex64::from_polar(1.0, -2.0 * std::f64::consts::PI * k as f64 / n as f64))
            .collect();
        Transform {
            n,
            ranks,
            me,
            b,
            chunks: (2 * threads).min(b),
            rows,
            twiddles,
            fft: FftPlanner::new().plan_fft_forward(b),
            threads,
        }
    }

    /// `w_n^k`.
    fn w(&self, k: usize) -> Complex64 {
        self.twiddles[k % self.n]
    }

    /// The rows (of a block) or columns (of the result) of chunk `chunk`.
    fn span(&self, chunk: usize) -> Range<usize> {
        chunk * self.b / self.chunks..(chunk + 1) * self.b / self.chunks
    }

    /// Rows `rows` of the block for destination `dest`: row `m` holds local row `m`'s
    /// transform at the columns `dest + ranks k`, `k < b`.
    fn outgoing(&self, dest: usize, rows: Range<usize>) -> Vec<Complex64> {
        let (b, ranks) = (self.b, self.ranks);
        let mut block = Vec::with_capacity(rows.len() * b);
        for row in self
            .rows
            .chunks_exact(self.n)
            .take(rows.end)
            .skip(rows.start)
        {
            for m in 0..b {
                let folded: Complex64 = (0..ranks)
                    .map(|j| row[m + b * j] * self.w(j * dest * b))
                    .sum();
                block.push(folded * self.w(m * dest));
            }
        }
        self.fft.process(&mut block);
        block
    }

    /// The share of `source`'s block in columns `columns` of this rank: for each column,
    /// `b` values that [`Output::add`] adds at `t + b s` for every `s`.
    fn incoming(
        &self,
        source: usize,
        block: &Block<'_>,
        columns: Range<usize>,
    ) -> Outcome<Vec<Complex64>> {
        let b = self.b;
        let mut share = vec![Complex64::default(); columns.len() * b];
        let mut landed = Vec::new();
        for m in 0..b {
            let row = match *block {
                Block::Copied(values) => &values[m * b..][columns.clone()],
                Block::Landed { segment, offset } => {
                    landed.resize(columns.len(), Complex64::default());
                    let at = offset + (VALUE * (m * b + columns.start)) as u64;
                    segment.read(at, bytemuck::cast_slice_mut(&mut landed))?;
                    &landed[..]
                }
            };
            for (k, &value) in row.iter().enumerate() {
                share[k * b + m] = value;
            }
        }
        self.fft.process(&mut share);
        for column in share.chunks_exact_mut(b) {
            for (t, value) in column.iter_mut().enumerate() {
                *value *= self.w(source * t);
            }
        }
        Ok(share)
    }
}

/// Where the values of an arrived block are read from.
#[derive(Clone, Copy)]
enum Block<'a> {
    /// A copy in this rank's memory, row after row.
    Copied(&'a [Complex64]),
    /// Where it landed in the receive segment, at `offset`: each stripe is read out of the
    /// segment as it is added, and the block's source is reset only after the last one.
    Landed {
        segment: &'a Segment<'a>,
        offset: u64,
    },
}

/// The columns a rank holds of the result, in stripes ([`Transform::span`]) with a lock each.
struct Output {
    stripes: Vec<Mutex<Vec<Complex64>>>,
    /// Values per column.
    n: usize,
}

impl Output {
    fn new(tf: &Transform) -> Output {
        let stripes = (0..tf.chunks)
            .map(|stripe| Mutex::new(vec![Complex64::default(); tf.span(stripe).len() * tf.n]))
            .collect();
        Output { stripes, n: tf.n }
    }

    /// Adds stripe `stripe` of `source`'s block.
    fn add(&self, tf: &Transform, source: usize, block: &Block<'_>, stripe: usize) -> Outcome<()> {
        let b = tf.b;
        let share = tf.incoming(source, block, tf.span(stripe))?;
        let mut columns = self.stripes[stripe].lock().map_err(poisoned)?;
        for (column, part) in columns.chunks_exact_mut(tf.n).zip(share.chunks_exact(b)) {
            for (s, target) in column.chunks_exact_mut(b).enumerate() {
                let factor = tf.w(source * s * b);
                for (value, &add) in target.iter_mut().zip(part) {
                    *value += factor * add;
                }
            }
        }
        Ok(())
    }

    /// The columns, each as its `n` values.
    fn into_columns(self) -> Outcome<Vec<Vec<Complex64>>> {
        let mut columns = Vec::new();
        for stripe in self.stripes {
            let values = stripe.into_inner().map_err(poisoned)?;
            columns.extend(values.chunks_exact(self.n).map(<[Complex64]>::to_vec));
        }
        Ok(columns)
    }
}

/// The four ways of running a transform's exchange and arithmetic.
struct Exchange<'a> {
    ctx: &'a Context,
    a2a: &'a Alltoallv<'a>,
    plan: &'a Plan,
    tf: &'a Transform,
    /// Where each destination's block is packed in [`SOURCE`].
    offsets: Vec<u64>,
}

/// What the threads of a pipelined round share.
struct Pipeline<'a> {
    round: &'a Round<'a>,
    out: Output,
    /// Chunks of rows handed out, in the order of [`Exchange::write_rows`].
    chunks_begun: AtomicUsize,
    /// Per destination, chunks of rows not yet written.
    chunks_left: Vec<AtomicUsize>,
    /// Per source, stripes of its block not yet added.
    stripes_of: Vec<AtomicUsize>,
    /// [`RECEIVE`], whose arrived blocks are read where they landed (a handle, so that the
    /// many reads of rows look the segment up once).
    receive: Segment<'a>,
    landed: Mutex<Landed>,
    /// Signalled when a stripe is queued, the last block taken, or the last stripe added.
    changed: Condvar,
}

/// The arrived blocks' work of a pipelined round.
struct Landed {
    /// Stripes of arrived blocks not yet handed out: source, where its block is, stripe.
    queue: Vec<(Rank, u64, usize)>,
    /// Stripes not yet added, of blocks arrived or not.
    stripes_left: usize,
    /// Whether every block of the round was handed out.
    all_taken: bool,
    /// Whether a thread waits in [`Round::next_arrival`]: one is enough, and the others wait
    /// for the stripes it queues, which it could not wake them for from there.
    watching: bool,
}

impl Exchange<'_> {
    /// Communication alone: sends `outgoing` (a block per destination), copies every block
    /// that arrives out and resets its source; returns the blocks by source.
    fn communication(&self, outgoing: &[Vec<Complex64>]) -> Outcome<Vec<Vec<Complex64>>> {
        for (block, &offset) in outgoing.iter().zip(&self.offsets) {
            self.ctx
                .segment_write(SOURCE, offset, bytemuck::cast_slice(block))?;
        }
        let round = self.a2a.round(self.plan, SOURCE)?;
        round.send_all(&self.offsets)?;
        let mut incoming = vec![Vec::new(); self.tf.ranks];
        while let Some(source) = round.next_arrival(TIMEOUT)? {
            incoming[source as usize] = self.receive(source)?;
            round.reset(source)?;
        }
        round.finish(TIMEOUT)?;
        Ok(incoming)
    }

    /// Computation alone: every chunk of every outgoing block, then the result from
    /// `incoming` (by source).
    fn computation(&self, incoming: &[Vec<Complex64>]) -> Outcome<Output> {
        let tf = self.tf;
        let jobs = tf.ranks * tf.chunks;
        self.in_parallel(jobs, |job| {
            let dest = job / tf.chunks;
            black_box(tf.outgoing(dest, tf.span(job % tf.chunks)));
            Ok(())
        })?;
        self.add_all(incoming)
    }

    /// Wait-for-all: every block computed, then all sent, the round finished, and only then
    /// every arrived block used.
    fn wait_for_all(&self) -> Outcome<Output> {
        let tf = self.tf;
        let round = self.a2a.round(self.plan, SOURCE)?;
        self.in_parallel(tf.ranks * tf.chunks, |job| self.write_rows(job).map(drop))?;
        round.send_all(&self.offsets)?;
        round.finish(TIMEOUT)?;
        let mut blocks = Vec::with_capacity(tf.ranks);
        for source in 0..tf.ranks as Rank {
            blocks.push(self.receive(source)?);
            self.a2a.alltoallv_reset(&[source])?;
        }
        self.add_all(&blocks)
    }

    /// The result from `blocks` (by source), every stripe of every block a job.
    fn add_all(&self, blocks: &[Vec<Complex64>]) -> Outcome<Output> {
        let (tf, out) = (self.tf, Output::new(self.tf));
        self.in_parallel(tf.ranks * tf.chunks, |job| {
            let source = job / tf.chunks;
            out.add(tf, source, &Block::Copied(&blocks[source]), job % tf.chunks)
        })?;
        Ok(out)
    }

    /// Computes chunk of rows `job` (see [`Transform::span`]) and writes it into its place in
    /// [`SOURCE`]; returns its destination. Jobs go through the destinations from the next
    /// rank on, this rank's own block last, so that ranks start by sending to different ranks.
    fn write_rows(&self, job: usize) -> Outcome<usize> {
        let tf = self.tf;
        let dest = (tf.me + 1 + job / tf.chunks) % tf.ranks;
        let rows = tf.span(job % tf.chunks);
        let offset = self.offsets[dest] + (VALUE * rows.start * tf.b) as u64;
        let values = tf.outgoing(dest, rows);
        self.ctx
            .segment_write(SOURCE, offset, bytemuck::cast_slice(&values))?;
        Ok(dest)
    }

    /// Pipelined: the threads share one round (see the module's documentation); returns the
    /// result and how many blocks the threads took.
    fn pipelined(&self) -> Outcome<(Output, usize)> {
        let tf = self.tf;
        let round = self.a2a.round(self.plan, SOURCE)?;
        let pipeline = Pipeline {
            round: &round,
            out: Output::new(tf),
            chunks_begun: AtomicUsize::new(0),
            chunks_left: (0..tf.ranks).map(|_| AtomicUsize::new(tf.chunks)).collect(),
            stripes_of: (0..tf.ranks).map(|_| AtomicUsize::new(tf.chunks)).collect(),
            receive: self.ctx.segment(RECEIVE)?,
            landed: Mutex::new(Landed {
                queue: Vec::new(),
                stripes_left: tf.ranks * tf.chunks,
                all_taken: false,
                watching: false,
            }),
            changed: Condvar::new(),
        };
        let taken = thread::scope(|s| {
            let handles = (0..tf.threads)
                .map(|_| s.spawn(|| self.pipeline(&pipeline)))
                .collect();
            joined(handles)
        })?;
        round.finish(TIMEOUT)?;
        Ok((pipeline.out, taken.iter().sum()))
    }

    /// One thread of [`pipelined`](Self::pipelined); returns the blocks it took.
    fn pipeline(&self, p: &Pipeline<'_>) -> Outcome<usize> {
        let tf = self.tf;
        let mut taken = 0;
        loop {
            let arrived = match p.round.next_arrival(Timeout::Test) {
                Ok(arrived) => arrived,
                Err(e) if e.is_timeout() => None,
                Err(e) => return Err(e.into()),
            };
            if let Some(source) = arrived {
                self.take(p, source)?;
                taken += 1;
                continue;
            }
            if let Some(job) = next_job(&p.chunks_begun, tf.ranks * tf.chunks) {
                let dest = self.write_rows(job)?;
                // The thread that writes a block's last chunk sends it; the others' writes
                // happened before their decrements, which this one has seen.
                if p.chunks_left[dest].fetch_sub(1, Ordering::AcqRel) == 1 {
                    p.round.send(dest as Rank, self.offsets[dest])?;
                }
                continue;
            }
            let mut landed = p.landed.lock().map_err(poisoned)?;
            if let Some((source, offset, stripe)) = landed.queue.pop() {
                drop(landed);
                let block = Block::Landed {
                    segment: &p.receive,
                    offset,
                };
                p.out.add(tf, source as usize, &block, stripe)?;
                // The block's last stripe is read: its source may write it again.
                if p.stripes_of[source as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                    p.round.reset(source)?;
                }
                let mut landed = p.landed.lock().map_err(poisoned)?;
                landed.stripes_left -= 1;
                if landed.stripes_left == 0 {
                    p.changed.notify_all();
                }
                continue;
            }
            if landed.stripes_left == 0 {
                return Ok(taken);
            }
            if landed.all_taken || landed.watching {
                // Another thread waits for the next block, or queues one's stripes, or adds a
                // stripe: it wakes this one when there is work.
                let (landed, waited) = p
                    .changed
                    .wait_timeout(landed, Duration::from_millis(TIMEOUT_MS))
                    .map_err(poisoned)?;
                drop(landed);
                if waited.timed_out() {
                    return Err("nothing happened within the timeout".into());
                }
                continue;
            }
            landed.watching = true;
            drop(landed);
            let arrived = p.round.next_arrival(TIMEOUT);
            let mut landed = p.landed.lock().map_err(poisoned)?;
            landed.watching = false;
            match arrived? {
                Some(source) => {
                    drop(landed);
                    self.take(p, source)?;
                    taken += 1;
                }
                None => {
                    landed.all_taken = true;
                    p.changed.notify_all();
                }
            }
        }
    }

    /// Takes `source`'s block in a pipelined round: queues its stripes, to be read where
    /// the block landed.
    fn take(&self, p: &Pipeline<'_>, source: Rank) -> Outcome<()> {
        let offset = self.landed(source)?;
        let mut landed = p.landed.lock().map_err(poisoned)?;
        landed
            .queue
            .extend((0..self.tf.chunks).map(|stripe| (source, offset, stripe)));
        p.changed.notify_all();
        Ok(())
    }

    /// Where `source`'s block landed in the receive segment, once its size is checked.
    fn landed(&self, source: Rank) -> Outcome<u64> {
        let area = self
            .plan
            .source(source)
            .ok_or_else(|| format!("rank {source} arrived but is no source"))?;
        let (bytes, expected) = (area.bytes, (VALUE * self.tf.b * self.tf.b) as u64);
        if bytes != expected {
            return Err(format!("rank {source}'s block is {bytes} B, not {expected}").into());
        }
        Ok(area.offset)
    }

    /// A copy of `source`'s block out of the receive segment.
    fn receive(&self, source: Rank) -> Outcome<Vec<Complex64>> {
        let offset = self.landed(source)?;
        let mut block = vec![Complex64::default(); self.tf.b * self.tf.b];
        self.ctx
            .segment_read(RECEIVE, offset, bytemuck::cast_slice_mut(&mut block))?;
        Ok(block)
    }

    /// Runs jobs `0..jobs` on the rank's threads, each job once.
    fn in_parallel(&self, jobs: usize, work: impl Fn(usize) -> Outcome<()> + Sync) -> Outcome<()> {
        let next = AtomicUsize::new(0);
        thread::scope(|s| {
            let handles = (0..self.tf.threads)
                .map(|_| {
                    s.spawn(|| {
                        while let Some(job) = next_job(&next, jobs) {
                            work(job)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            joined(handles).map(drop)
        })
    }
}

/// The error of a lock that a panicking thread held.
fn poisoned<T>(_: PoisonError<T>) -> &'static str {
    "another thread panicked"
}

/// The next of `count` jobs handed out from `counter`, if one is left.
fn next_job(counter: &AtomicUsize, count: usize) -> Option<usize> {
    let job = counter.fetch_add(1, Ordering::Relaxed);
    (job < count).then_some(job)
}
