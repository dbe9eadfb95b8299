//! The endpoint: one RDM endpoint per process with its completion queue and address vector,
//! and the hand-off of operation records to libfabric and back.
//!
//! One completion queue serves both directions: local completions of our own operations give
//! back the record we posted, and remote writes that carried CQ data arrive as
//! [`Event::Remote`]. The queue is opened with a file-descriptor wait object when the provider
//! offers one, so an idle thread can sleep on it ([`Endpoint::wait`]) instead of polling.
//!
//! # The hand-off
//! Posting boxes the caller's record together with a reference to the region the operation
//! uses, and passes the box's address as the libfabric context. libfabric returns every context
//! of an operation that was accepted exactly once, in a completion or an error entry (a
//! cancelled receive included), and contexts of remote events are never read. So each box is
//! taken back exactly once: when the operation completes, or at once when posting fails.

use std::collections::HashSet;
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use gaspi_segments::SegmentMemory;
use gaspi_sys as sys;

use crate::info::{self, Info};
use crate::region::{Region, Slice};
use crate::stale;
use crate::{check, fabric_error, Capabilities, Error, Result};

/// The fabric and domain, closed when the endpoint and every region are gone.
pub(crate) struct Domain {
    fabric: *mut sys::fid_fabric,
    domain: *mut sys::fid_domain,
    /// Set by [`Endpoint::keep_memory_until_closed`]: the memory of regions closed from then
    /// on waits in `kept` and is released after the domain closes, which is after the
    /// endpoint (it holds the domain).
    keeping: AtomicBool,
    kept: Mutex<Vec<SegmentMemory>>,
}

// SAFETY: the domain is opened with FI_THREAD_SAFE; the pointers are only passed to libfabric
// (which serialises internally) and closed once, in Drop.
unsafe impl Send for Domain {}
// SAFETY: as above.
unsafe impl Sync for Domain {}

impl Domain {
    pub(crate) fn as_ptr(&self) -> *mut sys::fid_domain {
        self.domain
    }

    /// Takes the memory of a region whose registration was closed: released now, or kept
    /// until the domain closes (see [`Endpoint::keep_memory_until_closed`]).
    pub(crate) fn release(&self, memory: SegmentMemory) {
        if self.keeping.load(Ordering::Acquire) {
            self.kept
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(memory);
        }
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: each fid was opened by Endpoint::open (null when not) and is closed exactly
        // once, domain before fabric; every registration and the endpoint are closed by now
        // (they hold this Domain).
        unsafe {
            if !self.domain.is_null() {
                sys::fi_close(&mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                sys::fi_close(&mut (*self.fabric).fid);
            }
        }
    }
}

/// The low bit of an untracked operation's context; boxes are aligned, so their addresses
/// never have it.
const UNTRACKED: usize = 1;

/// The context of an untracked operation with `tag` (which loses its top bit).
fn untracked(tag: usize) -> *mut c_void {
    ((tag << 1) | UNTRACKED) as *mut c_void
}

/// What an accepted operation's context points to.
struct OpBox<T> {
    op: T,
    /// Keeps the memory the operation uses registered and mapped until it completes.
    _keep: Arc<Region>,
    /// A posted receive, listed in `Endpoint::receives` for cancellation.
    receive: bool,
}

/// A thread's turn at reading the completion queue: at most one at a time, ended on drop
/// (also by a panic in the handler of an event).
struct Reading<'a>(&'a AtomicBool);

impl<'a> Reading<'a> {
    /// The turn, unless another thread has it. A flag rather than a mutex: one atomic
    /// exchange per read, and a plain store to end it, on every poll of the queue.
    fn begin(flag: &'a AtomicBool) -> Option<Reading<'a>> {
        flag.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Reading(flag))
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Owns the fids of one process's communication endpoint; `T` is the caller's record of an
/// operation, handed back when the operation completes.
pub struct Endpoint<T> {
    _info: Info,
    caps: Capabilities,
    domain: Arc<Domain>,
    cq: *mut sys::fid_cq,
    av: *mut sys::fid_av,
    ep: *mut sys::fid_ep,
    cq_waitable: bool,
    /// The queue's wait object as a file descriptor (`FI_GETWAIT`), when the provider gives
    /// one: [`wait`](Self::wait) sleeps on it until the provider has anything to do.
    wait_fd: Option<c_int>,
    /// Post injects through `fi_writemsg` with a context (see [`Endpoint::open`]).
    inject_with_context: bool,
    /// Contexts of posted receives not completed yet, for [`cancel_receives`](Self::cancel_receives).
    receives: Mutex<HashSet<usize>>,
    /// Set while a thread reads the completion queue and hands its events on (see
    /// [`poll`](Self::poll)).
    reading: AtomicBool,
    /// Operations offered to the provider so far (see [`posts`](Self::posts)).
    posts: AtomicU64,
    _ops: PhantomData<fn(T) -> T>,
}

// SAFETY: the domain is opened with FI_THREAD_SAFE (checked by fi_getinfo against our hints), so
// libfabric serialises concurrent calls on these fids internally; the raw pointers are only
// closed in Drop, which has exclusive access. Records cross threads (posted on one, completed
// on another), hence `T: Send`.
unsafe impl<T: Send> Send for Endpoint<T> {}
// SAFETY: see Send; every method takes &self and libfabric is thread-safe at FI_THREAD_SAFE.
unsafe impl<T: Send> Sync for Endpoint<T> {}

/// Outcome of posting an operation that owns no record (an injected write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    /// The operation is queued in the provider.
    Yes,
    /// The provider is out of resources (`-FI_EAGAIN`): drive progress and post again.
    Again,
}

/// An operation the provider did not accept; its record comes back.
#[derive(Debug)]
pub enum Refused<T> {
    /// The provider is out of resources (`-FI_EAGAIN`): drive progress and post again.
    Busy(T),
    /// The provider refused the operation.
    Failed(Error, T),
}

/// Where a remote access goes: the peer, the address in its registration, and the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteTarget {
    /// Index of the peer in the address vector (its rank).
    pub rank: u32,
    /// Remote address (virtual or offset, as the provider's addressing wants: a region's
    /// [`base`](Region::base) plus the offset).
    pub addr: u64,
    /// Remote registration key.
    pub key: u64,
}

