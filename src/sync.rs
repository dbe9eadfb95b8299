//! Owns the choice of synchronization primitives for the engine's concurrent counters: the
//! standard library's normally, loom's under `cfg(loom)` so that the models beside the code
//! (`engine::tracker`, `engine::handoff`, `timed_lock`) see every atomic access, lock and wait.

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard,
};

/// Locks `m`, ignoring poisoning: every lock of the engine guards plain bookkeeping that a
/// panicking holder cannot leave half-updated in a way later users could not cope with.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
