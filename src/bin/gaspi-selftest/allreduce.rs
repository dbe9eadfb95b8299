//! `allreduce`: every built-in operator on every element type, user operators, long vectors,
//! bitwise identical floating-point results, timeouts in the middle of a reduction, and misuse.
//!
//! Each rank computes the expected result itself from the inputs every rank uses (they are a
//! function of rank and position), folding in rank order, and compares it with what the
//! allreduce returned. Float inputs of the per-operator checks are chosen so that every sum and
//! product is exact; the order-sensitive check instead sums values of wildly different
//! magnitudes and proves, with a second allreduce over the result's bit patterns, that every
//! member got the same bits. Every rank reports a digest of those bits on its data line, which
//! the integration test compares across runs and providers.

use std::time::Duration;

use gaspi::{Context, Element, Error, GroupId, ReduceOp, Timeout, UserOp, GROUP_ALL};

use crate::check::{ensure, mix, seed, Data, Doing, Failure, Outcome, Report};

const TIMEOUT: Timeout = Timeout::Millis(60_000);
/// Lengths of the per-operator checks: one element, a few, and enough for Rabenseifner.
const LENGTHS: [usize; 3] = [1, 7, 2500];

pub fn run(ctx: &Context) -> Outcome<Report> {
    let mut done = Vec::new();
    let mut data = Data::default();
    let mut ops = 0;
    ops += builtins::<i32>(ctx)?;
    ops += builtins::<u32>(ctx)?;
    ops += builtins::<i64>(ctx)?;
    ops += builtins::<u64>(ctx)?;
    ops += builtins::<f32>(ctx)?;
    ops += builtins::<f64>(ctx)?;
    done.push(format!("{ops} operator/type pairs at lengths {LENGTHS:?}"));
    done.push(long_vector(ctx)?);
    let digest = identical_bits(ctx)?;
    data.put("digest", format!("{digest:016x}"));
    done.push("order-sensitive f64 sums identical on every member".to_owned());
    done.push(matrices(ctx, GROUP_ALL, 1)?);
    done.push(matrices(ctx, GROUP_ALL, 3000)?);
    done.push(commutative_user_op(ctx)?);
    done.push(subgroup(ctx)?);
    done.push(resumed_after_timeouts(ctx)?);
    done.push(misuse(ctx)?);
    done.push(panicking_user_op(ctx)?);
    done.push(panicking_user_op_of_every_rank(ctx)?);
    // Last: the run it leaves in flight on some ranks is given up by `finalize` alone.
    done.push(abandoned_by_a_mismatch(ctx)?);
    ctx.barrier(TIMEOUT).doing(|| "final barrier")?;
    Ok(Report {
        summary: done.join("; "),
        data,
    })
}

/// Element types with a local reference for every operator the runtime applies to them.
trait Reference: Element + PartialEq + std::fmt::Debug {
    /// Rank `r`'s input at position `i`.
    fn input(r: u32, i: usize) -> Self;
    /// `a ⊕ b` for `op`, or `None` if `op` does not apply.
    fn apply(op: ReduceOp, a: Self, b: Self) -> Option<Self>;
}

macro_rules! int_reference {
    ($($t:ty),*) => {$(
        impl Reference for $t {
            fn input(r: u32, i: usize) -> Self {
                // Mostly small values (products stay interesting), some zeros (logical ops).
                (mix(seed(&[u64::from(r), i as u64])) % 9) as $t
            }
            fn apply(op: ReduceOp, a: Self, b: Self) -> Option<Self> {
                let t = |x: bool| <$t>::from(x);
                Some(match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::BitAnd => a & b,
                    ReduceOp::BitOr => a | b,
                    ReduceOp::BitXor => a ^ b,
                    ReduceOp::LogicalAnd => t(a != 0 && b != 0),
                    ReduceOp::LogicalOr => t(a != 0 || b != 0),
                    ReduceOp::LogicalXor => t((a != 0) != (b != 0)),
                    _ => return None,
                })
            }
        }
    )*};
}

