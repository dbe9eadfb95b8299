//! A team's allreduce with a user operator within one process (a job of one rank, started
//! without a launcher): the operator's block is checked without calling the operator, so
//! one written for whole blocks never sees an empty slice, and bad blocks are clear errors.

#![forbid(unsafe_code)]

use gaspi::{Context, Timeout, UserOp, GROUP_ALL};
use gaspi_coll::{Collectives, Error, Flags, Team};

const TIMEOUT: Timeout = Timeout::Millis(10_000);

/// A 2×2 matrix product on blocks of four, which indexes its elements as such an operator
/// does: it panics on a slice shorter than a block.
fn matrix_product(acc: &mut [i64], other: &[i64]) {
    for (a, b) in acc.chunks_exact_mut(4).zip(other.chunks_exact(4)) {
        let c = [
            a[0] * b[0] + a[1] * b[2],
            a[0] * b[1] + a[1] * b[3],
            a[2] * b[0] + a[3] * b[2],
            a[2] * b[1] + a[3] * b[3],
        ];
        a.copy_from_slice(&c);
    }
    assert!(!acc.is_empty(), "the operator was called with no block");
}

#[test]
fn user_operators_are_checked_without_being_called() {
    let ctx = Context::init().expect("a job of one starts without a launcher");
    let coll = Collectives::new(&ctx).expect("the namespace registers");
    let team = Team::new(&coll, GROUP_ALL, TIMEOUT).expect("a team of one");
    let op = UserOp::new(matrix_product).block(4);

    let src = [1i64, 2, 3, 4, 5, 6, 7, 8];
    let mut dst = [0i64; 8];
    team.allreduce_with(&src, &mut dst, &op, Flags::MY, TIMEOUT)
        .expect("a team of one reduces to its own vector");
    assert_eq!(dst, src);
    let mut handle = team
        .allreduce_with_nb(&src, &mut dst, &op, Flags::EAGER)
        .expect("initiated");
    handle.wait_sync(TIMEOUT).expect("synced");
    drop(handle);

    let mut short = [0i64; 6];
    assert!(matches!(
        team.allreduce_with(&src[..6], &mut short, &op, Flags::MY, TIMEOUT),
        Err(Error::PartialBlock {
            elements: 6,
            block: 4
        })
    ));
    let empty = UserOp::new(matrix_product).block(0);
    assert!(matches!(
        team.allreduce_with(&src, &mut dst, &empty, Flags::MY, TIMEOUT),
        Err(Error::Gaspi(gaspi::Error::Unsupported(_)))
    ));
    let huge = UserOp::new(matrix_product).block(usize::MAX);
    assert!(matches!(
        team.allreduce_with(&src, &mut dst, &huge, Flags::MY, TIMEOUT),
        Err(Error::Gaspi(gaspi::Error::Limit(_)))
    ));
    drop(team);
    drop(coll);
    ctx.finalize(TIMEOUT).expect("finalize");
}
