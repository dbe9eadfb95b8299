//! The `stopped` scenario: a peer that is alive but stopped (SIGSTOP) is not a dead one. Every
//! call that waits on it, with a 500 ms timeout, must return `Timeout` in time and mark nothing,
//! and must complete with correct results once the peer is continued (see
//! `src/bin/gaspi-selftest/stopped.rs` for the choreography). The ranks report what they saw on
//! their `data` lines; the verdicts are here.

mod common;

use std::time::Duration;

use common::{selftest, Finished, RankData};

const SCENARIO: &str = "stopped";

/// How long a call with `Millis(500)` may take to time out: its timeout plus slack for a
/// loaded 2-core machine. The defects this guards against blocked for 30 s.
const BOUND_MS: u64 = 500 + 400;
/// How soon a call with `Millis(500)` that timed out may have returned: not before its
/// deadline, less an allowance for rounding between the runtime's clock readings and the
/// scenario's.
const TIMED_OUT_AFTER_MS: u64 = 500 - 10;

/// The whole job: about 9 s of checks. A call blocked for the runtime's 30 s operation timeout
/// anywhere, also in the calls after the resumption, shows up here.
const JOB_BOUND: Duration = Duration::from_secs(30);

/// Calls rank 0 makes with `Millis(500)` while the victim is stopped, which must time out
/// (except [`DONE_BY_THE_CALLER`] on the direct path).
const MUST_TIME_OUT: [&str; 15] = [
    "barrier",
    "group_commit",
    "group_barrier",
    "allreduce",
    "atomic_fetch_add",
    "atomic_fetch_add_nb",
    "proc_ping",
    "wait_queue",
    "segment_size_of",
    "target",
    "notify_wait_any",
    "batch_wait",
    "lib_segment_create",
    "lib_team",
    "segment_create",
];

/// Of `MUST_TIME_OUT`, the calls that only touch the victim's memory (or, for `proc_ping`,
/// look at its process): on the direct intra-node path rank 0 does them itself, stopped victim
/// or not, so there they must succeed.
const DONE_BY_THE_CALLER: [&str; 7] = [
    "atomic_fetch_add",
    "atomic_fetch_add_nb",
    "proc_ping",
    "wait_queue",
    "segment_size_of",
    "target",
    "batch_wait",
];

/// Calls rank 0 makes again once the victim is continued (or, for `finalize` and the reads of
/// results, only then), which must complete: `<call>_after=Ok`.
const MUST_COMPLETE: [&str; 25] = [
    "barrier",
    "group_commit",
    "group_barrier",
    "allreduce",
    "allreduce_group_barrier",
    "group_commit_barrier",
    "atomic_fetch_add",
    "atomic_read",
    "atomic_fetch_add_nb",
    "atomic_nb_read",
    "proc_ping",
    "wait_queue",
    "segment_size_of",
    "target",
    "passive_send",
    "notify_wait_any",
    "batch_wait",
    "lib_segment_create",
    "lib_segment_target",
    "lib_team",
    "segment_create",
    "segment_create_size_of",
    "closing_barrier",
    "go_wait",
    "finalize",
];

/// The victim's segment sizes, unlike every other rank's (`stopped.rs`: `VICTIM_*`).
const VICTIM_SIZE_OF: u64 = 24_576;
const VICTIM_TARGET: u64 = 40_960;
const VICTIM_CREATED: u64 = 20_480;
const VICTIM_LIBRARY: u64 = 28_672;

