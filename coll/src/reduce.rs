//! The allreduce of a [`Team`]: the runtime's algorithms and guarantees (see
//! [`schedule::reduce`](crate::schedule::reduce)) as a schedule on the team's engine, with a
//! built-in [`ReduceOp`] or a user [`UserOp`] as the run's [`Reducer`].
//!
//! # Algorithm
//! Recursive doubling up to 2 KiB, Rabenseifner's reduce-scatter and allgather beyond (when
//! there is a block per virtual member), as in the runtime; `GASPI_COLL_ALLREDUCE=doubling`
//! or `=rabenseifner` (read once per process) forces one, and must then be the same on every
//! member (a difference is reported as [`Error::Mismatch`]).

use std::marker::PhantomData;
use std::sync::OnceLock;

use gaspi::{Element, ReduceOp, Timeout, UserOp};

use crate::buffer::{Input, Output};
use crate::engine::Cut;
use crate::error::{Error, Result};
use crate::ops::Shape;
use crate::schedule::reduce::{algorithm, allreduce, stage_bound, AllreduceAlgo};
use crate::schedule::Reducer;
use crate::team::{Flags, Handle, Lend, Team};

/// Built-in operator `ReduceOp::ALL[OP]` on `T`, checked to apply: a type per operator, so
/// that the boxed operator a run owns is zero-sized and initiating costs no allocation.
struct Builtin<T, const OP: usize>(PhantomData<fn() -> T>);

impl<T: Element, const OP: usize> Reducer for Builtin<T, OP> {
    fn block(&self) -> u64 {
        std::mem::size_of::<T>() as u64
    }

    fn boxed(&self) -> Box<dyn Reducer> {
        Box::new(Builtin::<T, OP>(PhantomData))
    }

    fn fold(&self, acc: &mut [u8], other: &[u8]) -> std::result::Result<(), String> {
        fold_with::<T>(ReduceOp::ALL[OP], acc, other, false)
    }

    fn folds_right(&self) -> bool {
        true
    }

    fn fold_right(&self, left: &[u8], acc: &mut [u8]) -> std::result::Result<(), String> {
        fold_with::<T>(ReduceOp::ALL[OP], acc, left, true)
    }
}

/// A built-in operator on `T` outside [`ReduceOp::ALL`] (should one be added there later).
struct Other<T> {
    op: ReduceOp,
    element: PhantomData<fn() -> T>,
}

impl<T: Element> Reducer for Other<T> {
    fn block(&self) -> u64 {
        std::mem::size_of::<T>() as u64
    }

    fn boxed(&self) -> Box<dyn Reducer> {
        Box::new(Other::<T> {
            op: self.op,
            element: PhantomData,
        })
    }

    fn fold(&self, acc: &mut [u8], other: &[u8]) -> std::result::Result<(), String> {
        fold_with::<T>(self.op, acc, other, false)
    }

    fn folds_right(&self) -> bool {
        true
    }

    fn fold_right(&self, left: &[u8], acc: &mut [u8]) -> std::result::Result<(), String> {
        fold_with::<T>(self.op, acc, left, true)
    }
}

/// Folds `other` into `acc` with `op` on `T`: `acc ⊕ other`, or `other ⊕ acc` when
/// `other_first`.
fn fold_with<T: Element>(
    op: ReduceOp,
    acc: &mut [u8],
    other: &[u8],
    other_first: bool,
) -> std::result::Result<(), String> {
    let acc = bytemuck::try_cast_slice_mut(acc).map_err(|e| e.to_string())?;
    let other = bytemuck::try_cast_slice(other).map_err(|e| e.to_string())?;
    match other_first {
        false => op.apply::<T>(acc, other),
        true => op.apply_right::<T>(other, acc),
    }
    .map_err(|e| e.to_string())
}

// `builtin` names the first ten operators by their place in `ReduceOp::ALL`.
const _: () = assert!(ReduceOp::ALL.len() >= 10);

/// The run's operator for `op`, the `code`-th of [`ReduceOp::ALL`].
fn builtin<T: Element>(op: ReduceOp, code: u64) -> Box<dyn Reducer> {
    macro_rules! by_code {
        ($($i:literal)*) => {
            match code {
                $($i => Box::new(Builtin::<T, $i>(PhantomData)),)*
                _ => Box::new(Other::<T> { op, element: PhantomData }),
            }
        };
    }
    by_code!(0 1 2 3 4 5 6 7 8 9)
}

/// A user operator on `T`, always applied in member order.
struct User<T, F> {
    op: UserOp<F>,
    element: PhantomData<fn() -> T>,
}

impl<T: Element, F: Fn(&mut [T], &[T]) + Clone + Send + 'static> Reducer for User<T, F> {
    fn block(&self) -> u64 {
        (self.op.block_elements() * std::mem::size_of::<T>()) as u64
    }

    fn boxed(&self) -> Box<dyn Reducer> {
        Box::new(User::<T, F> {
            op: self.op.clone(),
            element: PhantomData,
        })
    }

    fn fold(&self, acc: &mut [u8], other: &[u8]) -> std::result::Result<(), String> {
        let acc = bytemuck::try_cast_slice_mut(acc).map_err(|e| e.to_string())?;
        let other = bytemuck::try_cast_slice(other).map_err(|e| e.to_string())?;
        self.op.apply(acc, other).map_err(|e| e.to_string())
    }
}