macro_rules! float_reference {
    ($($t:ty),*) => {$(
        impl Reference for $t {
            fn input(r: u32, i: usize) -> Self {
                // Powers of two and small integers: every sum and product below is exact.
                [0.5, 1.0, 2.0, -1.0, 4.0][(mix(seed(&[u64::from(r), i as u64])) % 5) as usize]
            }
            fn apply(op: ReduceOp, a: Self, b: Self) -> Option<Self> {
                Some(match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    _ => return None,
                })
            }
        }
    )*};
}

int_reference!(i32, u32, i64, u64);
float_reference!(f32, f64);

/// Every operator on `T` at every length; returns how many operators applied.
fn builtins<T: Reference>(ctx: &Context) -> Outcome<usize> {
    let (me, n) = (ctx.rank(), ctx.size());
    let ty = std::any::type_name::<T>();
    let mut applied = 0;
    for op in ReduceOp::ALL {
        let one = T::input(0, 0);
        if T::apply(op, one, one).is_none() {
            match ctx.allreduce(GROUP_ALL, &[one], &mut [one], op, TIMEOUT) {
                Err(Error::Unsupported(_)) => continue,
                other => return Err(Failure(format!("{op:?} on {ty}: {other:?}"))),
            }
        }
        applied += 1;
        for len in LENGTHS {
            let input: Vec<T> = (0..len).map(|i| T::input(me, i)).collect();
            let mut output = vec![T::default(); len];
            ctx.allreduce(GROUP_ALL, &input, &mut output, op, TIMEOUT)
                .doing(|| format!("allreduce {op:?} of {len} {ty}"))?;
            for (i, got) in output.iter().enumerate() {
                let want = (1..n).fold(T::input(0, i), |acc, r| {
                    T::apply(op, acc, T::input(r, i)).unwrap_or(acc)
                });
                ensure!(
                    *got == want,
                    "allreduce {op:?} of {len} {ty}: element {i} is {got:?}, expected {want:?}"
                );
            }
        }
    }
    Ok(applied)
}

/// A vector of several chunks (GASPI_REDUCE_CHUNK is 1 MiB by default).
fn long_vector(ctx: &Context) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    let len = 300_000;
    let input: Vec<u64> = (0..len).map(|i| mix(seed(&[u64::from(me), i]))).collect();
    let mut output = vec![0u64; len as usize];
    ctx.allreduce(GROUP_ALL, &input, &mut output, ReduceOp::BitXor, TIMEOUT)
        .doing(|| "allreduce of 300,000 u64")?;
    for (i, got) in output.iter().enumerate() {
        let want = (0..n).fold(0, |acc, r| acc ^ mix(seed(&[u64::from(r), i as u64])));
        ensure!(
            *got == want,
            "long allreduce: element {i} is {got:#x}, expected {want:#x}"
        );
    }
    Ok(format!(
        "{len} u64 ({} KiB) reduced exactly",
        len * 8 / 1024
    ))
}

/// Sums that depend on the order of addition: every member must get the same bits.
fn identical_bits(ctx: &Context) -> Outcome<u64> {
    let me = ctx.rank();
    let sum = |len: u64| -> Outcome<Vec<f64>> {
        let input: Vec<f64> = (0..len)
            .map(|i| {
                let x = mix(seed(&[u64::from(me), i, 77]));
                let mantissa = (x % 2001) as f64 - 1000.0;
                mantissa * 10f64.powi((x >> 32) as i32 % 31 - 15) / 7.0
            })
            .collect();
        let mut output = vec![0.0; len as usize];
        ctx.allreduce(GROUP_ALL, &input, &mut output, ReduceOp::Sum, TIMEOUT)
            .doing(|| format!("allreduce of {len} order-sensitive f64"))?;
        Ok(output)
    };
    let mut digest = 0u64;
    for len in [3u64, 5000] {
        let result = sum(len)?;
        let bits: Vec<u64> = result.iter().map(|v| v.to_bits()).collect();
        let (mut lo, mut hi) = (vec![0u64; bits.len()], vec![0u64; bits.len()]);
        ctx.allreduce(GROUP_ALL, &bits, &mut lo, ReduceOp::Min, TIMEOUT)
            .doing(|| "allreduce Min of the result bits")?;
        ctx.allreduce(GROUP_ALL, &bits, &mut hi, ReduceOp::Max, TIMEOUT)
            .doing(|| "allreduce Max of the result bits")?;
        ensure!(
            lo == bits && hi == bits,
            "members got different bits for {len} f64 sums"
        );
        digest = bits.iter().fold(digest, |acc, &b| mix(acc ^ b));
    }
    Ok(digest)
}

