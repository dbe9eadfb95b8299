//! The schedules of the collectives in which every member sends to every other:
//! `gather_all` (every member's block ends at every member), `exchange` (alltoall: a block from
//! every member to every member) and their variable-size forms. Each function returns what
//! member `me` of `n` does; the engine runs it and the simulator checks it.
//!
//! # Gather_all
//! Member `i`'s source is block `i` of every member's destination, the blocks packed in member
//! order ([`gather_allv`]: block `i` has `counts[i]` bytes, and every member knows every
//! count). A member copies its own block from source to destination directly: it never
//! travels. The algorithms ([`GatherAllAlgo`]) move the others:
//! * `Ring`: `n − 1` steps; in step `t` a member forwards to `me + 1` the block it received in
//!   step `t − 1` (its own in step 0). Each block crosses each link once, but each put waits for
//!   the receipt before it: `n − 1` latencies.
//! * `Dissemination`: Bruck's allgather, the pattern of the spec's dissemination gather_all run
//!   the other way round. Member `p`'s stage holds blocks `p, p + 1, …` (mod `n`) in that
//!   order; in round `k` it sends the first `min(2^k, n − 2^k)` of them to `p − 2^k` and
//!   receives as many from `p + 2^k`, behind its first `2^k`. After `⌈log2 n⌉` rounds it holds
//!   all `n`, no block sent twice to a member; the copies into the destination undo the
//!   rotation. The same bytes as the ring in `⌈log2 n⌉` latencies.
//!
//! Both copy each received range into the destination as soon as it lands, so the copies overlap
//! the later steps. A zero-byte block or round moves nothing and raises no signal: every member
//! knows every count, so sender and receiver skip it alike.
//!
//! # Exchange
//! Member `i`'s source holds a block for every member, in member order; block `i` of member
//! `j`'s destination is member `i`'s block for `j` ([`exchangev`]: member `i` sends
//! `send_counts[j]` bytes to `j` and `j` receives `recv_counts[i]` from `i`, the two the same;
//! a member knows only its own counts). A member's block for itself goes straight from source to
//! destination. The algorithms ([`ExchangeAlgo`]):
//! * `Pairwise`: in step `s = 1..n` a member sends its block for `me + s` and receives from
//!   `me − s`, the spec's staggered order, in which every member receives from exactly one
//!   other per step. The steps do not wait for each other: each put waits only for its block's
//!   staging copy and its receiver's credit, and each block received gets a slot of its own in
//!   the stage and is copied out as it lands, so all `n − 1` puts and receipts may be in flight
//!   at once.
//! * `Bruck`: `⌈log2 n⌉` rounds. A member's block for `me + j` has offset `j`; in round `k` a
//!   member packs the blocks whose offset has bit `k` set — its own or ones received in earlier
//!   rounds — sends them to `me + 2^k` in one put, and receives as many from `me − 2^k` in
//!   their place. A block travels once per bit of its offset, ending at `me + j`: about
//!   `n/2 · log2 n` blocks sent instead of `n − 1`, in `⌈log2 n⌉` messages instead of `n − 1`.
//!   For small blocks. Each round packs into and receives into areas of its own, so the stage
//!   holds about `n · log2 n` blocks.
//!
//! `exchangev` is pairwise only: Bruck forwards other members' blocks, whose sizes a member
//! does not know. For the same reason a sender cannot know where its block could go beside
//! the others in its receiver's stage, nor how much that stage must hold, so blocks are
//! *streamed*: each is cut into chunks of at most `chunk` bytes (the same on every member),
//! which its sender and receiver, both knowing its size, cut alike. Step `t`'s chunks land
//! one after another in slot `t − 1` of `chunk` bytes at the start of the receiver's stage,
//! which every sender can place; a sender stages each block's chunks in a slot of its own
//! behind those. The receiver credits chunk `k + 1` only once chunk `k` is copied out of its
//! slot, and so once chunk `k` landed: the sender's slot is free too. The stage is at most
//! `2(n − 1)` chunks whatever the counts, so an exchangev never needs to be cut into pieces;
//! the pairs all stream at once. A block of zero bytes moves nothing and raises no signal.
//! Each step's data and credit signals are raised once per chunk, each time only after their
//! receiver waited for the previous raise. Copies out of a slot that a later chunk reuses
//! *capture* their bytes when taken ([`Schedule::capture`]).
//!
//! Every data and credit signal of a block carries the block's size as its sender and its
//! receiver each count it ([`Check`](super::Check)): sizes that disagree end in a mismatch
//! where the first signal between the two is taken, before any byte is copied out, at no
//! extra message. A block one of them takes for empty raises nothing that the other could
//! check: the other waits for its timeout.
//!
//! # Signals and credits
//! In step or round `t` — below `n` in every algorithm: the ring's steps are `0..n − 1`, the
//! pairwise steps `1..n`, and there are `⌈log2 n⌉ ≤ n − 1` rounds — the data a member receives
//! raises [`data(t)`](data) at it, and the credit it gives its sender for that data raises
//! [`credit(n, t)`](credit) at the sender: so numbers stay below `2n`, within
//! [`algorithm_signals`](super::algorithm_signals). A member waits for each data signal after
//! raising its credit, as the data cannot come before. Every put but exchangev's lands in a
//! stage range of its own, which no step of its receiver ever puts from, so the credits are
//! given at the start; the ring's steps all land in slots of their own behind the same link,
//! so one credit (`credit(n, 0)`) covers them all.
//!
//! Those credits are listed as skippable ([`Schedule::credits`]): a range received into is
//! never written by its receiver, whose only stage writes are its source copies (the ring's
//! and dissemination's slot 0, the pairwise blocks sent) and, in Bruck's exchange, the
//! packing areas, where nothing lands. Neither dissemination nor Bruck reuses an area from
//! round to round: each round receives into stage of its own. So the data may land before
//! its receiver started. Exchangev lists the credits of each block's first chunk only, which
//! lands in a slot that nothing of the run wrote before; the credit of a later chunk says the
//! chunk before it was moved out of the slot, an order within the run that skipping would
//! break.
//!
//! When the credits are waited for, every algorithm here meets `IN_MYSYNC` and `OUT_MYSYNC` by
//! itself; the `ALLSYNC` modes add [`sync`](super::sync)'s barriers.

