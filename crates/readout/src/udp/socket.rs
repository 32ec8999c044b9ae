//! The sockets of network ingest: one UDP socket per link, all on one port (SO_REUSEPORT), a
//! receive buffer as large as asked (SO_RCVBUFFORCE where allowed), the kernel's drop count on
//! every datagram (SO_RXQ_OVFL), and the classic BPF program that routes each datagram to its
//! link's socket by the DAQEthHeader's stream_id.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub(super) fn udp_socket(bind: SocketAddr, reuse_port: bool) -> std::io::Result<OwnedFd> {
    let domain = if bind.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2); the descriptor is owned at once.
    let fd = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor socket(2) just returned, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if reuse_port {
        set_int(&fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    Ok(fd)
}

pub(super) fn set_int(fd: &OwnedFd, level: i32, name: i32, value: i32) -> std::io::Result<()> {
    // SAFETY: setsockopt with a valid descriptor and a pointer to a live int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Asks the kernel to hand over runs of same-size datagrams of one flow as one coalesced buffer
/// (UDP_GRO): its GRO on a NIC, and a sender's UDP_SEGMENT batch on loopback, arrive whole,
/// with the segment size in a control message.
pub(super) fn enable_gro(fd: &OwnedFd) -> std::io::Result<()> {
    set_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1)
}

/// Asks for `bytes` of receive buffer (SO_RCVBUFFORCE where allowed, past net.core.rmem_max)
/// and returns what the kernel granted (it doubles the request for bookkeeping).
pub(super) fn set_rcvbuf(fd: &OwnedFd, bytes: usize) -> std::io::Result<usize> {
    let want = bytes.min(i32::MAX as usize / 2) as i32;
    if set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, want).is_err() {
        set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, want)?;
    }
    let mut got: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: getsockopt into a live int with its size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut got as *mut i32).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    debug_assert_eq!(
        len as usize,
        std::mem::size_of::<i32>(),
        "SO_RCVBUF is an int"
    );
    Ok(got.max(0) as usize)
}

pub(super) fn bind_to(fd: &OwnedFd, addr: SocketAddr) -> std::io::Result<()> {
    let rc = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: bind with a valid descriptor and a live sockaddr_in of the size given.
            unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sin as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            }
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, with a sockaddr_in6.
            unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sin6 as *const libc::sockaddr_in6).cast(),
                    std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                )
            }
        }
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The classic BPF program the kernel runs on each datagram of the group to pick its socket:
/// the DAQEthHeader's stream_id (bits 26-33 of the little-endian word at the start of the
/// datagram: bits 2-7 of byte 3, bits 0-1 of byte 4), then the socket index of that stream's
/// link; an index past the group sends unknown streams to the kernel's hash.
pub fn stream_router(routes: &[(u8, u32)]) -> Vec<libc::sock_filter> {
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let mut p = vec![
        op(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 0, 0, 3),
        op(libc::BPF_ALU | libc::BPF_RSH | libc::BPF_K, 0, 0, 2),
        op(libc::BPF_MISC | libc::BPF_TAX, 0, 0, 0),
        op(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 0, 0, 4),
        op(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, 0, 0, 3),
        op(libc::BPF_ALU | libc::BPF_LSH | libc::BPF_K, 0, 0, 6),
        op(libc::BPF_ALU | libc::BPF_OR | libc::BPF_X, 0, 0, 0),
    ];
    for (index, &(stream, _)) in routes.iter().enumerate() {
        p.push(op(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            0,
            1,
            stream as u32,
        ));
        p.push(op(libc::BPF_RET | libc::BPF_K, 0, 0, index as u32));
    }
    p.push(op(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX));
    // Two instructions a stream: at most 256 streams, far inside the kernel's 4096.
    assert!(
        p.len() == 8 + 2 * routes.len() && p.len() <= 4096,
        "a program the kernel takes"
    );
    p
}

pub(super) fn attach_stream_router(fd: &OwnedFd, routes: &[(u8, u32)]) -> std::io::Result<()> {
    attach(fd, libc::SO_ATTACH_REUSEPORT_CBPF, stream_router(routes))
}

/// Makes the socket drop every datagram (a socket filter that accepts nothing), until
/// `accept_all`. While a group's sockets bind one by one, the kernel spreads datagrams over
/// those bound by its hash, before the stream router can run: better none than misrouted.
pub(super) fn drop_all(fd: &OwnedFd) -> std::io::Result<()> {
    let ret_zero = libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: 0,
    };
    attach(fd, libc::SO_ATTACH_FILTER, vec![ret_zero])
}

/// Removes the `drop_all` filter.
pub(super) fn accept_all(fd: &OwnedFd) -> std::io::Result<()> {
    set_int(fd, libc::SOL_SOCKET, libc::SO_DETACH_FILTER, 0)
}

/// The kernel's count of datagrams the socket dropped so far (what SO_RXQ_OVFL reports).
pub(super) fn drops_so_far(fd: &OwnedFd) -> std::io::Result<u32> {
    // Room for more fields than the kernel has today (it fills what it knows).
    let mut info = [0u32; 16];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`, and says how many.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // (Linux 4.7 on: an older kernel's shorter answer would read as no drops, ever.)
    if (len as usize) <= libc::SK_MEMINFO_DROPS as usize * std::mem::size_of::<u32>() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this kernel's SO_MEMINFO has no drop count (Linux 4.7 or later has)",
        ));
    }
    Ok(info[libc::SK_MEMINFO_DROPS as usize])
}

fn attach(fd: &OwnedFd, option: i32, mut program: Vec<libc::sock_filter>) -> std::io::Result<()> {
    assert!(
        !program.is_empty() && program.len() <= u16::MAX as usize,
        "a program's length is a u16"
    );
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: setsockopt with a live sock_fprog pointing at `program` (the kernel copies it).
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&prog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_router_reads_stream_id_where_the_header_keeps_it() {
        // stream_id 0xB5 = 1011_0101: bits 26-31 of word 0 are its low 6 bits (byte 3, bits
        // 2-7 = 0b110101 << 2 = 0xD4), bits 32-33 its high 2 (byte 4, bits 0-1 = 0b10).
        let p = stream_router(&[(0xB5, 0)]);
        assert_eq!(p[0].k, 3);
        assert_eq!(p[3].k, 4);
        // Evaluate the program on a hand-made datagram.
        let pkt = [0u8, 0, 0, 0xD4, 0x02, 0, 0, 0];
        let a = ((pkt[3] as u32) >> 2) | (((pkt[4] as u32) & 3) << 6);
        assert_eq!(a, 0xB5);
        assert_eq!(p[7].k, 0xB5);
        assert_eq!(p.last().unwrap().k, u32::MAX);
    }
}
