//! The sparse alltoallv as real jobs of separate processes under `gaspirun`, over `tcp` and
//! `shm`: the `alltoallv_check` example runs its scenarios and reports, per rank, the plan it was
//! given, what each misuse returned, counts of timeouts and a digest of every byte it received;
//! these tests compute from the same cases (the example's `plan.rs`, included here) the plan
//! every rank must have been given and the bytes it must have received, and compare.

#![forbid(unsafe_code)]

#[path = "../../tests/common/mod.rs"]
mod common;

#[path = "../examples/support/data.rs"]
mod data;

// Only the parts of the cases that decide what ranks must report are used here.
#[allow(dead_code)]
#[path = "../examples/alltoallv_check/plan.rs"]
mod plan;

use common::{
    example, gaspirun, gaspirun_casualty, jobs, Finished, RankData, JOB_TIMEOUT_S, PROVIDERS,
};
use gaspi::{Rank, SegmentId};
use plan::{Digest, Forms, Pattern, CASES, SENTINEL};

/// Rounds of the long case in the `exchange` jobs.
const LONG: u32 = 1_000;

/// The plan rank `me` of a job of `n` must be given for `pattern`, where every rank `r`
/// receives into `receive[r % 2]` from `first(r)` on.
struct Expected {
    /// `(rank, offset, bytes)`, ascending rank, packed from `first(me)`.
    sources: Vec<(Rank, u64, u64)>,
    /// `(rank, segment, offset, bytes)`, in the order `me` passed them.
    destinations: Vec<(Rank, SegmentId, u64, u64)>,
}

impl Expected {
    fn new(
        pattern: Pattern,
        n: u32,
        me: Rank,
        receive: [SegmentId; 2],
        first: impl Fn(Rank) -> u64,
    ) -> Expected {
        // Where the block of `source` lands on `target`: after those of every lower source.
        let landing = |source: Rank, target: Rank| -> u64 {
            first(target)
                + (0..source)
                    .flat_map(|r| plan::sends(pattern, n, r))
                    .filter(|&(t, _)| t == target)
                    .map(|(_, bytes)| bytes)
                    .sum::<u64>()
        };
        let sources = (0..n)
            .filter_map(|r| {
                let (_, bytes) = plan::sends(pattern, n, r)
                    .into_iter()
                    .find(|&(t, _)| t == me)?;
                Some((r, landing(r, me), bytes))
            })
            .collect();
        let destinations = plan::sends(pattern, n, me)
            .into_iter()
            .map(|(t, bytes)| (t, receive[(t % 2) as usize], landing(me, t), bytes))
            .collect();
        Expected {
            sources,
            destinations,
        }
    }

    fn sources_layout(&self) -> String {
        layout(
            self.sources
                .iter()
                .map(|(r, off, bytes)| format!("{r}@{off}+{bytes}")),
        )
    }

    fn destinations_layout(&self) -> String {
        layout(
            self.destinations
                .iter()
                .map(|(r, seg, off, bytes)| format!("{r}@{seg}:{off}+{bytes}")),
        )
    }

    fn required(&self) -> u64 {
        self.sources.iter().map(|&(_, _, bytes)| bytes).sum()
    }

    /// Checks the plan `data` reports against this one.
    fn check(&self, job: &Finished, data: &RankData<'_>, what: &str) {
        let rank = data.rank();
        let report = job.report();
        assert_eq!(
            data.get("sources"),
            self.sources_layout(),
            "{what}, rank {rank}: the sources of its plan\n{report}"
        );
        assert_eq!(
            data.get("destinations"),
            self.destinations_layout(),
            "{what}, rank {rank}: the destinations of its plan\n{report}"
        );
    }

    /// Adds the blocks of rounds `numbers` (every source, ascending) to `digest`.
    fn digest_rounds(&self, me: Rank, numbers: std::ops::RangeInclusive<u64>, digest: &mut Digest) {
        for number in numbers {
            for &(source, _, bytes) in &self.sources {
                digest.add(&plan::block(number, source, me, bytes));
            }
        }
    }
}

