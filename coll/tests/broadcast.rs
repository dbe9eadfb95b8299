//! The broadcast as real jobs of separate processes under `gaspirun`, over `tcp` and `shm`:
//! the `broadcast` example runs its plan and reports, per rank, a digest of everything it
//! received and what its error cases returned; these tests compute from the same plan (the
//! example's `plan.rs`, included here) what each rank must have received, and compare.

#![forbid(unsafe_code)]

#[path = "../../tests/common/mod.rs"]
mod common;

#[path = "../examples/support/data.rs"]
mod data;

// Only the parts of the plan that decide what ranks must report are used here.
#[allow(dead_code)]
#[path = "../examples/broadcast/plan.rs"]
mod plan;

use common::{example, gaspirun, gaspirun_casualty, jobs, JOB_TIMEOUT_S, PROVIDERS};
use plan::{Digest, ROUNDS, SUB_ROUNDS};

/// The digest a member of the group `members` (ranks by member index) must report after the
/// plan of `rounds` rounds: every broadcast's data, in order.
fn expected(members: &[u32], rounds: u32, late: bool) -> (usize, String) {
    let steps = plan::steps(members.len() as u32, rounds, late);
    let mut digest = Digest::default();
    let mut buf = Vec::new();
    for step in &steps {
        buf.resize(step.len, 0);
        plan::fill(members[step.root as usize], step.round, &mut buf);
        digest.add(&buf);
    }
    (steps.len(), digest.hex())
}

fn broadcast(ranks: u32, provider: &str) {
    assert!(PROVIDERS.contains(&provider));
    let job = gaspirun(ranks, provider, JOB_TIMEOUT_S, &example("broadcast"), &[]);
    let report = job.report();
    assert!(job.status.success(), "the job failed\n{report}");
    let all: Vec<u32> = (0..ranks).collect();
    let (broadcasts, digest) = expected(&all, ROUNDS, true);
    let sub: Vec<u32> = (1..ranks).collect();
    let late_root = ranks - 1;
    for rank in 0..ranks {
        let data = job.data("broadcast", rank);
        assert_eq!(
            data.get("broadcasts"),
            broadcasts.to_string(),
            "rank {rank}\n{report}"
        );
        assert_eq!(
            data.get("digest"),
            digest,
            "rank {rank} received other bytes\n{report}"
        );
        let mismatch = if rank == 0 {
            "none".to_owned()
        } else {
            format!("0/{}/{}", plan::MISMATCH_LEN, plan::MISMATCH_LEN / 2)
        };
        assert_eq!(data.get("mismatch"), mismatch, "rank {rank}\n{report}");
        // Refused on every member alike: the plan's digest after it shows them in step.
        assert_eq!(
            data.get("too_large"),
            format!("{}/{}", plan::MAX_BYTES + 1, plan::MAX_BYTES),
            "rank {rank}\n{report}"
        );
        // Rank 0 built with another maximum: the others name it, and it names another.
        let disagreed = data.get("disagreed");
        if ranks > 1 {
            let named: u32 = disagreed.parse().unwrap_or_else(|_| {
                panic!("rank {rank}: {disagreed} instead of a member\n{report}")
            });
            assert!(
                if rank == 0 { named != 0 } else { named == 0 },
                "rank {rank} named {named}\n{report}"
            );
        } else {
            assert_eq!(disagreed, "built", "alone, nobody disagrees\n{report}");
        }
        let timeouts: u32 = data.parse("late_timeouts");
        if rank == late_root {
            assert_eq!(
                timeouts, 0,
                "the late root waits without a timeout\n{report}"
            );
        } else {
            // The root joins LATE_MS late: calls with LATE_POLL_MS must have timed out
            // and been resumed.
            assert!(timeouts >= 1, "rank {rank} never timed out\n{report}");
        }
        if sub.contains(&rank) {
            let (broadcasts, digest) = expected(&sub, SUB_ROUNDS, false);
            assert_eq!(
                data.get("sub_broadcasts"),
                broadcasts.to_string(),
                "rank {rank}\n{report}"
            );
            assert_eq!(
                data.get("sub_digest"),
                digest,
                "rank {rank} in the subgroup\n{report}"
            );
        } else {
            assert_eq!(data.get("sub_broadcasts"), "none", "rank {rank}\n{report}");
            assert_eq!(data.get("sub_digest"), "none", "rank {rank}\n{report}");
        }
    }
}

/// One test per rank count and provider.
macro_rules! broadcast_tests {
    ($($test:ident: $ranks:literal, $provider:literal;)*) => {
        $(
            #[test]
            fn $test() {
                broadcast($ranks, $provider);
            }
        )*
    };
}

broadcast_tests! {
    broadcast_1_tcp: 1, "tcp";
    broadcast_1_shm: 1, "shm";
    broadcast_2_tcp: 2, "tcp";
    broadcast_2_shm: 2, "shm";
    broadcast_3_tcp: 3, "tcp";
    broadcast_3_shm: 3, "shm";
    broadcast_4_tcp: 4, "tcp";
    broadcast_4_shm: 4, "shm";
    broadcast_5_tcp: 5, "tcp";
    broadcast_5_shm: 5, "shm";
}

/// What a survivor of the fault scenario must report, unless it learnt of the death before
/// (or while) it waited on a neighbour that still went on: then `RankFailed` naming the dead
/// rank, with the buffer untouched.
enum Survivor {
    /// The broadcast completed: the root's second message arrived.
    Completed,
    /// `RankFailed` naming the dead rank (a dead parent or child); the buffer is untouched.
    Failed,
    /// Abandoned upstream because of the dead rank, told by this parent.
    Aborted { parent: u32 },
}

