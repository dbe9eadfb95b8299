//! Provider discovery: the hints we send to `fi_getinfo` and what we take from its answer.
//!
//! We ask for what write-with-notification relies on instead of assuming it: RMA with remote CQ
//! data (the notification travels as the 64-bit immediate of the write), thread safety, and
//! write-after-write ordering. Ordering is requested first and, if no provider offers it,
//! requested again without; [`Capabilities::ordered_writes`] records what was granted, and the
//! memory-registration mode is always taken from the returned `fi_info`.

use std::ffi::{CStr, CString};
use std::ptr;

use gaspi_sys as sys;

use crate::{api_version, fabric_error};
use crate::{Error, Result};

/// An owned `fi_info` list (freed with `fi_freeinfo`).
pub(crate) struct Info(*mut sys::fi_info);

impl Info {
    pub(crate) fn as_ptr(&self) -> *mut sys::fi_info {
        self.0
    }

    /// The first entry, the one the runtime uses.
    pub(crate) fn first(&self) -> &sys::fi_info {
        // SAFETY: an Info is only constructed from a successful, non-empty fi_getinfo result, and
        // the list lives as long as self.
        unsafe { &*self.0 }
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: self.0 came from fi_getinfo and is freed exactly once.
        unsafe { sys::fi_freeinfo(self.0) }
    }
}

/// What the chosen provider granted, read off its `fi_info`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Capabilities {
    /// Provider name as libfabric reports it, e.g. `tcp;ofi_rxm`.
    pub provider: String,
    /// RMA addresses are virtual addresses (else offsets into the registration).
    pub virt_addr: bool,
    /// Registrations must be bound to the endpoint.
    pub mr_endpoint: bool,
    /// Writes are placed in order at the target (`FI_ORDER_RMA_WAW`/`FI_ORDER_WAW` granted).
    pub ordered_writes: bool,
    /// Largest write whose data the provider places before it processes a later write from
    /// the same endpoint (`max_order_waw_size`); 0 when it promises only the order in which
    /// writes are processed.
    pub ordered_write_size: u64,
    /// The provider executes remote atomics (`FI_ATOMIC`).
    pub atomics: bool,
    /// Messages of one sender arrive in order (`FI_ORDER_SAS` granted).
    pub ordered_sends: bool,
    /// Largest message `fi_inject*` accepts.
    pub inject_size: usize,
    /// Largest single message.
    pub max_msg_size: u64,
    /// The provider needs the application to drive data progress.
    pub manual_progress: bool,
}

impl Capabilities {
    /// The base to publish for a registration starting at `ptr`: RMA addresses are `base +
    /// offset`, where the provider wants virtual addresses or offsets into the registration.
    pub(crate) fn rma_base(&self, ptr: *const u8) -> u64 {
        if self.virt_addr {
            ptr as u64
        } else {
            0
        }
    }
}

const CAPS: u64 = (sys::FI_RMA
    | sys::FI_READ
    | sys::FI_WRITE
    | sys::FI_REMOTE_READ
    | sys::FI_REMOTE_WRITE
    | sys::FI_MSG
    | sys::FI_SEND
    | sys::FI_RECV) as u64;

const MR_MODES: u32 = sys::FI_MR_LOCAL
    | sys::FI_MR_VIRT_ADDR
    | sys::FI_MR_ALLOCATED
    | sys::FI_MR_PROV_KEY
    | sys::FI_MR_ENDPOINT;

const ORDER: u64 = sys::FI_ORDER_RMA_WAW | sys::FI_ORDER_WAW as u64;

/// Send-after-send ordering: passive messages of one sender arrive in order.
const SEND_ORDER: u64 = sys::FI_ORDER_SAS as u64;

/// Maps the user-facing provider names to libfabric's.
fn libfabric_name(requested: &str) -> &str {
    match requested {
        "tcp" => "tcp",
        "shm" => "shm",
        "verbs" => "verbs",
        other => other,
    }
}

