//! The alltoallv examples as real jobs of separate processes under `gaspirun`, over `tcp` and
//! `shm`. Each example checks its own results and exits non-zero on a mismatch; these tests
//! also judge what every rank reports against what they compute themselves from the examples'
//! data modules (included here): the digest of every block `threaded_reset` received, the
//! sources and the final values (to the bit) of `spmv_halo`, and a checksum of the columns of
//! `fft_transpose`'s result against a plain 2-D FFT. The callgrind harness's program
//! `cg_alltoallv` (`scripts/callgrind-alltoallv.sh`) checks every block it receives, as a few
//! rounds in both of its cases.

#![forbid(unsafe_code)]

#[path = "../../tests/common/mod.rs"]
mod common;

#[path = "../examples/support/data.rs"]
mod data;

#[path = "../examples/threaded_reset/pattern.rs"]
mod pattern;

// Only the parts of these examples' data that decide what ranks must report are used here.
#[allow(dead_code)]
#[path = "../examples/spmv_halo/matrix.rs"]
mod matrix;

#[allow(dead_code)]
#[path = "../examples/fft_transpose/signal.rs"]
mod signal;

use common::{example, gaspirun, Finished, JOB_TIMEOUT_S, PROVIDERS};
use matrix::Grid;
use rustfft::num_complex::Complex64;
use signal::Checksum;

/// Runs example `name` with `args` on `ranks` ranks over `provider`; it must succeed.
fn run(name: &str, ranks: u32, provider: &str, args: &[&str]) -> Finished {
    assert!(PROVIDERS.contains(&provider));
    let job = gaspirun(ranks, provider, JOB_TIMEOUT_S, &example(name), args);
    assert!(job.status.success(), "the job failed\n{}", job.report());
    job
}

/// `threaded_reset` with its defaults (1,000 rounds, 4 threads): every source handed out to
/// exactly one thread in every round, with the bytes it sent in that round.
fn threaded_reset(ranks: u32, provider: &str) {
    let job = run("threaded_reset", ranks, provider, &[]);
    let report = job.report();
    let rounds = pattern::ROUNDS;
    for rank in 0..ranks {
        let data = job.data("threaded_reset", rank);
        assert_eq!(data.parse::<u64>("rounds"), rounds, "rank {rank}\n{report}");
        assert_eq!(data.parse::<u32>("sources"), ranks, "rank {rank}\n{report}");
        let arrivals = rounds * u64::from(ranks);
        assert_eq!(
            data.parse::<u64>("arrivals"),
            arrivals,
            "rank {rank}\n{report}"
        );
        let per_thread: Vec<u64> = data
            .get("per_thread")
            .split('/')
            .map(|count| count.parse().expect("a count per thread"))
            .collect();
        assert_eq!(per_thread.len(), pattern::THREADS, "rank {rank}\n{report}");
        assert_eq!(
            per_thread.iter().sum::<u64>(),
            arrivals,
            "rank {rank}: the threads' arrivals\n{report}"
        );
        for key in ["duplicates", "missed", "bad"] {
            assert_eq!(data.get(key), "0", "rank {rank}: {key}\n{report}");
        }
        assert_eq!(
            data.get("digest"),
            pattern::expected(rounds, ranks, rank).hex(),
            "rank {rank} received other blocks\n{report}"
        );
    }
}

