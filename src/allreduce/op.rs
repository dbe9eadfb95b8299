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
/// `f64::max` (a NaN loses against a number); of a `+0.0` and a `-0.0`, which they leave
/// open, the allreduces keep the zero of the lower member in the fold order, on every member
/// (measured at 2 to 8 members, through both allreduces, at every length).
///
/// A float result that is a NaN is a NaN on every member, but its sign and payload are not
/// part of the bitwise identity the allreduces promise: of two NaN operands, the processor
/// passes on one by the order of the instruction's operands, which the compiler picks (`+`
/// and `*` commute) and picks differently in a vectorised loop and its remainder, and Rust
/// leaves a NaN made of numbers (`∞ − ∞`, `0 · ∞`) unspecified. Measured: sums and products
/// of NaNs with different payloads differ between the members of `Context::allreduce` at 2
/// to 8 members, and between it and the team allreduce of `gaspi-coll`.
///
/// Bitwise and logical operators take integer elements only; logical ones treat non-zero as
/// true and produce 0 or 1.
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

    /// Folds `other` into `acc` element by element: `acc[i] = acc[i] ⊕ other[i]` (for the
    /// non-commutative cases, `acc` is the left operand). The same function the allreduce
    /// folds with, for libraries that build their own reductions.
    ///
    /// ```
    /// # use gaspi::ReduceOp;
    /// let mut acc = [1i64, 5, -3];
    /// ReduceOp::Max.apply(&mut acc, &[4, 2, -7])?;
    /// assert_eq!(acc, [4, 5, -3]);
    /// # Ok::<(), gaspi::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Buffers`] when the slices differ in length; [`Error::Unsupported`] for a
    /// bitwise or logical operator on floats.
    pub fn apply<T: Element>(self, acc: &mut [T], other: &[T]) -> Result<()> {
        self.fold(other, acc, false)
    }

    /// Folds `left` into `acc` element by element with `acc` as the right operand:
    /// `acc[i] = left[i] ⊕ acc[i]`. A reduction that must keep an operand order and has its
    /// left operand in memory it may not write (a caller's input) so folds without copying
    /// that operand first.
    ///
    /// ```
    /// # use gaspi::ReduceOp;
    /// let mut acc = [3.0f64, 0.5];
    /// ReduceOp::Sum.apply_right(&[1.0, 2.0], &mut acc)?;
    /// assert_eq!(acc, [4.0, 2.5]);
    /// # Ok::<(), gaspi::Error>(())
    /// ```
    ///
    /// # Errors
    /// As for [`apply`](Self::apply).
    pub fn apply_right<T: Element>(self, left: &[T], acc: &mut [T]) -> Result<()> {
        self.fold(left, acc, true)
    }

    fn fold<T: Element>(self, other: &[T], acc: &mut [T], other_first: bool) -> Result<()> {
        if acc.len() != other.len() {
            return Err(Error::Buffers(format!(
                "{} elements folded with {}",
                acc.len(),
                other.len()
            )));
        }
        T::fold(self, other, acc, other_first).ok_or_else(|| unsupported::<T>(self))
    }
}