use super::{Schedule, Signal, Span, StepId};

/// The algorithms of [`gather_all`] and [`gather_allv`] (see the
/// [module documentation](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GatherAllAlgo {
    Ring,
    Dissemination,
}

/// The algorithms of [`exchange`] (see the [module documentation](self)); [`exchangev`] is
/// pairwise only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExchangeAlgo {
    Pairwise,
    Bruck,
}

/// Member `me`'s part in a gather_all of `bytes` per member among `n`: see the
/// [module documentation](self).
pub(crate) fn gather_all(n: u32, me: u32, bytes: u64, algo: GatherAllAlgo) -> Schedule {
    gather_allv(n, me, &vec![bytes; n as usize], algo)
}

/// Member `me`'s part in a gather_all among `n` in which member `i` contributes `counts[i]`
/// bytes: see the [module documentation](self).
pub(crate) fn gather_allv(n: u32, me: u32, counts: &[u64], algo: GatherAllAlgo) -> Schedule {
    assert_eq!(
        counts.len(),
        n as usize,
        "gather_allv: one count per member"
    );
    let dst_at = packed(counts.iter().copied());
    let own = counts[me as usize];
    let mut s = Schedule::new();
    s.copy(Span::src(0, own), Span::dst(dst_at[me as usize], own), &[]);
    if n > 1 {
        match algo {
            GatherAllAlgo::Ring => ring(&mut s, n, me, counts, &dst_at),
            GatherAllAlgo::Dissemination => dissemination(&mut s, n, me, counts, &dst_at),
        }
    }
    s
}