/// The algorithm forced by `GASPI_COLL_ALLREDUCE`, read and parsed once (matching the name
/// on every call cost an 8 B allreduce a tenth of its entry); a bad name is reported on
/// every call.
fn forced() -> Result<Option<AllreduceAlgo>> {
    static FORCED: OnceLock<std::result::Result<Option<AllreduceAlgo>, String>> = OnceLock::new();
    let forced = FORCED.get_or_init(|| {
        match std::env::var("GASPI_COLL_ALLREDUCE")
            .ok()
            .filter(|v| !v.is_empty())
            .as_deref()
        {
            None => Ok(None),
            Some("doubling") => Ok(Some(AllreduceAlgo::Doubling)),
            Some("rabenseifner") => Ok(Some(AllreduceAlgo::Rabenseifner)),
            Some(name) => Err(name.to_string()),
        }
    });
    match forced {
        Ok(algo) => Ok(*algo),
        Err(name) => Err(Error::UnknownAlgorithm {
            op: "allreduce",
            name: name.clone(),
        }),
    }
}

/// Identifies element type `T` in signatures, the same in every process of one build:
/// its name's bytes, which tell the six element types apart.
fn element_code<T: Element>() -> u64 {
    std::any::type_name::<T>()
        .bytes()
        .fold(0, |code, b| code.rotate_left(8) ^ u64::from(b))
}

impl<'c> Team<'c> {
    /// Non-blocking allreduce: the element-wise reduction with `op` of every member's `src`
    /// into every member's `dst` (the same length everywhere).
    ///
    /// # Guarantees
    /// * The fold order is fixed by member index (the runtime's tree, see
    ///   [`gaspi::Context::allreduce`]): the result is bitwise identical on every member and in
    ///   every run with the same inputs and team size, floating point included, whichever
    ///   algorithm the length selects; but for the sign and payload of a NaN result, which
    ///   the processor chooses (see [`gaspi::ReduceOp`]).
    /// * After [`gaspi::Error::Timeout`] from [`Handle::wait_sync`], call it again to
    ///   continue; `dst` is written only when the reduction completes here.
    /// * The operator, the element type, the length, the sync mode and the algorithm travel
    ///   in every notification: a member that called with others (or another collective) is
    ///   named ([`Error::Mismatch`]) by the members that hear from it before any of its data
    ///   is folded, since every put waits for its receiver's credit, which carries them; the
    ///   members that do not hear from it wait until their timeout. An empty vector takes
    ///   every step too (its puts carry no data), so a member passing one where others pass
    ///   more is found alike.
    ///
    /// # Errors
    /// [`Error::BufferTooShort`] for `src` and `dst` of different lengths;
    /// [`gaspi::Error::Unsupported`] for a bitwise or logical operator on floats;
    /// [`Error::Flags`]; [`Error::TooLarge`] only when a single block of the operator does
    /// not fit a lane of the team's [`Capacity`](crate::Capacity) (a longer vector runs as
    /// pieces of whole blocks, each reduced in member order); [`Error::UnknownAlgorithm`]
    /// for a bad `GASPI_COLL_ALLREDUCE`.
    pub fn allreduce_nb<'t, 'b, T: Element>(
        &'t self,
        src: &'b [T],
        dst: &'b mut [T],
        op: ReduceOp,
        flags: Flags,
    ) -> Result<Handle<'t, 'b>> {
        self.builtin(src, dst, op, flags, Lend::Now)
    }

    /// Blocking [`allreduce_nb`](Self::allreduce_nb), synced within `timeout`. A timeout
    /// leaves this member's part to finish without its output (`dst` is not written), as a
    /// dropped [`Handle`] does: the rest of that part is taken by this member's later calls
    /// on the team, so make one before waiting elsewhere, or the members that need it wait
    /// until their timeout. Use the non-blocking form to continue after a timeout.
    ///
    /// # Errors
    /// As for [`allreduce_nb`](Self::allreduce_nb) and [`Handle::wait_sync`].
    pub fn allreduce<T: Element>(
        &self,
        src: &[T],
        dst: &mut [T],
        op: ReduceOp,
        flags: Flags,
        timeout: Timeout,
    ) -> Result<()> {
        self.builtin(src, dst, op, flags, Lend::Late)?
            .wait_sync(timeout)
    }

