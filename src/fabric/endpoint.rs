//! The endpoint: one RDM endpoint per rank with its completion queue and address vector.
//!
//! One completion queue serves both directions: local completions of our own operations carry
//! the context we posted, and remote writes that carried CQ data (our notifications) arrive with
//! `FI_REMOTE_CQ_DATA` set. The queue is opened with a wait object when the provider offers one,
//! so an idle progress thread can sleep in `fi_cq_sread` instead of polling.

use std::ffi::c_void;
use std::ptr;

use gaspi_sys as sys;

use super::info::{self, Info};
use super::{check, fabric_error, Capabilities};
use crate::error::{Error, Result};

/// Owns the fids of one rank's communication endpoint, closed in reverse order on drop.
pub(crate) struct Endpoint {
    info: Info,
    caps: Capabilities,
    fabric: *mut sys::fid_fabric,
    domain: *mut sys::fid_domain,
    cq: *mut sys::fid_cq,
    av: *mut sys::fid_av,
    ep: *mut sys::fid_ep,
    cq_waitable: bool,
}

// SAFETY: the domain is opened with FI_THREAD_SAFE (checked by fi_getinfo against our hints), so
// libfabric serialises concurrent calls on these fids internally; the raw pointers are only
// closed in Drop, which has exclusive access.
unsafe impl Send for Endpoint {}
// SAFETY: see Send; every method takes &self and libfabric is thread-safe at FI_THREAD_SAFE.
unsafe impl Sync for Endpoint {}

/// Outcome of posting an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Posted {
    /// The operation is queued in the provider.
    Yes,
    /// The provider is out of resources (`-FI_EAGAIN`): drive progress and post again.
    Again,
}

/// Where a remote access goes: the peer, the address in its registration, and the key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteTarget {
    /// Index of the peer in the address vector (its rank).
    pub rank: u32,
    /// Remote address (virtual or offset, as the provider's mr_mode wants).
    pub addr: u64,
    /// Remote registration key.
    pub key: u64,
}

/// A completion read from the queue.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CqEvent {
    /// The context posted with the operation (0 for remote events).
    pub context: usize,
    /// Remote CQ data, when `remote` is set.
    pub data: u64,
    /// The event reports a remote write carrying CQ data.
    pub remote: bool,
    /// Bytes received, for the completion of a posted receive (0 otherwise).
    pub received: usize,
}

/// A failed operation, from `fi_cq_readerr`.
#[derive(Debug, Clone)]
pub(crate) struct CqFailure {
    /// The context posted with the failed operation.
    pub context: usize,
    /// What the provider reported.
    pub message: String,
    /// The libfabric error number (positive).
    pub code: i32,
    /// The provider's own error number (tcp: the socket's errno).
    pub prov_errno: i32,
}