/// The ring (`n > 1`): slot `j` of member `p`'s stage holds block `p − j`, the slots packed.
fn ring(s: &mut Schedule, n: u32, me: u32, counts: &[u64], dst_at: &[u64]) {
    let (right, left) = (ahead(n, me, 1), behind(n, me, 1));
    let slots = |p: u32| packed((0..n).map(|j| counts[behind(n, p, j) as usize]));
    let (mine, theirs) = (slots(me), slots(right));
    let size = |t: u32| mine[t as usize + 1] - mine[t as usize];
    // A member forwards every block but its right neighbour's (slots 0..n - 1) and receives
    // every block but its own (slots 1..n): without a byte to move, neither side asks for or
    // gives the credit.
    let credited = (1..n)
        .any(|t| size(t) > 0)
        .then(|| s.signal(left, credit(n, 0), &[]));
    let go = (0..n - 1)
        .any(|t| size(t) > 0)
        .then(|| s.wait(right, credit(n, 0), &[]));
    s.credits.extend(credited.into_iter().chain(go));
    // The step that filled slot t: the staging copy, then each receipt.
    let mut filled = s.copy(Span::src(0, size(0)), Span::stage(0, size(0)), &[]);
    for t in 0..n - 1 {
        if size(t) > 0 {
            let after: Vec<StepId> = filled.into_iter().chain(go).collect();
            s.put(
                right,
                mine[t as usize],
                theirs[t as usize + 1],
                size(t),
                data(t),
                &after,
            );
        }
        filled = (size(t + 1) > 0).then(|| {
            let got = s.wait(left, data(t), credited.as_slice());
            let block = behind(n, me, t + 1) as usize;
            s.copy(
                Span::stage(mine[t as usize + 1], size(t + 1)),
                Span::dst(dst_at[block], size(t + 1)),
                &[got],
            );
            got
        });
    }
}

/// Bruck's allgather (`n > 1`): slot `j` of member `p`'s stage holds block `p + j`, the slots
/// packed.
fn dissemination(s: &mut Schedule, n: u32, me: u32, counts: &[u64], dst_at: &[u64]) {
    let slots = |p: u32| packed((0..n).map(|j| counts[ahead(n, p, j) as usize]));
    let mine = slots(me);
    let staged = s.copy(Span::src(0, mine[1]), Span::stage(0, mine[1]), &[]);
    // The receipt of each round so far, if it moved anything.
    let mut received: Vec<Option<StepId>> = Vec::new();
    let (mut k, mut d) = (0, 1u32);
    while d < n {
        let count = d.min(n - d);
        let sent = mine[count as usize];
        if sent > 0 {
            let to = behind(n, me, d);
            let go = s.wait(to, credit(n, k), &[]);
            s.credits.push(go);
            // Slots 0..count were filled by the staging copy and by the rounds that received
            // slots below `count`: round i received from slot 2^i on. So the last round of an
            // `n` just above a power of two need not wait for the others.
            let after: Vec<StepId> = staged
                .into_iter()
                .chain(
                    (0..received.len())
                        .filter(|&i| 1u32 << i < count)
                        .flat_map(|i| received[i]),
                )
                .chain([go])
                .collect();
            s.put(to, 0, slots(to)[d as usize], sent, data(k), &after);
        }
        let (at, end) = (mine[d as usize], mine[(d + count) as usize]);
        received.push((end > at).then(|| {
            let from = ahead(n, me, d);
            let credited = s.signal(from, credit(n, k), &[]);
            s.credits.push(credited);
            let got = s.wait(from, data(k), &[credited]);
            copy_rotated(s, n, me, &mine, dst_at, d..d + count, got);
            got
        }));
        k += 1;
        d = d.saturating_mul(2);
    }
}

/// Copies the stage slots `range` of member `me` (slot `j` at `slots[j]`, holding block
/// `me + j`) to their blocks in the destination (block `b` at `dst_at[b]`), after `after`: one
/// copy, or two where the blocks wrap past `n − 1`.
fn copy_rotated(
    s: &mut Schedule,
    n: u32,
    me: u32,
    slots: &[u64],
    dst_at: &[u64],
    range: std::ops::Range<u32>,
    after: StepId,
) {
    let wrap = n - me;
    let split = if range.start < wrap && wrap < range.end {
        wrap
    } else {
        range.end
    };
    for piece in [range.start..split, split..range.end] {
        let (at, end) = (slots[piece.start as usize], slots[piece.end as usize]);
        let block = ahead(n, me, piece.start) as usize;
        s.copy(
            Span::stage(at, end - at),
            Span::dst(dst_at[block], end - at),
            &[after],
        );
    }
}