/// `spmv_halo` on a grid split `px` across (`None`: its default split): the sources the
/// matrix implies, one arrival per source and iteration, and the serial iterations' values.
fn spmv_halo(ranks: u32, provider: &str, px: Option<usize>) {
    const ITERATIONS: u64 = 60;
    let (width, height) = (96, 64);
    let mut args = vec![
        "--width".to_owned(),
        width.to_string(),
        "--height".to_owned(),
        height.to_string(),
        "--iterations".to_owned(),
        ITERATIONS.to_string(),
    ];
    if let Some(px) = px {
        args.extend(["--px".to_owned(), px.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let job = run("spmv_halo", ranks, provider, &args);
    let report = job.report();
    let grid = Grid::new(width, height, ranks, px).expect("the split fits");
    let serial = grid.serial(ITERATIONS);
    for rank in 0..ranks {
        let data = job.data("spmv_halo", rank);
        let rows = grid.rows(rank);
        let sources: Vec<u32> = (0..ranks)
            .filter(|&source| !grid.halo(rank, source).is_empty())
            .collect();
        let listed: Vec<String> = sources.iter().map(u32::to_string).collect();
        let listed = if listed.is_empty() {
            "none".to_owned()
        } else {
            listed.join("/")
        };
        let halo: usize = sources.iter().map(|&s| grid.halo(rank, s).len()).sum();
        let interior = rows
            .iter()
            .filter(|&&i| grid.neighbours(i).iter().all(|&j| grid.owner(j) == rank))
            .count();
        let expected = [
            ("ranks", format!("{}x{}", grid.px, grid.py)),
            ("rows", rows.len().to_string()),
            ("sources", listed),
            ("halo_values", halo.to_string()),
            ("arrivals", (ITERATIONS * sources.len() as u64).to_string()),
            ("interior", interior.to_string()),
            ("mismatches", "0".to_owned()),
            (
                "digest",
                Grid::digest(rows.iter().map(|&i| serial[i])).hex(),
            ),
        ];
        for (key, value) in expected {
            assert_eq!(data.get(key), value, "rank {rank}: {key}\n{report}");
        }
    }
}

/// `fft_transpose` on a 256 x 256 matrix: every rank's columns of the result agree with a
/// plain 2-D FFT, and every block of every pipelined round was taken by one of its threads.
fn fft_transpose(ranks: u32, provider: &str) {
    const N: usize = 256;
    const REPS: usize = 2;
    let job = run(
        "fft_transpose",
        ranks,
        provider,
        &["--n", &N.to_string(), "--reps", &REPS.to_string()],
    );
    let report = job.report();
    let all: Vec<usize> = (0..N).collect();
    let reference = signal::reference(N, &all);
    let p = ranks as usize;
    for rank in 0..ranks {
        let data = job.data("fft_transpose", rank);
        assert_eq!(
            data.parse::<usize>("columns"),
            N / p,
            "rank {rank}\n{report}"
        );
        assert_eq!(
            data.parse::<usize>("arrivals"),
            REPS * p,
            "rank {rank}: blocks taken by the pipelined rounds\n{report}"
        );
        let columns: Vec<usize> = (0..N / p).map(|k| rank as usize + p * k).collect();
        let values: Vec<_> = columns.iter().map(|&v| reference[v].clone()).collect();
        let expected = Checksum::of(&columns, &values);
        let reported = Checksum {
            weighted: Complex64::new(data.parse("weighted_re"), data.parse("weighted_im")),
            energy: data.parse("energy"),
        };
        assert!(
            agrees(&reported, &expected, 1e-9),
            "rank {rank}: checksum {reported:?}, a plain FFT gives {expected:?}\n{report}"
        );
    }
    let pipelining = job
        .stdout
        .lines()
        .find_map(|line| line.split_once("{\"bench\":\"pipelining\",\"value\":"))
        .and_then(|(_, rest)| rest.split(',').next()?.parse::<f64>().ok());
    assert!(
        pipelining.is_some_and(|value| value.is_finite() && value > 0.0),
        "rank 0 reports the pipelining ratio\n{report}"
    );
}

/// Counts of 0 are refused rather than raised, and a size the rank count does not divide is
/// named as the default it is when the user did not pass it.
fn refused(provider: &str) {
    for (ranks, name, args, message) in [
        (
            1,
            "fft_transpose",
            &["--reps", "0"][..],
            "--reps 0: must be at least 1",
        ),
        (
            1,
            "fft_transpose",
            &["--threads", "0"],
            "--threads 0: must be at least 1",
        ),
        (
            1,
            "threaded_reset",
            &["--threads", "0"],
            "--threads 0: must be at least 1",
        ),
        (
            3,
            "fft_transpose",
            &[],
            "the default --n 1024: not a positive multiple of the 3 ranks",
        ),
        (
            3,
            "fft_transpose",
            &["--n", "100"],
            "--n 100: not a positive multiple of the 3 ranks",
        ),
    ] {
        let job = gaspirun(ranks, provider, 20, &example(name), args);
        let report = job.report();
        assert_eq!(job.status.code(), Some(1), "{name} {args:?}\n{report}");
        assert!(job.stderr.contains(message), "{name} {args:?}\n{report}");
    }
}

/// `cg_alltoallv CASE` for 10 rounds: every rank ran them all, each block as sent.
fn cg_alltoallv(ranks: u32, provider: &str, case: &str) {
    let job = run("cg_alltoallv", ranks, provider, &[case, "10"]);
    for rank in 0..ranks {
        let data = job.data("cg_alltoallv", rank);
        assert_eq!(data.get("rounds"), "10", "rank {rank}\n{}", job.report());
        assert_eq!(data.get("blocks"), "ok", "rank {rank}\n{}", job.report());
    }
}

/// Whether two checksums agree to `tolerance` relative to the size of the values.
fn agrees(a: &Checksum, b: &Checksum, tolerance: f64) -> bool {
    let energy = a.energy.max(b.energy);
    (a.weighted - b.weighted).norm() <= tolerance * energy.sqrt().max(1.0)
        && (a.energy - b.energy).abs() <= tolerance * energy
}

#[test]
fn threaded_reset_1_shm() {
    threaded_reset(1, "shm");
}

#[test]
fn threaded_reset_2_tcp() {
    threaded_reset(2, "tcp");
}

#[test]
fn threaded_reset_4_tcp() {
    threaded_reset(4, "tcp");
}

#[test]
fn threaded_reset_4_shm() {
    threaded_reset(4, "shm");
}

#[test]
fn spmv_halo_1_tcp() {
    spmv_halo(1, "tcp", None);
}

#[test]
fn spmv_halo_2_shm() {
    spmv_halo(2, "shm", None);
}

/// A 2 x 2 split: every other rank is a neighbour, with halos of different sizes.
#[test]
fn spmv_halo_4_tcp() {
    spmv_halo(4, "tcp", None);
}

/// Strips: each rank reads from 2 of the 3 others, a sparse exchange.
#[test]
fn spmv_halo_4_strips_shm() {
    spmv_halo(4, "shm", Some(4));
}

#[test]
fn spmv_halo_4_strips_tcp() {
    spmv_halo(4, "tcp", Some(4));
}

#[test]
fn fft_transpose_1_tcp() {
    fft_transpose(1, "tcp");
}

#[test]
fn fft_transpose_2_shm() {
    fft_transpose(2, "shm");
}

#[test]
fn fft_transpose_4_tcp() {
    fft_transpose(4, "tcp");
}

#[test]
fn fft_transpose_4_shm() {
    fft_transpose(4, "shm");
}

#[test]
fn cg_alltoallv_4_shm_there() {
    cg_alltoallv(4, "shm", "there");
}

#[test]
fn cg_alltoallv_4_tcp_late() {
    cg_alltoallv(4, "tcp", "late");
}

#[test]
fn refused_options_tcp() {
    refused("tcp");
}
