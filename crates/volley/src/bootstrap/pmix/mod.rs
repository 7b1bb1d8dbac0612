//! Joining a job started by a PMIx launcher: Open MPI's `mpirun`, Slurm's `srun --mpi=pmix`,
//! PRRTE's `prterun`. A PMIx server sets `PMIX_NAMESPACE` in the environment of every process
//! it starts; the process then asks it (through `libpmix`, loaded at run time) who it is, and
//! exchanges endpoint information with a `Put`, a `Commit` and a `Fence` that collects every
//! rank's data. Shared-memory regions travel between the ranks of a node through a node-local
//! rendezvous (`node`), since file descriptors cannot go through PMIx.
//!
//! The client is process-wide (PMIx allows one per process): it is initialized by the first
//! runtime built under a PMIx launcher and finalized when that runtime finalizes.

mod ffi;
pub(crate) mod node;

use super::{BootstrapError, JobInfo};
use ffi::{Api, Data, Info, Proc, Value};
use std::ffi::{c_char, CStr, CString};
use std::sync::{Mutex, OnceLock};

/// The variable every PMIx server sets for the processes it starts.
pub const ENV_NAMESPACE: &str = "PMIX_NAMESPACE";
/// Overrides where `libpmix` is loaded from (a file name or a path).
pub const ENV_LIBRARY: &str = "VOLLEY_PMIX_LIBRARY";
/// Splits each host's ranks into emulated nodes of this many ranks (what `volley run
/// --ranks-per-node` does), so that the network transports can be exercised on one host.
pub const ENV_RANKS_PER_NODE: &str = "VOLLEY_RANKS_PER_NODE";

/// The Debian package that installs the library.
const PACKAGE: &str = "libpmix2";

const KEY_JOB_SIZE: &str = "pmix.job.size";
const KEY_LOCAL_SIZE: &str = "pmix.local.size";
const KEY_LOCAL_RANK: &str = "pmix.lrank";
const KEY_NODE_ID: &str = "pmix.nodeid";
const KEY_COLLECT_DATA: &str = "pmix.collect";

/// The loaded library, kept for the life of the process.
static API: OnceLock<Result<Api, String>> = OnceLock::new();
/// This process's name while the client is initialized.
static ACTIVE: Mutex<Option<Name>> = Mutex::new(None);

/// A process's name: namespace and rank.
#[derive(Debug, Clone)]
struct Name {
    namespace: CString,
    rank: u32,
}

impl Name {
    fn proc(&self, rank: u32) -> Proc {
        let mut p = Proc {
            nspace: [0; ffi::MAX_NSLEN + 1],
            rank,
        };
        for (dst, &b) in p
            .nspace
            .iter_mut()
            .zip(self.namespace.as_bytes().iter().take(ffi::MAX_NSLEN))
        {
            *dst = b as c_char;
        }
        p
    }
}

fn library_name() -> String {
    std::env::var(ENV_LIBRARY)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| ffi::LIBRARY.to_string())
}

fn api() -> Result<&'static Api, BootstrapError> {
    API.get_or_init(|| Api::load(&library_name()))
        .as_ref()
        .map_err(|why| {
            BootstrapError::Pmix(format!(
                "started by a PMIx launcher ({ENV_NAMESPACE} is set) but {why}; install the \
                 Debian package {PACKAGE}, or set {ENV_LIBRARY} to the library's path"
            ))
        })
}

/// Whether `libpmix` can be loaded here (for `volley info`): its name, or why not and what
/// to do.
pub fn library_status() -> Result<String, String> {
    match API.get_or_init(|| Api::load(&library_name())) {
        Ok(_) => Ok(library_name()),
        Err(why) => Err(format!(
            "{why}; install the Debian package {PACKAGE}, or set {ENV_LIBRARY} to its path"
        )),
    }
}

fn status_error(api: &Api, what: &str, status: i32) -> BootstrapError {
    // SAFETY: PMIx_Error_string returns a pointer to a static NUL-terminated string for any
    // status, known or not.
    let text = unsafe { CStr::from_ptr((api.error_string)(status)) };
    BootstrapError::Pmix(format!(
        "{what} failed: {} ({status})",
        text.to_string_lossy()
    ))
}

/// The initialized client: what a rank asks PMIx.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    api: &'static Api,
    me: Name,
}

