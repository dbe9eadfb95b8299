//! Reduction operators and the element types they work on.
//!
//! Built-in operators ([`ReduceOp`]) work element by element on the six [`Element`] types;
//! user operators ([`UserOp`]) get whole slices. Inside the runtime both are a [`Folder`]: it
//! folds a received byte range into this member's own, with the operand order the schedule
//! dictates.

use crate::error::{Error, Result};

/// A built-in reduction operator.
///
/// Sums and products of integers wrap on overflow. `Min`/`Max` of floats follow `f64::min` /
/// `f64::max` (a NaN loses against a number). Bitwise and logical operators take integer
/// elements only; logical ones treat non-zero as true and produce 0 or 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReduceOp {
    /// `a + b`.
    Sum,
    /// `a * b`.
    Prod,
    /// The smaller of `a` and `b`.
    Min,
    /// The larger of `a` and `b`.
    Max,
    /// `a & b`.
    BitAnd,
    /// `a | b`.
    BitOr,
    /// `a ^ b`.
    BitXor,
    /// `a != 0 && b != 0`.
    LogicalAnd,
    /// `a != 0 || b != 0`.
    LogicalOr,
    /// `(a != 0) != (b != 0)`.
    LogicalXor,
}

impl ReduceOp {
    /// Every built-in operator.
    pub const ALL: [ReduceOp; 10] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::BitAnd,
        ReduceOp::BitOr,
        ReduceOp::BitXor,
        ReduceOp::LogicalAnd,
        ReduceOp::LogicalOr,
        ReduceOp::LogicalXor,
    ];

    fn code(self) -> u8 {
        self as u8
    }
}

/// A user-defined reduction operator: `function(acc, other)` must leave `acc ⊕ other` in `acc`,
/// where `acc` holds the contribution of lower-indexed members and `other` that of higher ones.
///
/// The operator must be associative. Unless declared [`commutative`](Self::commutative), it is
/// always called with its operands in member order; a commutative one may get them swapped,
/// which saves a copy (declare it only if `f(a, b)` and `f(b, a)` give the same bits, or results
/// may differ between members). Slices may be any whole number of [`block`](Self::block)s long
/// and start at a block boundary of the vector; with the default block of one element the
/// operator must work element by element.
pub struct UserOp<F> {
    function: F,
    commutative: bool,
    block: usize,
}

impl<F> std::fmt::Debug for UserOp<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserOp")
            .field("commutative", &self.commutative)
            .field("block", &self.block)
            .finish()
    }
}

impl<F> UserOp<F> {
    /// An operator applied in member order, on slices of whole elements.
    pub fn new(function: F) -> Self {
        UserOp {
            function,
            commutative: false,
            block: 1,
        }
    }

    /// Declares the operator commutative (see the type's documentation).
    pub fn commutative(mut self) -> Self {
        self.commutative = true;
        self
    }

    /// Declares that the operator works on blocks of `elements` consecutive elements (a 2×2
    /// matrix is a block of 4): the runtime never splits a block, and the vector length must be
    /// a multiple of it.
    pub fn block(mut self, elements: usize) -> Self {
        self.block = elements;
        self
    }
}

mod sealed {
    pub trait Sealed {}
}

/// An element type allreduce works on: `i32`, `u32`, `i64`, `u64`, `f32`, `f64`.
pub trait Element: Copy + Default + Send + Sync + 'static + sealed::Sealed {
    #[doc(hidden)]
    const CODE: u8;
    #[doc(hidden)]
    fn from_bytes(bytes: &[u8]) -> Self;
    #[doc(hidden)]
    fn to_bytes(self, out: &mut [u8]);
    /// Folds with built-in `op`; `None` when `op` does not apply to this type.
    #[doc(hidden)]
    fn fold(op: ReduceOp, received: &[u8], own: &mut [u8], received_first: bool) -> Option<()>;
}

/// Applies `f` element by element, with the received element as the first operand when
/// `received_first`.
fn zip<T: Element>(received: &[u8], own: &mut [u8], received_first: bool, f: impl Fn(T, T) -> T) {
    let size = std::mem::size_of::<T>();
    for (r, o) in received.chunks_exact(size).zip(own.chunks_exact_mut(size)) {
        let (r, mine) = (T::from_bytes(r), T::from_bytes(o));
        let v = if received_first {
            f(r, mine)
        } else {
            f(mine, r)
        };
        v.to_bytes(o);
    }
}