/// `a · b` for 2×2 matrices stored row-major, wrapping.
fn product(a: [i64; 4], b: [i64; 4]) -> [i64; 4] {
    let m = |x: i64, y: i64| x.wrapping_mul(y);
    [
        m(a[0], b[0]).wrapping_add(m(a[1], b[2])),
        m(a[0], b[1]).wrapping_add(m(a[1], b[3])),
        m(a[2], b[0]).wrapping_add(m(a[3], b[2])),
        m(a[2], b[1]).wrapping_add(m(a[3], b[3])),
    ]
}

/// Rank `r`'s matrix number `k`: small, and not commuting with the others.
fn matrix(r: u32, k: usize) -> [i64; 4] {
    let x = mix(seed(&[u64::from(r), k as u64, 5]));
    [
        1 + (x % 3) as i64,
        (x >> 8) as i64 % 4,
        (x >> 16) as i64 % 5,
        1 + (x >> 24) as i64 % 2,
    ]
}

/// A non-commutative user operator: the product of every rank's matrices, in rank order.
fn matrices(ctx: &Context, group: GroupId, count: usize) -> Outcome<String> {
    let me = ctx.rank();
    let members = ctx.group_ranks(group).doing(|| "group_ranks")?;
    let op = UserOp::new(|acc: &mut [i64], other: &[i64]| {
        for (a, b) in acc.chunks_exact_mut(4).zip(other.chunks_exact(4)) {
            let p = product([a[0], a[1], a[2], a[3]], [b[0], b[1], b[2], b[3]]);
            a.copy_from_slice(&p);
        }
    })
    .block(4);
    let input: Vec<i64> = (0..count).flat_map(|k| matrix(me, k)).collect();
    let mut output = vec![0i64; input.len()];
    ctx.allreduce_with(group, &input, &mut output, &op, TIMEOUT)
        .doing(|| format!("allreduce of {count} matrix products"))?;
    for k in 0..count {
        let want = members
            .iter()
            .map(|&r| matrix(r, k))
            .reduce(product)
            .unwrap_or_default();
        ensure!(
            output[4 * k..4 * k + 4] == want,
            "matrix product {k}: got {:?}, expected {want:?} (rank order)",
            &output[4 * k..4 * k + 4]
        );
    }
    Ok(format!(
        "{count} 2x2 matrix products in rank order over {} members",
        members.len()
    ))
}

/// A commutative user operator gives what the built-in one gives.
fn commutative_user_op(ctx: &Context) -> Outcome<String> {
    let me = u64::from(ctx.rank());
    let input: Vec<u64> = (0..4000).map(|i| mix(seed(&[me, i]))).collect();
    let op = UserOp::new(|acc: &mut [u64], other: &[u64]| {
        for (a, b) in acc.iter_mut().zip(other) {
            *a = a.wrapping_add(*b);
        }
    })
    .commutative();
    let (mut user, mut builtin) = (vec![0u64; 4000], vec![0u64; 4000]);
    ctx.allreduce_with(GROUP_ALL, &input, &mut user, &op, TIMEOUT)
        .doing(|| "allreduce with a commutative user operator")?;
    ctx.allreduce(GROUP_ALL, &input, &mut builtin, ReduceOp::Sum, TIMEOUT)
        .doing(|| "allreduce Sum to compare with")?;
    ensure!(
        user == builtin,
        "a commutative user sum differs from the built-in Sum"
    );
    Ok("commutative user operator agrees with Sum".into())
}

