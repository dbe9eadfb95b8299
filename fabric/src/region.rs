//! Registered memory: a [`Region`] is segment memory registered with the endpoint's domain, and
//! a [`Slice`] is a bounds-checked range of one, the only way an operation names local bytes.

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::Arc;

use gaspi_segments::SegmentMemory;
use gaspi_sys as sys;

use crate::endpoint::{Domain, Endpoint};
use crate::{check, Error, Result};

/// Memory registered for local and remote read and write access; deregistered when the last
/// reference goes, which is never before every operation using it has completed (operations
/// hold a reference).
pub struct Region {
    mr: *mut sys::fid_mr,
    key: u64,
    desc: *mut c_void,
    base: u64,
    // Handed to the domain after the registration is closed (see Drop).
    memory: ManuallyDrop<SegmentMemory>,
    domain: Arc<Domain>,
}

// SAFETY: a registration is an opaque provider handle of a domain opened with FI_THREAD_SAFE;
// the raw pointers are only read (key, descriptor) or closed once in Drop, which has exclusive
// access. The memory is SegmentMemory, itself Send + Sync.
unsafe impl Send for Region {}
// SAFETY: as above; shared access only reads immutable fields.
unsafe impl Sync for Region {}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("len", &self.memory.len())
            .field("key", &self.key)
            .finish()
    }
}

impl Region {
    /// Registers `memory` with `ep`'s domain for local and remote read and write access.
    ///
    /// `requested_key` is used where the provider lets the application choose keys; it must be
    /// unique among the domain's registrations.
    ///
    /// # Errors
    ///
    /// [`Error::Fabric`] when the provider refuses the registration.
    pub fn register<T>(
        ep: &Endpoint<T>,
        memory: SegmentMemory,
        requested_key: u64,
    ) -> Result<Arc<Region>> {
        let access =
            (sys::FI_READ | sys::FI_WRITE | sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE) as u64;
        let mut mr: *mut sys::fid_mr = ptr::null_mut();
        // SAFETY: the domain is open (the Arc keeps it so); `memory` is valid for its length
        // and is moved into the Region, which closes the registration before dropping it.
        let ret = unsafe {
            sys::fi_mr_reg(
                ep.domain().as_ptr(),
                memory.as_ptr() as *const c_void,
                memory.len(),
                access,
                0,
                requested_key,
                0,
                &mut mr,
                ptr::null_mut(),
            )
        };
        check("fi_mr_reg", ret)?;
        let mut region = Region {
            mr,
            key: 0,
            desc: ptr::null_mut(),
            base: ep.caps().rma_base(memory.as_ptr()),
            memory: ManuallyDrop::new(memory),
            domain: Arc::clone(ep.domain()),
        };
        if ep.caps().mr_endpoint {
            // SAFETY: mr and the endpoint are open; FI_MR_ENDPOINT requires bind then enable.
            // A failure drops `region`, which closes the registration.
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
        Ok(Arc::new(region))
    }

    /// The memory, for local access.
    pub fn memory(&self) -> &SegmentMemory {
        &self.memory
    }

    /// The key remote ranks use to access this region.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// What remote ranks add an offset to, to address byte `offset` of the region: its virtual
    /// address, or 0 where the provider addresses registrations by offset.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.memory.len()
    }

    /// Whether the region is empty (never: segment memory has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.memory.len() == 0
    }

    /// The bytes `offset..offset + len`, for an operation.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`] when the range does not lie within the region.
    // Inline: every operation through the fabric takes its slice on the way to the provider,
    // and called from the runtime (another crate, no LTO) the checks and the result's
    // return through memory cost as much again (an 8 B write_notify: ~50 instructions).
    #[inline]
    pub fn slice(self: &Arc<Self>, offset: u64, len: u64) -> Result<Slice<'_>> {
        let region_len = self.memory.len() as u64;
        // Both fit a usize once the range lies within the region's (usize) length.
        match (
            offset.checked_add(len),
            usize::try_from(offset),
            usize::try_from(len),
        ) {
            (Some(end), Ok(start), Ok(count)) if end <= region_len => Ok(Slice {
                region: self,
                offset: start,
                len: count,
            }),
            _ => Err(self.out_of_bounds(offset, len)),
        }
    }

    #[cold]
    fn out_of_bounds(&self, offset: u64, len: u64) -> Error {
        Error::OutOfBounds {
            offset,
            len,
            region_len: self.memory.len() as u64,
        }
    }

    pub(crate) fn desc(&self) -> *mut c_void {
        self.desc
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: mr was opened by fi_mr_reg and is closed exactly once, before the memory it
        // covers is released.
        unsafe {
            sys::fi_close(&mut (*self.mr).fid);
        }
        // SAFETY: taken once, here, and not used again: the region is being dropped.
        let memory = unsafe { ManuallyDrop::take(&mut self.memory) };
        self.domain.release(memory);
    }
}

/// A bounds-checked range of a [`Region`].
#[derive(Clone, Copy, Debug)]
pub struct Slice<'a> {
    pub(crate) region: &'a Arc<Region>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl Slice<'_> {
    /// The first byte, for libfabric: in bounds by construction.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.region.memory.as_ptr().wrapping_add(self.offset)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slice is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