/// A failed operation, from `fi_cq_readerr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What the provider reported.
    pub message: String,
    /// The libfabric error number (positive). The provider's own number is only in
    /// `message`: tcp's is its thread's last `errno`, nothing to decide on.
    pub code: i32,
}

/// What the completion queue reported.
#[derive(Debug)]
pub enum Event<T> {
    /// An operation of ours completed locally.
    Done(T),
    /// A posted receive got a message of `len` bytes.
    Received {
        /// The receive's record.
        op: T,
        /// Bytes placed in the receive buffer.
        len: usize,
    },
    /// An operation of ours failed (`None` when the provider named no context).
    Failed {
        /// The failed operation's record.
        op: Option<T>,
        /// What went wrong.
        failure: Failure,
    },
    /// An operation posted without a record completed (see
    /// [`write_untracked`](Endpoint::write_untracked)), successfully or not.
    Untracked {
        /// The tag it was posted with.
        tag: usize,
        /// Why it failed, if it did.
        failure: Option<Failure>,
    },
    /// A remote write carrying CQ data was placed in one of our regions.
    Remote {
        /// The write's 64-bit completion data.
        data: u64,
    },
}

impl<T> Endpoint<T> {
    /// Opens the provider's fabric, domain, completion queue (of `cq_size` entries), address
    /// vector and endpoint. `require_unordered` ignores write ordering the provider would
    /// grant; `atomics` asks for `FI_ATOMIC` (taken when available).
    ///
    /// Over rxm (`tcp;ofi_rxm` and its kin) a bare inject reaches the connection's endpoint
    /// without a context, and if the connection breaks, libfabric 1.17's rxm dereferences that
    /// null context when it reads the failure, crashing the process (ofiwg/libfabric#7396;
    /// seen here when a peer dies). So there [`inject_write`](Self::inject_write) posts
    /// `fi_writemsg(FI_INJECT)` with an untracked context instead: rxm copies the bytes into a
    /// buffer of its own whose failure it can report, and its completion (or failure) comes
    /// back as an [`Event::Untracked`] whose tag is the target rank
    /// ([`injects_report`](Self::injects_report) says whether this endpoint does so).
    ///
    /// # Errors
    ///
    /// [`Error::ProviderUnavailable`] when no provider of that name gives an RDM endpoint with
    /// RMA, messages and 8 bytes of CQ data; [`Error::Fabric`] when opening a fid fails, and
    /// (`EBUSY`, naming the files) when the first shm endpoint of this process finds
    /// `/dev/shm` files of its pid and pid namespace that libfabric would take for its own
    /// region (`gaspi-ep-<pidns>-<pid>-<n>`: an shm endpoint is named so, see the `stale`
    /// module) and cannot remove them (another user's): those a dead process of this pid
    /// left, it removes ([`gaspi_segments::remove_stale_files`]).
    pub fn open(
        provider: &str,
        require_unordered: bool,
        atomics: bool,
        cq_size: usize,
    ) -> Result<Self> {
        let (info, caps) = info::select(
            provider,
            require_unordered,
            atomics,
            stale::next_shm_address,
        )?;
        let inject_with_context = caps.provider.contains("ofi_rxm");
        if caps.provider.split(';').any(|p| p == "shm") {
            stale::check_first_shm_endpoint()?;
        }
        let fi = info.as_ptr();
        let mut domain = Domain {
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            keeping: AtomicBool::new(false),
            kept: Mutex::new(Vec::new()),
        };
        // SAFETY: fi is a valid fi_info from fi_getinfo; each out-pointer is written only on
        // success, and whatever was opened is closed by Drop if a later step fails.
        unsafe {
            check(
                "fi_fabric",
                sys::fi_fabric((*fi).fabric_attr, &mut domain.fabric, ptr::null_mut()),
            )?;
            check(
                "fi_domain",
                sys::fi_domain(domain.fabric, fi, &mut domain.domain, ptr::null_mut()),
            )?;
        }
        let mut ep = Endpoint {
            _info: info,
            caps,
            domain: Arc::new(domain),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            ep: ptr::null_mut(),
            cq_waitable: false,
            wait_fd: None,
            inject_with_context,
            receives: Mutex::new(HashSet::new()),
            reading: AtomicBool::new(false),
            posts: AtomicU64::new(0),
            _ops: PhantomData,
        };
        let dom = ep.domain.as_ptr();
        // SAFETY: as above; the domain is open.
        unsafe {
            let mut cq_attr = sys::fi_cq_attr {
                size: cq_size,
                format: sys::fi_cq_format_FI_CQ_FORMAT_DATA,
                wait_obj: sys::fi_wait_obj_FI_WAIT_FD,
                ..Default::default()
            };
            if sys::fi_cq_open(dom, &mut cq_attr, &mut ep.cq, ptr::null_mut()) == 0 {
                ep.cq_waitable = true;
                let mut fd: c_int = -1;
                // A queue opened with FI_WAIT_FD hands its descriptor out as an int; the
                // queue owns it and closes it with itself.
                let got = sys::fi_control(
                    &mut (*ep.cq).fid,
                    sys::FI_GETWAIT as c_int,
                    (&mut fd as *mut c_int).cast(),
                );
                if got == 0 && fd >= 0 {
                    ep.wait_fd = Some(fd);
                }
            } else {
                cq_attr.wait_obj = sys::fi_wait_obj_FI_WAIT_NONE;
                check(
                    "fi_cq_open",
                    sys::fi_cq_open(dom, &mut cq_attr, &mut ep.cq, ptr::null_mut()),
                )?;
            }
            let mut av_attr = sys::fi_av_attr {
                type_: sys::fi_av_type_FI_AV_TABLE,
                ..Default::default()
            };
            check(
                "fi_av_open",
                sys::fi_av_open(dom, &mut av_attr, &mut ep.av, ptr::null_mut()),
            )?;
            check(
                "fi_endpoint",
                sys::fi_endpoint(dom, fi, &mut ep.ep, ptr::null_mut()),
            )?;
            check(
                "fi_ep_bind(av)",
                sys::fi_ep_bind(ep.ep, &mut (*ep.av).fid, 0),
            )?;
            check(
                "fi_ep_bind(cq)",
                sys::fi_ep_bind(
                    ep.ep,
                    &mut (*ep.cq).fid,
                    (sys::FI_TRANSMIT | sys::FI_RECV) as u64,
                ),
            )?;
            check("fi_enable", sys::fi_enable(ep.ep))?;
        }
        Ok(ep)
    }

