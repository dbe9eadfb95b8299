//! The post / start / complete / wait epochs of `Window` as real jobs of separate processes
//! under `gaspirun`, over `tcp` and `shm`: the `pscw_check` example runs its scenarios and
//! reports, per rank, counts, a digest of every byte it received and what each misuse
//! returned; these tests recompute from the same patterns (the example's `pattern.rs`,
//! included here) what every rank must have received, and compare.

#![forbid(unsafe_code)]

#[path = "../../tests/common/mod.rs"]
mod common;

#[path = "../examples/support/data.rs"]
mod data;

// Only the parts that decide what targets receive are used here.
#[allow(dead_code)]
#[path = "../examples/pscw_check/pattern.rs"]
mod pattern;

use common::{example, gaspirun, gaspirun_casualty, gaspirun_with_env, jobs, Finished, PROVIDERS};
use data::Digest;
use gaspi::Rank;
use pattern::Pattern;

/// Epochs per pattern of the `epochs` jobs.
const EPOCHS: u64 = 1_000;

fn job(ranks: u32, provider: &str, args: &[&str]) -> Finished {
    job_with_env(&[], ranks, provider, args)
}

/// [`job`] with `VAR=value` settings (`env`) in every rank's environment.
fn job_with_env(env: &[&str], ranks: u32, provider: &str, args: &[&str]) -> Finished {
    assert!(PROVIDERS.contains(&provider));
    let job = gaspirun_with_env(env, ranks, provider, &example("pscw_check"), args);
    assert!(job.status.success(), "the job failed\n{}", job.report());
    job
}

/// The digest of what `target` must have received in epochs `1..=epochs`: every epoch, each
/// origin's block, ascending origin.
fn expected(pattern: Pattern, n: u32, target: Rank, epochs: u64) -> (u64, Digest) {
    let mut digest = Digest::default();
    let mut blocks = 0;
    for epoch in 1..=epochs {
        for o in pattern::origins(pattern, n, target, epoch) {
            digest.add(&pattern::block(epoch, o, target));
            blocks += 1;
        }
    }
    (blocks, digest)
}

/// `epochs`: per pattern, every rank received exactly the blocks its origins of each epoch
/// wrote, none early, late or from another epoch (`mismatches`), with origin and target sets
/// that change every epoch and all start / complete forms.
fn epochs(ranks: u32, provider: &str) {
    epochs_with_env(&[], ranks, provider);
}

/// `epochs` where the runtime takes the provider as unordered (`GASPI_FORCE_UNORDERED=1`):
/// a held write then carries `done` only when it is the only write to its target in the
/// epoch, and the two halves of a block go out as writes followed by a separate `done`.
fn unordered(ranks: u32, provider: &str) {
    epochs_with_env(&["GASPI_FORCE_UNORDERED=1"], ranks, provider);
}

fn epochs_with_env(env: &[&str], ranks: u32, provider: &str) {
    let count = EPOCHS.to_string();
    let job = job_with_env(env, ranks, provider, &["epochs", &count]);
    let report = job.report();
    for pattern in Pattern::ALL {
        let scenario = format!("epochs-{}", pattern.name());
        for rank in 0..ranks {
            let data = job.data(&scenario, rank);
            let (blocks, digest) = expected(pattern, ranks, rank, EPOCHS);
            assert_eq!(
                data.get("mismatches"),
                "0",
                "{scenario} rank {rank}\n{report}"
            );
            assert_eq!(
                data.parse::<u64>("received"),
                blocks,
                "{scenario} rank {rank}: blocks received\n{report}"
            );
            assert_eq!(
                data.get("digest"),
                digest.hex(),
                "{scenario} rank {rank}: the bytes received\n{report}"
            );
        }
    }
}

/// `epochs` through the fabric with user queues one deep: a window's batch is its own.
fn shallow_queues(provider: &str) {
    epochs_with_env(
        &["GASPI_QUEUE_DEPTH=1", "GASPI_INTRANODE=fabric"],
        3,
        provider,
    );
}

/// `nocheck`: repeated NOCHECK epochs around a ring neither end early (every block is there
/// after each wait) nor hang.
fn nocheck(ranks: u32, provider: &str) {
    ring("nocheck", 200, ranks, provider, |rank| {
        vec![(rank + ranks - 1) % ranks]
    });
}

