//! The GASNet collectives of `Team` as real jobs of separate processes under `gaspirun`, over
//! `tcp` and `shm`: the `gasnet_check` example runs every operation × size × sync mode ×
//! addressing and reports a digest of what each rank received; these tests recompute from
//! the same cases (the example's `cases.rs`, included here, a serial reference) what every
//! rank must have received, and compare.

#![forbid(unsafe_code)]

#[path = "../../tests/common/mod.rs"]
mod common;

#[path = "../examples/support/data.rs"]
mod data;

#[allow(dead_code)]
#[path = "../examples/gasnet_check/cases.rs"]
mod cases;

use std::path::Path;

use common::{
    example, gaspirun, gaspirun_casualty, gaspirun_with_env, jobs, Finished, JOB_TIMEOUT_S,
    PROVIDERS,
};
use data::Digest;

fn job(ranks: u32, provider: &str, args: &[&str]) -> Finished {
    job_on(Hosts::One, ranks, provider, args)
}

/// Where the ranks of a job run.
#[derive(Clone, Copy)]
enum Hosts {
    One,
    /// One host, no progress thread (`GASPI_PROGRESS_THREAD=0`): only the calls move data.
    Unthreaded,
    /// Two "hosts" (`GASPI_HOST_ID` from the rank), the first half of the ranks on one: the
    /// members of one host reach each other directly, the others through the fabric, so
    /// that collectives mix both paths (puts out of the source, for one, go only directly).
    Two,
}