/// The odd ranks (every rank if there is just one) reduce in a group of their own.
fn subgroup(ctx: &Context) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    let odd: Vec<u32> = (0..n).filter(|r| r % 2 == 1 || n == 1).collect();
    let g = ctx.group_create().doing(|| "group_create")?;
    for &r in &odd {
        ctx.group_add(g, r).doing(|| "group_add")?;
    }
    let summary = if odd.contains(&me) {
        ctx.group_commit(g, TIMEOUT)
            .doing(|| "committing the odd ranks")?;
        let summary = matrices(ctx, g, 700)?;
        ctx.group_barrier(g, TIMEOUT)
            .doing(|| "barrier of the odd ranks")?;
        summary
    } else {
        "not in the odd group".into()
    };
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the odd group")?;
    ctx.group_delete(g).doing(|| "deleting the odd group")?;
    Ok(format!("subgroup: {summary}"))
}

/// The last rank joins late: the others time out (with `Test` and with short waits), find the
/// group busy for an allreduce with other arguments but not for a barrier (GASPI lets one of
/// each be in flight; theirs times out too), and then continue the same reduction to its end,
/// and the barrier after it. Every call after a timeout passes another input, which the run
/// must not read: it took its input from the first call.
fn resumed_after_timeouts(ctx: &Context) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    let input: Vec<i64> = (0..3000).map(|i| i64::from(me) * 1000 + i).collect();
    let other = vec![-1i64; input.len()];
    let mut output = vec![0i64; input.len()];
    let mut timeouts = 0;
    if me == n - 1 {
        std::thread::sleep(Duration::from_millis(400));
    } else if n > 1 {
        match ctx.allreduce(GROUP_ALL, &input, &mut output, ReduceOp::Sum, Timeout::Test) {
            Err(Error::Timeout) => timeouts += 1,
            other => {
                return Err(Failure(format!(
                    "allreduce with Test before the last rank: {other:?}"
                )))
            }
        }
        match ctx.barrier(Timeout::Test) {
            Err(Error::Timeout) => {}
            other => {
                return Err(Failure(format!(
                    "barrier(Test) while an allreduce is in flight and the last rank is late: \
                     {other:?}"
                )))
            }
        }
        match ctx.allreduce(
            GROUP_ALL,
            &input[1..],
            &mut output[1..],
            ReduceOp::Sum,
            Timeout::Test,
        ) {
            Err(Error::CollectiveInProgress {
                group: GROUP_ALL, ..
            }) => {}
            other => {
                return Err(Failure(format!(
                    "a different allreduce while one is in flight: {other:?}"
                )))
            }
        }
    }
    loop {
        let given = if timeouts == 0 { &input } else { &other };
        match ctx.allreduce(
            GROUP_ALL,
            given,
            &mut output,
            ReduceOp::Sum,
            Timeout::Millis(20),
        ) {
            Ok(()) => break,
            Err(Error::Timeout) => timeouts += 1,
            Err(e) => return Err(Failure(format!("allreduce after {timeouts} timeouts: {e}"))),
        }
        ensure!(
            timeouts < 10_000,
            "allreduce did not finish after {timeouts} timeouts"
        );
    }
    // The others continue the barrier begun beside the allreduce.
    ctx.barrier(TIMEOUT)
        .doing(|| "the barrier after the resumed allreduce")?;
    let base = i64::from(n) * i64::from(n - 1) / 2 * 1000;
    for (i, got) in output.iter().enumerate() {
        let want = base + i64::from(n) * i as i64;
        ensure!(
            *got == want,
            "resumed allreduce: element {i} is {got}, expected {want}"
        );
    }
    ensure!(
        me == n - 1 || n == 1 || timeouts > 0,
        "no timeout before the last rank arrived"
    );
    Ok(format!("resumed after {timeouts} timeouts"))
}