/// `double`: NOCHECK double buffering between ring neighbours on two windows: every epoch's
/// blocks from both neighbours, none early or late, no hang.
fn double(ranks: u32, provider: &str) {
    ring("double", 500, ranks, provider, |rank| {
        let mut neighbours = vec![(rank + ranks - 1) % ranks, (rank + 1) % ranks];
        neighbours.sort_unstable();
        neighbours
    });
}

/// Runs `scenario` for `epochs` epochs, in which every rank is written by the same `origins`
/// each epoch, and checks every block of every epoch.
fn ring(
    scenario: &str,
    epochs: u64,
    ranks: u32,
    provider: &str,
    origins: impl Fn(Rank) -> Vec<Rank>,
) {
    let count = epochs.to_string();
    let job = job(ranks, provider, &[scenario, &count]);
    let report = job.report();
    for rank in 0..ranks {
        let data = job.data(scenario, rank);
        let mut digest = Digest::default();
        for epoch in 1..=epochs {
            for o in origins(rank) {
                digest.add(&pattern::block(epoch, o, rank));
            }
        }
        assert_eq!(data.get("mismatches"), "0", "rank {rank}\n{report}");
        assert_eq!(data.get("digest"), digest.hex(), "rank {rank}\n{report}");
    }
}

/// `threads` on 2 ranks: a thread waits in one window while another runs 100 epochs in a
/// second one; both get their data.
fn threads(provider: &str) {
    const EPOCHS: u64 = 100;
    let job = job(2, provider, &["threads"]);
    let report = job.report();
    let data = job.data("threads", 1);
    let mut digest = Digest::default();
    for epoch in 1..=EPOCHS {
        digest.add(&pattern::block(epoch, 0, 1));
    }
    assert_eq!(data.get("first"), "1", "{report}");
    assert_eq!(data.get("received"), EPOCHS.to_string(), "{report}");
    assert_eq!(data.get("mismatches"), "0", "{report}");
    assert_eq!(data.get("digest"), digest.hex(), "{report}");
}

/// `overlap` on 5 ranks: the posts of ranks 3 and 4 do not count towards rank 0's epoch
/// started with 1 and 2 (counter-only matching would open it), and every target got its data.
fn overlap(provider: &str) {
    let job = job(5, provider, &["overlap"]);
    let report = job.report();
    assert_eq!(
        job.data("overlap", 0).get("first_try"),
        "PostsMissing { ranks: [1, 2] }",
        "rank 0's first start\n{report}"
    );
    for rank in 1..5 {
        let data = job.data("overlap", rank);
        assert_eq!(data.get("received"), "1", "rank {rank}\n{report}");
        assert_eq!(data.get("mismatches"), "0", "rank {rank}\n{report}");
    }
}

/// `xyzu` on 3 ranks: the proposal's cases (X), (Y), (Z) and (U), each start made before its
/// post, each matching exactly the post meant for it.
fn xyzu(provider: &str) {
    let job = job(3, provider, &["xyzu"]);
    let report = job.report();
    let data = job.data("xyzu", 0);
    let mut digest = Digest::default();
    for (step, origin) in (1..).zip(pattern::XYZU) {
        digest.add(&pattern::block(step, origin, 0));
    }
    assert_eq!(data.get("received"), "4", "{report}");
    assert_eq!(data.get("mismatches"), "0", "{report}");
    assert_eq!(data.get("digest"), digest.hex(), "{report}");
}

/// `errors` on 2 ranks: every misuse by its variant; a start and a wait that time out name
/// the rank they wait for and are continued; `test` is false, then true once, then an error;
/// a rank listed twice in a post and a start counts once (the wait ends with one complete).
fn errors(provider: &str) {
    let job = job(2, provider, &["errors"]);
    let report = job.report();
    let origin = job.data("errors", 0);
    for (key, want) in [
        (
            "crossed",
            "LibraryDisagreement { library: \"gaspi-coll\", rank: 1 }",
        ),
        ("complete", "NoEpoch { epoch: Access }"),
        ("complete_one", "NotStarted { rank: 1 }"),
        ("wait", "NoEpoch { epoch: Exposure }"),
        ("test", "NoEpoch { epoch: Exposure }"),
        ("stranger", "NotMember { rank: 2, group: 0 }"),
        ("unknown_assert", "UnknownAssert { bits: 128 }"),
        ("unknown_post", "UnknownAssert { bits: 128 }"),
        ("unstarted", "NotStarted { rank: 1 }"),
        ("unposted", "PostsMissing { ranks: [1] }"),
        ("early_write", "NotPosted { rank: 1 }"),
        ("other_start", "EpochOpen { epoch: Access }"),
        ("resumed", "Ok(())"),
        ("outside", "NotStarted { rank: 0 }"),
        ("second_start", "EpochOpen { epoch: Access }"),
        ("done", "Ok(())"),
    ] {
        assert_eq!(origin.get(key), want, "rank 0: {key}\n{report}");
    }
    let target = job.data("errors", 1);
    for (key, want) in [
        (
            "crossed",
            "LibraryDisagreement { library: \"gaspi-coll\", rank: 0 }",
        ),
        ("second_post", "EpochOpen { epoch: Exposure }"),
        ("short_wait", "CompletionsMissing { ranks: [0] }"),
        ("resumed_wait", "Ok(())"),
        ("test_before", "Ok(false)"),
        ("test_after", "Ok(true)"),
        ("test_again", "NoEpoch { epoch: Exposure }"),
        ("received", "3"),
        ("mismatches", "0"),
    ] {
        assert_eq!(target.get(key), want, "rank 1: {key}\n{report}");
    }
}

