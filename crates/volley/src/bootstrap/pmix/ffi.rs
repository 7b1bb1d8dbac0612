//! The few libpmix entry points volley calls, loaded at run time so that the default build has
//! no C dependency, and the C layouts they take (PMIx 4, `pmix_common.h`). A test compiles a
//! C program against the installed header and compares its sizes and offsets with these.

use libloading::Library;
use std::ffi::{c_char, c_int};

/// The library's file name: the soname Debian's `libpmix2` installs.
pub(crate) const LIBRARY: &str = "libpmix.so.2";

/// Longest namespace (without its terminating NUL).
pub(crate) const MAX_NSLEN: usize = 255;
/// Longest key (without its terminating NUL).
pub(crate) const MAX_KEYLEN: usize = 511;
/// The rank that names a whole namespace (job-level values).
pub(crate) const RANK_WILDCARD: u32 = u32::MAX - 1;
/// `PMIX_SUCCESS`.
pub(crate) const SUCCESS: c_int = 0;

/// `pmix_data_type_t` values volley reads or writes.
pub(crate) mod types {
    /// `bool`.
    pub(crate) const BOOL: u16 = 1;
    /// NUL-terminated `char *`.
    pub(crate) const STRING: u16 = 3;
    /// `uint16_t`.
    pub(crate) const UINT16: u16 = 13;
    /// `uint32_t`.
    pub(crate) const UINT32: u16 = 14;
    /// `pmix_rank_t` (`uint32_t`).
    pub(crate) const PROC_RANK: u16 = 40;
}

/// `PMIX_GLOBAL`: a `Put` shared with every process of the job.
pub(crate) const SCOPE_GLOBAL: u8 = 3;

/// `pmix_proc_t`.
#[repr(C)]
pub(crate) struct Proc {
    pub(crate) nspace: [c_char; MAX_NSLEN + 1],
    pub(crate) rank: u32,
}

/// The part of `pmix_value_t`'s union volley uses; `words` gives it the union's full size
/// (its largest member, `pmix_envar_t`, is two pointers and a char).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union Data {
    pub(crate) flag: bool,
    pub(crate) string: *mut c_char,
    pub(crate) uint16: u16,
    pub(crate) uint32: u32,
    pub(crate) words: [u64; 3],
}

/// `pmix_value_t`.
#[repr(C)]
pub(crate) struct Value {
    pub(crate) kind: u16,
    pub(crate) data: Data,
}

/// `pmix_info_t`.
#[repr(C)]
pub(crate) struct Info {
    pub(crate) key: [c_char; MAX_KEYLEN + 1],
    pub(crate) flags: u32,
    pub(crate) value: Value,
}

impl Info {
    /// A boolean directive, such as `PMIX_COLLECT_DATA`.
    pub(crate) fn flag(key: &str, on: bool) -> Self {
        let mut info = Info {
            key: [0; MAX_KEYLEN + 1],
            flags: 0,
            value: Value {
                kind: types::BOOL,
                data: Data { words: [0; 3] },
            },
        };
        info.value.data.flag = on;
        for (dst, &b) in info
            .key
            .iter_mut()
            .zip(key.as_bytes().iter().take(MAX_KEYLEN))
        {
            *dst = b as c_char;
        }
        info
    }
}

type InitFn = unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const Info, usize) -> c_int;
type GetFn =
    unsafe extern "C" fn(*const Proc, *const c_char, *const Info, usize, *mut *mut Value) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type FenceFn = unsafe extern "C" fn(*const Proc, usize, *const Info, usize) -> c_int;
type AbortFn = unsafe extern "C" fn(c_int, *const c_char, *mut Proc, usize) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type ValueDestructFn = unsafe extern "C" fn(*mut Value);

/// The loaded library and its entry points. Never unloaded: the PMIx client keeps threads of
/// its own running for the life of the process.
pub(crate) struct Api {
    _library: Library,
    pub(crate) init: InitFn,
    pub(crate) finalize: FinalizeFn,
    pub(crate) get: GetFn,
    pub(crate) put: PutFn,
    pub(crate) commit: CommitFn,
    pub(crate) fence: FenceFn,
    pub(crate) abort: AbortFn,
    pub(crate) error_string: ErrorStringFn,
    pub(crate) value_destruct: ValueDestructFn,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Api(libpmix)")
    }
}