fn job_on(hosts: Hosts, ranks: u32, provider: &str, args: &[&str]) -> Finished {
    assert!(PROVIDERS.contains(&provider));
    let program = example("gasnet_check");
    let job = match hosts {
        Hosts::One => gaspirun(ranks, provider, JOB_TIMEOUT_S, &program, args),
        Hosts::Unthreaded => gaspirun_with_env(
            &["GASPI_PROGRESS_THREAD=0"],
            ranks,
            provider,
            &program,
            args,
        ),
        Hosts::Two => {
            let program = program
                .to_str()
                .expect("the target directory is a UTF-8 path");
            let script =
                format!(r#"GASPI_HOST_ID="host$((PMI_RANK * 2 / {ranks}))" exec "$0" "$@""#);
            let mut sh_args = vec!["-c", &script, program];
            sh_args.extend_from_slice(args);
            gaspirun(ranks, provider, JOB_TIMEOUT_S, Path::new("sh"), &sh_args)
        }
    };
    assert!(job.status.success(), "the job failed\n{}", job.report());
    job
}

/// `ops`: every rank's destination of every case equals the serial reference.
fn ops(ranks: u32, provider: &str) {
    ops_on(Hosts::One, ranks, provider);
}

fn ops_on(hosts: Hosts, ranks: u32, provider: &str) {
    let job = job_on(hosts, ranks, provider, &["ops"]);
    check_ops(&job, ranks);
}

/// Every rank's destinations of `ops` in `job` of `ranks` equal the serial reference.
fn check_ops(job: &Finished, ranks: u32) {
    let report = job.report();
    for rank in 0..ranks {
        let data = job.data("ops", rank);
        let mut case = 0;
        for op in cases::OPS {
            let mut digest = Digest::default();
            let mut count = 0;
            for size in cases::SIZES {
                for _ in cases::flags() {
                    case += 1;
                    digest.add(&cases::want(op, case, size, ranks, rank));
                    count += 1;
                }
            }
            assert_eq!(
                data.get(op),
                format!("{count}/{}", digest.hex()),
                "rank {rank}: {op}\n{report}"
            );
        }
    }
}

/// `ops` with every operation's algorithm forced by `GASPI_COLL_<OP>` (`forced`: operation,
/// value), on one host: the destinations equal the serial reference, and every handle
/// names the forced algorithm (`named`: operation, the names its handles reported).
fn forced(ranks: u32, provider: &str, forced: &[(&str, &str)], named: &[(&str, &str)]) {
    let env: Vec<String> = forced
        .iter()
        .map(|(op, algo)| format!("GASPI_COLL_{}={algo}", op.to_uppercase()))
        .collect();
    let env: Vec<&str> = env.iter().map(String::as_str).collect();
    let job = gaspirun_with_env(&env, ranks, provider, &example("gasnet_check"), &["ops"]);
    assert!(job.status.success(), "the job failed\n{}", job.report());
    check_ops(&job, ranks);
    for rank in 0..ranks {
        let data = job.data("ops", rank);
        for (op, names) in named {
            let key = format!("{op}_algorithms");
            assert_eq!(data.get(&key), *names, "rank {rank}\n{}", job.report());
        }
    }
}

/// `ops` through the fabric with user queues one deep (`GASPI_QUEUE_DEPTH=1`): the
/// collectives keep batches of their own, so the user's choice does not limit them.
fn shallow_queues(provider: &str) {
    let env = ["GASPI_QUEUE_DEPTH=1", "GASPI_INTRANODE=fabric"];
    let job = gaspirun_with_env(&env, 3, provider, &example("gasnet_check"), &["ops"]);
    assert!(job.status.success(), "the job failed\n{}", job.report());
    check_ops(&job, 3);
}

/// A `GASPI_COLL_<OP>` that names no algorithm of its operation fails the call with
/// `UnknownAlgorithm`; an empty one is unset, and the table decides.
fn unforced(provider: &str) {
    let program = example("gasnet_check");
    let job = gaspirun_with_env(
        &["GASPI_COLL_BROADCAST=knomial1"],
        2,
        provider,
        &program,
        &["ops"],
    );
    assert!(!job.status.success(), "the job succeeded\n{}", job.report());
    assert!(
        job.stderr
            .contains(r#"broadcast has no algorithm "knomial1""#),
        "{}",
        job.report()
    );
    let empty = ["GASPI_COLL_BROADCAST=", "GASPI_COLL_EXCHANGE="];
    let job = gaspirun_with_env(&empty, 2, provider, &program, &["ops"]);
    assert!(job.status.success(), "the job failed\n{}", job.report());
    check_ops(&job, 2);
    for rank in 0..2 {
        let data = job.data("ops", rank);
        assert_eq!(data.get("broadcast_algorithms"), "flat", "{}", job.report());
        assert_eq!(
            data.get("exchange_algorithms"),
            "bruck+pairwise",
            "{}",
            job.report()
        );
    }
}

/// Rank 0 forces `GASPI_COLL_BROADCAST=knomial17` and the others `knomial18`: trees that
/// differ only in a `k` above 16, which `Handle::algorithm` names alike (`knomial`). The
/// algorithm is part of what members agree on, so a broadcast fails with `Mismatch`, as for
/// any two names, though at this size both trees are flat (before the fix the job ran; at 19
/// ranks, where the trees differ, a member timed out in every round and nobody was told).
fn wide_knomial_disagreement(ranks: u32, provider: &str) {
    let program = example("gasnet_check");
    let program = program
        .to_str()
        .expect("the target directory is a UTF-8 path");
    let script =
        r#"k=18; [ "$PMI_RANK" = 0 ] && k=17; GASPI_COLL_BROADCAST=knomial$k exec "$0" "$@""#;
    let job = gaspirun(
        ranks,
        provider,
        JOB_TIMEOUT_S,
        Path::new("sh"),
        &["-c", script, program, "ops"],
    );
    assert!(!job.status.success(), "the job ran\n{}", job.report());
    assert!(
        job.stderr
            .contains("called another collective, or with other arguments"),
        "no member was told of the mismatch\n{}",
        job.report()
    );
}

/// `large`: operations of up to 4 MiB per block, run as many pieces through small lanes (an
/// exchangev streamed in chunks), deliver what the serial reference says; so do an
/// exchangev whose chunks land while its member syncs another collective, two such
/// collectives that members sync in opposite orders, and a pieced gather_all whose handle
/// one member drops unsynced.
fn large(ranks: u32, provider: &str) {
    large_on(Hosts::One, ranks, provider);
}

fn large_on(hosts: Hosts, ranks: u32, provider: &str) {
    let job = job_on(hosts, ranks, provider, &["large"]);
    let report = job.report();
    for rank in 0..ranks {
        let data = job.data("large", rank);
        let mut case = cases::LARGE_FIRST;
        for op in cases::OPS {
            let mut digest = Digest::default();
            for size in cases::LARGE_SIZES {
                digest.add(&cases::want(op, case, size, ranks, rank));
                case += 1;
            }
            assert_eq!(
                data.get(op),
                format!("{}/{}", cases::LARGE_SIZES.len(), digest.hex()),
                "rank {rank}: {op}\n{report}"
            );
        }
        let mut digest = Digest::default();
        let size = cases::LARGE_SIZES[0];
        digest.add(&cases::want("exchangev", case, size, ranks, rank));
        assert_eq!(
            data.get("streamed"),
            digest.hex(),
            "rank {rank}: streamed\n{report}"
        );
        let mut digest = Digest::default();
        digest.add(&cases::want("gather_all", case + 1, size, ranks, rank));
        digest.add(&cases::want("exchangev", case + 2, size, ranks, rank));
        assert_eq!(
            data.get("crossed"),
            digest.hex(),
            "rank {rank}: crossed\n{report}"
        );
        let want = if rank + 1 == ranks {
            "dropped".to_string()
        } else {
            let mut digest = Digest::default();
            digest.add(&cases::want("gather_all", case + 3, size, ranks, rank));
            digest.hex()
        };
        assert_eq!(data.get("dropped"), want, "rank {rank}: dropped\n{report}");
    }
}

/// `many`: 64 gather_alls in flight at once on a team of 4 lanes, synced in an order of each
/// rank's own, every one with every member's block.
fn many(ranks: u32, provider: &str) {
    let job = job(ranks, provider, &["many"]);
    let report = job.report();
    let mut digest = Digest::default();
    for i in 0..64u64 {
        let len = if i.is_multiple_of(2) { 64 } else { 1024 };
        let all: Vec<u8> = (0..ranks)
            .flat_map(|m| cases::block(1000 + i, m, 0, len))
            .collect();
        digest.add(&all);
    }
    for rank in 0..ranks {
        let data = job.data("many", rank);
        assert_eq!(data.get("synced"), "64", "rank {rank}\n{report}");
        assert_eq!(data.get("digest"), digest.hex(), "rank {rank}\n{report}");
    }
}

/// `outstanding`: 2^16 − 1 broadcasts in flight at once on one team, every one delivered.
fn outstanding(ranks: u32, provider: &str) {
    let job = job(ranks, provider, &["outstanding"]);
    let report = job.report();
    let mut digest = Digest::default();
    for i in 0..cases::OUTSTANDING {
        let root = (i % u64::from(ranks)) as u32;
        digest.add(&cases::block(3_000_000 + i, root, 0, 8));
    }
    for rank in 0..ranks {
        let data = job.data("outstanding", rank);
        assert_eq!(
            data.get("synced"),
            cases::OUTSTANDING.to_string(),
            "rank {rank}\n{report}"
        );
        assert_eq!(data.get("digest"), digest.hex(), "rank {rank}\n{report}");
    }
}

/// `some` on `ranks` ranks: `try_sync_some` reports a collective that completed while
/// another cannot, and `wait_sync_some` the other once it can; both deliver every block; a
/// set of synced handles is `Synced` to `try_sync_some` and all synced to `try_sync_all`.
fn some(ranks: u32, provider: &str) {
    some_on(Hosts::One, ranks, provider);
}

/// [`some`] with no progress thread: the polls of `try_sync_some` drive the fabric
/// themselves, also on a team whose members all go direct (a test once left a member
/// polling for good under load, 4 ranks over tcp, about a third of the runs).
fn some_unthreaded(ranks: u32, provider: &str) {
    some_on(Hosts::Unthreaded, ranks, provider);
}

fn some_on(hosts: Hosts, ranks: u32, provider: &str) {
    let job = job_on(hosts, ranks, provider, &["some"]);
    let report = job.report();
    let mut digest = Digest::default();
    for i in [4000u64, 4001] {
        let all: Vec<u8> = (0..ranks).flat_map(|m| cases::block(i, m, 0, 64)).collect();
        digest.add(&all);
    }
    for rank in 0..ranks {
        let data = job.data("some", rank);
        let last = rank + 1 == ranks;
        let (fast, slow) = if last { ("-", "-") } else { ("0", "1") };
        assert_eq!(data.get("fast"), fast, "rank {rank}\n{report}");
        assert_eq!(data.get("slow"), slow, "rank {rank}\n{report}");
        let (again_some, again_all) = if last { ("-", "-") } else { ("Synced", "true") };
        assert_eq!(data.get("again_some"), again_some, "rank {rank}\n{report}");
        assert_eq!(data.get("again_all"), again_all, "rank {rank}\n{report}");
        assert_eq!(data.get("digest"), digest.hex(), "rank {rank}\n{report}");
    }
}

/// `mixed`: rounds of eager and synchronising collectives in flight together on 3 lanes:
/// every one completes (no member takes another's signal for its own) and the broadcast of
/// each round delivers its byte.
fn mixed(ranks: u32, provider: &str) {
    let job = job(ranks, provider, &["mixed"]);
    let report = job.report();
    let want: Vec<String> = (0..20).map(|r: u32| r.to_string()).collect();
    for rank in 0..ranks {
        let data = job.data("mixed", rank);
        assert_eq!(data.get("rounds"), "20", "rank {rank}\n{report}");
        assert_eq!(data.get("got"), want.join("/"), "rank {rank}\n{report}");
    }
}

/// `uneven`: a gatherv cut into pieces in some of which members have nothing to send, then a
/// gather_all, both synchronising: every round delivers on every member.
fn uneven(ranks: u32, provider: &str) {
    let job = job(ranks, provider, &["uneven"]);
    let report = job.report();
    for rank in 0..ranks {
        let data = job.data("uneven", rank);
        assert_eq!(data.get("rounds"), "5", "rank {rank}\n{report}");
        assert_eq!(data.get("gatherv"), "5", "rank {rank}\n{report}");
        assert_eq!(data.get("gather_all"), "5", "rank {rank}\n{report}");
    }
}

/// `crossed_teams` on 4 ranks: members wait in a team for members that wait in its split,
/// and the other way round; every collective completes and delivers.
fn crossed_teams(provider: &str) {
    let job = job(4, provider, &["crossed_teams"]);
    let mut digest = Digest::default();
    for i in 0..4u64 {
        digest.add(&cases::block(5000 + i, (i % 4) as u32, 0, 128));
    }
    for i in 0..4u64 {
        let all: Vec<u8> = (0..2)
            .flat_map(|m| cases::block(6000 + i, m, 0, 64))
            .collect();
        digest.add(&all);
    }
    every_delivered(&job, "crossed_teams", 4, &digest.hex());
}

/// Every rank of `job` reported `scenario`'s collectives complete (`outcome=Ok`) with the
/// destinations of `digest`.
fn every_delivered(job: &Finished, scenario: &str, ranks: u32, digest: &str) {
    let report = job.report();
    for rank in 0..ranks {
        let data = job.data(scenario, rank);
        assert_eq!(data.get("outcome"), "Ok", "rank {rank}\n{report}");
        assert_eq!(data.get("digest"), digest, "rank {rank}\n{report}");
    }
}

/// `crossed_eager` on 4 ranks: members sync three teams of one family in orders of their own
/// while eager puts wait for counts of freed stages; every collective completes and delivers.
fn crossed_eager(provider: &str) {
    let job = job(4, provider, &["crossed_eager"]);
    // The team, its split by parity, its split in reverse order, in turn.
    let sizes = [4u32, 2, 4];
    let mut digest = Digest::default();
    for i in 0..27u64 {
        let all: Vec<u8> = (0..sizes[(i % 3) as usize])
            .flat_map(|m| cases::block(7000 + i, m, 0, 1))
            .collect();
        digest.add(&all);
    }
    every_delivered(&job, "crossed_eager", 4, &digest.hex());
}

/// `overlap`: collectives over overlapping source and destination ranges of one segment
/// give every member what separate buffers give, in every sync mode, blocking and not.
fn overlap(ranks: u32, provider: &str) {
    let job = job(ranks, provider, &["overlap"]);
    for me in 0..ranks {
        let mut digest = Digest::default();
        for (case, _, _) in cases::overlap_cases() {
            for result in cases::overlap_results(case, ranks, me) {
                digest.add(&result);
            }
        }
        let data = job.data("overlap", me);
        assert_eq!(
            data.get("digest"),
            digest.hex(),
            "rank {me}\n{}",
            job.report()
        );
    }
}

/// `allsync_source` on 3 ranks: an `IN_ALLSYNC` broadcast out of the root's segment, initiated
/// non-blocking before another member writes into that range and enters, sends the bytes
/// written.
fn allsync_source(provider: &str) {
    let job = job(3, provider, &["allsync_source"]);
    let report = job.report();
    for rank in 0..3 {
        let data = job.data("allsync_source", rank);
        assert_eq!(data.get("got"), "new", "rank {rank}\n{report}");
    }
}

/// The `allsync_*` scenarios in a job of one rank, which has no rank 1 to write into the
/// root's range or to receive from rank 0: a usage error at once (before: `allsync_source`
/// waited out its timeout, `allsync_dest` refused its own broadcast as a buffer too short).
fn allsync_alone(provider: &str) {
    for scenario in ["allsync_source", "allsync_dest"] {
        let job = gaspirun(1, provider, 20, &example("gasnet_check"), &[scenario]);
        let report = job.report();
        assert_eq!(job.status.code(), Some(1), "{scenario}\n{report}");
        assert!(
            job.stderr
                .contains(&format!("{scenario} needs 2 ranks or more")),
            "{scenario}\n{report}"
        );
    }
}

/// `allsync_dest` on 3 ranks: after an `OUT_ALLSYNC` gather_all into segments synced on rank
/// 0, the last member's range is written, though that member has not synced it yet.
fn allsync_dest(provider: &str) {
    let job = job(3, provider, &["allsync_dest"]);
    let report = job.report();
    assert_eq!(
        job.data("allsync_dest", 0).get("remote"),
        "written",
        "{report}"
    );
    for rank in 0..3 {
        let data = job.data("allsync_dest", rank);
        assert_eq!(data.get("got"), "ok", "rank {rank}\n{report}");
    }
}

/// `threads`: two threads sync halves of 32 gather_alls at once; every one is complete.
fn threads(ranks: u32, provider: &str) {
    let job = job(ranks, provider, &["threads"]);
    let report = job.report();
    let mut digest = Digest::default();
    for i in 0..32u64 {
        let all: Vec<u8> = (0..ranks)
            .flat_map(|m| cases::block(2000 + i, m, 0, 256))
            .collect();
        digest.add(&all);
    }
    for rank in 0..ranks {
        let data = job.data("threads", rank);
        assert_eq!(data.get("synced"), "32", "rank {rank}\n{report}");
        assert_eq!(data.get("digest"), digest.hex(), "rank {rank}\n{report}");
    }
}

/// `split`: teams split by parity with keys descending hold the members MPI_Comm_split
/// gives, a member without colour joins none, and collectives on the split (disjoint) teams
/// interleaved with the whole team's, in orders that differ between members, all deliver;
/// every team has its own `Team::id`, the same on its members.
fn split(ranks: u32, provider: &str) {
    let job = job(ranks, provider, &["split"]);
    let report = job.report();
    for rank in 0..ranks {
        let data = job.data("split", rank);
        // Group-all member indices are ranks.
        let sub: Vec<u32> = (0..ranks).rev().filter(|r| r % 2 == rank % 2).collect();
        let mine = sub.iter().position(|&r| r == rank).unwrap_or(usize::MAX);
        assert_eq!(
            data.get("sub"),
            format!("{}:{mine}:{sub:?}", sub.len()),
            "rank {rank}\n{report}"
        );
        let rest = if rank + 1 == ranks {
            "none".to_string()
        } else {
            format!("{}:{rank}", ranks - 1)
        };
        assert_eq!(data.get("rest"), rest, "rank {rank}\n{report}");
        let mut digest = Digest::default();
        for i in 0..8u64 {
            let all: Vec<u8> = (0..sub.len() as u32)
                .flat_map(|m| cases::block(3000 + i, m, 0, 96))
                .collect();
            digest.add(&all);
        }
        for i in 0..8u64 {
            let root = (i % u64::from(ranks)) as u32;
            digest.add(&cases::block(4000 + i, root, 0, 200));
        }
        assert_eq!(data.get("digest"), digest.hex(), "rank {rank}\n{report}");
    }
    // Team ids: one per team, the same on every member, another for every team.
    let ids: Vec<Vec<String>> = (0..ranks)
        .map(|rank| {
            let data = job.data("split", rank);
            data.get("ids").split('/').map(str::to_string).collect()
        })
        .collect();
    let mut teams = std::collections::HashMap::new();
    for (rank, [whole, sub, rest]) in ids.iter().map(|v| [&v[0], &v[1], &v[2]]).enumerate() {
        let rank = rank as u32;
        for (team, id) in [("whole", whole), ("sub", sub), ("rest", rest)] {
            let team = match team {
                "sub" => format!("sub{}", rank % 2),
                other => other.to_string(),
            };
            if id == "none" {
                assert_eq!(team, "rest", "rank {rank}\n{report}");
                continue;
            }
            let first = teams.entry(team.clone()).or_insert_with(|| id.clone());
            assert_eq!(first, id, "rank {rank}: the id of {team}\n{report}");
        }
    }
    let distinct: std::collections::HashSet<&String> = teams.values().collect();
    assert_eq!(
        distinct.len(),
        teams.len(),
        "team ids repeat: {teams:?}\n{report}"
    );
}

/// `drop_early` on 4 ranks: members that drop their team once their part of a gather is
/// over, before the last member entered it, break nobody's gather: the late member's and the
/// root's complete, with every member's block at the root.
fn drop_early(provider: &str, mode: &str) {
    const RANKS: u32 = 4;
    let job = job(RANKS, provider, &["drop_early", mode]);
    let report = job.report();
    for rank in 0..RANKS {
        let data = job.data("drop_early", rank);
        assert_eq!(data.get("outcome"), "Ok", "rank {rank}\n{report}");
        let want = if rank == 0 { "1,2,3,4" } else { "" };
        assert_eq!(data.get("got"), want, "rank {rank}\n{report}");
    }
}

/// `errors`: bad flags, a root outside the team, a short buffer and a second sync by their
/// variants; members that disagree on the root are told (`Mismatch`) rather than corrupted.
fn errors(ranks: u32, provider: &str) {
    let job = job(ranks, provider, &["errors"]);
    let report = job.report();
    let stranger = format!("NotInTeam {{ rank: {} }}", ranks + 3);
    // The segments of the `in_job` scenarios: 400 000 bytes per rank.
    let seg = 400_000 * u64::from(ranks);
    for rank in 0..ranks {
        let data = job.data("errors", rank);
        let unknown = format!("Gaspi(UnknownSegment {{ rank: {rank}, segment: 9 }})");
        // Member indices are ranks in the whole team.
        let own_counts = format!("OwnCounts {{ index: {rank}, send: 4, recv: 8 }}");
        // 8 bytes for this member, 2^63 − 1 for each other (`errors` runs on 2 or more
        // ranks), summed saturating.
        let huge_sum = (0..ranks)
            .map(|i| if i == rank { 8 } else { u64::MAX / 2 })
            .fold(0u64, u64::saturating_add);
        let huge_counts = format!(
            "TooLarge {{ rank: {rank}, len: {huge_sum}, max: {} }}",
            1u64 << 44
        );
        let huge_own = format!(
            "TooLarge {{ rank: {rank}, len: {}, max: {} }}",
            u64::MAX,
            1u64 << 44
        );
        // The root (rank 0) finds its 8-byte source short of `ranks` blocks of 2^62 bytes; the
        // others find the range beyond their segment 1.
        let huge_range = if rank == 0 {
            format!(
                "BufferTooShort {{ len: 8, need: {} }}",
                (1u64 << 62).saturating_mul(u64::from(ranks))
            )
        } else {
            format!(
                "Gaspi(OutOfBounds {{ rank: {rank}, segment: 1, offset: 0, size: {}, segment_size: {seg} }})",
                1u64 << 62
            )
        };
        let beyond = format!(
            "Gaspi(OutOfBounds {{ rank: {rank}, segment: 0, offset: {}, size: 8, segment_size: {seg} }})",
            seg - 4
        );
        for (key, want) in [
            (
                "no_out",
                "Flags { flags: 130, why: \"exactly one OUT_ sync mode is needed\" }",
            ),
            (
                "two_in",
                "Flags { flags: 150, why: \"exactly one IN_ sync mode is needed\" }",
            ),
            ("stranger", stranger.as_str()),
            (
                "unknown_bit",
                "Flags { flags: 1048722, why: \"bits that name no flag are set\" }",
            ),
            ("second_sync", "Synced"),
            (
                "src_flag_memory",
                "Flags { flags: 402, why: \"SRC_IN_SEGMENT is set if and only if the source is a segment range\" }",
            ),
            (
                "src_range_no_flag",
                "Flags { flags: 146, why: \"SRC_IN_SEGMENT is set if and only if the source is a segment range\" }",
            ),
            ("dst_unknown_segment", unknown.as_str()),
            ("own_counts", own_counts.as_str()),
            ("huge_counts", huge_counts.as_str()),
            ("huge_own", huge_own.as_str()),
            ("huge_range", huge_range.as_str()),
            ("src_range_beyond", beyond.as_str()),
        ] {
            assert_eq!(data.get(key), want, "rank {rank}: {key}\n{report}");
        }
        assert!(
            data.get("short").starts_with("BufferTooShort"),
            "rank {rank}\n{report}"
        );
    }
    // Members that disagree on the root are never all told Ok: a notification that crosses
    // between them carries another value (Mismatch); a member whose partner never sends
    // times out.
    for key in ["disagree", "disagree_size"] {
        let kinds: Vec<String> = (0..ranks)
            .map(|r| job.data("errors", r).get(key).to_string())
            .collect();
        assert!(
            kinds.iter().any(|k| k != "Ok"),
            "{key}: {kinds:?}\n{report}"
        );
        assert!(
            kinds.iter().all(|k| k != "Other"),
            "{key}: {kinds:?}\n{report}"
        );
    }
}

/// `teams`: a capacity that differs on rank 0 fails on every member, naming rank 0 on the
/// others and the member it met first (1) on rank 0, or saying on rank 0 what is too small;
/// teams made alike afterwards work, also after a capacity the runtime refuses on rank 0;
/// a team and an alltoallv of a group keep its members after its id went to another group,
/// and a team of the id's next group has one id on its members; members that disagree on
/// the addressing are not all told Ok.
fn teams(ranks: u32, provider: &str) {
    let job = job(ranks, provider, &["teams"]);
    let report = job.report();
    let firsts = (1..=ranks)
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(",");
    for rank in 0..ranks {
        let data = job.data("teams", rank);
        let other = if rank == 0 { 1 } else { 0 };
        let mismatch = format!("CapacityMismatch {{ rank: {other} }}");
        let small = if rank == 0 {
            format!("CapacityTooSmall {{ lanes: 4, lane_bytes: 1, size: {ranks} }}")
        } else {
            mismatch.clone()
        };
        let no_lanes =
            format!("CapacityTooSmall {{ lanes: 0, lane_bytes: 1048576, size: {ranks} }}");
        let left = (rank + ranks - 1) % ranks;
        let regroup = format!("{ranks}:{firsts}");
        let pair_ids = if rank < 2 { "same" } else { "none" };
        // Rank 0's staging is 1 lane of 2^50 bytes, which no memory holds.
        let cap_refused = if rank == 0 {
            format!("LibrarySegment({})", 1u64 << 50)
        } else {
            mismatch.clone()
        };
        let from_left = (left + 1).to_string();
        for (key, want) in [
            ("bytes", mismatch.as_str()),
            ("lanes", mismatch.as_str()),
            ("small", small.as_str()),
            ("no_lanes", no_lanes.as_str()),
            ("agreed", firsts.as_str()),
            ("split_bytes", mismatch.as_str()),
            ("split_again", firsts.as_str()),
            ("regroup", regroup.as_str()),
            ("regroup_a2a", from_left.as_str()),
            ("pair_ids", pair_ids),
            ("cap_refused", cap_refused.as_str()),
            ("after_refused", firsts.as_str()),
        ] {
            assert_eq!(data.get(key), want, "rank {rank}: {key}\n{report}");
        }
    }
    let kinds: Vec<String> = (0..ranks)
        .map(|r| job.data("teams", r).get("addressing").to_string())
        .collect();
    assert!(
        kinds.iter().any(|k| k == "Mismatch"),
        "addressing: {kinds:?}\n{report}"
    );
    assert!(
        kinds.iter().all(|k| k == "Mismatch" || k == "Timeout"),
        "addressing: {kinds:?}\n{report}"
    );
}

/// `counts`: an exchangev whose member 1 expects 16 bytes from member 0, which sends it 8.
/// The two never both complete: whichever takes the other's signal first reports a mismatch
/// naming it (member 0 the credit, when it waits for one; member 1 the data, which comes
/// without one when eager), member 1 never completes and receives none of the bytes.
fn counts(ranks: u32, provider: &str, mode: &str) {
    let job = job(ranks, provider, &["counts", mode]);
    let report = job.report();
    let outcome = |rank: u32| job.data("counts", rank).get("outcome").to_string();
    let (first, second) = (outcome(0), outcome(1));
    assert!(
        first == "Mismatch(1)" || second == "Mismatch(0)",
        "{first} / {second}\n{report}"
    );
    if mode == "eager" {
        assert_eq!(second, "Mismatch(0)", "{report}");
    }
    assert!(
        ["Mismatch(0)", "Timeout"].contains(&second.as_str()),
        "{report}"
    );
    assert_eq!(
        job.data("counts", 1).get("bytes"),
        vec!["0"; 16].join(","),
        "{report}"
    );
    for rank in 0..ranks {
        let got = outcome(rank);
        assert!(!got.starts_with("Other"), "rank {rank}: {got}\n{report}");
    }
}

/// `stalled`: a root whose puts cannot complete locally for a while (its partner drains
/// nothing) gets timeouts it can call again after, then the broadcast, intact.
fn stalled(provider: &str) {
    let job = job(2, provider, &["stalled"]);
    let report = job.report();
    let mut digest = Digest::default();
    digest.add(&cases::block(7000, 0, 0, 16 << 20));
    for rank in 0..2 {
        let data = job.data("stalled", rank);
        assert_eq!(data.get("outcome"), "Ok", "rank {rank}\n{report}");
        assert_eq!(data.get("digest"), digest.hex(), "rank {rank}\n{report}");
    }
}

/// `kill`: the last of 4 members is killed (SIGKILL) between two collectives. The survivors'
/// collectives in flight that need it end in `RankFailed` naming it, and so does every one
/// initiated after (a broadcast's root too), never in a timeout or a hang; a broadcast in
/// flight that does not need it may complete; the survivors then run a team of their own.
fn kill(provider: &str) {
    const RANKS: u32 = 4;
    let victim = RANKS - 1;
    let job = gaspirun_casualty(RANKS, provider, &example("gasnet_check"), &["kill"], 137);
    let report = job.report();
    let _: u32 = job.data("kill", victim).parse("pid");
    let failed = format!("RankFailed({victim})");
    let mut digest = Digest::default();
    let blocks: Vec<u8> = (0..victim)
        .flat_map(|m| cases::block(5002, m, 0, 4096))
        .collect();
    digest.add(&blocks);
    for rank in 0..victim {
        let data = job.data("kill", rank);
        assert_eq!(data.get("first"), "Ok", "rank {rank}\n{report}");
        assert_eq!(data.get("second"), failed, "rank {rank}\n{report}");
        let third = data.get("third");
        assert!(
            third == "Ok" || third == failed,
            "rank {rank}: the broadcast ended in {third}\n{report}"
        );
        assert_eq!(data.get("later"), failed, "rank {rank}\n{report}");
        // Initiated with the death known: at the root too, which needs nothing of it.
        assert_eq!(data.get("rooted"), failed, "rank {rank}\n{report}");
        assert_eq!(data.get("survivors"), "Ok", "rank {rank}\n{report}");
        assert_eq!(data.get("digest"), digest.hex(), "rank {rank}\n{report}");
    }
}

/// `kill_alone`: the last of 4 members is killed (SIGKILL) while the others wait in a
/// blocking allreduce, each alone in its team's engine: every survivor's ends in
/// `RankFailed` naming it, within the fault model's bounds, never in a timeout or a hang.
fn kill_alone(provider: &str) {
    const RANKS: u32 = 4;
    let victim = RANKS - 1;
    let job = gaspirun_casualty(
        RANKS,
        provider,
        &example("gasnet_check"),
        &["kill_alone"],
        137,
    );
    let report = job.report();
    let _: u32 = job.data("kill_alone", victim).parse("pid");
    for rank in 0..victim {
        let data = job.data("kill_alone", rank);
        assert_eq!(data.get("first"), "Ok", "rank {rank}\n{report}");
        assert_eq!(
            data.get("alone"),
            format!("RankFailed({victim})"),
            "rank {rank}\n{report}"
        );
        // A death on this host is seen within about a second of the victim's 300 ms.
        let millis: u64 = data.parse("millis");
        assert!(millis < 10_000, "rank {rank}: {millis} ms\n{report}");
    }
}

jobs! {
    ops_1_tcp: ops(1, "tcp");
    ops_2_tcp: ops(2, "tcp");
    ops_2_shm: ops(2, "shm");
    ops_3_shm: ops(3, "shm");
    ops_4_tcp: ops(4, "tcp");
    ops_5_shm: ops(5, "shm");
    shallow_queues_fabric_3_tcp: shallow_queues("tcp");
    ops_6_tcp: ops(6, "tcp");
    ops_7_shm: ops(7, "shm");
    ops_8_shm: ops(8, "shm");
    large_1_shm: large(1, "shm");
    large_3_tcp: large(3, "tcp");
    large_4_shm: large(4, "shm");
    two_hosts_ops_4_tcp: ops_on(Hosts::Two, 4, "tcp");
    forced_5_shm: forced(5, "shm", &[
        ("broadcast", "knomial3"), ("scatter", "knomial4"), ("gather", "binomial"),
        ("gather_all", "ring"), ("exchange", "bruck"),
    ], &[
        ("broadcast", "knomial3"), ("scatter", "knomial4"), ("scatterv", "knomial4"),
        ("gather", "binomial"), ("gatherv", "binomial"), ("gather_all", "ring"),
        ("gather_allv", "ring"), ("exchange", "bruck"), ("exchangev", "pairwise"),
    ]);
    forced_7_tcp: forced(7, "tcp", &[
        ("broadcast", "pipelined"), ("scatter", "binomial"), ("gather", "knomial8"),
        ("gather_all", "dissemination"), ("exchange", "pairwise"),
    ], &[
        ("broadcast", "pipelined"), ("scatter", "binomial"), ("scatterv", "binomial"),
        ("gather", "knomial8"), ("gatherv", "knomial8"), ("gather_all", "dissemination"),
        ("gather_allv", "dissemination"), ("exchange", "pairwise"),
    ]);
    forced_6_shm: forced(6, "shm", &[
        ("broadcast", "flat"), ("scatter", "flat"), ("gather", "flat"),
    ], &[
        ("broadcast", "flat"), ("scatterv", "flat"), ("gatherv", "flat"),
    ]);
    unforced_2_tcp: unforced("tcp");
    wide_knomial_disagreement_3_shm: wide_knomial_disagreement(3, "shm");
    wide_knomial_disagreement_2_tcp: wide_knomial_disagreement(2, "tcp");
    two_hosts_large_4_tcp: large_on(Hosts::Two, 4, "tcp");
    many_4_tcp: many(4, "tcp");
    many_4_shm: many(4, "shm");
    outstanding_2_shm: outstanding(2, "shm");
    outstanding_3_tcp: outstanding(3, "tcp");
    allsync_dest_3_shm: allsync_dest("shm");
    allsync_dest_3_tcp: allsync_dest("tcp");
    allsync_source_3_shm: allsync_source("shm");
    allsync_source_3_tcp: allsync_source("tcp");
    allsync_alone_1_shm: allsync_alone("shm");
    crossed_teams_4_shm: crossed_teams("shm");
    crossed_teams_4_tcp: crossed_teams("tcp");
    crossed_eager_4_shm: crossed_eager("shm");
    crossed_eager_4_tcp: crossed_eager("tcp");
    overlap_4_shm: overlap(4, "shm");
    overlap_3_tcp: overlap(3, "tcp");
    some_3_shm: some(3, "shm");
    some_2_tcp: some(2, "tcp");
    some_unthreaded_4_tcp: some_unthreaded(4, "tcp");
    some_unthreaded_4_shm: some_unthreaded(4, "shm");
    mixed_4_shm: mixed(4, "shm");
    mixed_5_tcp: mixed(5, "tcp");
    uneven_6_shm: uneven(6, "shm");
    uneven_6_tcp: uneven(6, "tcp");
    threads_3_tcp: threads(3, "tcp");
    threads_4_shm: threads(4, "shm");
    split_1_shm: split(1, "shm");
    split_4_tcp: split(4, "tcp");
    split_5_shm: split(5, "shm");
    kill_4_tcp: kill("tcp");
    kill_4_shm: kill("shm");
    kill_alone_4_tcp: kill_alone("tcp");
    kill_alone_4_shm: kill_alone("shm");
    stalled_2_tcp: stalled("tcp");
    stalled_2_shm: stalled("shm");
    teams_2_shm: teams(2, "shm");
    teams_3_tcp: teams(3, "tcp");
    errors_3_tcp: errors(3, "tcp");
    errors_3_shm: errors(3, "shm");
    drop_early_4_tcp: drop_early("tcp", "my");
    drop_early_4_shm: drop_early("shm", "my");
    drop_early_eager_4_tcp: drop_early("tcp", "eager");
    drop_early_eager_4_shm: drop_early("shm", "eager");
    counts_2_tcp: counts(2, "tcp", "my");
    counts_3_shm: counts(3, "shm", "my");
    counts_eager_2_shm: counts(2, "shm", "eager");
    counts_eager_4_tcp: counts(4, "tcp", "eager");
}
