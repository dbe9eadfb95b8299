//! The cases of the `values` scenario, the inputs of every member and what every member must
//! end with: shared by the example and by `coll/tests/allreduce.rs`, which recomputes from
//! it (a serial reference, folding in member order) what every rank must have received.

use crate::data::mix64;

/// The reductions, in the order the example runs them: a built-in operator on an element
/// type, or `affine_i64`, a user operator that is associative but not commutative.
pub const KINDS: [&str; 7] = [
    "sum_i64",
    "min_i64",
    "max_i64",
    "sum_f64",
    "min_f64",
    "max_f64",
    "affine_i64",
];

/// Vector lengths in elements (in blocks of two for `affine_i64`): empty, one, odd, long
/// enough for Rabenseifner, and long (96 KB, 192 KB for `affine_i64`, whose staging is
/// about four times that).
pub const LENGTHS: [usize; 5] = [0, 1, 7, 301, 12_001];

/// 1 MiB of 8-byte elements, whose staging exceeds a lane of the team's default capacity
/// (in a team of more than one): it runs as pieces.
pub const LARGE: usize = 1 << 17;

/// Elements of the `late` scenario's first allreduce: large enough for its folds to read
/// the source (whole blocks of 4 KiB and more), small enough for a lane.
pub const LATE: usize = 12_345;

/// The elements of a vector of `len` of kind `kind`.
pub fn elements(kind: &str, len: usize) -> usize {
    if kind == "affine_i64" {
        2 * len
    } else {
        len
    }
}

fn word(kind: &str, len: usize, member: u32, i: usize) -> u64 {
    let k = KINDS.iter().position(|&k| k == kind).unwrap_or(99) as u64;
    mix64(k << 56 ^ (len as u64) << 24 ^ u64::from(member) << 16 ^ i as u64)
}

/// Member `member`'s integers: small, so that sums are far from overflow; for `affine_i64`
/// pairs `[a, b]` with `a` odd.
pub fn ints(kind: &str, len: usize, member: u32) -> Vec<i64> {
    (0..elements(kind, len))
        .map(|i| {
            let v = (word(kind, len, member, i) % 2001) as i64 - 1000;
            if kind == "affine_i64" && i % 2 == 0 {
                v | 1
            } else {
                v
            }
        })
        .collect()
}

/// Member `member`'s floats: quarters of small integers, whose sums are exact in any order,
/// so the serial reference must match bit for bit.
pub fn floats(kind: &str, len: usize, member: u32) -> Vec<f64> {
    (0..len)
        .map(|i| ((word(kind, len, member, i) % 4001) as f64 - 2000.0) / 4.0)
        .collect()
}

/// The user operator: blocks `[a, b]` are the maps `x ↦ a·x + b` (wrapping), composed left
/// then right.
pub fn affine(acc: &mut [i64], other: &[i64]) {
    for (l, r) in acc.chunks_exact_mut(2).zip(other.chunks_exact(2)) {
        let (a, b) = (
            l[0].wrapping_mul(r[0]),
            r[0].wrapping_mul(l[1]).wrapping_add(r[1]),
        );
        l.copy_from_slice(&[a, b]);
    }
}

/// What every member of `n` must end with, as bytes: the inputs folded in member order.
pub fn want(kind: &str, len: usize, n: u32) -> Vec<u8> {
    let fold_i = |f: fn(i64, i64) -> i64| {
        let mut acc = ints(kind, len, 0);
        for m in 1..n {
            for (a, b) in acc.iter_mut().zip(ints(kind, len, m)) {
                *a = f(*a, b);
            }
        }
        bytes_i(&acc)
    };
    let fold_f = |f: fn(f64, f64) -> f64| {
        let mut acc = floats(kind, len, 0);
        for m in 1..n {
            for (a, b) in acc.iter_mut().zip(floats(kind, len, m)) {
                *a = f(*a, b);
            }
        }
        bytes_f(&acc)
    };
    match kind {
        "sum_i64" => fold_i(i64::wrapping_add),
        "min_i64" => fold_i(i64::min),
        "max_i64" => fold_i(i64::max),
        "sum_f64" => fold_f(|a, b| a + b),
        "min_f64" => fold_f(f64::min),
        "max_f64" => fold_f(f64::max),
        "affine_i64" => {
            let mut acc = ints(kind, len, 0);
            for m in 1..n {
                affine(&mut acc, &ints(kind, len, m));
            }
            bytes_i(&acc)
        }
        _ => unreachable!("no kind {kind}"),
    }
}

pub fn bytes_i(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn bytes_f(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Collectives in flight at once in the `many` scenario, more than the team's lanes.
pub const MANY: usize = 48;

/// Collective `i` of the `many` scenario: a gather_all of 64 bytes (every third), else an
/// allreduce (a sum of i64) of this many elements: empty, short (doubling) or long
/// (Rabenseifner).
pub fn many_len(i: usize) -> Option<usize> {
    match i % 3 {
        0 => None,
        _ => Some([0, 1, 5, 400][i % 4]),
    }
}

/// Member `member`'s source of collective `i` of the `many` scenario: 8 integers for a
/// gather_all.
pub fn many_src(i: usize, member: u32) -> Vec<i64> {
    ints("sum_i64", many_len(i).unwrap_or(8), member)
}

/// What every member of `n` ends with in collective `i` of the `many` scenario.
pub fn many_want(i: usize, n: u32) -> Vec<u8> {
    match many_len(i) {
        None => (0..n).flat_map(|m| bytes_i(&many_src(i, m))).collect(),
        Some(len) => want("sum_i64", len, n),
    }
}