/// Member `me`'s part in an exchange of `bytes` per pair of members among `n`: see the
/// [module documentation](self).
pub(crate) fn exchange(n: u32, me: u32, bytes: u64, algo: ExchangeAlgo) -> Schedule {
    match algo {
        ExchangeAlgo::Pairwise => pairwise(n, me, bytes),
        ExchangeAlgo::Bruck => bruck(n, me, bytes),
    }
}

/// Member `me`'s part in an exchange among `n` in which it sends `send_counts[j]` bytes to
/// member `j` and receives `recv_counts[i]` from member `i`, pairwise, streaming every block in
/// chunks of at most `chunk` bytes: see the [module documentation](self).
pub(crate) fn exchangev(
    n: u32,
    me: u32,
    send_counts: &[u64],
    recv_counts: &[u64],
    chunk: u64,
) -> Schedule {
    assert_eq!(
        send_counts.len(),
        n as usize,
        "exchangev: one send count per member"
    );
    assert_eq!(
        recv_counts.len(),
        n as usize,
        "exchangev: one receive count per member"
    );
    assert!(chunk > 0, "exchangev: chunks of no bytes");
    let (send, recv) = (send_counts, recv_counts);
    let (src_at, dst_at) = (packed(send.iter().copied()), packed(recv.iter().copied()));
    let mine = me as usize;
    debug_assert_eq!(
        send[mine], recv[mine],
        "a member's counts for itself differ"
    );
    let mut s = Schedule::new();
    s.capture = (0..n).any(|i| i != me && recv[i as usize] > chunk);
    s.copy(
        Span::src(src_at[mine], send[mine]),
        Span::dst(dst_at[mine], recv[mine]),
        &[],
    );
    // Step t's chunks land in slot t − 1 of the receiver, which every sender can place.
    let slot = |t: u32| u64::from(t - 1) * chunk;
    let mut sending_at = u64::from(n - 1) * chunk;
    for t in 1..n {
        let to = ahead(n, me, t);
        let len = send[to as usize];
        let mut sent: Option<StepId> = None;
        for (at, piece) in chunks(len, chunk) {
            // The credit for chunk k + 1 comes once chunk k landed and was copied out: then
            // both the sender's slot and the receiver's are free.
            let go = s.wait(to, credit(n, t), sent.as_slice());
            s.check(go, len);
            if sent.is_none() {
                s.credits.push(go);
            }
            // The first chunk is staged at once; a later one once its slot is free.
            let free: &[StepId] = match sent {
                Some(_) => std::slice::from_ref(&go),
                None => &[],
            };
            let staged = s.copy(
                Span::src(src_at[to as usize] + at, piece),
                Span::stage(sending_at, piece),
                free,
            );
            let after: Vec<StepId> = staged.into_iter().chain([go]).collect();
            let put = s.put(to, sending_at, slot(t), piece, data(t), &after);
            s.check(put, len);
            sent = Some(put);
        }
        sending_at += len.min(chunk);
        let from = behind(n, me, t);
        let len = recv[from as usize];
        let mut out: Option<StepId> = None;
        for (at, piece) in chunks(len, chunk) {
            let credited = s.signal(from, credit(n, t), out.as_slice());
            s.check(credited, len);
            if out.is_none() {
                s.credits.push(credited);
            }
            let got = s.wait(from, data(t), &[credited]);
            s.check(got, len);
            let into = Span::dst(dst_at[from as usize] + at, piece);
            out = s.copy(Span::stage(slot(t), piece), into, &[got]);
        }
    }
    s
}

/// The offsets and lengths of the chunks of at most `chunk` bytes of a block of `len` bytes:
/// none for an empty block.
fn chunks(len: u64, chunk: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..len.div_ceil(chunk)).map(move |k| {
        let at = k * chunk;
        (at, chunk.min(len - at))
    })
}