/// `from_bytes` / `to_bytes` in native byte order: every rank of a job runs on the same
/// architecture, as for every other word the runtime exchanges.
macro_rules! native_bytes {
    ($t:ty) => {
        fn from_bytes(bytes: &[u8]) -> Self {
            let mut a = [0u8; std::mem::size_of::<$t>()];
            // Callers pass exactly one element (`chunks_exact` of the element size).
            a.copy_from_slice(bytes);
            <$t>::from_ne_bytes(a)
        }
        fn to_bytes(self, out: &mut [u8]) {
            out.copy_from_slice(&self.to_ne_bytes());
        }
    };
}

macro_rules! int_elements {
    ($($t:ty => $code:expr),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const CODE: u8 = $code;
            native_bytes!($t);
            fn fold(op: ReduceOp, r: &[u8], o: &mut [u8], first: bool) -> Option<()> {
                let t = |b: bool| <$t>::from(b);
                match op {
                    ReduceOp::Sum => zip(r, o, first, <$t>::wrapping_add),
                    ReduceOp::Prod => zip(r, o, first, <$t>::wrapping_mul),
                    ReduceOp::Min => zip(r, o, first, <$t>::min),
                    ReduceOp::Max => zip(r, o, first, <$t>::max),
                    ReduceOp::BitAnd => zip(r, o, first, |a: $t, b| a & b),
                    ReduceOp::BitOr => zip(r, o, first, |a: $t, b| a | b),
                    ReduceOp::BitXor => zip(r, o, first, |a: $t, b| a ^ b),
                    ReduceOp::LogicalAnd => zip(r, o, first, |a: $t, b| t(a != 0 && b != 0)),
                    ReduceOp::LogicalOr => zip(r, o, first, |a: $t, b| t(a != 0 || b != 0)),
                    ReduceOp::LogicalXor => zip(r, o, first, |a: $t, b| t((a != 0) != (b != 0))),
                }
                Some(())
            }
        }
    )*};
}

macro_rules! float_elements {
    ($($t:ty => $code:expr),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const CODE: u8 = $code;
            native_bytes!($t);
            fn fold(op: ReduceOp, r: &[u8], o: &mut [u8], first: bool) -> Option<()> {
                match op {
                    ReduceOp::Sum => zip(r, o, first, |a: $t, b| a + b),
                    ReduceOp::Prod => zip(r, o, first, |a: $t, b| a * b),
                    ReduceOp::Min => zip(r, o, first, <$t>::min),
                    ReduceOp::Max => zip(r, o, first, <$t>::max),
                    _ => return None,
                }
                Some(())
            }
        }
    )*};
}

int_elements!(i32 => 1, u32 => 2, i64 => 3, u64 => 4);
float_elements!(f32 => 5, f64 => 6);

/// An operator as the runner sees it.
pub(crate) trait Folder {
    /// Bytes of one block (the unit the schedule splits the vector into).
    fn block_bytes(&self) -> usize;
    /// Identifies the operator and element type, so members can tell a mismatch.
    fn code(&self) -> u64;
    /// `own = received ⊕ own` when `received_first`, else `own = own ⊕ received`.
    fn fold(&self, received: &[u8], own: &mut [u8], received_first: bool);
}

/// A built-in operator on `T`, checked to apply.
pub(crate) struct Builtin<T> {
    op: ReduceOp,
    _t: std::marker::PhantomData<T>,
}

impl<T: Element> Builtin<T> {
    pub(crate) fn new(op: ReduceOp) -> Result<Self> {
        // Folding nothing tells whether the operator applies, without a second table of rules.
        T::fold(op, &[], &mut [], false).ok_or_else(|| {
            Error::Unsupported(format!(
                "{op:?} needs integer elements, not {}",
                std::any::type_name::<T>()
            ))
        })?;
        Ok(Builtin {
            op,
            _t: std::marker::PhantomData,
        })
    }
}

impl<T: Element> Folder for Builtin<T> {
    fn block_bytes(&self) -> usize {
        std::mem::size_of::<T>()
    }

    fn code(&self) -> u64 {
        u64::from(T::CODE) << 8 | u64::from(self.op.code())
    }

    fn fold(&self, received: &[u8], own: &mut [u8], received_first: bool) {
        // Applicability was checked in `new`.
        let _ = T::fold(self.op, received, own, received_first);
    }
}

/// A user operator on `T`, with its block size checked.
pub(crate) struct User<'a, T, F> {
    op: &'a UserOp<F>,
    _t: std::marker::PhantomData<T>,
}