    /// What the provider granted.
    pub fn caps(&self) -> &Capabilities {
        &self.caps
    }

    /// Whether an [`inject_write`](Self::inject_write) reports its completion or failure as an
    /// [`Event::Untracked`] tagged with the target rank (over rxm; see [`open`](Self::open)).
    pub fn injects_report(&self) -> bool {
        self.inject_with_context
    }

    /// Whether [`wait`](Self::wait) can sleep in the provider (a file-descriptor wait object).
    pub fn cq_waitable(&self) -> bool {
        self.cq_waitable
    }

    /// How many operations have been offered to the provider so far, accepted or not: a
    /// count that moves while some thread posts. For telling whether anybody posted since
    /// the last look (a progress thread stands aside while a user thread posts: both in the
    /// provider at once contend for its locks). Posts racing on several threads may count
    /// once; only a change means anything.
    pub fn posts(&self) -> u64 {
        self.posts.load(Ordering::Relaxed)
    }

    /// Counts a post in [`posts`](Self::posts). A load and a store rather than an atomic
    /// add: a hint needs no lock prefix on every post.
    fn count_post(&self) {
        let n = self.posts.load(Ordering::Relaxed);
        self.posts.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    pub(crate) fn domain(&self) -> &Arc<Domain> {
        &self.domain
    }

    /// Keeps the memory of every region closed from now on mapped until this endpoint and
    /// the domain are closed. For tearing down: a provider may still be receiving a peer's
    /// write into a region when its registration closes, and write the rest while the
    /// endpoint closes (seen over tcp: a rank crashed in `fi_close` of its endpoint, the
    /// provider copying a write of a peer that had not waited for it into segment memory
    /// already unmapped). Regions closed before this call, or while the context runs, release
    /// their memory at once.
    pub fn keep_memory_until_closed(&self) {
        self.domain.keeping.store(true, Ordering::Release);
    }

    pub(crate) fn endpoint_fid(&self) -> *mut sys::fid {
        // SAFETY: ep is open for the lifetime of self.
        unsafe { &mut (*self.ep).fid }
    }

    /// The endpoint's address, to be published to the other ranks.
    ///
    /// # Errors
    ///
    /// [`Error::Fabric`] when `fi_getname` fails.
    pub fn name(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: buf has len bytes; fi_getname writes at most len and updates it.
        let mut ret = unsafe {
            sys::fi_getname(
                self.endpoint_fid(),
                buf.as_mut_ptr() as *mut c_void,
                &mut len,
            )
        };
        if ret == -(sys::FI_ETOOSMALL as i32) {
            buf.resize(len, 0);
            // SAFETY: as above, with the size the provider asked for.
            ret = unsafe {
                sys::fi_getname(
                    self.endpoint_fid(),
                    buf.as_mut_ptr() as *mut c_void,
                    &mut len,
                )
            };
        }
        check("fi_getname", ret)?;
        buf.truncate(len);
        Ok(buf)
    }

    /// Inserts every rank's address, in rank order, so that a rank is its own address.
    ///
    /// # Errors
    ///
    /// [`Error::Fabric`] when an address is refused, [`Error::Invalid`] when the address
    /// vector numbers them differently.
    pub fn insert_peers(&self, names: &[Vec<u8>]) -> Result<()> {
        for (rank, name) in names.iter().enumerate() {
            let mut addr: sys::fi_addr_t = 0;
            // SAFETY: name is a byte buffer the AV reads `addrlen` bytes of (the provider's own
            // name length, as produced by fi_getname on the peer); the AV is a table, so
            // addresses are assigned in insertion order.
            let ret = unsafe {
                sys::fi_av_insert(
                    self.av,
                    name.as_ptr() as *const c_void,
                    1,
                    &mut addr,
                    0,
                    ptr::null_mut(),
                )
            };
            if ret != 1 {
                return Err(fabric_error("fi_av_insert", ret.min(-1) as i64));
            }
            if addr != rank as u64 {
                return Err(Error::Invalid(format!(
                    "the address vector assigned {addr} to rank {rank}"
                )));
            }
        }
        Ok(())
    }

    /// Boxes `op` with what it keeps alive, hands the box to `post` as the context, and takes
    /// it back if `post` reports that nothing was posted.
    fn post_op(
        &self,
        call: &'static str,
        op: T,
        keep: &Arc<Region>,
        receive: bool,
        post: impl FnOnce(*mut c_void) -> isize,
    ) -> Result<(), Refused<T>> {
        self.count_post();
        let boxed = Box::new(OpBox {
            op,
            _keep: Arc::clone(keep),
            receive,
        });
        let context = Box::into_raw(boxed);
        if receive {
            // Listed before posting: the receive may complete before `post` returns.
            self.lock_receives().insert(context as usize);
        }
        let ret = post(context.cast());
        if ret == 0 {
            return Ok(());
        }
        if receive {
            self.lock_receives().remove(&(context as usize));
        }
        // SAFETY: the provider did not accept the operation, so it never saw the context: this
        // is the only owner of the box made just above.
        let boxed = unsafe { Box::from_raw(context) };
        if ret == -(sys::FI_EAGAIN as isize) {
            Err(Refused::Busy(boxed.op))
        } else {
            Err(Refused::Failed(fabric_error(call, ret as i64), boxed.op))
        }
    }

    fn lock_receives(&self) -> std::sync::MutexGuard<'_, HashSet<usize>> {
        // The set holds plain addresses; a panic elsewhere cannot leave it inconsistent.
        self.receives.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Posts an RMA write of `src` to `target`; with `data`, the target gets a completion
    /// carrying it once the payload is placed. With `delivery_complete`, the local completion
    /// is only reported once the data is placed at the target (`FI_DELIVERY_COMPLETE`).
    ///
    /// # Errors
    ///
    /// [`Refused`] with the record when the provider did not accept the write.
    pub fn write(
        &self,
        src: Slice<'_>,
        target: RemoteTarget,
        data: Option<u64>,
        delivery_complete: bool,
        op: T,
    ) -> Result<(), Refused<T>> {
        let (local, len, desc) = (src.ptr(), src.len, src.region.desc());
        // A write of no bytes places nothing, so there is no delivery to wait for; and the shm
        // provider (libfabric 1.17) never completes one posted with `FI_DELIVERY_COMPLETE`.
        if delivery_complete && len > 0 {
            return self.post_op("fi_writemsg", op, src.region, false, |context| {
                let flags = (sys::FI_COMPLETION | sys::FI_DELIVERY_COMPLETE) as u64;
                // SAFETY: the payload lies in a registered region (bounds checked by Slice)
                // that the boxed context keeps alive until the write completes.
                unsafe { self.write_msg(local, len, desc, target, data, context, flags) }
            });
        }
        self.post_op("fi_write", op, src.region, false, |context| {
            // SAFETY: the payload lies in a registered region (bounds checked by Slice) that
            // the boxed context keeps alive until the write completes.
            unsafe { self.rma_write(local, len, desc, target, data, context) }
        })
    }

    /// `fi_writedata` with `data`, else `fi_write`.
    ///
    /// # Safety
    /// `local..local + len` must lie in the registered memory `desc` describes and stay
    /// valid and unmodified until the write completes.
    unsafe fn rma_write(
        &self,
        local: *const u8,
        len: usize,
        desc: *mut c_void,
        target: RemoteTarget,
        data: Option<u64>,
        context: *mut c_void,
    ) -> isize {
        // SAFETY: guaranteed by the caller; the endpoint is open.
        unsafe {
            match data {
                Some(data) => sys::fi_writedata(
                    self.ep,
                    local as *const c_void,
                    len,
                    desc,
                    data,
                    u64::from(target.rank),
                    target.addr,
                    target.key,
                    context,
                ),
                None => sys::fi_write(
                    self.ep,
                    local as *const c_void,
                    len,
                    desc,
                    u64::from(target.rank),
                    target.addr,
                    target.key,
                    context,
                ),
            }
        }
    }

    /// An inject, bare or (over rxm) with a context: see the provider note on
    /// [`open`](Self::open).
    ///
    /// # Safety
    /// `local..local + len` must be valid for reads for the call (inject copies it).
    unsafe fn inject(
        &self,
        local: *const u8,
        len: usize,
        target: RemoteTarget,
        data: Option<u64>,
    ) -> Result<Posted> {
        // SAFETY: guaranteed by the caller; rxm is the provider whose bare injects need the
        // context.
        unsafe {
            if self.inject_with_context {
                self.inject_with_context(local, len, target, data)
            } else {
                self.bare_inject(local, len, target, data)
            }
        }
    }

    /// `fi_inject_writedata` with `data`, else `fi_inject_write`, as a C program would call it.
    ///
    /// # Safety
    /// `local..local + len` must be valid for reads for the call (inject copies it), and over
    /// rxm the connection to `target.rank` must not break while the write is in flight (see
    /// [`inject`](Self::inject)).
    unsafe fn bare_inject(
        &self,
        local: *const u8,
        len: usize,
        target: RemoteTarget,
        data: Option<u64>,
    ) -> Result<Posted> {
        self.count_post();
        // SAFETY: guaranteed by the caller; the endpoint is open.
        let ret = unsafe {
            match data {
                Some(data) => sys::fi_inject_writedata(
                    self.ep,
                    local as *const c_void,
                    len,
                    data,
                    u64::from(target.rank),
                    target.addr,
                    target.key,
                ),
                None => sys::fi_inject_write(
                    self.ep,
                    local as *const c_void,
                    len,
                    u64::from(target.rank),
                    target.addr,
                    target.key,
                ),
            }
        };
        posted("fi_inject_write", ret)
    }

    /// The inject of [`inject`](Self::inject) as `fi_writemsg(FI_INJECT)`, with an untracked
    /// context whose tag is the target rank.
    ///
    /// # Safety
    /// `local..local + len` must be valid for reads for the call (inject copies it).
    unsafe fn inject_with_context(
        &self,
        local: *const u8,
        len: usize,
        target: RemoteTarget,
        data: Option<u64>,
    ) -> Result<Posted> {
        self.count_post();
        let context = untracked(target.rank as usize);
        // SAFETY: guaranteed by the caller; FI_INJECT copies the payload (no descriptor
        // needed) and the odd context is never taken for a box.
        let ret = unsafe {
            self.write_msg(
                local,
                len,
                ptr::null_mut(),
                target,
                data,
                context,
                u64::from(sys::FI_INJECT),
            )
        };
        posted("fi_writemsg(FI_INJECT)", ret)
    }

    /// `fi_writemsg` of one local range to `target` with `flags` (plus `FI_REMOTE_CQ_DATA`
    /// with `data`).
    ///
    /// # Safety
    /// `local..local + len` must be valid for reads for as long as the provider uses it
    /// (`FI_INJECT`: the call; otherwise until the completion), `desc` its registration
    /// descriptor where the provider needs one, and `context` a context the caller owns.
    #[allow(clippy::too_many_arguments)]
    unsafe fn write_msg(
        &self,
        local: *const u8,
        len: usize,
        mut desc: *mut c_void,
        target: RemoteTarget,
        data: Option<u64>,
        context: *mut c_void,
        mut flags: u64,
    ) -> isize {
        let iov = sys::iovec {
            iov_base: local as *mut c_void,
            iov_len: len,
        };
        let rma_iov = sys::fi_rma_iov {
            addr: target.addr,
            len,
            key: target.key,
        };
        let msg = sys::fi_msg_rma {
            msg_iov: &iov,
            desc: &mut desc,
            iov_count: 1,
            addr: u64::from(target.rank),
            rma_iov: &rma_iov,
            rma_iov_count: 1,
            context,
            data: data.unwrap_or(0),
        };
        if data.is_some() {
            flags |= u64::from(sys::FI_REMOTE_CQ_DATA);
        }
        // SAFETY: msg and everything it points to live until the call returns (the provider
        // copies the descriptors); the rest is the caller's guarantee.
        unsafe { sys::fi_writemsg(self.ep, &msg, flags) }
    }

    /// Posts a write like [`write`](Self::write) (without delivery completion), but with no
    /// record: its completion is reported as [`Event::Untracked`] carrying `tag` (whose top
    /// bit is lost). This is the bare libfabric call, for yardsticks that measure libfabric
    /// itself.
    ///
    /// # Safety
    /// Nothing keeps `src`'s region alive for the operation: the caller must keep the region
    /// (and so the memory and registration) alive and the bytes unmodified until it has read
    /// the completion.
    ///
    /// # Errors
    ///
    /// [`Error::Fabric`] when the provider refuses the write (`-FI_EAGAIN` is
    /// [`Posted::Again`]).
    pub unsafe fn write_untracked(
        &self,
        src: Slice<'_>,
        target: RemoteTarget,
        data: Option<u64>,
        tag: usize,
    ) -> Result<Posted> {
        self.count_post();
        let context = untracked(tag);
        let (local, len, desc) = (src.ptr(), src.len, src.region.desc());
        // SAFETY: the payload lies in a registered region (bounds checked by Slice) that the
        // caller keeps alive until the completion; the odd context is never taken for a box.
        let ret = unsafe { self.rma_write(local, len, desc, target, data, context) };
        posted("fi_write", ret)
    }

    /// The bare `fi_inject_write` (or `fi_inject_writedata` with `data`) of `bytes`, as a C
    /// program would post it: no completion, whatever the provider. This is for yardsticks
    /// that measure libfabric itself; everything else uses [`inject_write`](Self::inject_write).
    ///
    /// # Safety
    /// Over rxm (`tcp;ofi_rxm`), libfabric 1.17 crashes the process if the connection to
    /// `target.rank` breaks while this write is in flight (ofiwg/libfabric#7396): call it only
    /// where no peer can fail or be stopped.
    ///
    /// # Errors
    ///
    /// [`Error::Fabric`] when the provider refuses the write (`-FI_EAGAIN` is
    /// [`Posted::Again`]).
    pub unsafe fn inject_untracked(
        &self,
        bytes: &[u8],
        target: RemoteTarget,
        data: Option<u64>,
    ) -> Result<Posted> {
        // SAFETY: inject copies `bytes` before returning; the connection is the caller's.
        unsafe { self.bare_inject(bytes.as_ptr(), bytes.len(), target, data) }
    }

    /// Posts a small write (at most [`Capabilities::inject_size`] bytes) whose bytes are copied
    /// before the call returns. It generates no completion of its own, except where
    /// [`injects_report`](Self::injects_report): then an [`Event::Untracked`] tagged with the
    /// target rank.
    ///
    /// # Errors
    ///
    /// [`Error::Fabric`] when the provider refuses the write (`-FI_EAGAIN` is
    /// [`Posted::Again`]).
    pub fn inject_write(
        &self,
        bytes: &[u8],
        target: RemoteTarget,
        data: Option<u64>,
    ) -> Result<Posted> {
        // SAFETY: inject copies `bytes` before returning, so the borrow suffices.
        unsafe { self.inject(bytes.as_ptr(), bytes.len(), target, data) }
    }

    /// Like [`inject_write`](Self::inject_write), from registered memory: the provider copies
    /// `src` before the call returns (at most [`Capabilities::inject_size`] bytes).
    ///
    /// # Errors
    ///
    /// [`Error::Fabric`] when the provider refuses the write (`-FI_EAGAIN` is
    /// [`Posted::Again`]).
    pub fn inject_write_from(
        &self,
        src: Slice<'_>,
        target: RemoteTarget,
        data: Option<u64>,
    ) -> Result<Posted> {
        // SAFETY: the source lies in a registered region (bounds checked by Slice), borrowed
        // for the call, and inject copies it before returning.
        unsafe { self.inject(src.ptr(), src.len, target, data) }
    }

    /// Posts an RMA read of `target` into `dst`.
    ///
    /// # Errors
    ///
    /// [`Refused`] with the record when the provider did not accept the read.
    pub fn read(&self, dst: Slice<'_>, target: RemoteTarget, op: T) -> Result<(), Refused<T>> {
        let (local, len, desc) = (dst.ptr(), dst.len, dst.region.desc());
        self.post_op("fi_read", op, dst.region, false, |context| {
            // SAFETY: the destination lies in a registered region (bounds checked by Slice)
            // that the boxed context keeps alive until the read completes.
            unsafe {
                sys::fi_read(
                    self.ep,
                    local as *mut c_void,
                    len,
                    desc,
                    u64::from(target.rank),
                    target.addr,
                    target.key,
                    context,
                )
            }
        })
    }

    /// Sends `src` as one message to `rank`.
    ///
    /// # Errors
    ///
    /// [`Refused`] with the record when the provider did not accept the send.
    pub fn send(&self, src: Slice<'_>, rank: u32, op: T) -> Result<(), Refused<T>> {
        let (local, len, desc) = (src.ptr(), src.len, src.region.desc());
        self.post_op("fi_send", op, src.region, false, |context| {
            // SAFETY: the payload lies in a registered region (bounds checked by Slice) that
            // the boxed context keeps alive until the send completes.
            unsafe {
                sys::fi_send(
                    self.ep,
                    local as *const c_void,
                    len,
                    desc,
                    u64::from(rank),
                    context,
                )
            }
        })
    }

    /// Posts `dst` as a receive buffer for one incoming message from any rank; it completes
    /// as [`Event::Received`], or as [`Event::Failed`] once cancelled.
    ///
    /// # Errors
    ///
    /// [`Refused`] with the record when the provider did not accept the buffer.
    pub fn post_recv(&self, dst: Slice<'_>, op: T) -> Result<(), Refused<T>> {
        let (local, len, desc) = (dst.ptr(), dst.len, dst.region.desc());
        self.post_op("fi_recv", op, dst.region, true, |context| {
            // SAFETY: the buffer lies in a registered region (bounds checked by Slice) that
            // the boxed context keeps alive until the receive completes; FI_ADDR_UNSPEC
            // accepts any sender.
            unsafe { sys::fi_recv(self.ep, local as *mut c_void, len, desc, u64::MAX, context) }
        })
    }

    /// Cancels every posted receive; each then completes as [`Event::Failed`] (or, if a
    /// message was already being placed, as [`Event::Received`]).
    pub fn cancel_receives(&self) {
        let receives = self.lock_receives();
        for &context in receives.iter() {
            // SAFETY: the endpoint is open, and `context` is the context of a receive that has
            // not completed yet (completions remove it from the set under this lock before
            // the box is freed), so it names our own live operation.
            unsafe {
                sys::fi_cancel(self.endpoint_fid(), context as *mut c_void);
            }
        }
    }

    /// Posts a remote atomic on the u64 at `target`: fetch-and-add of the word in `operand`,
    /// or, with `compare`, compare-and-swap (`operand` replaces the target if it equals
    /// `compare`). The old value lands in `result`. All words are 8 bytes of one region.
    ///
    /// # Errors
    ///
    /// [`Refused`] with the record when the provider did not accept the atomic or the words
    /// are not 8 bytes of one region.
    pub fn atomic_u64(
        &self,
        operand: Slice<'_>,
        compare: Option<Slice<'_>>,
        result: Slice<'_>,
        target: RemoteTarget,
        op: T,
    ) -> Result<(), Refused<T>> {
        let words = [Some(operand), compare, Some(result)];
        let fits = words
            .iter()
            .flatten()
            .all(|w| w.len == 8 && Arc::ptr_eq(w.region, operand.region));
        if !fits {
            let e = Error::Invalid("an atomic's words must be 8 bytes of one region".into());
            return Err(Refused::Failed(e, op));
        }
        let desc = operand.region.desc();
        self.post_op("fi_atomic", op, operand.region, false, |context| {
            // SAFETY: the words lie in one registered region (checked above, bounds checked by
            // Slice) that the boxed context keeps alive until the atomic completes.
            unsafe {
                match compare {
                    None => sys::fi_fetch_atomic(
                        self.ep,
                        operand.ptr() as *const c_void,
                        1,
                        desc,
                        result.ptr() as *mut c_void,
                        desc,
                        u64::from(target.rank),
                        target.addr,
                        target.key,
                        sys::fi_datatype_FI_UINT64,
                        sys::fi_op_FI_SUM,
                        context,
                    ),
                    Some(compare) => sys::fi_compare_atomic(
                        self.ep,
                        operand.ptr() as *const c_void,
                        1,
                        desc,
                        compare.ptr() as *const c_void,
                        desc,
                        result.ptr() as *mut c_void,
                        desc,
                        u64::from(target.rank),
                        target.addr,
                        target.key,
                        sys::fi_datatype_FI_UINT64,
                        sys::fi_op_FI_CSWAP,
                        context,
                    ),
                }
            }
        })
    }

    /// Reads up to 16 completions without blocking, driving the provider's progress, and
    /// hands each to `each`. Returns how many there were.
    ///
    /// One thread at a time reads and hands on, so events reach `each` in the queue's order:
    /// two threads each reading a batch could hand the later batch on first, and a
    /// notification's older value then land after its newer one. A call that finds another
    /// thread reading returns 0 at once; that thread hands on what there is.
    ///
    /// # Errors
    ///
    /// [`Error::Fabric`] when the completion queue itself fails (not when an operation does:
    /// that is an [`Event::Failed`]).
    pub fn poll(&self, each: impl FnMut(Event<T>)) -> Result<usize> {
        self.read_cq(None, each)
    }

    /// Like [`poll`](Self::poll), but a call that finds another thread reading waits up to
    /// `limit` for that thread's turn to end (waking it if it sleeps in [`wait`](Self::wait))
    /// and then reads, instead of returning 0 at once. When it returns, every event taken
    /// from the queue before the call has been handed on, and what the queue held then is
    /// being read: for a caller that must know what arrived so far (a rank that judges a
    /// peer dead looks one last time for what the peer sent before it ended). Returns 0 when
    /// the turn did not end within `limit`.
    ///
    /// Must not be called from within `each` of a read of this endpoint, whose own turn it
    /// would wait for until `limit`.
    ///
    /// # Errors
    ///
    /// As for [`poll`](Self::poll).
    pub fn poll_settled(&self, limit: Duration, each: impl FnMut(Event<T>)) -> Result<usize> {
        // The other turn is a read and its handlers: short, unless its thread lost its core,
        // so a short nap between tries costs nothing worth a wake-up.
        const NAP: Duration = Duration::from_micros(50);
        let start = Instant::now();
        loop {
            if let Some(turn) = Reading::begin(&self.reading) {
                return self.read_cq_in(turn, None, each);
            }
            if start.elapsed() >= limit {
                return Ok(0);
            }
            self.signal();
            std::thread::sleep(NAP);
        }
    }

    /// Like [`poll`](Self::poll) but, when nothing is there, sleeps up to `timeout_ms` in the
    /// provider's wait object. Only sleeps when [`cq_waitable`](Self::cq_waitable).
    ///
    /// Where the queue's wait object is a file descriptor, the sleep ends as soon as the
    /// provider has anything to do — a completion, or traffic on one of its sockets, such as
    /// the next chunk of a large write arriving — and the call returns what the queue then
    /// holds, possibly nothing: the caller can tell a stream going on and poll through it.
    /// `fi_cq_sread` instead sleeps again after every socket event until a completion comes,
    /// a wake-up per chunk that cost a receiver a third of the bandwidth of one that polls.
    ///
    /// # Errors
    ///
    /// As for [`poll`](Self::poll).
    pub fn wait(&self, timeout_ms: i32, mut each: impl FnMut(Event<T>)) -> Result<usize> {
        let Some(fd) = self.wait_fd else {
            return self.read_cq(self.cq_waitable.then_some(timeout_ms), each);
        };
        let read = self.read_cq(None, &mut each)?;
        if read > 0 {
            return Ok(read);
        }
        // SAFETY: the cq is open; its fid is the first member of fid_cq.
        let mut fids = [unsafe { ptr::addr_of_mut!((*self.cq).fid) }];
        // SAFETY: the fabric and the cq are open; fi_trywait reads `fids` only.
        let quiet = unsafe { sys::fi_trywait(self.domain.fabric, fids.as_mut_ptr(), 1) } == 0;
        if quiet {
            let mut pollfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call. Its outcome (ready,
            // timed out, interrupted) needs no handling: the queue is read either way.
            unsafe {
                libc::poll(&mut pollfd, 1, timeout_ms);
            }
        }
        self.read_cq(None, each)
    }

    /// Wakes a thread sleeping in [`wait`](Self::wait).
    pub fn signal(&self) {
        if self.cq_waitable {
            // SAFETY: the cq is open.
            unsafe {
                sys::fi_cq_signal(self.cq);
            }
        }
    }

    /// Takes back the box behind a completion's context.
    ///
    /// # Safety
    /// `context` must be the non-null context of a completion (or error entry) of this
    /// endpoint's queue, reported for an operation that was accepted, and not taken back yet.
    unsafe fn take(&self, context: *mut c_void) -> T {
        // SAFETY: guaranteed by the caller: the context is a leaked Box<OpBox<T>> of ours that
        // libfabric returns exactly once.
        let boxed = unsafe { Box::from_raw(context.cast::<OpBox<T>>()) };
        if boxed.receive {
            self.lock_receives().remove(&(context as usize));
        }
        boxed.op
    }

    fn read_cq(&self, timeout_ms: Option<i32>, each: impl FnMut(Event<T>)) -> Result<usize> {
        // Not waited for: `each` may post, and a post refused by the provider drives
        // progress, which would wait here for itself.
        let Some(turn) = Reading::begin(&self.reading) else {
            return Ok(0);
        };
        self.read_cq_in(turn, timeout_ms, each)
    }

    /// [`read_cq`](Self::read_cq) in `_turn`, which ends when the events read were handed on.
    fn read_cq_in(
        &self,
        _turn: Reading<'_>,
        timeout_ms: Option<i32>,
        mut each: impl FnMut(Event<T>),
    ) -> Result<usize> {
        const BATCH: usize = 16;
        // Uninitialised: zeroing 16 entries (640 bytes) on every poll of an idle queue cost a
        // measurable share of a shared-memory ping-pong.
        let mut raw = [MaybeUninit::<sys::fi_cq_data_entry>::uninit(); BATCH];
        // SAFETY: raw has room for BATCH entries of the format the queue was opened with.
        let ret = unsafe {
            match timeout_ms {
                Some(ms) => sys::fi_cq_sread(
                    self.cq,
                    raw.as_mut_ptr() as *mut c_void,
                    BATCH,
                    ptr::null(),
                    ms,
                ),
                None => sys::fi_cq_read(self.cq, raw.as_mut_ptr() as *mut c_void, BATCH),
            }
        };
        if ret >= 0 {
            let n = ret as usize;
            for entry in &raw[..n] {
                // SAFETY: fi_cq_read wrote the first `n` entries.
                let entry = unsafe { entry.assume_init_ref() };
                if entry.flags & sys::FI_REMOTE_CQ_DATA as u64 != 0 {
                    // A remote event's context is not ours to read.
                    each(Event::Remote { data: entry.data });
                    continue;
                }
                let Some(context) = NonNull::new(entry.op_context) else {
                    continue;
                };
                if context.as_ptr() as usize & UNTRACKED != 0 {
                    let tag = context.as_ptr() as usize >> 1;
                    each(Event::Untracked { tag, failure: None });
                    continue;
                }
                // SAFETY: a local completion of this queue carries the context of one of our
                // accepted operations, reported exactly once.
                let op = unsafe { self.take(context.as_ptr()) };
                if entry.flags & sys::FI_RECV as u64 != 0 {
                    each(Event::Received { op, len: entry.len });
                } else {
                    each(Event::Done(op));
                }
            }
            return Ok(n);
        }
        let code = (-ret) as u32;
        if code == sys::FI_EAGAIN || code == sys::FI_EINTR || code == sys::FI_ETIMEDOUT {
            return Ok(0);
        }
        if code == sys::FI_EAVAIL {
            let (context, failure) = self.read_error()?;
            if context as usize & UNTRACKED != 0 {
                let tag = context as usize >> 1;
                each(Event::Untracked {
                    tag,
                    failure: Some(failure),
                });
                return Ok(1);
            }
            let op = NonNull::new(context).map(|context| {
                // SAFETY: an error entry carries the context of one of our accepted
                // operations (remote writes report no errors here), reported exactly once.
                unsafe { self.take(context.as_ptr()) }
            });
            each(Event::Failed { op, failure });
            return Ok(1);
        }
        Err(fabric_error("fi_cq_read", ret as i64))
    }

    fn read_error(&self) -> Result<(*mut c_void, Failure)> {
        let mut entry = sys::fi_cq_err_entry::default();
        // SAFETY: entry is a zeroed fi_cq_err_entry (err_data_size 0: the provider keeps its
        // own error data buffer, valid until the next read).
        let ret = unsafe { sys::fi_cq_readerr(self.cq, &mut entry, 0) };
        if ret < 0 {
            return Err(fabric_error("fi_cq_readerr", ret as i64));
        }
        // SAFETY: fi_cq_strerror returns a NUL-terminated string owned by the provider (or
        // null), valid until the next call on this cq; we copy it immediately.
        let provider_msg = unsafe {
            let s = sys::fi_cq_strerror(
                self.cq,
                entry.prov_errno,
                entry.err_data,
                ptr::null_mut(),
                0,
            );
            if s.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(s).to_string_lossy().into_owned()
            }
        };
        Ok((
            entry.op_context,
            Failure {
                // Labelled as the provider's: tcp's is its thread's last `errno`, often
                // unrelated to the failure ("Operation canceled (No such file or directory)").
                message: if provider_msg.is_empty() {
                    crate::strerror(entry.err)
                } else {
                    format!("{}; provider: {provider_msg}", crate::strerror(entry.err))
                },
                code: entry.err,
            },
        ))
    }
}

// Inline, with the error built apart: called, the check of every inject's return cost 20
// instructions, a tenth of what an 8 B write_notify adds to libfabric's inject.
#[inline]
fn posted(call: &'static str, ret: isize) -> Result<Posted> {
    if ret == 0 {
        Ok(Posted::Yes)
    } else if ret == -(sys::FI_EAGAIN as isize) {
        Ok(Posted::Again)
    } else {
        Err(refused(call, ret))
    }
}

#[cold]
#[inline(never)]
fn refused(call: &'static str, ret: isize) -> Error {
    fabric_error(call, ret as i64)
}

impl<T> Drop for Endpoint<T> {
    fn drop(&mut self) {
        // SAFETY: each fid was opened by `open` (null when not) and is closed exactly once,
        // endpoint first; the domain and fabric close when the last region is gone. Records of
        // operations still outstanding are never taken back: their boxes (and the regions
        // they keep) are leaked rather than freed under a provider that may still hold them.
        unsafe {
            if !self.ep.is_null() {
                sys::fi_close(&mut (*self.ep).fid);
            }
            if !self.av.is_null() {
                sys::fi_close(&mut (*self.av).fid);
            }
            if !self.cq.is_null() {
                sys::fi_close(&mut (*self.cq).fid);
            }
        }
    }
}