/// The pairwise exchange: step `s`'s block lands at `(s − 1) × bytes` of its receiver's stage,
/// a slot of its own, then the blocks sent, packed in the order of the steps.
fn pairwise(n: u32, me: u32, bytes: u64) -> Schedule {
    let block = |m: u32| u64::from(m) * bytes;
    let mut s = own_block(me, bytes);
    if bytes == 0 {
        return s;
    }
    let into = |t: u32| u64::from(t - 1) * bytes;
    let mut sending_at = u64::from(n - 1) * bytes;
    for t in 1..n {
        let to = ahead(n, me, t);
        let staged = s.copy(
            Span::src(block(to), bytes),
            Span::stage(sending_at, bytes),
            &[],
        );
        let go = s.wait(to, credit(n, t), &[]);
        s.credits.push(go);
        let after: Vec<StepId> = staged.into_iter().chain([go]).collect();
        s.put(to, sending_at, into(t), bytes, data(t), &after);
        sending_at += bytes;
        let from = behind(n, me, t);
        let credited = s.signal(from, credit(n, t), &[]);
        s.credits.push(credited);
        let got = s.wait(from, data(t), &[credited]);
        s.copy(
            Span::stage(into(t), bytes),
            Span::dst(block(from), bytes),
            &[got],
        );
    }
    s
}

/// A schedule that starts with member `me`'s copy of its own block of `bytes` (block `me` of
/// its source) into block `me` of its destination: in an exchange that block never travels.
fn own_block(me: u32, bytes: u64) -> Schedule {
    let at = u64::from(me) * bytes;
    let mut s = Schedule::new();
    s.copy(Span::src(at, bytes), Span::dst(at, bytes), &[]);
    s
}

/// A bound on any member's staging in an exchange of blocks of `bytes` among `n` by `algo`:
/// pairwise stages the blocks it sends and receives, `2(n − 1)` of them; Bruck
/// [`bruck_stage`].
pub(crate) fn exchange_stage_bound(n: u32, bytes: u64, algo: ExchangeAlgo) -> u64 {
    match algo {
        ExchangeAlgo::Pairwise => (2 * u64::from(n - 1)).saturating_mul(bytes),
        ExchangeAlgo::Bruck => bruck_stage(n, bytes),
    }
}

/// The staging of Bruck's exchange of blocks of `bytes` among `n`, on every member: each
/// block it forwards packed and received once per round that moves it (the block of offset
/// `j` in every round whose bit `j` has set).
pub(crate) fn bruck_stage(n: u32, bytes: u64) -> u64 {
    let forwarded: u64 = (1..n).map(|j| u64::from(j.count_ones())).sum();
    (2 * forwarded).saturating_mul(bytes)
}

/// Bruck's exchange. Same layout on every member: per round, the area it packs into, then the
/// area it receives into.
fn bruck(n: u32, me: u32, bytes: u64) -> Schedule {
    let block = |m: u32| u64::from(m) * bytes;
    let mut s = own_block(me, bytes);
    if bytes == 0 {
        return s;
    }
    // Where the block of each offset is now, and the step it waits for there: at first its
    // source block (which needs none).
    let mut held: Vec<(Span, Option<StepId>)> = (0..n)
        .map(|j| (Span::src(block(ahead(n, me, j)), bytes), None))
        .collect();
    let mut stage_end = 0;
    let (mut k, mut d) = (0, 1u32);
    while d < n {
        let moving: Vec<u32> = (1..n).filter(|j| j & d != 0).collect();
        let len = moving.len() as u64 * bytes;
        let (packing, receiving) = (stage_end, stage_end + len);
        stage_end += 2 * len;
        let (to, from) = (ahead(n, me, d), behind(n, me, d));
        let go = s.wait(to, credit(n, k), &[]);
        s.credits.push(go);
        let mut after = vec![go];
        for (i, &j) in moving.iter().enumerate() {
            let (span, ready) = held[j as usize];
            let into = Span::stage(packing + i as u64 * bytes, bytes);
            after.extend(s.copy(span, into, ready.as_slice()));
        }
        s.put(to, packing, receiving, len, data(k), &after);
        let credited = s.signal(from, credit(n, k), &[]);
        s.credits.push(credited);
        let got = s.wait(from, data(k), &[credited]);
        for (i, &j) in moving.iter().enumerate() {
            let at = Span::stage(receiving + i as u64 * bytes, bytes);
            held[j as usize] = (at, Some(got));
        }
        k += 1;
        d = d.saturating_mul(2);
    }
    // The block of offset j has come from me − j, for me.
    for j in 1..n {
        let (span, ready) = held[j as usize];
        s.copy(
            span,
            Span::dst(block(behind(n, me, j)), bytes),
            ready.as_slice(),
        );
    }
    s
}

