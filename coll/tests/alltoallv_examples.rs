//! The alltoallv examples as real jobs of separate processes under `gaspirun`, over `tcp` and
//! `shm`. Each example checks its own results and exits non-zero on a mismatch; these tests
//! also judge what every rank reports against what they compute themselves from the examples'
//! data modules (included here): the digest of every block `threaded_reset` received.

#![forbid(unsafe_code)]

#[path = "../../tests/common/mod.rs"]
mod common;

#[path = "../examples/support/data.rs"]
mod data;

#[path = "../examples/threaded_reset/pattern.rs"]
mod pattern;

use common::{example, gaspirun, Finished, JOB_TIMEOUT_S, PROVIDERS};

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
