//! The outbox: small runtime writes that must go out without blocking anybody.
//!
//! Notifications the runtime sends on its own account (a deletion's news, the reply to an
//! atomic, the notification of an atomic executed by the provider) are injected at once when
//! the provider has room, and otherwise kept here, in order, and injected by the progress
//! engine later. Writes to one rank keep their order; a rank whose provider queue is full
//! does not hold up writes to the others. One towards a rank that died is dropped: nobody
//! waits for it any more.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use gaspi_fabric::{Posted, RemoteTarget};

use crate::context::Inner;
use crate::engine::Retry;
use crate::error::Rank;
use crate::sync::{lock, AtomicBool, Mutex};
use crate::system::{layout, SCRATCH_LEN};
use crate::wire::WireNotification;

/// Bytes an outbox write carries at most.
pub(crate) const MAX_BYTES: usize = 16;

/// One injected write: `len` bytes of `bytes` to `target`, with `data` as its completion data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Write {
    pub(crate) target: RemoteTarget,
    pub(crate) bytes: [u8; MAX_BYTES],
    pub(crate) len: usize,
    pub(crate) data: u64,
}

/// Writes waiting for room at the provider.
pub(crate) struct Outbox {
    waiting: Mutex<VecDeque<Write>>,
    scheduled: AtomicBool,
    me: Weak<Outbox>,
}

impl Outbox {
    pub(crate) fn new() -> Arc<Outbox> {
        Arc::new_cyclic(|me| Outbox {
            waiting: Mutex::new(VecDeque::new()),
            scheduled: AtomicBool::new(false),
            me: me.clone(),
        })
    }

    /// Injects `write` now if nothing waits before it and the provider has room; else keeps
    /// it for the progress engine.
    pub(crate) fn send(&self, inner: &Inner, write: Write) {
        let mut waiting = lock(&self.waiting);
        let rank = write.target.rank;
        let behind = waiting.iter().any(|w| w.target.rank == rank);
        if !behind && !matches!(inject(inner, &write), Some(Posted::Again)) {
            return;
        }
        waiting.push_back(write);
        drop(waiting);
        if let Some(me) = self.me.upgrade() {
            inner.engine.schedule(me as Arc<dyn Retry>);
        }
    }
}

impl Outbox {
    /// Sends notification `wire` to `rank` as a notification-only write into its scratch
    /// word, through the outbox.
    pub(crate) fn notify(&self, inner: &Inner, rank: Rank, wire: WireNotification) {
        self.send(
            inner,
            Write {
                target: inner.system.target(rank, layout::SCRATCH),
                bytes: [0; MAX_BYTES],
                len: SCRATCH_LEN as usize,
                data: wire.encode(),
            },
        );
    }
}

/// Injects `write`; `None` when its target is dead or refused it for good (dropped).
fn inject(inner: &Inner, write: &Write) -> Option<Posted> {
    if inner.health.known(write.target.rank).is_some() {
        return None;
    }
    inner
        .ep
        .inject_write(&write.bytes[..write.len], write.target, Some(write.data))
        .ok()
}

impl Retry for Outbox {
    fn scheduled(&self) -> &AtomicBool {
        &self.scheduled
    }

    fn retry(&self, inner: &Inner) -> bool {
        let mut waiting = lock(&self.waiting);
        let mut blocked: Vec<u32> = Vec::new();
        waiting.retain(|write| {
            let rank = write.target.rank;
            if blocked.contains(&rank) {
                return true;
            }
            let refused = inject(inner, write) == Some(Posted::Again);
            if refused {
                blocked.push(rank);
            }
            refused
        });
        !waiting.is_empty()
    }
}