/// `remade` on 2 ranks: the window's segment made anew larger between epochs takes writes
/// beyond its first size; while it is gone a write to it fails at the call on both paths
/// and the epoch still ends on both sides; made again, it takes writes as before.
fn remade(provider: &str) {
    let job = job(2, provider, &["remade"]);
    let report = job.report();
    let origin = job.data("remade", 0);
    let target = job.data("remade", 1);
    for (key, want) in [
        ("first", "Ok(()),Ok(())"),
        ("larger", "Ok(()),Ok(()),Ok(())"),
        ("gone", "UnknownSegment { rank: 1, segment: 3 },Ok(())"),
        ("again", "Ok(()),Ok(())"),
        (
            "found_gone",
            "UnknownSegment { rank: 1, segment: 4 },Ok(()),Timeout",
        ),
    ] {
        assert_eq!(origin.get(key), want, "rank 0: {key}\n{report}");
    }
    for (key, want) in [
        ("first", "Ok(()),0 wrong"),
        ("larger", "Ok(()),0 wrong,0 wrong"),
        ("gone", "Ok(())"),
        ("again", "Ok(()),0 wrong"),
        ("found_gone", "Ok(())"),
    ] {
        assert_eq!(target.get(key), want, "rank 1: {key}\n{report}");
    }
}

/// Scenarios run on rank counts they do not support: `remade` on 3 ranks (whose third rank
/// waited for a post until its timeout, and then the job failed with "timed out") and
/// `errors` alone (which waited 30 s for a rank 1 and then failed on a range outside a
/// segment) end at once with a usage error.
fn unsupported_ranks(provider: &str) {
    for (ranks, scenario, message) in [
        (3, "remade", "remade needs 2 ranks"),
        (1, "errors", "errors needs 2 ranks or more"),
    ] {
        let job = gaspirun(ranks, provider, 20, &example("pscw_check"), &[scenario]);
        let report = job.report();
        assert_eq!(job.status.code(), Some(1), "{scenario}\n{report}");
        assert!(job.stderr.contains(message), "{scenario}\n{report}");
    }
}

/// `any` on 4 ranks: rank 0 serves the targets with `start_any` in the order their posts
/// arrive (the highest rank posts first, each lower one once the one above was served), and
/// each got its data.
fn any(provider: &str) {
    let job = job(4, provider, &["any"]);
    let report = job.report();
    assert_eq!(job.data("any", 0).get("order"), "3/2/1", "{report}");
    for rank in 1..4 {
        let data = job.data("any", rank);
        assert_eq!(data.get("received"), "1", "rank {rank}\n{report}");
        assert_eq!(data.get("mismatches"), "0", "rank {rank}\n{report}");
    }
}

/// `one` on 3 ranks: a target started on its own is served as soon as it posted, while
/// another target of the access epoch has not posted yet; that one is served once it does.
fn one(provider: &str) {
    let job = job(3, provider, &["one"]);
    let report = job.report();
    let origin = job.data("one", 0);
    for (key, want) in [
        ("pending", "PostsMissing { ranks: [1] }"),
        ("started", "Ok(())"),
        ("completed", "Ok(())"),
        ("resumed", "Ok(())"),
        ("told_wait", "CompletionsMissing { ranks: [2] }"),
    ] {
        assert_eq!(origin.get(key), want, "rank 0: {key}\n{report}");
    }
    // Through the fabric, a notification towards a table that is gone fails at its target,
    // not at the call.
    let posted = origin.get("told_post");
    assert!(
        posted == "Ok(())" || posted.starts_with("UnknownSegment { rank: 2,"),
        "rank 0: told_post\n{report}"
    );
    assert_eq!(
        job.data("one", 1).get("told_start"),
        "Ok(())",
        "rank 1 must be told although the post failed at rank 2 first\n{report}"
    );
    for rank in 1..3 {
        let data = job.data("one", rank);
        assert_eq!(data.get("received"), "1", "rank {rank}\n{report}");
        assert_eq!(data.get("mismatches"), "0", "rank {rank}\n{report}");
    }
}