/// Initializes the client (or returns the one already initialized). `namespace` is what
/// `PMIX_NAMESPACE` said; the server's answer is what counts.
pub(crate) fn client(namespace: &str) -> Result<Client, BootstrapError> {
    let api = api()?;
    let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(me) = active.as_ref() {
        return Ok(Client {
            api,
            me: me.clone(),
        });
    }
    let mut proc = Proc {
        nspace: [0; ffi::MAX_NSLEN + 1],
        rank: 0,
    };
    // SAFETY: `proc` is a valid pmix_proc_t for the library to fill in; no directives.
    let status = unsafe { (api.init)(&mut proc, std::ptr::null_mut(), 0) };
    if status != ffi::SUCCESS {
        return Err(status_error(
            api,
            &format!(
                "{ENV_NAMESPACE}={namespace} is set but its PMIx server cannot be reached (was \
                 this process started by mpirun or srun --mpi=pmix?): PMIx_Init"
            ),
            status,
        ));
    }
    // SAFETY: PMIx_Init NUL-terminated the namespace within its MAX_NSLEN + 1 bytes.
    let namespace = unsafe { CStr::from_ptr(proc.nspace.as_ptr()) }.to_owned();
    let me = Name {
        namespace,
        rank: proc.rank,
    };
    *active = Some(me.clone());
    Ok(Client { api, me })
}

/// Ends the job loudly through the launcher (`PMIx_Abort`), if this process is a PMIx client;
/// returns only if it is not (or the abort could not be delivered).
pub(crate) fn abort_job(status: i32, message: &str) {
    let Some(api) = API.get().and_then(|a| a.as_ref().ok()) else {
        return;
    };
    if ACTIVE.lock().map_or(true, |a| a.is_none()) {
        return;
    }
    let msg = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: `msg` is NUL-terminated; no process list means the whole namespace.
    unsafe { (api.abort)(status, msg.as_ptr(), std::ptr::null_mut(), 0) };
}

/// A value PMIx returned, freed on drop.
struct Got {
    api: &'static Api,
    value: *mut Value,
}

impl Drop for Got {
    fn drop(&mut self) {
        // SAFETY: PMIx_Get allocated the value with malloc (PMIX_VALUE_RELEASE's contract):
        // destruct frees what it points to, free the value itself; nothing else holds it.
        unsafe {
            (self.api.value_destruct)(self.value);
            libc::free(self.value.cast());
        }
    }
}

impl Client {
    /// This process's rank.
    pub(crate) fn rank(&self) -> u32 {
        self.me.rank
    }

    /// The job's namespace.
    pub(crate) fn namespace(&self) -> String {
        self.me.namespace.to_string_lossy().into_owned()
    }

    fn get(&self, rank: u32, key: &str) -> Result<Got, BootstrapError> {
        let ckey = CString::new(key).expect("keys have no NUL");
        let proc = self.me.proc(rank);
        let mut value: *mut Value = std::ptr::null_mut();
        // SAFETY: `proc` and `ckey` are valid for the call; PMIx_Get stores a freshly
        // allocated value in `value` on success.
        let status =
            unsafe { (self.api.get)(&proc, ckey.as_ptr(), std::ptr::null(), 0, &mut value) };
        if status != ffi::SUCCESS || value.is_null() {
            return Err(status_error(
                self.api,
                &format!("PMIx_Get({key}) of rank {}", Self::who(rank)),
                status,
            ));
        }
        Ok(Got {
            api: self.api,
            value,
        })
    }

    fn who(rank: u32) -> String {
        if rank == ffi::RANK_WILDCARD {
            "the job".into()
        } else {
            rank.to_string()
        }
    }

    fn wrong_type(key: &str, kind: u16, expected: &str) -> BootstrapError {
        BootstrapError::Pmix(format!(
            "PMIx gave {key} as data type {kind}, expected {expected}"
        ))
    }

    /// A `uint32_t` (or `pmix_rank_t`) value of `rank` (or of the job, with the wildcard).
    fn get_u32(&self, rank: u32, key: &str) -> Result<u32, BootstrapError> {
        let got = self.get(rank, key)?;
        // SAFETY: `got.value` points to the value PMIx_Get returned; the union member read is
        // the one its type tag names.
        unsafe {
            let v = &*got.value;
            match v.kind {
                ffi::types::UINT32 | ffi::types::PROC_RANK => Ok(v.data.uint32),
                ffi::types::UINT16 => Ok(u32::from(v.data.uint16)),
                k => Err(Self::wrong_type(key, k, "uint32")),
            }
        }
    }

    /// A `uint16_t` value.
    fn get_u16(&self, rank: u32, key: &str) -> Result<u16, BootstrapError> {
        let got = self.get(rank, key)?;
        // SAFETY: as in `get_u32`.
        unsafe {
            let v = &*got.value;
            match v.kind {
                ffi::types::UINT16 => Ok(v.data.uint16),
                k => Err(Self::wrong_type(key, k, "uint16")),
            }
        }
    }

    /// A string value.
    pub(crate) fn get_string(&self, rank: u32, key: &str) -> Result<String, BootstrapError> {
        let got = self.get(rank, key)?;
        // SAFETY: as in `get_u32`; a string value holds a NUL-terminated string or null.
        unsafe {
            let v = &*got.value;
            match v.kind {
                ffi::types::STRING if !v.data.string.is_null() => {
                    Ok(CStr::from_ptr(v.data.string).to_string_lossy().into_owned())
                }
                k => Err(Self::wrong_type(key, k, "string")),
            }
        }
    }