/// Bad calls are refused with their own errors; ranks 0 and 1 disagree on a length (4 against
/// 5 elements, then 1 against none) and both notice.
fn misuse(ctx: &Context) -> Outcome<String> {
    let me = ctx.rank();
    match ctx.allreduce(GROUP_ALL, &[1.0f64], &mut [0.0], ReduceOp::BitOr, TIMEOUT) {
        Err(Error::Unsupported(_)) => {}
        other => return Err(Failure(format!("BitOr on f64: {other:?}"))),
    }
    match ctx.allreduce(GROUP_ALL, &[1u32, 2], &mut [0], ReduceOp::Sum, TIMEOUT) {
        Err(Error::Buffers(_)) => {}
        other => return Err(Failure(format!("output shorter than input: {other:?}"))),
    }
    let square = UserOp::new(|_: &mut [u32], _: &[u32]| {}).block(4);
    match ctx.allreduce_with(GROUP_ALL, &[1u32; 6], &mut [0; 6], &square, TIMEOUT) {
        Err(Error::Buffers(_)) => {}
        other => return Err(Failure(format!("6 elements in blocks of 4: {other:?}"))),
    }
    match ctx.allreduce(40, &[1u32], &mut [0], ReduceOp::Sum, TIMEOUT) {
        Err(Error::UnknownGroup { group: 40 }) => {}
        other => return Err(Failure(format!("unknown group: {other:?}"))),
    }
    // Every member's vector empty: the run's steps carry notifications alone.
    ctx.allreduce(GROUP_ALL, &[] as &[u64], &mut [], ReduceOp::Sum, TIMEOUT)
        .doing(|| "an allreduce of empty vectors")?;
    if ctx.size() < 2 {
        return Ok("misuse refused".into());
    }
    // An empty vector against one element: before an empty vector took the schedule's
    // steps, rank 1's call returned `Ok` at once, rank 0's waited until its timeout, and
    // their next allreduces paired rank 0's first call with rank 1's second.
    for lengths in [[4, 5], [1, 0]] {
        // Well below `TIMEOUT`: a timeout here is a call whose difference went unnoticed.
        let timeout = Timeout::Millis(10_000);
        // After the last group's deletion on every member, before it is made anew (see
        // `group_delete`).
        ctx.barrier(TIMEOUT).doing(|| "barrier before the group")?;
        let g = ranks_0_and_1(ctx)?;
        if me <= 1 {
            let len = lengths[me as usize];
            let partner = 1 - me;
            match ctx.allreduce(
                g,
                &vec![1u32; len],
                &mut vec![0; len],
                ReduceOp::Sum,
                timeout,
            ) {
                Err(Error::CollectiveMismatch { group, rank }) if group == g && rank == partner => {
                }
                other => return Err(Failure(format!("lengths {lengths:?}: {other:?}"))),
            }
        }
        ctx.barrier(TIMEOUT)
            .doing(|| "barrier after the mismatch")?;
        ctx.group_delete(g)
            .doing(|| "deleting the mismatched group")?;
    }
    let mut done = String::from(
        "misuse refused; length mismatches (an empty vector too) are named on both sides",
    );
    if ctx.size() == 2 {
        calls_of_the_job_that_differ(ctx)?;
        done += "; so are segment_create against a barrier, and of different ids";
    }
    Ok(done)
}

/// A group of ranks 0 and 1, made on every rank (as groups are) and committed by its members.
fn ranks_0_and_1(ctx: &Context) -> Outcome<GroupId> {
    let g = ctx.group_create().doing(|| "group_create")?;
    ctx.group_add(g, 0).doing(|| "group_add")?;
    ctx.group_add(g, 1).doing(|| "group_add")?;
    if ctx.rank() <= 1 {
        ctx.group_commit(g, TIMEOUT)
            .doing(|| "committing ranks 0 and 1")?;
    }
    Ok(g)
}

