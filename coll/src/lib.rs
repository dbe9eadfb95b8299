//! Collectives built only on the public primitives of the [`gaspi`] runtime.
//!
//! This crate owns the collective operations (reduce_scatter_block, the GASNet collective set) that
//! will run as resumable schedules of `write_notify` steps. It is deliberately empty until the
//! foundation and groups issues have landed and been measured; depending on nothing but `gaspi`'s
//! public API keeps that boundary honest from the start.

pub use gaspi;