fn unsupported<T>(op: ReduceOp) -> Error {
    Error::Unsupported(format!(
        "{op:?} needs integer elements, not {}",
        std::any::type_name::<T>()
    ))
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
#[derive(Clone)]
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

    /// The elements of one block (see [`block`](Self::block)): libraries that reduce with the
    /// operator split vectors at block boundaries only.
    pub fn block_elements(&self) -> usize {
        self.block
    }

    /// Folds `other` into `acc` (`acc = acc ⊕ other`, `acc` the left operand) with the user's
    /// function, after the checks the allreduce makes.
    ///
    /// # Errors
    /// [`Error::Buffers`] when the slices differ in length or are not a whole number of
    /// blocks; [`Error::Unsupported`] for a block of zero elements; [`Error::Limit`] for a
    /// block of more bytes than an address can count.
    pub fn apply<T>(&self, acc: &mut [T], other: &[T]) -> Result<()>
    where
        F: Fn(&mut [T], &[T]),
    {
        self.check_block::<T>()?;
        if acc.len() != other.len() || acc.len() % self.block != 0 {
            return Err(Error::Buffers(format!(
                "{} elements folded with {} in blocks of {}",
                acc.len(),
                other.len(),
                self.block
            )));
        }
        (self.function)(acc, other);
        Ok(())
    }

    /// Checks that a block of `T`s is one the runtime can fold: at least one element, and its
    /// bytes countable. [`apply`](Self::apply) checks this first; a library that reduces with
    /// the operator checks it before any data moves, without calling the user's function.
    ///
    /// ```
    /// # use gaspi::UserOp;
    /// let sum = |acc: &mut [u64], other: &[u64]| acc[0] += other[0];
    /// assert!(UserOp::new(sum).check_block::<u64>().is_ok());
    /// assert!(UserOp::new(sum).block(0).check_block::<u64>().is_err());
    /// assert!(UserOp::new(sum).block(usize::MAX).check_block::<u64>().is_err());
    /// ```
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a block of zero elements; [`Error::Limit`] for a block of
    /// more bytes than an address can count.
    pub fn check_block<T>(&self) -> Result<()> {
        if self.block == 0 {
            return Err(Error::Unsupported(
                "a user operator's block must hold at least one element".into(),
            ));
        }
        if self.block.checked_mul(std::mem::size_of::<T>()).is_none() {
            return Err(Error::Limit(format!(
                "a user operator's block of {} elements has more bytes than an address can count",
                self.block
            )));
        }
        Ok(())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// An element type allreduce works on: `i32`, `u32`, `i64`, `u64`, `f32`, `f64`.
pub trait Element: bytemuck::Pod + Default + Send + Sync + sealed::Sealed {
    #[doc(hidden)]
    const CODE: u8;
    /// Folds with built-in `op`; `None` when `op` does not apply to this type.
    #[doc(hidden)]
    fn fold(op: ReduceOp, received: &[Self], own: &mut [Self], received_first: bool) -> Option<()>;
}

/// Applies `f` element by element, with the received element as the first operand when
/// `received_first`. The branch sits outside the loops so that each loop vectorises.
fn zip<T: Copy>(received: &[T], own: &mut [T], received_first: bool, f: impl Fn(T, T) -> T) {
    if received_first {
        for (o, &r) in own.iter_mut().zip(received) {
            *o = f(r, *o);
        }
    } else {
        for (o, &r) in own.iter_mut().zip(received) {
            *o = f(*o, r);
        }
    }
}

macro_rules! int_elements {
    ($($t:ty => $code:expr),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const CODE: u8 = $code;
            fn fold(op: ReduceOp, r: &[Self], o: &mut [Self], first: bool) -> Option<()> {
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
            fn fold(op: ReduceOp, r: &[Self], o: &mut [Self], first: bool) -> Option<()> {
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

/// A byte buffer aligned for every [`Element`], so that its element-aligned ranges can be
/// viewed as element slices without copying.
#[derive(Default)]
pub(crate) struct Bytes {
    words: Vec<u64>,
    len: usize,
}

impl Bytes {
    /// A buffer holding the bytes of `values`.
    #[cfg(test)]
    pub(crate) fn from_elements<T: Element>(values: &[T]) -> Self {
        let mut b = Bytes::default();
        b.resize(std::mem::size_of_val(values));
        b.as_mut().copy_from_slice(bytemuck::cast_slice(values));
        b
    }

    /// Makes the buffer `len` bytes long (new bytes are zero).
    pub(crate) fn resize(&mut self, len: usize) {
        self.words.resize(len.div_ceil(8), 0);
        self.len = len;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes the buffer can hold without allocating.
    pub(crate) fn capacity(&self) -> usize {
        self.words.capacity() * 8
    }

    pub(crate) fn as_ref(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub(crate) fn as_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

/// Views element-aligned bytes as elements. The runner only passes ranges of a [`Bytes`] that
/// start at a multiple of the element size and hold whole elements, so the cast cannot fail.
fn elements<T: Element>(bytes: &[u8]) -> &[T] {
    bytemuck::cast_slice(bytes)
}

fn elements_mut<T: Element>(bytes: &mut [u8]) -> &mut [T] {
    bytemuck::cast_slice_mut(bytes)
}

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
        T::fold(op, &[], &mut [], false).ok_or_else(|| unsupported::<T>(op))?;
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
        let _ = T::fold(
            self.op,
            elements(received),
            elements_mut(own),
            received_first,
        );
    }
}

/// A user operator on `T`, with its block size checked.
pub(crate) struct User<'a, T, F> {
    op: &'a UserOp<F>,
    _t: std::marker::PhantomData<T>,
}

impl<'a, T: Element, F: Fn(&mut [T], &[T])> User<'a, T, F> {
    pub(crate) fn new(op: &'a UserOp<F>) -> Result<Self> {
        op.check_block::<T>()?;
        Ok(User {
            op,
            _t: std::marker::PhantomData,
        })
    }

    pub(crate) fn block(&self) -> usize {
        self.op.block
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
        let (other, mine) = (elements::<T>(received), elements_mut::<T>(own));
        if received_first && !self.op.commutative {
            let mut left = other.to_vec();
            (self.op.function)(&mut left, mine);
            mine.copy_from_slice(&left);
        } else {
            (self.op.function)(mine, other);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold_pair<T: Element>(op: ReduceOp, a: T, b: T) -> T {
        let (r, mut o) = (Bytes::from_elements(&[a]), Bytes::from_elements(&[b]));
        Builtin::<T>::new(op)
            .expect("applies")
            .fold(r.as_ref(), o.as_mut(), true);
        elements::<T>(o.as_ref())[0]
    }

    #[test]
    fn min_and_max_of_opposite_zeros_keep_the_left_one() {
        // Every length through the vectorised loop and its remainder, in both operand forms.
        for len in [1, 3, 8, 33] {
            for op in [ReduceOp::Min, ReduceOp::Max] {
                for (left, right) in [(0.0f64, -0.0f64), (-0.0, 0.0)] {
                    let mut acc = vec![left; len];
                    op.apply(&mut acc, &vec![right; len]).expect("applies");
                    assert!(acc
                        .iter()
                        .all(|x| x.is_sign_negative() == left.is_sign_negative()));
                    let mut acc = vec![right; len];
                    op.apply_right(&vec![left; len], &mut acc).expect("applies");
                    assert!(acc
                        .iter()
                        .all(|x| x.is_sign_negative() == left.is_sign_negative()));
                }
            }
        }
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
    fn apply_folds_in_place_and_checks_its_arguments() {
        let mut acc = [1u32, 2, 3];
        ReduceOp::Sum
            .apply(&mut acc, &[10, 20, 30])
            .expect("applies");
        assert_eq!(acc, [11, 22, 33]);
        assert!(matches!(
            ReduceOp::Sum.apply(&mut acc, &[1]),
            Err(Error::Buffers(_))
        ));
        assert!(matches!(
            ReduceOp::BitOr.apply(&mut [1.0f64], &[2.0]),
            Err(Error::Unsupported(_))
        ));
        // Into the right operand, wrapping as `apply` does.
        let mut right = [5i64, i64::MAX, 9];
        ReduceOp::Sum
            .apply_right(&[7, 1, -2], &mut right)
            .expect("applies");
        assert_eq!(right, [12, i64::MIN, 7]);
        let mut right = [3u32, 8];
        ReduceOp::Max
            .apply_right(&[4, 2], &mut right)
            .expect("applies");
        assert_eq!(right, [4, 8]);
        assert!(matches!(
            ReduceOp::Sum.apply_right(&[1u8 as i32], &mut [1, 2]),
            Err(Error::Buffers(_))
        ));
        assert!(matches!(
            ReduceOp::BitXor.apply_right(&[1.0f32], &mut [2.0]),
            Err(Error::Unsupported(_))
        ));
        let concat = UserOp::new(|acc: &mut [u32], other: &[u32]| {
            for (a, o) in acc.iter_mut().zip(other) {
                *a = *a * 10 + *o;
            }
        })
        .block(2);
        let mut pair = [1u32, 2];
        concat.apply(&mut pair, &[3, 4]).expect("applies");
        assert_eq!(pair, [13, 24]);
        assert!(concat.apply(&mut [1u32, 2, 3], &[1, 2, 3]).is_err());
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
        let r = Bytes::from_elements(&[1u32]);
        let mut o = Bytes::from_elements(&[2u32]);
        user.fold(r.as_ref(), o.as_mut(), true);
        assert_eq!(elements::<u32>(o.as_ref()), [12]);
        let mut o = Bytes::from_elements(&[2u32]);
        user.fold(r.as_ref(), o.as_mut(), false);
        assert_eq!(elements::<u32>(o.as_ref()), [21]);
        assert!(User::<u32, _>::new(&UserOp::new(|_: &mut [u32], _: &[u32]| {}).block(0)).is_err());
        // A block of more bytes than an address counts is refused, not overflowed.
        let huge = UserOp::new(|_: &mut [u64], _: &[u64]| {}).block(usize::MAX / 4);
        assert!(matches!(User::<u64, _>::new(&huge), Err(Error::Limit(_))));
    }
}