/// Ranks 0 and 1 reduce one element with a user operator that panics on rank 0 (a
/// single-step run: both sent their data before either folds). The panic reaches rank 0's
/// caller, and the group goes on: its next allreduce, barrier and deletion work on both
/// (before, rank 0's half-folded run stayed in flight, so every later allreduce was refused
/// as "in progress" and `finalize` refused).
fn panicking_user_op(ctx: &Context) -> Outcome<String> {
    let me = ctx.rank();
    if ctx.size() < 2 {
        return Ok("no partner for a panicking operator".into());
    }
    // The group id is likely the one `misuse` left unsettled and deleted: the members' new
    // commit must not reach one of them before its deletion (see `group_delete`).
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier before the panicking operator")?;
    let g = ranks_0_and_1(ctx)?;
    if me <= 1 {
        let op = UserOp::new(move |acc: &mut [u64], other: &[u64]| {
            assert!(me != 0, "the operator panics on rank 0");
            acc[0] += other[0];
        });
        let input = [u64::from(me) + 1];
        let mut output = [0u64];
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ctx.allreduce_with(g, &input, &mut output, &op, TIMEOUT)
        }));
        std::panic::set_hook(hook);
        match (me, first) {
            (0, Err(_)) => {}
            (1, Ok(Ok(()))) if output == [3] => {}
            (_, Ok(outcome)) => {
                return Err(Failure(format!(
                    "the panicking operator: {outcome:?}, output {output:?}"
                )))
            }
            (_, Err(_)) => return Err(Failure("the operator panicked on rank 1".into())),
        }
        ctx.allreduce(g, &input, &mut output, ReduceOp::Sum, TIMEOUT)
            .doing(|| "the allreduce after an operator panicked")?;
        ensure!(output == [3], "the sum after the panic: {output:?}");
        ctx.group_barrier(g, TIMEOUT)
            .doing(|| "the barrier after an operator panicked")?;
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the panicking operator")?;
    ctx.group_delete(g)
        .doing(|| "deleting the panicking operator's group")?;
    Ok("a panicking user operator reaches its caller and the group goes on".into())
}

/// The last rank's user operator panics in allreduces of every rank, of one element and of
/// enough for Rabenseifner (several chunks under a small `GASPI_REDUCE_CHUNK`). The panic
/// reaches that rank's caller; every other rank gets the sum or `OperatorPanicked` naming
/// the last rank, with its output untouched; and the next allreduce of every rank sums
/// right. Before, a member whose part needed the panicking one's later steps timed out, and
/// its run in flight then refused the group's next allreduce and `finalize` for good (at 4
/// ranks: rank 2 of rank 0's panic). At 4 ranks the panicking rank's call also times out
/// before the partner of its last step (rank 1) comes, and its next allreduce, of other
/// arguments, takes that step before its own run.
fn panicking_user_op_of_every_rank(ctx: &Context) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    let last = n - 1;
    if n < 2 {
        return Ok("no partner for a panicking operator of every rank".into());
    }
    // Well below `TIMEOUT`: a member left waiting for the panicking one's steps times out.
    let timeout = Timeout::Millis(10_000);
    let op = UserOp::new(move |acc: &mut [u64], other: &[u64]| {
        assert!(me != last, "the operator panics on the last rank");
        for (a, o) in acc.iter_mut().zip(other) {
            *a = a.wrapping_add(*o);
        }
    });
    let input =
        |len: usize| -> Vec<u64> { (0..len).map(|i| u64::from(me) * 1000 + i as u64).collect() };
    let sum = |len: usize| -> Vec<u64> {
        (0..len)
            .map(|i| (0..n).map(|r| u64::from(r) * 1000 + i as u64).sum())
            .collect()
    };
    let mut cases = vec![(1, timeout, 0), (3000, timeout, 0)];
    if n == 4 {
        // Rank 3 folds rank 2's part first, then sends to rank 1.
        cases.push((1, Timeout::Millis(300), 1_500));
    }
    let mut named = 0;
    for (len, timeout_of_last, delay_of_1) in cases {
        ctx.barrier(TIMEOUT)
            .doing(|| "barrier before a panicking operator of every rank")?;
        if me == 1 && delay_of_1 > 0 {
            std::thread::sleep(Duration::from_millis(delay_of_1));
        }
        let mut output = vec![7u64; len];
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let reduced = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let t = if me == last { timeout_of_last } else { timeout };
            ctx.allreduce_with(GROUP_ALL, &input(len), &mut output, &op, t)
        }));
        std::panic::set_hook(hook);
        match reduced {
            Err(_) if me == last => {}
            Ok(Ok(())) if me != last && output == sum(len) => {}
            Ok(Err(Error::OperatorPanicked { group, rank }))
                if me != last && group == GROUP_ALL && rank == last && output == vec![7; len] =>
            {
                named += 1;
            }
            Ok(outcome) => {
                return Err(Failure(format!(
                    "{len} elements, the last rank's operator panicking: {outcome:?}, output \
                     {:?}",
                    &output[..output.len().min(4)]
                )))
            }
            Err(_) => {
                return Err(Failure(format!(
                    "{len} elements: the operator panicked on rank {me}"
                )))
            }
        }
        ctx.allreduce(GROUP_ALL, &input(len), &mut output, ReduceOp::Sum, timeout)
            .doing(|| "the allreduce of every rank after an operator panicked")?;
        ensure!(
            output == sum(len),
            "{len} elements, the sum after the panic: {:?}",
            &output[..output.len().min(4)]
        );
    }
    Ok(format!(
        "a panicking user operator of every rank reaches its caller, {named} calls here named \
         its rank, and the next allreduces sum right"
    ))
}

