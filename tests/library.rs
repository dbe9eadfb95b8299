//! The `library` scenario of `gaspi-selftest` as real jobs: two libraries and the user share a
//! context, then move data through the library API (see `src/bin/gaspi-selftest/library.rs`).
//!
//! Each rank checks what it received itself; these tests judge what the ranks report on their
//! `data` lines against values computed here from the rank count, and check across ranks that
//! an error about a library segment names it by its local id on the rank concerned.

mod common;

use std::collections::BTreeSet;

use common::{selftest, RankData, PROVIDERS};

const SCENARIO: &str = "library";
/// Mirrors of the scenario's constants.
const SIZE: u64 = 64 << 10;
const ERR_SIZE: u64 = 1 << 20;
const TABLE: u32 = 64;
const ADDS: u64 = 40;
const EACH_VALUE: u32 = 77;
const LIBRARY_SEGMENTS: [&str; 6] = [
    "a_ring_id",
    "a_atom_id",
    "a_err_id",
    "a_table_id",
    "b_first_id",
    "b_second_id",
];

fn library(ranks: u32, provider: &str) {
    assert!(PROVIDERS.contains(&provider));
    let job = selftest(SCENARIO, ranks, provider);
    let n = u64::from(ranks);
    let all: Vec<RankData> = (0..ranks).map(|r| job.data(SCENARIO, r)).collect();
    for (rank, data) in (0..ranks).zip(&all) {
        let left = (rank + ranks - 1) % ranks;
        let right = (rank + 1) % ranks;
        let expect = |key: &str, want: String| {
            assert_eq!(data.get(key), want, "rank {rank}: {key}\n{}", job.report());
        };
        let num = |key: &str| data.parse::<u64>(key);

        // Namespaces: the user's ids are what they would be without libraries.
        expect("user_segments", "0,1,2,3".into());
        expect("user_groups", "1,2".into());
        expect("second_register", "LibraryExists(lib-a)".into());
        expect("team_all", format!("{ranks}:{rank}"));
        let even = if rank % 2 == 0 {
            format!("{}:{}", ranks.div_ceil(2), rank / 2)
        } else {
            "none".into()
        };
        expect("team_even", even);
        // The split by rank % 3 (none for 2), by descending rank: what MPI_Comm_split gives.
        let split = if rank % 3 == 2 {
            "none".into()
        } else {
            let members: Vec<u32> = (0..ranks).rev().filter(|r| r % 3 == rank % 3).collect();
            let me = members
                .iter()
                .position(|&r| r == rank)
                .unwrap_or(usize::MAX);
            let maps: Vec<Option<u32>> = (0..members.len() as u32).map(Some).collect();
            expect("team_split_ranks", format!("{members:?}"));
            format!("{}:{me}:{maps:?}", members.len())
        };
        expect("team_split", split);
        let ids: BTreeSet<u64> = LIBRARY_SEGMENTS.iter().map(|key| num(key)).collect();
        assert_eq!(
            ids.len(),
            6,
            "rank {rank}: library local ids {ids:?} repeat\n{}",
            job.report()
        );
        assert!(
            ids.iter().all(|id| (1..=255).contains(id)),
            "rank {rank}: library local ids {ids:?}\n{}",
            job.report()
        );
        let shared: Vec<String> = ids
            .iter()
            .filter(|&&id| id <= 3)
            .map(ToString::to_string)
            .collect();
        assert!(
            !shared.is_empty(),
            "rank {rank}: no library id {ids:?} equals a user segment id, so the separation \
             check proved little\n{}",
            job.report()
        );
        expect("shared_ids", shared.join(","));
        // Nine segments with memory, each checked whole; the table's own notification.
        assert_eq!(num("separate_bytes"), 9 * SIZE, "rank {rank}");
        assert_eq!(num("separate_notifications"), 10, "rank {rank}");

        // Data paths: values name the sender (its rank + 1).
        let from_left = u64::from(left) + 1;
        assert_eq!(num("ring_value"), from_left, "rank {rank}: ring");
        assert_eq!(num("ring_bytes"), 6000, "rank {rank}: ring");
        assert_eq!(num("read_bytes"), 6000, "rank {rank}: read");
        assert_eq!(
            num("to_user_value"),
            from_left,
            "rank {rank}: write_notify_to"
        );
        assert_eq!(num("to_user_bytes"), 3000, "rank {rank}: write_notify_to");
        assert_eq!(
            num("to_user_user_table"),
            0,
            "rank {rank}: write_notify_to set the user segment's notification"
        );
        if rank == 0 {
            assert_eq!(num("each_sent"), n - 1, "rank 0: write_notify_each");
        } else {
            assert_eq!(num("each_value"), u64::from(EACH_VALUE), "rank {rank}");
            assert_eq!(num("each_bytes"), 5000, "rank {rank}: write_notify_each");
        }
        // Out of ordinary memory only on the direct path; every rank runs on this host.
        let (from_memory, from_bytes) = if common::direct_mode() {
            ("Ok", 5000)
        } else {
            ("Unsupported", 0)
        };
        expect("from_memory", from_memory.into());
        assert_eq!(
            num("from_memory_bytes"),
            from_bytes,
            "rank {rank}: write_notify_from\n{}",
            job.report()
        );
        assert!(
            data.get("from_memory_beyond").starts_with("OutOfBounds("),
            "rank {rank}: write_from beyond the segment\n{}",
            job.report()
        );
        expect("wait_any", format!("0:5:{from_left},1:10:{from_left}"));
        assert_eq!(num("wait_any_bytes"), 100, "rank {rank}: notify_wait_any");
        assert_eq!(num("table_value"), from_left, "rank {rank}: Batch::notify");

        // The reduction folded in member order: sums, maxima and the ordered product of the
        // matrices of x -> (r + 1) x + 1.
        let vector = |f: &dyn Fn(u64) -> u64| -> String {
            (1..=4u64)
                .map(|i| f(i).to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        expect("reduce_sum", vector(&|i| i * n * (n + 1) / 2));
        expect("reduce_max", vector(&|i| i * n));
        let (mut p, mut q) = (1u64, 0u64);
        for m in 1..=n {
            (p, q) = (p * m, p + q);
        }
        expect("reduce_product", format!("{p},{q},0,1"));
        expect("apply_errors", "Buffers,Unsupported,Buffers".into());

        // Atomics: exact totals from the rank count; the notifying adds of the left neighbour.
        assert_eq!(
            num("atomic_lib_total"),
            ADDS * n * (n + 1) / 2,
            "rank {rank}: every rank added rank + 1, {ADDS} times"
        );
        assert_eq!(
            num("atomic_user_total"),
            ADDS * n,
            "rank {rank}: every rank added 1, {ADDS} times"
        );
        expect("atomic_fetched", format!("{ADDS}:{ADDS}"));
        let word = 1000 * from_left;
        expect("notified_lib", format!("{from_left}:{word}"));
        expect("notified_user", format!("{from_left}:{word}"));

        // Errors, the library segments named by their ids on the right neighbour.
        let on_right = |key: &str| all[right as usize].get(key);
        // Direct transfers take no room on a batch, so only the fabric can fill one.
        let full = if common::direct_mode() {
            "direct"
        } else {
            "BatchFull(1)"
        };
        expect("batch_full", full.into());
        expect(
            "notify_beyond",
            format!(
                "InvalidNotification({right},{},{TABLE})",
                on_right("a_table_id")
            ),
        );
        expect(
            "range_outside",
            format!(
                "OutOfBounds({right},{},{},16,{ERR_SIZE})",
                on_right("a_err_id"),
                ERR_SIZE - 8
            ),
        );
        expect("zero_notifications", format!("LibrarySegment({SIZE},0)"));
        expect("zero_table", "LibrarySegment(0,0)".into());
        expect("huge_segment", format!("LibrarySegment({},4)", u64::MAX));
        expect("team_empty", format!("NotInScope({rank})"));
        expect("team_twice", format!("DuplicateTeamMember({rank})"));
        // Rank 0 asked for no notifications: it says so, the others name it.
        let refused = if rank == 0 {
            format!("LibrarySegment({SIZE},0)")
        } else {
            "LibraryRefused(lib-a,0)".to_string()
        };
        expect("refused", refused);
        if rank == 0 {
            expect("retry_first", "Timeout".into());
            expect("retry_other", "LibraryBusy(lib-a)".into());
        }
        expect("retried", "Ok".into());
        // Rank 0 passed another agreement word: it names member 1, the others name it.
        let disagreeing = if rank == 0 { 1 } else { 0 };
        expect(
            "agreement_split",
            format!("LibraryDisagreement(lib-a,{disagreeing})"),
        );
        expect("agreement_same", "Ok".into());
        // The group's id went to a group of rank 0 alone; the team kept every rank.
        expect("snapshot", format!("{ranks}:{rank}:{}:true", left + 1));
        // Libraries creating and dropping segments at once, every round's data in place.
        assert_eq!(num("churn_rounds"), 300, "rank {rank}: churn");
        expect("after_abandoned", "Ok".into());
        // A library's target kept past its segment's deletion reaches nothing, not the
        // segment of another library that took its local id.
        if rank == 0 {
            expect("stale_untouched", "true".into());
        } else {
            let id = data.get("stale_write").to_owned();
            assert!(
                id.starts_with("UnknownSegment(0,"),
                "rank {rank}: {id}\n{}",
                job.report()
            );
            expect("stale_notify", id.clone());
            expect("stale_write_to", id.clone());
            expect("stale_atomic", id.clone());
        }
        // Each creation of a library registered again pairs with its own messages.
        expect("reregistered", "Ok".into());
        // A creation paired with a part another member abandoned reaches nothing of the
        // library segment that took the abandoned part's local id.
        match rank {
            0 => expect("leftover_untouched", "true".into()),
            1 => {
                let got = data.get("leftover_target").to_owned();
                assert!(
                    got.starts_with("UnknownSegment(0,"),
                    "rank 1: {got}\n{}",
                    job.report()
                );
            }
            _ => {}
        }
    }
}

#[test]
fn library_2_tcp() {
    library(2, "tcp");
}

#[test]
fn library_2_shm() {
    library(2, "shm");
}

#[test]
fn library_3_tcp() {
    library(3, "tcp");
}

#[test]
fn library_3_shm() {
    library(3, "shm");
}

#[test]
fn library_4_tcp() {
    library(4, "tcp");
}

#[test]
fn library_4_shm() {
    library(4, "shm");
}