fn layout(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        "none".into()
    } else {
        items.join(",")
    }
}

/// `exchange`: every case of `plan::CASES` on `ranks` ranks. Each rank's plan must be the one
/// its sends and its receive area make; every block of every round must have arrived (the
/// digest covers all, in order of rounds and sources) with the bytes around the receive area
/// untouched; the consumer threads must have been handed each source exactly once per round.
fn exchange(ranks: u32, provider: &str) {
    assert!(PROVIDERS.contains(&provider));
    let long = LONG.to_string();
    let job = gaspirun(
        ranks,
        provider,
        JOB_TIMEOUT_S,
        &example("alltoallv_check"),
        &["exchange", &long],
    );
    let report = job.report();
    assert!(job.status.success(), "the job failed\n{report}");
    // Round numbers run on from case to case.
    let mut next = 1;
    for (i, case) in CASES.iter().enumerate() {
        let rounds = u64::from(plan::rounds(case, LONG));
        let numbers = next..=next + rounds - 1;
        next += rounds;
        let scenario = format!("exchange-{}", case.name);
        for rank in 0..ranks {
            let data = job.data(&scenario, rank);
            let first = |r: Rank| plan::first_offset(i, r);
            let receive = [plan::receive_segment(i, 0), plan::receive_segment(i, 1)];
            let want = Expected::new(case.pattern, ranks, rank, receive, first);
            want.check(&job, &data, &scenario);
            assert_eq!(
                data.parse::<u64>("required"),
                want.required(),
                "{scenario}, rank {rank}\n{report}"
            );
            assert_eq!(
                data.parse::<u64>("rounds"),
                rounds,
                "{scenario}, rank {rank}\n{report}"
            );
            let mut digest = Digest::default();
            want.digest_rounds(rank, numbers.clone(), &mut digest);
            digest.add(&vec![SENTINEL; first(rank) as usize]);
            digest.add(&[SENTINEL; plan::TAIL as usize]);
            assert_eq!(
                data.get("digest"),
                digest.hex(),
                "{scenario}, rank {rank} received other bytes (or the bytes around its receive \
                 area changed)\n{report}"
            );
            if case.forms == Forms::Consumers {
                check_taken(&job, &data, &want, rounds, &scenario);
            }
        }
    }
}

/// The consumer threads of a rank together took every source once in each of `rounds`
/// rounds: the per-source counts, and a digest of the sorted sources of every round.
fn check_taken(job: &Finished, data: &RankData<'_>, want: &Expected, rounds: u64, scenario: &str) {
    let rank = data.rank();
    let counts = layout(want.sources.iter().map(|(r, _, _)| format!("{r}:{rounds}")));
    assert_eq!(
        data.get("taken"),
        counts,
        "{scenario}, rank {rank}: how often each source was handed out\n{}",
        job.report()
    );
    let mut digest = Digest::default();
    let round: Vec<u8> = want
        .sources
        .iter()
        .flat_map(|(r, _, _)| r.to_le_bytes())
        .collect();
    for _ in 0..rounds {
        digest.add(&round);
    }
    assert_eq!(
        data.get("taken_digest"),
        digest.hex(),
        "{scenario}, rank {rank}: a round handed a source out twice or missed one\n{}",
        job.report()
    );
}

/// The dense plan of the `late`, `errors` and `kill` scenarios on rank `me` of `n`.
fn dense(n: u32, me: Rank) -> Expected {
    Expected::new(Pattern::Dense, n, me, [1, 2], |r| plan::first_offset(0, r))
}

/// The plan of the `late` scenario on rank `me` of `n`: every rank to every other, blocks too
/// large to go a round ahead.
fn large(n: u32, me: Rank) -> Expected {
    Expected::new(Pattern::Large, n, me, [1, 2], |r| plan::first_offset(0, r))
}