/// `kill` on 3 ranks: an origin killed (SIGKILL) inside its access epoch makes the target's
/// wait fail naming it, and the other origin's data is there; a start of the dead rank as a
/// target names it too; then both survivors go on with the window.
fn kill(provider: &str) {
    let job = gaspirun_casualty(3, provider, &example("pscw_check"), &["kill"], 137);
    let report = job.report();
    let _: u32 = job.data("kill", 2).parse("pid");
    let target = job.data("kill", 0);
    assert_eq!(target.get("outcome"), "RankFailed(2)", "{report}");
    assert_eq!(target.get("block"), "ok", "{report}");
    let origin = job.data("kill", 1);
    assert_eq!(
        origin.get("outcome"),
        "RankFailed(2)",
        "a start of the dead target\n{report}"
    );
    // The survivors go on with the window: each epoch ends without the dead rank.
    assert_eq!(origin.get("ended"), "Ok(())", "{report}");
    assert_eq!(origin.get("both"), "RankFailed(2)", "{report}");
    assert_eq!(origin.get("to_dead"), "RankFailed(2)", "{report}");
    assert_eq!(origin.get("closed"), "Ok(())", "{report}");
    assert_eq!(origin.get("any"), "Timeout", "{report}");
    assert_eq!(target.get("again"), "RankFailed(2)", "{report}");
    assert_eq!(target.get("tested"), "RankFailed(2)", "{report}");
    assert_eq!(
        target.get("after"),
        "NoEpoch { epoch: Exposure }",
        "{report}"
    );
    assert_eq!(target.get("block2"), "ok", "{report}");
}

/// `full`: posting past a window's batch is `BatchFull`, and `complete` then waits for room
/// to tell its target (before the fix it returned `BatchFull` in 3 of 4 epochs, the target
/// never told).
fn full(provider: &str) {
    let job = job_with_env(
        &["GASPI_INTRANODE=fabric", "GASPI_PROGRESS_THREAD=0"],
        2,
        provider,
        &["full"],
    );
    let report = job.report();
    let epoch = "BatchFull { depth: 65536 }/65536/Ok(())";
    assert_eq!(
        job.data("full", 0).get("rounds"),
        [epoch; 3].join(","),
        "{report}"
    );
    assert_eq!(
        job.data("full", 1).get("rounds"),
        ["Ok(())/ok"; 3].join(","),
        "{report}"
    );
}

jobs! {
    epochs_2_tcp: epochs(2, "tcp");
    epochs_2_shm: epochs(2, "shm");
    epochs_4_tcp: epochs(4, "tcp");
    epochs_4_shm: epochs(4, "shm");
    epochs_9_tcp: epochs(9, "tcp");
    epochs_9_shm: epochs(9, "shm");
    unordered_4_tcp: unordered(4, "tcp");
    unordered_4_shm: unordered(4, "shm");
    shallow_queues_fabric_3_tcp: shallow_queues("tcp");
    nocheck_3_tcp: nocheck(3, "tcp");
    nocheck_3_shm: nocheck(3, "shm");
    double_3_tcp: double(3, "tcp");
    double_3_shm: double(3, "shm");
    double_4_tcp: double(4, "tcp");
    double_4_shm: double(4, "shm");
    threads_2_tcp: threads("tcp");
    threads_2_shm: threads("shm");
    overlap_5_tcp: overlap("tcp");
    overlap_5_shm: overlap("shm");
    xyzu_3_tcp: xyzu("tcp");
    xyzu_3_shm: xyzu("shm");
    errors_2_tcp: errors("tcp");
    errors_2_shm: errors("shm");
    remade_2_tcp: remade("tcp");
    remade_2_shm: remade("shm");
    unsupported_ranks_tcp: unsupported_ranks("tcp");
    any_4_tcp: any("tcp");
    any_4_shm: any("shm");
    one_3_tcp: one("tcp");
    one_3_shm: one("shm");
    full_fabric_2_shm: full("shm");
    kill_3_tcp: kill("tcp");
    kill_3_shm: kill("shm");
}