impl<'a, T: Element, F: Fn(&mut [T], &[T])> User<'a, T, F> {
    pub(crate) fn new(op: &'a UserOp<F>) -> Result<Self> {
        if op.block == 0 {
            return Err(Error::Unsupported(
                "a user operator's block must hold at least one element".into(),
            ));
        }
        Ok(User {
            op,
            _t: std::marker::PhantomData,
        })
    }

    pub(crate) fn block(&self) -> usize {
        self.op.block
    }
}

fn decode<T: Element>(bytes: &[u8]) -> Vec<T> {
    bytes
        .chunks_exact(std::mem::size_of::<T>())
        .map(T::from_bytes)
        .collect()
}

pub(crate) fn encode<T: Element>(values: &[T], out: &mut [u8]) {
    for (v, o) in values
        .iter()
        .zip(out.chunks_exact_mut(std::mem::size_of::<T>()))
    {
        v.to_bytes(o);
    }
}

pub(crate) fn encode_vec<T: Element>(values: &[T]) -> Vec<u8> {
    let mut out = vec![0u8; std::mem::size_of_val(values)];
    encode(values, &mut out);
    out
}

pub(crate) fn decode_into<T: Element>(bytes: &[u8], out: &mut [T]) {
    for (o, b) in out
        .iter_mut()
        .zip(bytes.chunks_exact(std::mem::size_of::<T>()))
    {
        *o = T::from_bytes(b);
    }
}

impl<T: Element, F: Fn(&mut [T], &[T])> Folder for User<'_, T, F> {
    fn block_bytes(&self) -> usize {
        self.op.block * std::mem::size_of::<T>()
    }

    fn code(&self) -> u64 {
        (u64::from(T::CODE) << 8 | 0xff)
            ^ (self.op.block as u64) << 16
            ^ u64::from(self.op.commutative) << 63
    }

    fn fold(&self, received: &[u8], own: &mut [u8], received_first: bool) {
        let other: Vec<T> = decode(received);
        let mut mine: Vec<T> = decode(own);
        if received_first && !self.op.commutative {
            let mut left = other;
            (self.op.function)(&mut left, &mine);
            encode(&left, own);
        } else {
            (self.op.function)(&mut mine, &other);
            encode(&mine, own);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold_pair<T: Element>(op: ReduceOp, a: T, b: T) -> T {
        let (r, mut o) = (encode_vec(&[a]), encode_vec(&[b]));
        Builtin::<T>::new(op)
            .expect("applies")
            .fold(&r, &mut o, true);
        let mut out = [T::default()];
        decode_into(&o, &mut out);
        out[0]
    }

    #[test]
    fn builtins_compute_what_they_say() {
        assert_eq!(fold_pair(ReduceOp::Sum, i32::MAX, 1), i32::MIN);
        assert_eq!(fold_pair(ReduceOp::Prod, 6u64, 7), 42);
        assert_eq!(fold_pair(ReduceOp::Min, -3i64, 2), -3);
        assert_eq!(fold_pair(ReduceOp::Max, 1.5f32, -2.0), 1.5);
        assert_eq!(fold_pair(ReduceOp::BitXor, 0b1100u32, 0b1010), 0b0110);
        assert_eq!(fold_pair(ReduceOp::LogicalAnd, 5i32, 0), 0);
        assert_eq!(fold_pair(ReduceOp::LogicalOr, 5i32, 0), 1);
        assert_eq!(fold_pair(ReduceOp::LogicalXor, 5u64, 9), 0);
        assert_eq!(fold_pair(ReduceOp::Sum, 0.5f64, 0.25), 0.75);
    }

    #[test]
    fn bitwise_on_floats_is_refused() {
        assert!(matches!(
            Builtin::<f64>::new(ReduceOp::BitAnd),
            Err(Error::Unsupported(_))
        ));
        assert!(Builtin::<f32>::new(ReduceOp::LogicalOr).is_err());
    }

    #[test]
    fn user_ops_keep_member_order_unless_commutative() {
        let concat = UserOp::new(|acc: &mut [u32], other: &[u32]| {
            for (a, o) in acc.iter_mut().zip(other) {
                *a = *a * 10 + *o;
            }
        });
        let user = User::<u32, _>::new(&concat).expect("valid");
        let (r, mut o) = (encode_vec(&[1u32]), encode_vec(&[2u32]));
        user.fold(&r, &mut o, true);
        assert_eq!(o, encode_vec(&[12u32]));
        let mut o = encode_vec(&[2u32]);
        user.fold(&r, &mut o, false);
        assert_eq!(o, encode_vec(&[21u32]));
        assert!(User::<u32, _>::new(&UserOp::new(|_: &mut [u32], _: &[u32]| {}).block(0)).is_err());
    }
}