/// `late` on 3 ranks: every early rank timed out in the discovery and in each kind of round and
/// resumed, its call with other arguments meanwhile was refused, and the plan and every block
/// of the six rounds are right; the sender a round ahead timed out waiting for its credit, and
/// its receiver still held the previous block until it reset it, also when the sender sent
/// while another of its threads waited in `next_arrival` (round 6, which would otherwise hang).
fn late(provider: &str) {
    const RANKS: u32 = 3;
    let late = RANKS - 1;
    let job = gaspirun(
        RANKS,
        provider,
        JOB_TIMEOUT_S,
        &example("alltoallv_check"),
        &["late"],
    );
    let report = job.report();
    assert!(job.status.success(), "the job failed\n{report}");
    for rank in 0..RANKS {
        let data = job.data("late", rank);
        let want = large(RANKS, rank);
        want.check(&job, &data, "late");
        let mut digest = Digest::default();
        want.digest_rounds(rank, 1..=6, &mut digest);
        assert_eq!(
            data.get("digest"),
            digest.hex(),
            "rank {rank} received other bytes\n{report}"
        );
        let timeouts = |key: &str| data.parse::<u32>(key);
        for key in [
            "discovery_timeouts",
            "arrival_timeouts",
            "finish_timeouts",
            "proposal_timeouts",
        ] {
            if rank == late {
                assert_eq!(
                    timeouts(key),
                    0,
                    "rank {rank} waits without timeouts: {key}\n{report}"
                );
            } else {
                assert!(
                    timeouts(key) >= 1,
                    "rank {rank} never timed out: {key}\n{report}"
                );
            }
        }
        if rank != late {
            assert_eq!(
                data.get("discovery_other"),
                "DiscoveryInProgress",
                "rank {rank}: a discovery with other arguments while one is in progress\n{report}"
            );
        }
        let ahead = timeouts("ahead_timeouts");
        if rank == late {
            assert!(
                ahead >= 1,
                "the sender a round ahead never waited\n{report}"
            );
        } else {
            assert_eq!(ahead, 0, "rank {rank}\n{report}");
        }
        // Rank 0 held back its reset of the block of `late` of round 4, then of round 5.
        for (key, number) in [("ahead_before_reset", 4), ("deferred_before_reset", 5)] {
            let before_reset = if rank == 0 {
                let (_, _, bytes) = (want.sources.iter())
                    .find(|s| s.0 == late)
                    .copied()
                    .expect("the late rank is a source of rank 0");
                let mut kept = Digest::default();
                kept.add(&plan::block(number, late, 0, bytes));
                kept.hex()
            } else {
                "none".into()
            };
            assert_eq!(
                data.get(key),
                before_reset,
                "rank {rank}: the block of rank {late} of round {number} was overwritten before \
                 rank 0 reset it\n{report}"
            );
        }
    }
}