    /// Publishes `value` under `key` to every rank of the job (after [`Client::commit`] and
    /// a collecting [`Client::fence`]).
    pub(crate) fn put_string(&self, key: &str, value: &str) -> Result<(), BootstrapError> {
        let ckey = CString::new(key).expect("keys have no NUL");
        let cvalue = CString::new(value)
            .map_err(|_| BootstrapError::Pmix(format!("{key}'s value holds a NUL byte")))?;
        let mut v = Value {
            kind: ffi::types::STRING,
            data: Data { words: [0; 3] },
        };
        v.data.string = cvalue.as_ptr().cast_mut();
        // SAFETY: PMIx_Put copies the value (and the string it points to) before returning.
        let status = unsafe { (self.api.put)(ffi::SCOPE_GLOBAL, ckey.as_ptr(), &mut v) };
        self.check("PMIx_Put", status)
    }

    /// Pushes this process's puts to the server.
    pub(crate) fn commit(&self) -> Result<(), BootstrapError> {
        // SAFETY: no arguments.
        let status = unsafe { (self.api.commit)() };
        self.check("PMIx_Commit", status)
    }

    /// A barrier of the whole job; with `collect`, every rank's committed data is brought
    /// to every rank.
    pub(crate) fn fence(&self, collect: bool) -> Result<(), BootstrapError> {
        let all = self.me.proc(ffi::RANK_WILDCARD);
        let info = Info::flag(KEY_COLLECT_DATA, true);
        let (info_ptr, ninfo) = if collect {
            (&info as *const Info, 1)
        } else {
            (std::ptr::null(), 0)
        };
        // SAFETY: `all` and `info` outlive the (blocking) call.
        let status = unsafe { (self.api.fence)(&all, 1, info_ptr, ninfo) };
        self.check("PMIx_Fence", status)
    }

    /// Leaves PMIx (at finalize). Later runtimes of this process initialize it again.
    pub(crate) fn finalize(&self) -> Result<(), BootstrapError> {
        let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
        if active.take().is_none() {
            return Ok(());
        }
        // SAFETY: no directives.
        let status = unsafe { (self.api.finalize)(std::ptr::null(), 0) };
        self.check("PMIx_Finalize", status)
    }

    fn check(&self, what: &str, status: i32) -> Result<(), BootstrapError> {
        if status == ffi::SUCCESS {
            Ok(())
        } else {
            Err(status_error(self.api, what, status))
        }
    }
}

/// Leaves the job at finalize: a fence (the finalize barrier: no rank disconnects from its
/// server while another may still need it) and `PMIx_Finalize`, without which the launcher
/// would report this process as having exited improperly.
pub(crate) fn leave(namespace: &str) -> Result<(), BootstrapError> {
    let pmix = client(namespace)?;
    pmix.fence(false)?;
    pmix.finalize()
}

/// The identity of this process from its PMIx server. With [`ENV_RANKS_PER_NODE`] each host's
/// ranks are split into emulated nodes of that many ranks, in local-rank order.
pub(crate) fn job_info(
    namespace: &str,
    ranks_per_node: Option<usize>,
) -> Result<(JobInfo, Client), BootstrapError> {
    let pmix = client(namespace)?;
    let rank = pmix.rank();
    let size = pmix.get_u32(ffi::RANK_WILDCARD, KEY_JOB_SIZE)? as usize;
    let host_size = pmix.get_u32(ffi::RANK_WILDCARD, KEY_LOCAL_SIZE)? as usize;
    let host_rank = usize::from(pmix.get_u16(rank, KEY_LOCAL_RANK)?);
    let node_id = pmix.get_u32(rank, KEY_NODE_ID)? as usize;
    let per_node = ranks_per_node.unwrap_or(host_size).max(1);
    let group = host_rank / per_node;
    // Frames carry the key to keep jobs apart; every rank derives it alike from the
    // namespace, which the launcher makes unique.
    let key = fnv1a(pmix.namespace().as_bytes()) | 1;
    let info = JobInfo {
        rank: rank as usize,
        size,
        local_rank: host_rank % per_node,
        local_size: per_node.min(host_size.saturating_sub(group * per_node)),
        job_id: key,
        job_key: key,
        start: super::Start::Pmix {
            namespace: pmix.namespace(),
        },
        node: (node_id << 32) | group,
        host_ranks: host_size,
        host_cpus: None,
    };
    info.validate()?;
    Ok((info, pmix))
}

/// FNV-1a, 64 bits: a stable hash every rank computes alike.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_named_with_its_package() {
        let text = Api::load("libpmix-that-does-not-exist.so.9").unwrap_err();
        assert!(text.contains("libpmix-that-does-not-exist.so.9"), "{text}");
    }

    #[test]
    fn namespaces_hash_apart() {
        assert_ne!(fnv1a(b"slurm.pmix.41.0"), fnv1a(b"slurm.pmix.41.1"));
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