    /// [`allreduce_nb`](Self::allreduce_nb) with a user operator, called with its operands
    /// in member order (also when declared commutative) on whole blocks; the vector must be
    /// a whole number of its blocks. The run owns a clone of `op`, so that any thread of the
    /// team may fold, also after the handle was dropped. Members cannot tell each other's
    /// functions apart: the block size is checked, the function is trusted to be the same.
    ///
    /// # Errors
    /// As for [`allreduce_nb`](Self::allreduce_nb); [`Error::PartialBlock`];
    /// [`gaspi::Error::Unsupported`] for a block of zero elements, [`gaspi::Error::Limit`]
    /// for one of more bytes than an address can count.
    ///
    /// # Panics
    /// When the operator panics, the collective fails on this member, and the panic goes on
    /// to the call that syncs its handle (for the blocking form, that call itself), with
    /// the operator's payload, whichever thread of the team took the fold: the other calls
    /// on the team, in this thread or others, and a dropped handle see nothing of it, and
    /// this member's later collectives on the team run. The operator is not called again
    /// for that collective. The other members are not told: those whose part needed a step
    /// of this member's not taken before the fold (its steps after it, and a put still held
    /// back as the fold went: at two members too, e.g. through the fabric when this member
    /// initiates last) cannot complete it and time out, and, as after any
    /// collective a member leaves unfinished, its lane stays taken on them, so that every
    /// later collective on that lane (one in [`Capacity::lanes`](crate::Capacity)) times
    /// out on every member. After such a panic, drop the team on every member and make
    /// another.
    pub fn allreduce_with_nb<'t, 'b, T, F>(
        &'t self,
        src: &'b [T],
        dst: &'b mut [T],
        op: &UserOp<F>,
        flags: Flags,
    ) -> Result<Handle<'t, 'b>>
    where
        T: Element,
        F: Fn(&mut [T], &[T]) + Clone + Send + 'static,
    {
        self.user(src, dst, op, flags, Lend::Now)
    }

    /// Blocking [`allreduce_with_nb`](Self::allreduce_with_nb) (see
    /// [`allreduce`](Self::allreduce) on timeouts).
    ///
    /// # Errors
    /// As for [`allreduce_with_nb`](Self::allreduce_with_nb) and [`Handle::wait_sync`].
    ///
    /// # Panics
    /// With the operator's panic, as [`allreduce_with_nb`](Self::allreduce_with_nb) says.
    pub fn allreduce_with<T, F>(
        &self,
        src: &[T],
        dst: &mut [T],
        op: &UserOp<F>,
        flags: Flags,
        timeout: Timeout,
    ) -> Result<()>
    where
        T: Element,
        F: Fn(&mut [T], &[T]) + Clone + Send + 'static,
    {
        self.user(src, dst, op, flags, Lend::Late)?
            .wait_sync(timeout)
    }

    /// An allreduce with built-in operator `op`.
    fn builtin<'t, 'b, T: Element>(
        &'t self,
        src: &'b [T],
        dst: &'b mut [T],
        op: ReduceOp,
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>> {
        op.apply::<T>(&mut [], &[])?;
        let code = ReduceOp::ALL
            .iter()
            .position(|&o| o == op)
            .map_or(u64::MAX, |i| i as u64);
        self.reduce(src, dst, builtin::<T>(op, code), code, flags, lend)
    }

    /// An allreduce with user operator `op`.
    fn user<'t, 'b, T, F>(
        &'t self,
        src: &'b [T],
        dst: &'b mut [T],
        op: &UserOp<F>,
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>>
    where
        T: Element,
        F: Fn(&mut [T], &[T]) + Clone + Send + 'static,
    {
        // Not through `op.apply` on empty slices, which would call the user's function with
        // no elements: one written for whole blocks (a 2×2 matrix product indexing its four
        // elements) panics on that.
        op.check_block::<T>()?;
        let block = op.block_elements();
        if !src.len().is_multiple_of(block) {
            return Err(Error::PartialBlock {
                elements: src.len() as u64,
                block: block as u64,
            });
        }
        let reducer = Box::new(User::<T, F> {
            op: op.clone(),
            element: PhantomData,
        });
        // Built-in operators' codes are small: a user block cannot be taken for one.
        self.reduce(src, dst, reducer, 1 << 32 | block as u64, flags, lend)
    }

    fn reduce<'t, 'b, T: Element>(
        &'t self,
        src: &'b [T],
        dst: &'b mut [T],
        reducer: Box<dyn Reducer>,
        op_code: u64,
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>> {
        let (src, dst): (&[u8], &mut [u8]) =
            (bytemuck::cast_slice(src), bytemuck::cast_slice_mut(dst));
        if src.len() != dst.len() {
            return Err(Error::BufferTooShort {
                len: dst.len() as u64,
                need: src.len() as u64,
            });
        }
        let n = self.size();
        let (len, block) = (src.len() as u64, reducer.block());
        let forced = forced()?;
        let name = match algorithm(n, len / block, block, forced) {
            AllreduceAlgo::Doubling => "doubling",
            AllreduceAlgo::Rabenseifner => "rabenseifner",
        };
        // A vector cut into pieces reduces each with the algorithm its length selects.
        let build = |m: u32, cut: Cut| {
            let blocks = cut.of(len) / block;
            allreduce(n, m, blocks, block, algorithm(n, blocks, block, forced))
        };
        let words = [10, op_code, element_code::<T>(), len, block];
        let (src, dst) = (Input::Memory(src), Output::Memory(dst));
        let shape = Shape::reduction(len, stage_bound(n, len), block);
        self.start(
            &words,
            &[],
            flags,
            name,
            lend,
            shape,
            build,
            Some(reducer),
            src,
            dst,
        )
    }
}