/// `errors` on 3 ranks: every misuse returns its own variant, naming what was wrong, and the
/// rounds after them deliver every block; a small block whose receive segment was deleted
/// before its hand-out is named at every call until the segment is back, then handed out; a
/// source out of step is named at every call of the round; a source segment deleted between
/// rounds is named, and once made again its new bytes are sent.
fn errors(provider: &str) {
    const RANKS: u32 = 3;
    /// A segment no rank creates, and the receive segment of `too_small` (see `errors.rs`).
    const MISSING: SegmentId = 250;
    const SMALL: SegmentId = 9;
    const SOURCE: SegmentId = 3;
    /// The tags of round 1 of the first and second plans of an alltoallv (`layout.rs`).
    const FIRST_TAG: u32 = (1 << 24 | 1) + 1;
    const SECOND_TAG: u32 = (2 << 24 | 1) + 1;
    let job = gaspirun(
        RANKS,
        provider,
        JOB_TIMEOUT_S,
        &example("alltoallv_check"),
        &["errors"],
    );
    let report = job.report();
    assert!(job.status.success(), "the job failed\n{report}");
    for rank in 0..RANKS {
        let data = job.data("errors", rank);
        let t = (rank + 1) % RANKS;
        let beyond = RANKS + 3;
        let sends = plan::sends(Pattern::Dense, RANKS, rank);
        let (_, source_size) = plan::source_offsets(&sends);
        let (_, bytes) = sends[t as usize];
        let too_far = source_size - bytes + 1;
        let expected = [
            ("duplicate", format!("DuplicateDestination({t})")),
            ("missing_receive", "Ok".into()),
            (
                "missing_receive_round",
                format!("UnknownSegment({rank}/{MISSING})"),
            ),
            (
                "too_small",
                format!("ReceiveAreaTooSmall(0/{SMALL}/{}/64)", 64 * RANKS),
            ),
            (
                "past_end",
                // Rank 0 of its own area, its previous rank of its destination's; nothing
                // is required there, the first offset is what is wrong.
                match rank {
                    0 | 2 => format!("OutOfBounds(0/{SMALL}/9999/0/100)"),
                    _ => "Ok".into(),
                },
            ),
            (
                "missing_source",
                format!("UnknownSegment({rank}/{MISSING})"),
            ),
            (
                "missing_source_proposal",
                format!("UnknownSegment({rank}/{MISSING})"),
            ),
            ("foreign", "ForeignPlan".into()),
            ("foreign_proposal", "ForeignPlan".into()),
            ("not_arrived", format!("NotArrived({t})")),
            ("not_arrived_proposal", format!("NotArrived({t})")),
            ("in_progress", "AlltoallvInProgress(0)".into()),
            ("in_progress_proposal", "AlltoallvInProgress(0)".into()),
            ("in_progress_object", "AlltoallvInProgress(0)".into()),
            ("joined", "1/1".into()),
            ("source_offsets", format!("SourceOffsets({RANKS}/1)")),
            (
                "unknown_destination",
                format!("UnknownDestination({beyond})"),
            ),
            (
                "out_of_bounds",
                format!("OutOfBounds({rank}/{SOURCE}/{too_far}/{bytes}/{source_size})"),
            ),
            ("unsent", "Unsent(0)".into()),
            ("already_sent", format!("AlreadySent({t})")),
            ("already_reset", format!("AlreadyReset({t})")),
            ("already_reset_proposal", format!("AlreadyReset({t})")),
            ("unknown_source", format!("UnknownSource({beyond})")),
            ("ended_send", "RoundEnded(1)".into()),
            ("ended_arrival", "None".into()),
            ("ended_finish", "Ok".into()),
            ("not_arrived_later", format!("NotArrived({t})")),
            ("blocking", "Complete".into()),
            ("blocking_reset", "Ok".into()),
            ("unknown_source_b", format!("UnknownSource({t})")),
            ("late_receive", "48/Ok".into()),
            (
                "half_missing",
                match rank {
                    0 => "UnknownSegment(2/13)/Complete".into(),
                    _ => "Arrived(0)/Complete".into(),
                },
            ),
            (
                "gone_receive",
                format!(
                    "UnknownSegment({rank}/14)/UnknownSegment({rank}/14)/Arrived({})/Ok",
                    (rank + RANKS - 1) % RANKS
                ),
            ),
            (
                "out_of_step",
                // Round 1's tags: plan 1's and plan 2's of the sixth alltoallv.
                match rank {
                    0 => {
                        let last = RANKS - 1;
                        let e = format!("OutOfStep({last}/{SECOND_TAG}/{FIRST_TAG})");
                        format!("{e}/{e}/{e}")
                    }
                    1 => {
                        let e = format!("OutOfStep(0/{FIRST_TAG}/{SECOND_TAG})");
                        format!("{e}/{e}/{e}")
                    }
                    _ => format!("Arrived({})/None/Ok", rank - 1),
                },
            ),
            (
                "source_again",
                format!(
                    "Arrived({prev})/UnknownSegment({rank}/17)/Arrived({prev})",
                    prev = (rank + RANKS - 1) % RANKS
                ),
            ),
            (
                "unknown_destination_b",
                format!("UnknownDestination({})", (rank + 2) % RANKS),
            ),
        ];
        for (key, want) in expected {
            assert_eq!(data.get(key), want, "rank {rank}: {key}\n{report}");
        }
        let mut digest = Digest::default();
        dense(RANKS, rank).digest_rounds(rank, 1..=4, &mut digest);
        let ring = Expected::new(Pattern::Ring(1), RANKS, rank, [7, 8], |r| {
            plan::first_offset(0, r)
        });
        ring.digest_rounds(rank, 1..=1, &mut digest);
        assert_eq!(
            data.get("digest"),
            digest.hex(),
            "rank {rank} received other bytes\n{report}"
        );
    }
}

