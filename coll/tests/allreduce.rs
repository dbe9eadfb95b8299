//! The team allreduce as real jobs of separate processes under `gaspirun`, over `tcp` and
//! `shm`: the `allreduce_check` example reduces every kind × length and reports a digest of
//! what each rank ended with; these tests recompute from the same cases (the example's
//! `cases.rs`, included here, a serial reference folding in member order) what every rank
//! must have, and compare — so results are also bitwise the same on every rank.

#![forbid(unsafe_code)]

#[path = "../../tests/common/mod.rs"]
mod common;

#[allow(dead_code)]
#[path = "../examples/support/data.rs"]
mod data;

#[allow(dead_code)]
#[path = "../examples/allreduce_check/cases.rs"]
mod cases;

use common::{example, gaspirun, gaspirun_with_env, jobs, Finished, JOB_TIMEOUT_S, PROVIDERS};
use data::Digest;

fn job(ranks: u32, provider: &str, scenario: &str) -> Finished {
    assert!(PROVIDERS.contains(&provider));
    let job = gaspirun(
        ranks,
        provider,
        JOB_TIMEOUT_S,
        &example("allreduce_check"),
        &[scenario],
    );
    assert!(job.status.success(), "the job failed\n{}", job.report());
    job
}

/// `values`: every rank's result of every case equals the serial reference; a vector whose
/// staging exceeds a lane is refused on every rank of a team of more than one.
fn values(ranks: u32, provider: &str) {
    check_values(&job(ranks, provider, "values"), ranks);
}

/// `values` with the algorithm forced by `GASPI_COLL_ALLREDUCE`: the same results, bitwise,
/// whichever algorithm the table would have chosen.
fn forced(ranks: u32, provider: &str, algorithm: &str) {
    let env = format!("GASPI_COLL_ALLREDUCE={algorithm}");
    let program = example("allreduce_check");
    let job = gaspirun_with_env(&[&env], ranks, provider, &program, &["values"]);
    assert!(job.status.success(), "the job failed\n{}", job.report());
    check_values(&job, ranks);
}

