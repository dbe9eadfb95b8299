//! Owns the choice of synchronization primitives: the standard library's normally, loom's
//! under `cfg(loom)` so that the model checker sees every atomic access, lock and wait.

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicBool, AtomicU32, Ordering},
    Condvar, Mutex,
};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