/// `kill_discovery` on 4 ranks: the last rank dies before `get_remote_offsets`, and every
/// survivor's call ends in `RankFailed` naming it well within its timeout of 20 s, also
/// rank 1, which neither sends to it nor receives from it.
fn kill_discovery(provider: &str) {
    const RANKS: u32 = 4;
    let victim = RANKS - 1;
    let program = example("alltoallv_check");
    let job = gaspirun_casualty(RANKS, provider, &program, &["kill_discovery"], 137);
    let report = job.report();
    let _: u32 = job.data("kill_discovery", victim).parse("pid");
    for rank in 0..victim {
        let data = job.data("kill_discovery", rank);
        assert_eq!(
            data.get("outcome"),
            format!("RankFailed({victim})"),
            "rank {rank}\n{report}"
        );
        let ms: u64 = data.parse("ms");
        assert!(ms < 10_000, "rank {rank} took {ms} ms\n{report}");
    }
}

/// `kill` on 4 ranks: the last rank is killed (SIGKILL) in the middle of round 2. Each survivor's
/// round ends in `RankFailed` naming it, not in a timeout or a hang, and so does its `finish`;
/// the blocks it took before were the right ones; and the survivors go on, in a group of their
/// own and with a new alltoallv over it whose round delivers every block.
fn kill(provider: &str) {
    const RANKS: u32 = 4;
    let victim = RANKS - 1;
    let job = gaspirun_casualty(RANKS, provider, &example("alltoallv_check"), &["kill"], 137);
    let report = job.report();
    assert!(
        job.stderr
            .contains(&format!("rank {victim} was killed by signal 9 (SIGKILL)")),
        "gaspirun reports the kill\n{report}"
    );
    // The victim reached the middle of round 2 (it had taken every other rank's block).
    let _: u32 = job.data("kill", victim).parse("pid");
    for rank in 0..victim {
        let data = job.data("kill", rank);
        for key in ["outcome", "finish"] {
            assert_eq!(
                data.get(key),
                format!("RankFailed({victim})"),
                "rank {rank}: how its round ended ({key})\n{report}"
            );
        }
        assert_eq!(data.get("survivors"), "Ok", "rank {rank}\n{report}");
        let taken: Vec<Rank> = match data.get("taken") {
            "none" => Vec::new(),
            list => list
                .split(',')
                .map(|r| r.parse().expect("taken lists ranks"))
                .collect(),
        };
        assert!(
            !taken.contains(&victim),
            "rank {rank} took a block the victim never sent\n{report}"
        );
        let want = dense(RANKS, rank);
        let mut digest = Digest::default();
        want.digest_rounds(rank, 1..=1, &mut digest);
        for &(source, _, bytes) in want.sources.iter().filter(|s| taken.contains(&s.0)) {
            digest.add(&plan::block(2, source, rank, bytes));
        }
        // The survivors' plan: the dense one without the victim, which is the last rank, so
        // the other sources keep their offsets. Its round carries the data of round 3.
        let survivors = Expected {
            sources: want.sources[..victim as usize].to_vec(),
            destinations: Vec::new(),
        };
        assert_eq!(
            data.get("survivors_sources"),
            survivors.sources_layout(),
            "rank {rank}: the sources of the survivors' plan\n{report}"
        );
        survivors.digest_rounds(rank, 3..=3, &mut digest);
        assert_eq!(
            data.get("digest"),
            digest.hex(),
            "rank {rank} received other bytes\n{report}"
        );
    }
}