fn stopped(ranks: u32, provider: &str) {
    let job = selftest(SCENARIO, ranks, provider);
    let victim = ranks - 1;
    let healthy = "H".repeat(ranks as usize);
    let all: Vec<RankData> = (0..ranks).map(|r| job.data(SCENARIO, r)).collect();
    let rank0 = &all[0];

    for call in MUST_TIME_OUT {
        let expected = if common::direct_mode() && DONE_BY_THE_CALLER.contains(&call) {
            "Ok"
        } else {
            "Timeout"
        };
        assert_eq!(
            rank0.get(call),
            expected,
            "{call} towards the stopped rank {victim}\n{}",
            job.report()
        );
        within_bound(&job, rank0, call);
    }
    // Over tcp the message may leave through the kernel while the peer is stopped; over shm
    // it queues behind the read that went unanswered. Either way: in time, never RankFailed.
    let passive = rank0.get("passive_send");
    assert!(
        passive == "Ok" || passive == "Timeout",
        "passive_send towards the stopped rank {victim}: {passive}\n{}",
        job.report()
    );
    within_bound(&job, rank0, "passive_send");
    println!("{provider}, {ranks} ranks: passive_send while stopped: {passive}");
    assert_eq!(
        rank0.get("finalize"),
        "FinalizeTimeout",
        "finalize with the victim stopped\n{}",
        job.report()
    );
    within_bound(&job, rank0, "finalize");

    for phase in ["collectives", "one_sided", "finalize", "end"] {
        let key = format!("state_vec_{phase}");
        assert_eq!(
            rank0.get(&key),
            healthy,
            "{key} on rank 0\n{}",
            job.report()
        );
    }
    for (rank, data) in (1..).zip(&all[1..]) {
        assert_eq!(
            data.get("state_vec_end"),
            healthy,
            "state_vec on rank {rank}\n{}",
            job.report()
        );
    }

    assert_eq!(
        rank0.get("atomic_fetch_add_nb_start"),
        "Ok",
        "starting atomic_fetch_add_nb towards the stopped rank {victim}\n{}",
        job.report()
    );
    for call in MUST_COMPLETE {
        let key = format!("{call}_after");
        assert_eq!(rank0.get(&key), "Ok", "{key} on rank 0\n{}", job.report());
    }
    // Every rank's calls after the resumption completed (they stop the scenario otherwise).
    for (rank, data) in (1..).zip(&all[1..]) {
        for (key, value) in data.pairs() {
            if key.ends_with("_after") {
                assert_eq!(value, "Ok", "{key} on rank {rank}\n{}", job.report());
            }
        }
    }

    let n = u64::from(ranks);
    let sums = format!("{},{}", n * (n + 1) / 2, (1u64 << n) - 1);
    for (rank, data) in (0..).zip(&all) {
        assert_eq!(
            data.get("allreduce_sum"),
            sums,
            "allreduce on rank {rank}\n{}",
            job.report()
        );
    }

    // The fetch_add of 1 that timed out stays in flight and happens once, the add of 10
    // after the resumption too, in either order.
    let old: u64 = rank0.parse("atomic_fetch_add_old");
    assert!(
        old == 0 || old == 1,
        "atomic_fetch_add old value {old}\n{}",
        job.report()
    );
    let word: u64 = rank0.parse("atomic_fetch_add_word");
    assert_eq!(
        word,
        11,
        "the word of the blocking atomic\n{}",
        job.report()
    );
    let nb_old: u64 = rank0.parse("atomic_fetch_add_nb_old");
    assert_eq!(nb_old, 0, "atomic_fetch_add_nb old value\n{}", job.report());
    let nb_word: u64 = rank0.parse("atomic_fetch_add_nb_word");
    assert_eq!(
        nb_word,
        2,
        "the word of the non-blocking atomic\n{}",
        job.report()
    );

    for (key, want) in [
        ("wait_queue_wrong_bytes", 0),
        ("batch_wait_wrong_bytes", 0),
        ("segment_size_of_value", VICTIM_SIZE_OF),
        ("target_len", VICTIM_TARGET),
        ("lib_segment_victim_len", VICTIM_LIBRARY),
        ("segment_create_victim_size", VICTIM_CREATED),
        ("notify_wait_any_id", 1),
        ("notify_wait_any_value", 77),
    ] {
        let got: u64 = rank0.parse(key);
        assert_eq!(got, want, "{key} on rank 0\n{}", job.report());
    }
    assert_eq!(
        rank0.get("lib_team_ranks"),
        format!("0,{victim}"),
        "{}",
        job.report()
    );

    // Both passive messages reached the victim, in order, the one sent while it was stopped
    // first.
    let on_victim = &all[victim as usize];
    assert_eq!(
        (on_victim.get("passive_1"), on_victim.get("passive_2")),
        ("0:sent-while-stopped", "0:sent-after-resume"),
        "passive messages received by the victim\n{}",
        job.report()
    );

    assert!(
        job.elapsed < JOB_BOUND,
        "the job took {:?} (bound {JOB_BOUND:?})\n{}",
        job.elapsed,
        job.report()
    );
}

/// `<call>_ms` of rank 0 is at most [`BOUND_MS`], and at least [`TIMED_OUT_AFTER_MS`] when
/// the call timed out (`Timeout`, or `FinalizeTimeout` for `finalize`): a timeout reported
/// before its deadline is as broken as one reported late. A call that completed (as
/// `passive_send` may) has no lower bound.
fn within_bound(job: &Finished, rank0: &RankData, call: &str) {
    let ms: u64 = rank0.parse(&format!("{call}_ms"));
    assert!(
        ms <= BOUND_MS,
        "{call} took {ms} ms with Millis(500) (bound {BOUND_MS} ms)\n{}",
        job.report()
    );
    if matches!(rank0.get(call), "Timeout" | "FinalizeTimeout") {
        assert!(
            ms >= TIMED_OUT_AFTER_MS,
            "{call} timed out after {ms} ms with Millis(500), before its deadline\n{}",
            job.report()
        );
    }
}

#[test]
fn stopped_2_tcp() {
    stopped(2, "tcp");
}

#[test]
fn stopped_2_shm() {
    stopped(2, "shm");
}

#[test]
fn stopped_3_tcp() {
    stopped(3, "tcp");
}

#[test]
fn stopped_3_shm() {
    stopped(3, "shm");
}
