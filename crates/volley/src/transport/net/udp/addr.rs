//! Socket addresses between Rust's form and the kernel's: one canonical form per peer for
//! matching datagrams to ranks, and the raw form `sendmmsg` and `recvmmsg` use.

use std::mem::size_of;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// A socket address in the form the kernel reads.
#[derive(Clone, Copy)]
pub(super) struct RawAddr {
    pub(super) storage: libc::sockaddr_storage,
    pub(super) len: libc::socklen_t,
}

/// One form per address: an IPv4-mapped IPv6 address becomes IPv4, flow labels are ignored.
pub(super) fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, v6.port())),
            None => SocketAddr::V6(SocketAddrV6::new(*v6.ip(), v6.port(), 0, v6.scope_id())),
        },
        v4 => v4,
    }
}

/// `a` as the kernel reads it from a socket of the family of `local` (an IPv4 peer of an
/// IPv6 socket is addressed as IPv4-mapped).
pub(super) fn to_raw(a: SocketAddr, local: SocketAddr) -> RawAddr {
    let a = match (a, local) {
        (SocketAddr::V4(v4), SocketAddr::V6(_)) => {
            SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
        }
        (a, _) => a,
    };
    // SAFETY: sockaddr_storage is a plain C struct; all-zero bytes are a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is at least as large as and aligned for every socket
            // address type, so the write stays inside `storage` and is aligned.
            unsafe {
                std::ptr::from_mut(&mut storage)
                    .cast::<libc::sockaddr_in>()
                    .write(sin)
            };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe {
                std::ptr::from_mut(&mut storage)
                    .cast::<libc::sockaddr_in6>()
                    .write(sin6)
            };
            size_of::<libc::sockaddr_in6>()
        }
    };
    RawAddr {
        storage,
        len: len as libc::socklen_t,
    }
}

/// The address the kernel wrote into `storage` (`len` bytes of it), in canonical form.
pub(super) fn from_raw(
    storage: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    let len = len as usize;
    match storage.ss_family as libc::c_int {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the kernel wrote a sockaddr_in, `len` says all of it;
            // sockaddr_storage is large enough and aligned for it.
            let sin = unsafe { &*std::ptr::from_ref(storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                sin.sin_addr.s_addr.to_ne_bytes().into(),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &*std::ptr::from_ref(storage).cast::<libc::sockaddr_in6>() };
            Some(canonical(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                0,
                sin6.sin6_scope_id,
            ))))
        }
        _ => None,
    }
}