/// `jitter` on 3 ranks: rank 0 pauses before each reset while the others run flat out through
/// plans of several block sizes; every rank must have been handed every block of
/// every round, each the right bytes, and none may have changed before its reset.
fn jitter(provider: &str) {
    const RANKS: u32 = 3;
    const ROUNDS: u64 = 300;
    let rounds = ROUNDS.to_string();
    let job = gaspirun(
        RANKS,
        provider,
        JOB_TIMEOUT_S,
        &example("alltoallv_check"),
        &["jitter", &rounds],
    );
    let report = job.report();
    assert!(job.status.success(), "the job failed\n{report}");
    for rank in 0..RANKS {
        let data = job.data("jitter", rank);
        assert_eq!(data.parse::<u64>("rounds"), ROUNDS, "rank {rank}\n{report}");
        assert_eq!(
            data.parse::<u64>("blocks"),
            ROUNDS * u64::from(RANKS),
            "rank {rank}: blocks handed out\n{report}"
        );
        assert_eq!(
            data.parse::<u64>("wrong"),
            0,
            "rank {rank}: blocks with other bytes than their round's\n{report}"
        );
        assert_eq!(
            data.parse::<u64>("overwritten"),
            0,
            "rank {rank}: blocks overwritten before their reset\n{report}"
        );
    }
}

/// `ahead` on `ranks` ranks: the last rank, whose small blocks to rank 0 go into one of two
/// slots by round parity, ran round 2 while rank 0 held round 1's block (the job fails if it
/// waited for that credit), and timed out in round 3 until rank 0 reset round 1's; rank 0 was
/// handed round 2's block only after that reset, with round 1's still in its area until then,
/// and every block it was handed held its own round's bytes (checked by the example, which
/// fails otherwise).
fn ahead(ranks: u32, provider: &str) {
    let late = ranks - 1;
    let job = gaspirun(
        ranks,
        provider,
        JOB_TIMEOUT_S,
        &example("alltoallv_check"),
        &["ahead"],
    );
    let report = job.report();
    assert!(job.status.success(), "the job failed\n{report}");
    let first = job.data("ahead", 0);
    assert_eq!(
        first.get("held_2"),
        "Timeout",
        "rank 0 was handed the block of round 2 before it reset round 1's\n{report}"
    );
    assert_eq!(
        first.get("kept_1"),
        "ok",
        "rank 0's block of round 1 changed before its reset\n{report}"
    );
    let last = job.data("ahead", late);
    assert!(
        last.parse::<u32>("two_ahead_timeouts") >= 1,
        "the sender two rounds ahead never waited for its credit\n{report}"
    );
}

jobs! {
    ahead_2_tcp: ahead(2, "tcp");
    ahead_2_shm: ahead(2, "shm");
    ahead_3_tcp: ahead(3, "tcp");
    jitter_tcp: jitter("tcp");
    jitter_shm: jitter("shm");
    exchange_1_tcp: exchange(1, "tcp");
    exchange_1_shm: exchange(1, "shm");
    exchange_2_tcp: exchange(2, "tcp");
    exchange_2_shm: exchange(2, "shm");
    exchange_3_tcp: exchange(3, "tcp");
    exchange_3_shm: exchange(3, "shm");
    exchange_4_tcp: exchange(4, "tcp");
    exchange_4_shm: exchange(4, "shm");
    exchange_5_tcp: exchange(5, "tcp");
    exchange_5_shm: exchange(5, "shm");
    exchange_6_tcp: exchange(6, "tcp");
    exchange_6_shm: exchange(6, "shm");
    exchange_7_tcp: exchange(7, "tcp");
    exchange_7_shm: exchange(7, "shm");
    exchange_8_tcp: exchange(8, "tcp");
    exchange_8_shm: exchange(8, "shm");
    late_3_tcp: late("tcp");
    late_3_shm: late("shm");
    errors_3_tcp: errors("tcp");
    errors_3_shm: errors("shm");
    kill_4_tcp: kill("tcp");
    kill_discovery_4_tcp: kill_discovery("tcp");
    kill_discovery_4_shm: kill_discovery("shm");
    kill_4_shm: kill("shm");
}