/// At 2 ranks, where each rank hears from the other directly: rank 0 makes a segment where
/// rank 1 enters a barrier, then they make segments of different ids. Every such call fails
/// with `CollectiveMismatch` naming the other rank (before, they paired up with no error:
/// `GROUP_ALL`'s synchronisations looked alike), and the job goes on.
fn calls_of_the_job_that_differ(ctx: &Context) -> Outcome<()> {
    /// Ids no other part of the scenario uses: rank 0's first, then each rank's own.
    const MADE: u8 = 200;
    const APART: [u8; 2] = [201, 202];
    let me = ctx.rank();
    let partner = 1 - me;
    let named = |what: &str, called: gaspi::Result<()>| match called {
        Err(Error::CollectiveMismatch { group, rank }) if group == GROUP_ALL && rank == partner => {
            Ok(())
        }
        other => Err(Failure(format!("{what}: {other:?}"))),
    };
    let called = match me {
        0 => ctx.segment_create(MADE, 64, TIMEOUT),
        _ => ctx.barrier(TIMEOUT),
    };
    named("segment_create against a barrier", called)?;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after segment_create against a barrier")?;
    named(
        "segment_create of another id",
        ctx.segment_create(APART[me as usize], 64, TIMEOUT),
    )?;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after segment_create of different ids")
}

/// Rank 0 passes 2 elements, the others 1, with a 2 s timeout: each rank fails, with
/// `CollectiveMismatch` where it hears from a rank that differs, else with `Timeout`, its run
/// left in flight for good (at 3 ranks, ranks 0 and 2). The job's barrier still works, and
/// `finalize` (called next by `main`) must end every rank: before, it was refused on the
/// ranks that timed out, on every call.
fn abandoned_by_a_mismatch(ctx: &Context) -> Outcome<String> {
    if ctx.size() < 2 {
        return Ok("no mismatch at 1 rank".to_owned());
    }
    let len = if ctx.rank() == 0 { 2 } else { 1 };
    let input = vec![1_u64; len];
    let mut output = vec![0_u64; len];
    let called = ctx.allreduce(
        GROUP_ALL,
        &input,
        &mut output,
        ReduceOp::Sum,
        Timeout::Millis(2_000),
    );
    let failed = match called {
        Err(Error::CollectiveMismatch { group, rank }) if group == GROUP_ALL => {
            format!("CollectiveMismatch naming rank {rank}")
        }
        Err(Error::Timeout) => "Timeout".to_owned(),
        other => {
            return Err(Failure(format!(
                "allreduce of {len} elements against others' 1: {other:?}"
            )))
        }
    };
    Ok(format!("mismatched allreduce failed with {failed}"))
}
