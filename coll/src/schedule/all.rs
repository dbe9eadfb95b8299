//! The schedules of the collectives in which every member sends to every other:
//! `gather_all` (every member's block ends at every member) and its variable-size form
//! `gather_allv`. Each function returns what member `me` of `n` does; the engine runs it and
//! the simulator checks it.
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
//! # Signals
//! In step or round `t` (`t < n`), the data a member receives raises [`data(t)`](data) at it,
//! and the credit it gives its sender for that data raises [`credit(n, t)`](credit) at the
//! sender: so numbers stay below `2n`, within [`algorithm_signals`](super::algorithm_signals).
//! The ring's steps all land in slots of their own, so one credit (`credit(n, 0)`) covers them
//! all.

use super::{Schedule, Signal, Span, StepId};

/// The algorithms of [`gather_all`] and [`gather_allv`] (see the
/// [module documentation](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GatherAllAlgo {
    Ring,
    Dissemination,
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
    // A member forwards every block but its right neighbour's, and receives every block but
    // its own: without a byte to move, neither side asks for or gives the credit.
    if (1..n).any(|t| size(t) > 0) {
        s.signal(left, credit(n, 0), &[]);
    }
    let go = (0..n - 1)
        .any(|t| size(t) > 0)
        .then(|| s.wait(right, credit(n, 0), &[]));
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
            let got = s.wait(left, data(t), &[]);
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
            s.signal(from, credit(n, k), &[]);
            let got = s.wait(from, data(k), &[]);
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
    use super::super::Task;
    use super::*;

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
            |m| synchronise(gather_allv(n, m, counts, algo), n, m, barriers, barriers),
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
                        |m| gather_all(n, m, bytes, algo),
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
}