impl Endpoint {
    /// Opens the provider's fabric, domain, completion queue, address vector and endpoint.
    pub(crate) fn open(
        provider: &str,
        require_unordered: bool,
        atomics: bool,
        cq_size: usize,
    ) -> Result<Self> {
        let (info, caps) = info::select(provider, require_unordered, atomics)?;
        let mut ep = Endpoint {
            info,
            caps,
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            ep: ptr::null_mut(),
            cq_waitable: false,
        };
        let fi = ep.info.as_ptr();
        // SAFETY: fi is a valid fi_info from fi_getinfo; each out-pointer is written only on
        // success, and whatever was opened is closed by Drop if a later step fails.
        unsafe {
            check(
                "fi_fabric",
                sys::fi_fabric((*fi).fabric_attr, &mut ep.fabric, ptr::null_mut()),
            )?;
            check(
                "fi_domain",
                sys::fi_domain(ep.fabric, fi, &mut ep.domain, ptr::null_mut()),
            )?;
            let mut cq_attr = sys::fi_cq_attr {
                size: cq_size,
                format: sys::fi_cq_format_FI_CQ_FORMAT_DATA,
                wait_obj: sys::fi_wait_obj_FI_WAIT_FD,
                ..Default::default()
            };
            if sys::fi_cq_open(ep.domain, &mut cq_attr, &mut ep.cq, ptr::null_mut()) == 0 {
                ep.cq_waitable = true;
            } else {
                cq_attr.wait_obj = sys::fi_wait_obj_FI_WAIT_NONE;
                check(
                    "fi_cq_open",
                    sys::fi_cq_open(ep.domain, &mut cq_attr, &mut ep.cq, ptr::null_mut()),
                )?;
            }
            let mut av_attr = sys::fi_av_attr {
                type_: sys::fi_av_type_FI_AV_TABLE,
                ..Default::default()
            };
            check(
                "fi_av_open",
                sys::fi_av_open(ep.domain, &mut av_attr, &mut ep.av, ptr::null_mut()),
            )?;
            check(
                "fi_endpoint",
                sys::fi_endpoint(ep.domain, fi, &mut ep.ep, ptr::null_mut()),
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
    pub(crate) fn caps(&self) -> &Capabilities {
        &self.caps
    }

    /// Whether `fi_cq_sread` can block on this queue.
    pub(crate) fn cq_waitable(&self) -> bool {
        self.cq_waitable
    }

    pub(super) fn domain(&self) -> *mut sys::fid_domain {
        self.domain
    }

    pub(super) fn endpoint_fid(&self) -> *mut sys::fid {
        // SAFETY: ep is open for the lifetime of self.
        unsafe { &mut (*self.ep).fid }
    }

    /// The endpoint's address, to be published to the other ranks.
    pub(crate) fn name(&self) -> Result<Vec<u8>> {
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

    /// Inserts every rank's address, in rank order, so that fi_addr == rank.
    pub(crate) fn insert_peers(&self, names: &[Vec<u8>]) -> Result<()> {
        for (rank, name) in names.iter().enumerate() {
            let mut addr: sys::fi_addr_t = 0;
            // SAFETY: name is a complete endpoint name produced by fi_getname on the peer; the
            // AV is a table, so addresses are assigned in insertion order.
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
                return Err(Error::Config(format!(
                    "address vector assigned {addr} to rank {rank}"
                )));
            }
        }
        Ok(())
    }

    /// Posts an RMA write of `len` bytes from `local`; with `data`, the target gets a completion
    /// carrying it once the payload is placed. With `delivery_complete`, the local completion
    /// is only reported once the data is placed at the target (`FI_DELIVERY_COMPLETE`).
    ///
    /// # Safety
    /// `local..local+len` must stay valid and unmodified until the operation completes, and
    /// `desc` must be its registration descriptor (or null where `FI_MR_LOCAL` is not required).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn write(
        &self,
        local: *const u8,
        len: usize,
        desc: *mut c_void,
        target: RemoteTarget,
        data: Option<u64>,
        context: usize,
        delivery_complete: bool,
    ) -> Result<Posted> {
        if delivery_complete {
            let iov = libc::iovec {
                iov_base: local as *mut c_void,
                iov_len: len,
            };
            let mut desc = desc;
            let rma = sys::fi_rma_iov {
                addr: target.addr,
                len,
                key: target.key,
            };
            let msg = sys::fi_msg_rma {
                msg_iov: &iov as *const libc::iovec as *const sys::iovec,
                desc: &mut desc,
                iov_count: 1,
                addr: target.rank as u64,
                rma_iov: &rma,
                rma_iov_count: 1,
                context: context as *mut c_void,
                data: data.unwrap_or(0),
            };
            let mut flags = (sys::FI_COMPLETION | sys::FI_DELIVERY_COMPLETE) as u64;
            if data.is_some() {
                flags |= sys::FI_REMOTE_CQ_DATA as u64;
            }
            // SAFETY: msg and everything it points to live until the call returns (the provider
            // copies the descriptors); the caller guarantees the payload buffer.
            let ret = unsafe { sys::fi_writemsg(self.ep, &msg, flags) };
            return posted("fi_writemsg", ret);
        }
        // SAFETY: the caller guarantees the buffer; the endpoint is open.
        let ret = unsafe {
            match data {
                Some(data) => sys::fi_writedata(
                    self.ep,
                    local as *const c_void,
                    len,
                    desc,
                    data,
                    target.rank as u64,
                    target.addr,
                    target.key,
                    context as *mut c_void,
                ),
                None => sys::fi_write(
                    self.ep,
                    local as *const c_void,
                    len,
                    desc,
                    target.rank as u64,
                    target.addr,
                    target.key,
                    context as *mut c_void,
                ),
            }
        };
        posted("fi_write", ret)
    }

    /// Posts a small write whose buffer is copied before the call returns; no completion is
    /// generated at the origin.
    pub(crate) fn inject_write(
        &self,
        bytes: &[u8],
        target: RemoteTarget,
        data: Option<u64>,
    ) -> Result<Posted> {
        // SAFETY: inject copies `bytes` before returning, so the borrow suffices.
        let ret = unsafe {
            match data {
                Some(data) => sys::fi_inject_writedata(
                    self.ep,
                    bytes.as_ptr() as *const c_void,
                    bytes.len(),
                    data,
                    target.rank as u64,
                    target.addr,
                    target.key,
                ),
                None => sys::fi_inject_write(
                    self.ep,
                    bytes.as_ptr() as *const c_void,
                    bytes.len(),
                    target.rank as u64,
                    target.addr,
                    target.key,
                ),
            }
        };
        posted("fi_inject_write", ret)
    }

    /// Posts a receive buffer for one incoming message.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and otherwise unaccessed until the receive completes (or
    /// the endpoint is closed), and `desc` must be its registration descriptor.
    pub(crate) unsafe fn post_recv(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        context: usize,
    ) -> Result<Posted> {
        // SAFETY: the caller guarantees the buffer; FI_ADDR_UNSPEC accepts any sender.
        let ret = unsafe {
            sys::fi_recv(
                self.ep,
                buf as *mut c_void,
                len,
                desc,
                u64::MAX,
                context as *mut c_void,
            )
        };
        posted("fi_recv", ret)
    }

    /// Posts a remote atomic on one u64 at `target`: fetch-and-add of `*operand`, or, with a
    /// `compare` word, compare-and-swap (`*operand` replaces the target if it equals
    /// `*compare`). The old value lands in `*result`.
    ///
    /// # Safety
    /// `operand`, `compare` and `result` must point to registered memory (described by `desc`)
    /// that stays valid, and is not otherwise accessed, until the operation completes.
    pub(crate) unsafe fn atomic_u64(
        &self,
        operand: *const u64,
        compare: Option<*const u64>,
        result: *mut u64,
        desc: *mut c_void,
        target: RemoteTarget,
        context: usize,
    ) -> Result<Posted> {
        // SAFETY: the caller guarantees the buffers; the endpoint is open.
        let ret = unsafe {
            match compare {
                None => sys::fi_fetch_atomic(
                    self.ep,
                    operand as *const c_void,
                    1,
                    desc,
                    result as *mut c_void,
                    desc,
                    u64::from(target.rank),
                    target.addr,
                    target.key,
                    sys::fi_datatype_FI_UINT64,
                    sys::fi_op_FI_SUM,
                    context as *mut c_void,
                ),
                Some(compare) => sys::fi_compare_atomic(
                    self.ep,
                    operand as *const c_void,
                    1,
                    desc,
                    compare as *const c_void,
                    desc,
                    result as *mut c_void,
                    desc,
                    u64::from(target.rank),
                    target.addr,
                    target.key,
                    sys::fi_datatype_FI_UINT64,
                    sys::fi_op_FI_CSWAP,
                    context as *mut c_void,
                ),
            }
        };
        posted("fi_atomic", ret)
    }

    /// Withdraws a posted receive. Returns whether the provider found it still pending.
    pub(crate) fn cancel(&self, context: usize) -> bool {
        // SAFETY: the endpoint is open; cancelling an unknown context is answered with an error.
        unsafe { sys::fi_cancel(self.endpoint_fid(), context as *mut c_void) == 0 }
    }

    /// Sends `len` bytes from `buf` as one message to `rank`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and unmodified until the send completes, and `desc` must
    /// be its registration descriptor.
    pub(crate) unsafe fn send(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        rank: u32,
        context: usize,
    ) -> Result<Posted> {
        // SAFETY: the caller guarantees the buffer; the endpoint is open.
        let ret = unsafe {
            sys::fi_send(
                self.ep,
                buf as *const c_void,
                len,
                desc,
                u64::from(rank),
                context as *mut c_void,
            )
        };
        posted("fi_send", ret)
    }

    /// Posts an RMA read of `len` bytes into `local`.
    ///
    /// # Safety
    /// `local..local+len` must stay valid and otherwise unaccessed until the read completes.
    pub(crate) unsafe fn read(
        &self,
        local: *mut u8,
        len: usize,
        desc: *mut c_void,
        target: RemoteTarget,
        context: usize,
    ) -> Result<Posted> {
        // SAFETY: the caller guarantees the buffer; the endpoint is open.
        let ret = unsafe {
            sys::fi_read(
                self.ep,
                local as *mut c_void,
                len,
                desc,
                target.rank as u64,
                target.addr,
                target.key,
                context as *mut c_void,
            )
        };
        posted("fi_read", ret)
    }

    /// Reads completions without blocking, driving the provider's progress.
    ///
    /// Returns how many events were written to `out`, or the failure of one operation.
    pub(crate) fn poll(&self, out: &mut [CqEvent]) -> Result<Result<usize, CqFailure>> {
        self.read_cq(out, None)
    }

    /// Like [`poll`](Self::poll) but sleeps up to `timeout_ms` in the provider's wait object
    /// when nothing is there. Only valid when [`cq_waitable`](Self::cq_waitable).
    pub(crate) fn wait(
        &self,
        out: &mut [CqEvent],
        timeout_ms: i32,
    ) -> Result<Result<usize, CqFailure>> {
        self.read_cq(out, Some(timeout_ms))
    }

    /// Wakes a thread blocked in [`wait`](Self::wait).
    pub(crate) fn signal(&self) {
        if self.cq_waitable {
            // SAFETY: the cq is open.
            unsafe {
                sys::fi_cq_signal(self.cq);
            }
        }
    }

    fn read_cq(
        &self,
        out: &mut [CqEvent],
        timeout_ms: Option<i32>,
    ) -> Result<Result<usize, CqFailure>> {
        const BATCH: usize = 16;
        let mut raw = [sys::fi_cq_data_entry::default(); BATCH];
        let count = out.len().min(BATCH);
        // SAFETY: raw has room for `count` entries of the format the queue was opened with.
        let ret = unsafe {
            match timeout_ms {
                Some(ms) => sys::fi_cq_sread(
                    self.cq,
                    raw.as_mut_ptr() as *mut c_void,
                    count,
                    ptr::null(),
                    ms,
                ),
                None => sys::fi_cq_read(self.cq, raw.as_mut_ptr() as *mut c_void, count),
            }
        };
        if ret >= 0 {
            let n = ret as usize;
            for (dst, src) in out.iter_mut().zip(&raw[..n]) {
                *dst = CqEvent {
                    context: src.op_context as usize,
                    data: src.data,
                    remote: src.flags & sys::FI_REMOTE_CQ_DATA as u64 != 0,
                    received: if src.flags & sys::FI_RECV as u64 != 0 {
                        src.len
                    } else {
                        0
                    },
                };
            }
            return Ok(Ok(n));
        }
        let code = (-ret) as u32;
        if code == sys::FI_EAGAIN || code == sys::FI_EINTR || code == sys::FI_ETIMEDOUT {
            return Ok(Ok(0));
        }
        if code == sys::FI_EAVAIL {
            return Ok(Err(self.read_error()?));
        }
        Err(fabric_error("fi_cq_read", ret as i64))
    }

    fn read_error(&self) -> Result<CqFailure> {
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
        Ok(CqFailure {
            context: entry.op_context as usize,
            message: format!("{} ({provider_msg})", super::strerror(entry.err)),
            code: entry.err,
            prov_errno: entry.prov_errno,
        })
    }
}

fn posted(call: &'static str, ret: isize) -> Result<Posted> {
    if ret == 0 {
        Ok(Posted::Yes)
    } else if ret == -(sys::FI_EAGAIN as isize) {
        Ok(Posted::Again)
    } else {
        Err(fabric_error(call, ret as i64))
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: each fid was opened by `open` (null when not) and is closed exactly once,
        // endpoint first, fabric last, as libfabric requires.
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
            if !self.domain.is_null() {
                sys::fi_close(&mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                sys::fi_close(&mut (*self.fabric).fid);
            }
        }
    }
}