impl Api {
    /// Loads `library` (a file name searched like the dynamic linker does, or a path); the
    /// error says which library and why.
    pub(crate) fn load(library: &str) -> Result<Self, String> {
        let missing = |why: String| format!("cannot load {library}: {why}");
        // SAFETY: loading libpmix runs its initializers, which only set up the library's own
        // state; no other code in this process depends on it.
        let lib = unsafe { Library::new(library) }.map_err(|e| missing(e.to_string()))?;
        macro_rules! symbol {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the symbol is the PMIx 4 function of that name, whose C prototype
                // (pmix.h) is the function type given; the pointer stays valid because the
                // library is kept loaded as long as `Api` lives.
                let f: libloading::Symbol<$ty> = unsafe { lib.get($name) }
                    .map_err(|e| missing(format!("{e} (is it PMIx 4 or later?)")))?;
                *f
            }};
        }
        Ok(Self {
            init: symbol!(b"PMIx_Init\0", InitFn),
            finalize: symbol!(b"PMIx_Finalize\0", FinalizeFn),
            get: symbol!(b"PMIx_Get\0", GetFn),
            put: symbol!(b"PMIx_Put\0", PutFn),
            commit: symbol!(b"PMIx_Commit\0", CommitFn),
            fence: symbol!(b"PMIx_Fence\0", FenceFn),
            abort: symbol!(b"PMIx_Abort\0", AbortFn),
            error_string: symbol!(b"PMIx_Error_string\0", ErrorStringFn),
            value_destruct: symbol!(b"PMIx_Value_destruct\0", ValueDestructFn),
            _library: lib,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes and offsets the C compiler gives the installed header's structs, if the
    /// header and a compiler are here (`None` otherwise).
    fn c_layout() -> Option<String> {
        let include = ["/usr/lib/x86_64-linux-gnu/pmix2/include", "/usr/include"]
            .into_iter()
            .find(|d| std::path::Path::new(d).join("pmix_common.h").exists())?;
        let dir = std::env::temp_dir().join(format!("volley-pmix-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let src = dir.join("layout.c");
        std::fs::write(
            &src,
            r#"#include <pmix_common.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu %zu %zu %zu %zu %d %d %d %d %d %d %d %u\n",
        sizeof(pmix_proc_t), offsetof(pmix_proc_t, rank),
        sizeof(pmix_value_t), offsetof(pmix_value_t, data),
        sizeof(pmix_info_t), offsetof(pmix_info_t, flags), offsetof(pmix_info_t, value),
        sizeof(pmix_scope_t), sizeof(pmix_data_type_t),
        PMIX_BOOL, PMIX_STRING, PMIX_UINT16, PMIX_UINT32, PMIX_PROC_RANK, PMIX_GLOBAL,
        PMIX_SUCCESS, (unsigned)PMIX_RANK_WILDCARD);
    return 0;
}
"#,
        )
        .ok()?;
        let exe = dir.join("layout");
        let built = std::process::Command::new("cc")
            .arg(format!("-I{include}"))
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .status()
            .ok()?;
        let out = built
            .success()
            .then(|| std::process::Command::new(&exe).output().ok())
            .flatten();
        let _ = std::fs::remove_dir_all(&dir);
        Some(String::from_utf8(out?.stdout).ok()?.trim().to_string())
    }

    #[test]
    fn layout_matches_the_installed_header() {
        let Some(c) = c_layout() else {
            // CI installs libpmix-dev and a compiler; say so loudly when run elsewhere.
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must have libpmix-dev and cc to check the PMIx layouts"
            );
            eprintln!("skipped: no PMIx header or C compiler here");
            return;
        };
        let ours = format!(
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
            std::mem::size_of::<Proc>(),
            std::mem::offset_of!(Proc, rank),
            std::mem::size_of::<Value>(),
            std::mem::offset_of!(Value, data),
            std::mem::size_of::<Info>(),
            std::mem::offset_of!(Info, flags),
            std::mem::offset_of!(Info, value),
            std::mem::size_of::<u8>(),
            std::mem::size_of::<u16>(),
            types::BOOL,
            types::STRING,
            types::UINT16,
            types::UINT32,
            types::PROC_RANK,
            SCOPE_GLOBAL,
            SUCCESS,
            RANK_WILDCARD,
        );
        assert_eq!(ours, c, "ours vs the header's");
    }
}
