//! What the `broadcast` example does and what its data is: the sequence of broadcasts (root,
//! length, form), the bytes each root sends, and the digest a rank reports over what it
//! received. The example runs the plan; `coll/tests/broadcast.rs` includes this same file and
//! computes from it, independently of any run, the digests the members must report.

use gaspi::Rank;

use crate::data;
pub use crate::data::Digest;

/// Rounds of the main plan; every round broadcasts each of [`LENGTHS`] once.
pub const ROUNDS: u32 = 50;
/// Rounds of the plan over the subgroup (every rank but 0).
pub const SUB_ROUNDS: u32 = 6;
/// The lengths broadcast every round.
pub const LENGTHS: [usize; 4] = [0, 1, 4096, 1 << 20];
/// The largest message, and so the staging area of the broadcast objects.
pub const MAX_BYTES: u64 = 1 << 20;
/// The mismatch step comes before the first broadcast of this round of the main plan.
pub const MISMATCH_AFTER: u32 = ROUNDS / 2;
/// The root's length in the mismatch step; the other members pass half of it.
pub const MISMATCH_LEN: usize = 64;
/// How long the root of the last step of the main plan waits before it joins.
pub const LATE_MS: u64 = 300;
/// The timeout of the other members' calls in that step, repeated until it completes.
pub const LATE_POLL_MS: u64 = 20;

/// The length of the broadcasts of the fault scenario: the first (before the death) sends
/// `fill(root, 0)`, the second `fill(root, 1)`.
pub const FAULT_LEN: usize = 4096;

/// What rank `me`'s buffer holds before a broadcast it is not the root of: bytes no root
/// sends in a plan, so that a broadcast that delivered nothing shows.
pub fn initial(me: Rank, len: usize) -> Vec<u8> {
    vec![0xa5 ^ me as u8; len]
}

/// How a member calls a broadcast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `broadcast` with a generous timeout.
    Blocking,
    /// `broadcast_nb`, then `test` until it reports completion.
    Polled,
    /// `broadcast_nb`, then `wait`.
    Waited,
    /// The root joins [`LATE_MS`] late; the others call `broadcast` with a timeout of
    /// [`LATE_POLL_MS`] until it completes (resuming after every timeout).
    Late,
}

/// One broadcast of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub round: u32,
    /// The root's member index in the group.
    pub root: u32,
    pub len: usize,
    pub form: Form,
}

/// The broadcasts of a plan of `rounds` rounds over a group of `members` members, in order:
/// the root moves on with every broadcast, the forms take turns, and the main plan
/// (`late`) ends with a [`Form::Late`] step.
pub fn steps(members: u32, rounds: u32, late: bool) -> Vec<Step> {
    const FORMS: [Form; 3] = [Form::Blocking, Form::Polled, Form::Waited];
    let mut steps: Vec<Step> = (0..rounds)
        .flat_map(|round| {
            LENGTHS.iter().enumerate().map(move |(k, &len)| Step {
                round,
                root: (round + k as u32) % members,
                len,
                form: FORMS[(round as usize + k) % FORMS.len()],
            })
        })
        .collect();
    if late {
        steps.push(Step {
            round: rounds,
            root: members - 1,
            len: 4096,
            form: Form::Late,
        });
    }
    steps
}

/// The bytes `root` broadcasts in round `round`: a splitmix64 stream seeded by both.
pub fn fill(root: Rank, round: u32, buf: &mut [u8]) {
    data::fill(u64::from(root) << 32 | u64::from(round), buf);
}
