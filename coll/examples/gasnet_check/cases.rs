//! The cases of the `ops` scenario and what every member must end with in each: shared by
//! the example and by `coll/tests/gasnet.rs`, which recomputes from it (a serial reference)
//! what every rank must have received.

use gaspi_coll::Flags;

use crate::data::{fill, mix64};

/// The operations, in the order the example runs them.
pub const OPS: [&str; 9] = [
    "broadcast",
    "scatter",
    "gather",
    "gather_all",
    "exchange",
    "scatterv",
    "gatherv",
    "gather_allv",
    "exchangev",
];

/// Bytes per block (the largest of a v form's blocks).
pub const SIZES: [u64; 4] = [0, 1, 100, 20_000];

/// The cases of the `large` scenario: every operation at these sizes, on a team whose lanes
/// hold [`LARGE_LANE`] bytes.
pub const LARGE_SIZES: [u64; 2] = [300_001, 4 << 20];

/// The lane of the `large` scenario's team: every large case runs as many pieces (exchangev
/// as one run streaming its blocks in chunks).
pub const LARGE_LANE: u64 = 256 << 10;

/// The first case number of the `large` scenario.
pub const LARGE_FIRST: u64 = 20_000;

/// The flags of the `large` scenario's cases, in turn.
pub fn large_flags() -> [Flags; 3] {
    [
        Flags::MY,
        Flags::ALL,
        Flags::IN_NOSYNC | Flags::OUT_ALLSYNC | Flags::SINGLE,
    ]
}

/// Every combination of one `IN_` mode, one `OUT_` mode and `SINGLE` or `LOCAL`.
pub fn flags() -> Vec<Flags> {
    let ins = [Flags::IN_NOSYNC, Flags::IN_MYSYNC, Flags::IN_ALLSYNC];
    let outs = [Flags::OUT_NOSYNC, Flags::OUT_MYSYNC, Flags::OUT_ALLSYNC];
    let mut all = Vec::new();
    for i in ins {
        for o in outs {
            for a in [Flags::SINGLE, Flags::LOCAL] {
                all.push(i | o | a);
            }
        }
    }
    all
}

/// Whether case `case` keeps its source and its destination in user segments (with the
/// `IN_SEGMENT` flags): every combination in turn, the same on every member.
pub fn placement(case: u64) -> (bool, bool) {
    let k = (case / 2) % 4;
    (k & 1 == 1, k & 2 == 2)
}

/// Collectives the `outstanding` scenario holds in flight at once: 2^16 − 1.
pub const OUTSTANDING: u64 = (1 << 16) - 1;

/// The root member of case `case`.
pub fn root(case: u64, n: u32) -> u32 {
    (mix64(case) % u64::from(n)) as u32
}

/// Bytes of a member's block in the `overlap` scenario, and how far its broadcasts shift
/// the destination from the source.
pub const OVERLAP_BLOCK: u64 = 24;
pub const OVERLAP_SHIFT: u64 = 5;

/// The `overlap` scenario's cases: each sync mode, blocking (`true`) and not.
pub fn overlap_cases() -> impl Iterator<Item = (u64, gaspi_coll::Flags, bool)> {
    use gaspi_coll::Flags;
    [Flags::MY, Flags::EAGER, Flags::ALL]
        .into_iter()
        .flat_map(|flags| [true, false].map(|blocking| (flags, blocking)))
        .zip(0..)
        .map(|((flags, blocking), i)| (9000 + 8 * i, flags, blocking))
}

/// What member `me` of `n` holds after each collective of `overlap` case `case`, in the
/// scenario's order: its in-place exchange, gather_all, broadcasts shifted forward and
/// backward, in-place scatter and gather (on a member other than the root, its own block,
/// which a gather leaves alone).
#[allow(dead_code)] // The tests' reference; the scenario only reports what it received.
pub fn overlap_results(case: u64, n: u32, me: u32) -> Vec<Vec<u8>> {
    let (len, shift) = (OVERLAP_BLOCK, OVERLAP_SHIFT as usize);
    let all = len * u64::from(n);
    let root = root(case, n);
    let from_each = |case, to| (0..n).flat_map(move |from| block(case, from, to, len));
    let gathered = match me == root {
        true => from_each(case + 5, root).collect(),
        false => block(case + 5, me, root, len),
    };
    vec![
        from_each(case, me).collect(),
        from_each(case + 1, 0).collect(),
        block(case + 2, root, 0, all)[..all as usize - shift].to_vec(),
        block(case + 3, root, 0, all)[shift..].to_vec(),
        block(case + 4, root, me, len),
        gathered,
    ]
}

/// The bytes member `from` contributes for member `to` in case `case`.
pub fn block(case: u64, from: u32, to: u32, len: u64) -> Vec<u8> {
    let mut bytes = vec![0; len as usize];
    fill(
        mix64(case ^ (u64::from(from) << 40) ^ (u64::from(to) << 20)),
        &mut bytes,
    );
    bytes
}

/// Block `i`'s length in the v forms of a case of `size`: irregular, zeros included.
pub fn count(size: u64, i: u32) -> u64 {
    (size * u64::from(i % 4)) / 3 % (size + 1)
}

/// What member `from` sends to member `to` in an exchangev of `size`.
pub fn xcount(size: u64, from: u32, to: u32) -> u64 {
    (size * u64::from((from * 3 + to * 5) % 7)) / 6 % (size + 1)
}

fn concat(parts: impl Iterator<Item = Vec<u8>>) -> Vec<u8> {
    parts.flatten().collect()
}

/// Member `me`'s source for `op` in case `case` of `size` among `n` (empty where it is not
/// read).
pub fn src(op: &str, case: u64, size: u64, n: u32, me: u32) -> Vec<u8> {
    let r = root(case, n);
    match op {
        "broadcast" if me == r => block(case, r, 0, size),
        "scatter" if me == r => concat((0..n).map(|j| block(case, r, j, size))),
        "scatterv" if me == r => concat((0..n).map(|j| block(case, r, j, count(size, j)))),
        "broadcast" | "scatter" | "scatterv" => Vec::new(),
        "gather" => block(case, me, r, size),
        "gatherv" => block(case, me, r, count(size, me)),
        "gather_all" => block(case, me, 0, size),
        "gather_allv" => block(case, me, 0, count(size, me)),
        "exchange" => concat((0..n).map(|j| block(case, me, j, size))),
        "exchangev" => concat((0..n).map(|j| block(case, me, j, xcount(size, me, j)))),
        _ => unreachable!("no operation {op}"),
    }
}

/// What member `me`'s destination must hold after `op` in case `case` (the serial
/// reference); its length is the destination's.
pub fn want(op: &str, case: u64, size: u64, n: u32, me: u32) -> Vec<u8> {
    let r = root(case, n);
    match op {
        "broadcast" => block(case, r, 0, size),
        "scatter" => block(case, r, me, size),
        "scatterv" => block(case, r, me, count(size, me)),
        "gather" if me == r => concat((0..n).map(|i| block(case, i, r, size))),
        "gatherv" if me == r => concat((0..n).map(|i| block(case, i, r, count(size, i)))),
        "gather" | "gatherv" => Vec::new(),
        "gather_all" => concat((0..n).map(|i| block(case, i, 0, size))),
        "gather_allv" => concat((0..n).map(|i| block(case, i, 0, count(size, i)))),
        "exchange" => concat((0..n).map(|i| block(case, i, me, size))),
        "exchangev" => concat((0..n).map(|i| block(case, i, me, xcount(size, i, me)))),
        _ => unreachable!("no operation {op}"),
    }
}