/// Where each of blocks of `sizes` starts when packed, and where the last ends.
fn packed(sizes: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut at = vec![0];
    let mut end = 0;
    for size in sizes {
        end += size;
        at.push(end);
    }
    at
}

/// Member `me + d` of `n`.
fn ahead(n: u32, me: u32, d: u32) -> u32 {
    // Below n, which is a u32.
    ((u64::from(me) + u64::from(d)) % u64::from(n)) as u32
}

/// Member `me − d` of `n`.
fn behind(n: u32, me: u32, d: u32) -> u32 {
    ahead(n, me, n - d % n)
}

/// The signal the data of step or round `t` raises at its receiver.
fn data(t: u32) -> Signal {
    t
}

/// The signal a receiver's credit for the data of step or round `t` raises at its sender.
fn credit(n: u32, t: u32) -> Signal {
    n + t
}

#[cfg(test)]
mod tests {
    use super::super::sim::{check, pattern};
    use super::super::sync::synchronise;
    use super::super::tree::tests::credit_steps;
    use super::super::Task;
    use super::*;

    /// Member `m`'s schedule of `n`, checked to list every credit step as skippable.
    fn listed(schedule: Schedule, n: u32, m: u32) -> Schedule {
        assert_eq!(
            schedule.credits,
            credit_steps(&schedule, n),
            "n={n} member {m}"
        );
        schedule
    }

    const SIZES: [u64; 4] = [0, 1, 7, 100];
    const GATHER_ALL: [GatherAllAlgo; 2] = [GatherAllAlgo::Ring, GatherAllAlgo::Dissemination];

    /// What every member ends with in a gather_allv of `counts`: block `i` from member `i`.
    fn gathered(counts: &[u64]) -> Vec<u8> {
        (0..counts.len())
            .flat_map(|i| pattern(i as u32, 0, counts[i]))
            .collect()
    }

    /// Checks gather_allv of `counts` by `algo`, with barriers before and after when
    /// `barriers`.
    fn check_gather_allv(counts: &[u64], algo: GatherAllAlgo, barriers: bool) {
        let n = counts.len() as u32;
        let want = gathered(counts);
        check(
            &format!("gather_allv {algo:?} {counts:?} barriers {barriers}"),
            n,
            |m| {
                let s = listed(gather_allv(n, m, counts, algo), n, m);
                synchronise(s, n, m, barriers, barriers)
            },
            |m| pattern(m, 0, counts[m as usize]),
            |_| want.clone(),
        );
    }

    /// The puts of `s`, in order: to whom, how many bytes.
    fn puts(s: &Schedule) -> Vec<(u32, u64)> {
        s.steps
            .iter()
            .filter_map(|step| match step.task {
                Task::Put { to, len, .. } => Some((to, len)),
                _ => None,
            })
            .collect()
    }

    /// `⌈log2 n⌉`.
    fn rounds(n: u32) -> u32 {
        n.next_power_of_two().trailing_zeros()
    }

    #[test]
    fn gather_all_leaves_every_block_at_every_member() {
        for algo in GATHER_ALL {
            for n in 1..=33 {
                for bytes in SIZES {
                    let want = gathered(&vec![bytes; n as usize]);
                    check(
                        &format!("gather_all {algo:?} {bytes} B"),
                        n,
                        |m| listed(gather_all(n, m, bytes, algo), n, m),
                        |m| pattern(m, 0, bytes),
                        |_| want.clone(),
                    );
                }
                check_gather_allv(&vec![7; n as usize], algo, true);
            }
        }
    }

    #[test]
    fn gather_allv_packs_blocks_of_any_size_including_none() {
        for algo in GATHER_ALL {
            for n in 1..=33u64 {
                for count in [
                    |i: u64, _| (i * 5 + 3) % 4 * 13,
                    |i: u64, n: u64| if i == n / 2 { 100 } else { 0 },
                    |i: u64, _| if i.is_multiple_of(3) { 0 } else { i },
                    |_, _| 0,
                ] {
                    let counts: Vec<u64> = (0..n).map(|i| count(i, n)).collect();
                    check_gather_allv(&counts, algo, n % 4 == 1);
                }
            }
        }
    }