/// Asks `fi_getinfo` for an RDM endpoint of `prov_name` (any provider when `None`) with
/// these orderings and atomics; `src_addr`, when given, is the endpoint's source address in
/// libfabric's `FI_ADDR_STR` form (`prefix://address`).
fn getinfo(
    prov_name: Option<&str>,
    order: u64,
    atomics: bool,
    src_addr: Option<&CStr>,
) -> Result<Option<Info>> {
    // SAFETY: fi_allocinfo returns a zeroed fi_info with its attribute structs allocated, or null.
    let hints = unsafe { sys::fi_allocinfo() };
    if hints.is_null() {
        return Err(Error::Invalid("fi_allocinfo returned null".into()));
    }
    let hints = Info(hints);
    let name = prov_name
        .map(CString::new)
        .transpose()
        .map_err(|_| Error::Invalid("provider name contains a NUL byte".into()))?;
    // SAFETY: the attribute pointers of an fi_allocinfo result are valid; prov_name must be
    // malloc'ed because fi_freeinfo frees it, hence strdup.
    unsafe {
        let h = &mut *hints.as_ptr();
        h.caps = if atomics {
            CAPS | sys::FI_ATOMIC as u64
        } else {
            CAPS
        };
        h.mode = 0;
        (*h.ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
        (*h.domain_attr).mr_mode = MR_MODES as i32;
        (*h.domain_attr).threading = sys::fi_threading_FI_THREAD_SAFE;
        (*h.tx_attr).msg_order = order;
        (*h.rx_attr).msg_order = order;
        if let Some(name) = &name {
            (*h.fabric_attr).prov_name = libc::strdup(name.as_ptr());
        }
        if let Some(addr) = src_addr {
            // fi_freeinfo frees src_addr too, hence strdup; the length counts the NUL.
            h.addr_format = sys::FI_ADDR_STR;
            h.src_addr = libc::strdup(addr.as_ptr()).cast();
            h.src_addrlen = addr.to_bytes_with_nul().len();
        }
    }
    let mut out: *mut sys::fi_info = ptr::null_mut();
    // SAFETY: hints is a valid fi_info; out receives an allocated list on success.
    let ret = unsafe {
        sys::fi_getinfo(
            api_version(),
            ptr::null(),
            ptr::null(),
            0,
            hints.as_ptr(),
            &mut out,
        )
    };
    if ret == -(sys::FI_ENODATA as i32) || (ret == 0 && out.is_null()) {
        return Ok(None);
    }
    if ret < 0 {
        return Err(fabric_error("fi_getinfo", ret as i64));
    }
    Ok(Some(Info(out)))
}

/// Finds the provider for `requested` and returns its `fi_info` and what it grants; an
/// endpoint of libfabric shm gets `shm_address` as its source address (see the `stale`
/// module).
pub(crate) fn select(
    requested: &str,
    require_unordered: bool,
    atomics: bool,
    shm_address: impl FnOnce() -> CString,
) -> Result<(Info, Capabilities)> {
    let name = libfabric_name(requested);
    let src = (name == "shm").then(shm_address);
    let src_addr = src.as_deref();
    // Most wanted first: write ordering (for notify) and send ordering (for passive
    // messages), then send ordering alone, then nothing.
    let wishes: &[u64] = if require_unordered {
        &[SEND_ORDER, 0]
    } else {
        &[ORDER | SEND_ORDER, SEND_ORDER, 0]
    };
    // Native atomics, when wanted, are asked for first, but a provider without them is still
    // usable: the runtime then reports atomics as unsupported.
    let atomic_wishes: &[bool] = if atomics { &[true, false] } else { &[false] };
    let mut found = None;
    'search: for &atomics in atomic_wishes {
        for &order in wishes {
            if let Some(info) = getinfo(Some(name), order, atomics, src_addr)? {
                found = Some((info, order));
                break 'search;
            }
        }
    }
    let Some((info, ordered)) = found else {
        return Err(Error::ProviderUnavailable {
            requested: requested.to_owned(),
            reason: "fi_getinfo found no RDM endpoint with RMA and messages for it".into(),
            available: available_providers().join(", "),
        });
    };
    let caps = capabilities(info.first(), ordered);
    // SAFETY: domain_attr of a returned fi_info is valid.
    let cq_data_size = unsafe { (*info.first().domain_attr).cq_data_size };
    if cq_data_size < 8 {
        return Err(Error::ProviderUnavailable {
            requested: requested.to_owned(),
            reason: format!(
                "{} carries only {cq_data_size} bytes of remote CQ data; notifications need 8",
                caps.provider
            ),
            available: available_providers().join(", "),
        });
    }
    if caps.inject_size < 8 {
        return Err(Error::ProviderUnavailable {
            requested: requested.to_owned(),
            reason: format!(
                "{} injects only {} bytes; notification-only writes need 8",
                caps.provider, caps.inject_size
            ),
            available: available_providers().join(", "),
        });
    }
    Ok((info, caps))
}

fn capabilities(info: &sys::fi_info, requested_order: u64) -> Capabilities {
    // SAFETY: the attribute pointers of a returned fi_info are valid and prov_name is a C string.
    unsafe {
        let fabric = &*info.fabric_attr;
        let domain = &*info.domain_attr;
        let tx = &*info.tx_attr;
        let ep = &*info.ep_attr;
        let mr_mode = domain.mr_mode as u32;
        let provider = if fabric.prov_name.is_null() {
            String::from("unknown")
        } else {
            CStr::from_ptr(fabric.prov_name)
                .to_string_lossy()
                .into_owned()
        };
        Capabilities {
            provider,
            virt_addr: mr_mode & sys::FI_MR_VIRT_ADDR != 0,
            mr_endpoint: mr_mode & sys::FI_MR_ENDPOINT != 0,
            ordered_writes: requested_order & ORDER == ORDER && tx.msg_order & ORDER == ORDER,
            ordered_write_size: ep.max_order_waw_size as u64,
            atomics: info.caps & sys::FI_ATOMIC as u64 != 0,
            ordered_sends: requested_order & SEND_ORDER != 0 && tx.msg_order & SEND_ORDER != 0,
            inject_size: tx.inject_size,
            max_msg_size: ep.max_msg_size as u64,
            manual_progress: domain.data_progress == sys::fi_progress_FI_PROGRESS_MANUAL,
        }
    }
}

/// The RDM providers with RMA that exist on this host (libfabric names, deduplicated).
pub fn available_providers() -> Vec<String> {
    let Ok(Some(info)) = getinfo(None, 0, false, None) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut cur = info.as_ptr();
    while !cur.is_null() {
        // SAFETY: cur walks the list returned by fi_getinfo, which stays alive with `info`.
        let entry = unsafe { &*cur };
        let name = capabilities(entry, 0).provider;
        if !names.contains(&name) {
            names.push(name);
        }
        cur = entry.next;
    }
    names
}