/// A `GASPI_COLL_ALLREDUCE` that names no allreduce algorithm fails the first allreduce with
/// `UnknownAlgorithm` naming it.
fn unknown(provider: &str) {
    let env = ["GASPI_COLL_ALLREDUCE=ring"];
    let job = gaspirun_with_env(&env, 2, provider, &example("allreduce_check"), &["values"]);
    assert!(!job.status.success(), "the job succeeded\n{}", job.report());
    // gaspirun ends the job when the first rank fails, so the other may not get to say it.
    assert!(
        job.stderr
            .contains(r#"sum_i64 of 0 (case 1): allreduce has no algorithm "ring""#),
        "{}",
        job.report()
    );
}

fn check_values(job: &Finished, ranks: u32) {
    let report = job.report();
    for rank in 0..ranks {
        let data = job.data("values", rank);
        for kind in cases::KINDS {
            let mut digest = Digest::default();
            for len in cases::LENGTHS {
                digest.add(&cases::want(kind, len, ranks));
            }
            assert_eq!(
                data.get(kind),
                digest.hex(),
                "rank {rank}: {kind}\n{report}"
            );
        }
        assert_eq!(data.get("large"), "Ok", "rank {rank}\n{report}");
        let mut digest = Digest::default();
        digest.add(&cases::want("affine_i64", cases::LARGE / 2, ranks));
        assert_eq!(
            data.get("large_affine"),
            digest.hex(),
            "rank {rank}: the large non-commutative reduction\n{report}"
        );
    }
}

/// `many`: allreduces and gather_alls in flight at once beyond the team's lanes, synced in
/// each rank's own order, every one with the reference's result.
fn many(ranks: u32, provider: &str) {
    let job = job(ranks, provider, "many");
    let report = job.report();
    let mut digest = Digest::default();
    for i in 0..cases::MANY {
        digest.add(&cases::many_want(i, ranks));
    }
    for rank in 0..ranks {
        let data = job.data("many", rank);
        assert_eq!(
            data.get("synced"),
            cases::MANY.to_string(),
            "rank {rank}\n{report}"
        );
        assert_eq!(data.get("digest"), digest.hex(), "rank {rank}\n{report}");
    }
}

/// `late`: a blocking allreduce that gave up on rank 0 before the others started it left
/// its destination alone and its part to go on, which the others' results show, and the
/// team goes on.
fn late(ranks: u32, provider: &str) {
    let job = job(ranks, provider, "late");
    let report = job.report();
    let digest = |len| {
        let mut digest = Digest::default();
        digest.add(&cases::want("sum_i64", len, ranks));
        digest.hex()
    };
    for rank in 0..ranks {
        let data = job.data("late", rank);
        let first = if rank == 0 {
            "Timeout".to_string()
        } else {
            digest(cases::LATE)
        };
        assert_eq!(data.get("first"), first, "rank {rank}\n{report}");
        assert_eq!(
            data.get("second"),
            digest(cases::LATE + 1),
            "rank {rank}\n{report}"
        );
    }
}

/// `mismatch`: members that disagree on the length (one passing an empty vector included)
/// or the operator are told (`Mismatch`, found in the credit before any data moves), never
/// all `Ok`, and nobody hangs.
fn mismatch(ranks: u32, provider: &str) {
    let job = job(ranks, provider, "mismatch");
    let report = job.report();
    for key in ["len", "op", "empty"] {
        let kinds: Vec<String> = (0..ranks)
            .map(|r| job.data("mismatch", r).get(key).to_string())
            .collect();
        assert!(
            kinds.iter().any(|k| k == "Mismatch"),
            "{key}: {kinds:?}\n{report}"
        );
        assert!(
            kinds.iter().all(|k| k == "Mismatch" || k == "Timeout"),
            "{key}: {kinds:?}\n{report}"
        );
    }
}

/// `panic`: rank 0's panicking operator, in its blocking call's sync, in its initiating
/// call, and taken by another thread's allreduce while one thread holds the handle, reaches
/// the call that syncs the collective with its message, and nowhere else (before, the
/// handle's drop took the fold again while the panic unwound, which aborted the process);
/// so does rank 0's own panic between initiating and syncing, whose dropped handle lets the
/// collective finish for the others. At two members every other outcome is the sum, but
/// where rank 0's fold may be taken before its put went: in its initiating call, late, when
/// the partner's data is there first (seen through the fabric), and in pieces; there, and at
/// more members, a member that needed rank 0's later steps may time out, and nothing else
/// happens: no other panic, no wrong sum, and every rank finalizes.
fn panics(ranks: u32, provider: &str) {
    let job = job(ranks, provider, "panic");
    let report = job.report();
    let panicking = ["sync", "initiate", "dropped", "thread_a", "pieces"];
    let parts = [
        "sync",
        "sync_after",
        "initiate",
        "dropped",
        "dropped_after",
        "thread_a",
        "thread_b",
        "pieces",
    ];
    for rank in 0..ranks {
        let data = job.data("panic", rank);
        for part in parts {
            let got = data.get(part);
            let panics = rank == 0 && panicking.contains(&part);
            let fine = match (panics, ranks) {
                (true, _) => got == "Panicked",
                (false, 2) if !["initiate", "pieces"].contains(&part) => got == "Ok",
                (false, _) => got == "Ok" || got == "Timeout",
            };
            assert!(fine, "rank {rank}: {part}={got}\n{report}");
        }
    }
}

jobs! {
    values_1_tcp: values(1, "tcp");
    values_2_tcp: values(2, "tcp");
    values_2_shm: values(2, "shm");
    values_3_shm: values(3, "shm");
    values_3_tcp: values(3, "tcp");
    values_4_shm: values(4, "shm");
    values_5_tcp: values(5, "tcp");
    values_6_shm: values(6, "shm");
    values_7_tcp: values(7, "tcp");
    values_8_shm: values(8, "shm");
    values_8_tcp: values(8, "tcp");
    forced_doubling_3_shm: forced(3, "shm", "doubling");
    forced_rabenseifner_5_tcp: forced(5, "tcp", "rabenseifner");
    unknown_2_shm: unknown("shm");
    many_3_tcp: many(3, "tcp");
    many_4_shm: many(4, "shm");
    many_5_shm: many(5, "shm");
    late_2_shm: late(2, "shm");
    late_3_tcp: late(3, "tcp");
    late_4_shm: late(4, "shm");
    mismatch_2_tcp: mismatch(2, "tcp");
    mismatch_2_shm: mismatch(2, "shm");
    mismatch_5_shm: mismatch(5, "shm");
    panic_2_tcp: panics(2, "tcp");
    panic_2_shm: panics(2, "shm");
    panic_4_shm: panics(4, "shm");
}