    #[test]
    fn the_ring_puts_n_minus_1_blocks_each_to_the_next_member() {
        for n in 1..=33 {
            for me in 0..n {
                let want = vec![((me + 1) % n, 5); n as usize - 1];
                assert_eq!(puts(&gather_all(n, me, 5, GatherAllAlgo::Ring)), want);
            }
        }
    }

    #[test]
    fn dissemination_puts_once_a_round_to_me_minus_2_to_the_k_doubling_the_blocks() {
        for n in 1..=33 {
            for me in 0..n {
                let want: Vec<(u32, u64)> = (0..rounds(n))
                    .map(|k| {
                        let d = 1 << k;
                        ((me + n - d) % n, u64::from(d.min(n - d)) * 5)
                    })
                    .collect();
                let s = gather_all(n, me, 5, GatherAllAlgo::Dissemination);
                assert_eq!(puts(&s), want, "n={n} me={me}");
            }
        }
    }

    /// Checks the exchange in which member `i` sends `count(i, j)` bytes to member `j`: by
    /// `algo`, or by exchangev in chunks of `chunk` bytes when `algo` is `None`; with barriers
    /// before and after when `barriers`.
    fn check_exchange(
        n: u32,
        count: impl Fn(u32, u32) -> u64,
        algo: Option<ExchangeAlgo>,
        chunk: u64,
        barriers: bool,
    ) {
        let schedule = |m: u32| match algo {
            Some(algo) => listed(exchange(n, m, count(0, 0), algo), n, m),
            None => {
                let send: Vec<u64> = (0..n).map(|j| count(m, j)).collect();
                let recv: Vec<u64> = (0..n).map(|i| count(i, m)).collect();
                let s = exchangev(n, m, &send, &recv, chunk);
                assert!(s.stage <= 2 * u64::from(n) * chunk, "n={n} member {m}");
                // Every credit is listed when no block needs more than one chunk; the credits
                // of later chunks order the reuse of their slots, and are not.
                let single = send.iter().chain(&recv).all(|&c| c <= chunk);
                if single {
                    listed(s, n, m)
                } else {
                    // Each listed credit is a credit signal or wait after listed ones only.
                    for &c in &s.credits {
                        let step = &s.steps[c as usize];
                        assert!(
                            matches!(step.task,
                                Task::Signal { signal, .. } | Task::Wait { signal, .. }
                                    if (n..2 * n).contains(&signal)),
                            "n={n} member {m} step {c}"
                        );
                        assert!(
                            step.after.iter().all(|a| s.credits.contains(a)),
                            "n={n} member {m} step {c}"
                        );
                    }
                    s
                }
            }
        };
        check(
            &match algo {
                Some(algo) => format!("exchange {algo:?} barriers {barriers}"),
                None => format!("exchangev chunk {chunk} barriers {barriers}"),
            },
            n,
            |m| synchronise(schedule(m), n, m, barriers, barriers),
            |m| (0..n).flat_map(|j| pattern(m, j, count(m, j))).collect(),
            |m| (0..n).flat_map(|i| pattern(i, m, count(i, m))).collect(),
        );
    }

    /// Checks exchanges by `algo` of every size for every `n`, and with barriers for some. The
    /// longest simulations of the module: a test per algorithm, so that they run in parallel.
    fn check_exchange_by(algo: ExchangeAlgo) {
        for n in 1..=33 {
            for bytes in SIZES {
                check_exchange(n, |_, _| bytes, Some(algo), 1, false);
            }
            if n % 4 == 1 {
                check_exchange(n, |_, _| 7, Some(algo), 1, true);
            }
        }
    }

    #[test]
    fn the_pairwise_exchange_delivers_every_block_to_its_member() {
        check_exchange_by(ExchangeAlgo::Pairwise);
    }

    #[test]
    fn the_bruck_exchange_delivers_every_block_to_its_member() {
        check_exchange_by(ExchangeAlgo::Bruck);
    }