/// Four ranks, rank `dead` exits after the first broadcast, the survivors broadcast from
/// `root`; `expected` lists every survivor's outcome.
fn fault(provider: &str, dead: u32, root: u32, expected: &[(u32, Survivor)]) {
    const RANKS: u32 = 4;
    let args = ["fault".to_owned(), dead.to_string(), root.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let job = gaspirun_casualty(RANKS, provider, &example("broadcast"), &args, 3);
    let report = job.report();
    assert!(
        !job.stdout.contains(&format!("data fault rank {dead}:")),
        "the dead rank cannot report\n{report}"
    );
    assert_eq!(expected.len() as u32, RANKS - 1);
    let mut sent = vec![0u8; plan::FAULT_LEN];
    plan::fill(root, 1, &mut sent);
    for (rank, survivor) in expected {
        let data = job.data("fault", *rank);
        let failed = format!("failed:{dead}");
        let (mut outcome, mut buffer) = match survivor {
            Survivor::Completed => ("ok".to_owned(), sent.clone()),
            Survivor::Failed => (failed.clone(), untouched(*rank, root, &sent)),
            Survivor::Aborted { parent } => (
                format!("aborted:{dead}:{parent}"),
                untouched(*rank, root, &sent),
            ),
        };
        // Every member watches every member's health: one that learnt of the death first
        // names it itself.
        if data.get("outcome") == failed {
            (outcome, buffer) = (failed, untouched(*rank, root, &sent));
        }
        assert_eq!(data.get("outcome"), outcome, "rank {rank}\n{report}");
        let mut digest = Digest::default();
        digest.add(&buffer);
        assert_eq!(
            data.get("digest"),
            digest.hex(),
            "rank {rank}'s buffer\n{report}"
        );
    }
}

/// The buffer of a member whose broadcast failed: as it was before (the root's holds what it
/// sent).
fn untouched(rank: u32, root: u32, sent: &[u8]) -> Vec<u8> {
    if rank == root {
        sent.to_vec()
    } else {
        plan::initial(rank, plan::FAULT_LEN)
    }
}

/// Four ranks, rank `dead` exits after the first broadcast; each survivor waits until it
/// knows the death, then broadcasts from `root` twice: the first fails at once naming the
/// dead rank, and the object is spent. Whatever the survivor's place in the tree: a member
/// whose neighbour gave the object up does not wait for it.
fn fault_known(provider: &str, dead: u32, root: u32) {
    const RANKS: u32 = 4;
    let args = ["fault-known".to_owned(), dead.to_string(), root.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let job = gaspirun_casualty(RANKS, provider, &example("broadcast"), &args, 3);
    let report = job.report();
    let mut sent = vec![0u8; plan::FAULT_LEN];
    plan::fill(root, 1, &mut sent);
    for rank in (0..RANKS).filter(|&r| r != dead) {
        let data = job.data("fault", rank);
        assert_eq!(
            data.get("outcome"),
            format!("failed:{dead}"),
            "rank {rank}\n{report}"
        );
        assert_eq!(data.get("again"), "abandoned", "rank {rank}\n{report}");
        let mut digest = Digest::default();
        digest.add(&untouched(rank, root, &sent));
        assert_eq!(
            data.get("digest"),
            digest.hex(),
            "rank {rank}'s buffer\n{report}"
        );
    }
}

/// Root 0 over 4 ranks: 0 serves 2 then 1, and 2 serves 3. Rank 2 dies: its parent 0 serves
/// its live child 1 and then names 2, and its child 3 names it.
fn dead_inner_member(provider: &str) {
    let failed = || Survivor::Failed;
    fault(
        provider,
        2,
        0,
        &[(0, failed()), (1, Survivor::Completed), (3, failed())],
    );
}

/// The root dies: its children 2 and 1 name it, and 2 tells its child 3, which would
/// otherwise wait for its timeout.
fn dead_root(provider: &str) {
    let failed = || Survivor::Failed;
    fault(
        provider,
        0,
        0,
        &[
            (1, failed()),
            (2, failed()),
            (3, Survivor::Aborted { parent: 2 }),
        ],
    );
}

/// Members that pass different roots (the example's `roots`): where both roots' trees give a
/// member one parent, that member names the other root and keeps its buffer; members that
/// each take themselves for the root are not told, and wait for each other until their
/// timeouts.
fn roots(provider: &str) {
    let job = gaspirun(
        4,
        provider,
        JOB_TIMEOUT_S,
        &example("broadcast"),
        &["roots"],
    );
    let report = job.report();
    assert!(job.status.success(), "the job failed\n{report}");
    for rank in 0..4 {
        let data = job.data("roots", rank);
        let shared = match rank {
            3 => "root_mismatch:0/2/2/untouched",
            _ => "ok",
        };
        assert_eq!(data.get("shared_parent"), shared, "rank {rank}\n{report}");
        assert_eq!(
            data.get("self_rooted"),
            "timeout/untouched",
            "rank {rank}\n{report}"
        );
    }
}

jobs! {
    roots_tcp: roots("tcp");
    roots_shm: roots("shm");
    fault_dead_inner_member_tcp: dead_inner_member("tcp");
    fault_dead_inner_member_shm: dead_inner_member("shm");
    fault_dead_root_tcp: dead_root("tcp");
    fault_dead_root_shm: dead_root("shm");
    fault_known_dead_leaf_tcp: fault_known("tcp", 3, 0);
    fault_known_dead_leaf_shm: fault_known("shm", 3, 0);
    fault_known_dead_child_of_root_tcp: fault_known("tcp", 1, 0);
    fault_known_dead_child_of_root_shm: fault_known("shm", 1, 0);
    fault_known_dead_inner_member_tcp: fault_known("tcp", 2, 0);
    fault_known_dead_inner_member_shm: fault_known("shm", 2, 0);
}
