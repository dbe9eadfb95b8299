//! Memory registrations: one per segment, closed when the segment is deleted.

use std::ffi::c_void;
use std::ptr;

use gaspi_sys as sys;

use super::{check, Endpoint};
use crate::error::Result;

/// A registered memory range; deregistered on drop.
pub(crate) struct MemoryRegion {
    mr: *mut sys::fid_mr,
    key: u64,
    desc: *mut c_void,
}

// SAFETY: a registration is an opaque provider handle; the domain is opened with
// FI_THREAD_SAFE, so using it (reading key/desc, closing it once on drop) from any thread is allowed.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above; shared access only reads the immutable key and descriptor.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers `len` bytes at `addr` for local and remote read/write access.
    ///
    /// `requested_key` is used when the provider lets the application choose keys; it must be
    /// unique per domain.
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid (mapped, not freed) until the returned value is dropped.
    pub(crate) unsafe fn register(
        ep: &Endpoint,
        addr: *mut u8,
        len: usize,
        requested_key: u64,
    ) -> Result<MemoryRegion> {
        let access =
            (sys::FI_READ | sys::FI_WRITE | sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE) as u64;
        let mut mr: *mut sys::fid_mr = ptr::null_mut();
        // SAFETY: the domain is open; the caller guarantees the range outlives the registration.
        let ret = unsafe {
            sys::fi_mr_reg(
                ep.domain(),
                addr as *const c_void,
                len,
                access,
                0,
                requested_key,
                0,
                &mut mr,
                ptr::null_mut(),
            )
        };
        check("fi_mr_reg", ret)?;
        let mut region = MemoryRegion {
            mr,
            key: 0,
            desc: ptr::null_mut(),
        };
        if ep.caps().mr_endpoint {
            // SAFETY: mr and the endpoint are open; FI_MR_ENDPOINT requires bind then enable.
            unsafe {
                check("fi_mr_bind", sys::fi_mr_bind(mr, ep.endpoint_fid(), 0))?;
                check("fi_mr_enable", sys::fi_mr_enable(mr))?;
            }
        }
        // SAFETY: mr is a valid, enabled registration.
        unsafe {
            region.key = sys::fi_mr_key(mr);
            region.desc = sys::fi_mr_desc(mr);
        }
        Ok(region)
    }

    /// The key remote ranks use to access this region.
    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    /// The local descriptor passed with local buffers (needed under `FI_MR_LOCAL`).
    pub(crate) fn desc(&self) -> *mut c_void {
        self.desc
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: mr was opened by fi_mr_reg and is closed exactly once here.
        unsafe {
            sys::fi_close(&mut (*self.mr).fid);
        }
    }
}