    #[test]
    fn bruck_stages_what_its_bound_says_and_pairwise_fits_the_least_lane() {
        for n in 1..=33 {
            for bytes in [1, 8, 256] {
                for me in 0..n {
                    let bruck = exchange(n, me, bytes, ExchangeAlgo::Bruck).stage;
                    assert_eq!(bruck, bruck_stage(n, bytes), "n = {n}, me = {me}");
                }
            }
            // A team's least lane (2 bytes per member) takes a pairwise byte per block.
            let pairwise = (0..n)
                .map(|me| exchange(n, me, 1, ExchangeAlgo::Pairwise).stage)
                .max();
            assert!(pairwise <= Some(2 * u64::from(n)), "n = {n}: {pairwise:?}");
        }
    }

    #[test]
    fn exchangev_delivers_blocks_of_any_size_including_none() {
        let irregular = |i: u32, j: u32| u64::from(i * 3 + j * 5) % 7;
        for n in 1..=33 {
            check_exchange(n, irregular, None, 100, false);
            if n % 4 == 1 {
                check_exchange(n, irregular, None, 100, true);
            }
            check_exchange(
                n,
                |i, j| if i == 0 || j == n / 2 { 100 } else { 0 },
                None,
                1000,
                false,
            );
            check_exchange(n, |_, _| 0, None, 1, false);
        }
    }

    #[test]
    fn exchangev_streams_blocks_larger_than_a_chunk_within_n_chunks_of_stage() {
        let irregular = |i: u32, j: u32| u64::from(i * 11 + j * 7) % 29;
        for n in 1..=33 {
            // Chunks of a byte make many steps: the small teams take every chunk size.
            let sizes: &[u64] = if n <= 9 { &[1, 3, 8] } else { &[6] };
            for &chunk in sizes {
                check_exchange(n, irregular, None, chunk, false);
            }
            if n % 4 == 1 {
                check_exchange(n, irregular, None, 5, true);
            }
            check_exchange(
                n,
                |i, j| if i == 0 || j == n / 2 { 100 } else { 0 },
                None,
                7,
                false,
            );
        }
    }

    /// Whether step `s` of `schedule` waits, directly or not, for a put's data.
    fn waits_for_data(schedule: &Schedule, s: StepId, n: u32) -> bool {
        let step = &schedule.steps[s as usize];
        matches!(step.task, Task::Wait { signal, .. } if signal < n)
            || step.after.iter().any(|&a| waits_for_data(schedule, a, n))
    }

    #[test]
    fn pairwise_puts_to_every_other_member_without_waiting_for_any_data() {
        for n in 1..=33 {
            for me in 0..n {
                let s = exchange(n, me, 5, ExchangeAlgo::Pairwise);
                let want: Vec<(u32, u64)> = (1..n).map(|t| ((me + t) % n, 5)).collect();
                assert_eq!(puts(&s), want, "n={n} me={me}");
                for (id, step) in s.steps.iter().enumerate() {
                    if let Task::Put { .. } = step.task {
                        assert!(!waits_for_data(&s, id as StepId, n), "n={n} me={me}");
                    }
                }
            }
        }
    }

    #[test]
    fn bruck_puts_once_a_round_to_me_plus_2_to_the_k_the_offsets_with_bit_k() {
        for n in 1..=33 {
            for me in 0..n {
                let want: Vec<(u32, u64)> = (0..rounds(n))
                    .map(|k| {
                        let moving = (1..n).filter(|j| j & (1 << k) != 0).count();
                        ((me + (1 << k)) % n, moving as u64 * 5)
                    })
                    .collect();
                let s = exchange(n, me, 5, ExchangeAlgo::Bruck);
                assert_eq!(puts(&s), want, "n={n} me={me}");
            }
        }
    }

    #[test]
    fn pairwise_exchangev_puts_only_nonempty_blocks_in_step_order() {
        let n = 9;
        let count = |i: u32, j: u32| u64::from(i * 3 + j * 5) % 7;
        for me in 0..n {
            let send: Vec<u64> = (0..n).map(|j| count(me, j)).collect();
            let recv: Vec<u64> = (0..n).map(|i| count(i, me)).collect();
            let want: Vec<(u32, u64)> = (1..n)
                .map(|t| (me + t) % n)
                .map(|j| (j, count(me, j)))
                .filter(|&(_, len)| len > 0)
                .collect();
            assert_eq!(puts(&exchangev(n, me, &send, &recv, 7)), want, "me={me}");
        }
    }
}
