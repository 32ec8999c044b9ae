//! What a receive call hands the kernel and what it gives back: one `recvmmsg` over message
//! headers built from the caller's iovecs, and the control messages each received message
//! carries (the socket's drop count, a coalesced buffer's segment size).

use std::os::fd::AsRawFd;

use super::LinkSocket;

/// Room for the control messages of one received message: SO_RXQ_OVFL's and UDP_GRO's (24 B
/// each).
pub(super) const CONTROL_WORDS: usize = 8;

/// One `recvmmsg` on `sock` without waiting: message i into the buffers `iov`'s i-th slice
/// describes, its control messages into `control[i]`. Returns the headers as the kernel filled
/// them, and how many messages came (0: none, or an error such as EAGAIN).
///
/// # Safety
/// Every iovec must describe memory that may be written and that nothing reads until the call
/// has returned.
pub(super) unsafe fn receive_messages<'a>(
    sock: &LinkSocket,
    iov: impl Iterator<Item = &'a mut [libc::iovec]>,
    control: &mut [[u64; CONTROL_WORDS]],
) -> (Vec<libc::mmsghdr>, usize) {
    let mut msgs: Vec<libc::mmsghdr> = iov
        .zip(control.iter_mut())
        .map(|(v, c)| {
            // SAFETY: mmsghdr is plain data; the pointers set here outlive the call below.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v.as_mut_ptr();
            m.msg_hdr.msg_iovlen = v.len() as _;
            m.msg_hdr.msg_control = c.as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = std::mem::size_of_val(c) as _;
            m
        })
        .collect();
    assert_eq!(
        msgs.len(),
        control.len(),
        "an iovec list per control buffer"
    );
    // SAFETY: the headers, iovecs and control buffers live across the call; what the iovecs
    // point at is the caller's to vouch for.
    let n = unsafe {
        libc::recvmmsg(
            sock.fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    (msgs, n.max(0) as usize)
}

/// The kernel's count of drops on the socket, from a received message's SO_RXQ_OVFL control
/// message.
pub(super) fn rxq_overflow(h: &libc::msghdr) -> Option<u32> {
    control_messages(h).0
}

/// What a received message's control messages say: the socket's drop count (SO_RXQ_OVFL) and
/// the segment size of a coalesced buffer (UDP_GRO).
pub(super) fn control_messages(h: &libc::msghdr) -> (Option<u32>, Option<u32>) {
    let (mut drops, mut segment) = (None, None);
    // SAFETY: walking the control messages the kernel wrote into the buffer `h` describes,
    // with the libc macros that bound every step by msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                    drops = Some(std::ptr::read_unaligned(data.cast::<u32>()))
                }
                // The kernel writes the segment size as an int.
                (libc::SOL_UDP, libc::UDP_GRO) => {
                    segment = Some(std::ptr::read_unaligned(data.cast::<i32>()).max(0) as u32)
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    (drops, segment)
}
