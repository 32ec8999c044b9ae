//! Waiting for io_uring completions, with a deadline: a device that stops completing must fail
//! its sink (`PersistError::Stalled`), not hang the writer thread that waits on it forever.
//!
//! The wait is one `io_uring_enter` with a timeout (`IORING_ENTER_EXT_ARG`, Linux 5.11): no
//! timer thread and no extra request in the ring. A kernel without it waits unbounded, and the
//! sink says so in its notes. `io_uring_enter` may return once it has submitted SQEs, before any
//! completion arrived, and a signal interrupts it: so the completion queue itself is checked,
//! and the call repeated, until it holds what was asked for or the deadline has passed.

use std::time::Instant;

use io_uring::{types, IoUring};

/// Hands the kernel every pending SQE and, when `want` > 0, waits until the completion queue
/// holds at least `want` entries. With a `deadline` it gives up then: `Ok(false)`, the SQEs
/// submitted all the same. An `io_uring_enter` error other than EINTR and ETIME is returned.
pub(crate) fn submit_and_wait_until(
    ring: &mut IoUring,
    want: usize,
    deadline: Option<Instant>,
) -> std::io::Result<bool> {
    debug_assert!(
        want <= ring.params().cq_entries() as usize,
        "a wait for {want} completions, more than the queue holds, would never end"
    );
    loop {
        let result = match deadline {
            Some(d) if want > 0 => {
                if ring.completion().len() >= want {
                    return Ok(true);
                }
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    // Submit what is pending without waiting, so that no SQE is left behind. A
                    // look with nothing to submit needs no system call: completions are posted
                    // to the queue by the kernel's task work, run as this thread leaves it.
                    if !ring.submission().is_empty() {
                        ring.submit()?;
                    }
                    return Ok(ring.completion().len() >= want);
                }
                let ts = types::Timespec::from(left);
                let args = types::SubmitArgs::new().timespec(&ts);
                ring.submitter().submit_with_args(want, &args)
            }
            _ => ring.submit_and_wait(want),
        };
        match result {
            Ok(_) if deadline.is_none() || want == 0 => return Ok(true),
            // Submitted, or woken: whether the completions came is checked at the loop's top.
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Whether this ring's kernel can bound a wait (`IORING_FEAT_EXT_ARG`).
pub(crate) fn can_bound_waits(ring: &IoUring) -> bool {
    ring.params().is_feature_ext_arg()
}

#[cfg(test)]
mod tests {
    use super::*;
    use io_uring::opcode;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    /// A read from an empty pipe: a request the kernel never completes.
    fn never_completing(ring: &mut IoUring, pipe: &std::fs::File, buf: &mut [u8; 8]) {
        let sqe = opcode::Read::new(types::Fd(pipe.as_raw_fd()), buf.as_mut_ptr(), 8)
            .build()
            .user_data(7);
        // SAFETY: `buf` outlives the ring in the test (declared before it).
        unsafe { ring.submission().push(&sqe).unwrap() };
    }

    fn pipe() -> (std::fs::File, std::fs::File) {
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        use std::os::fd::FromRawFd;
        // SAFETY: both are fresh descriptors this test owns.
        unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        }
    }

    #[test]
    fn a_request_that_never_completes_ends_the_wait_at_its_deadline() {
        let mut buf = [0u8; 8];
        let made = IoUring::new(4);
        let probe = made.as_ref().map(drop).map_err(|e| e.to_string());
        if !snbuf_testkit::available_or_skip("SNBUF_REQUIRE_URING", "io_uring", probe) {
            return;
        }
        let mut ring = made.expect("made above");
        assert!(
            can_bound_waits(&ring),
            "this kernel has IORING_FEAT_EXT_ARG"
        );
        let (read_end, _write_end) = pipe();
        never_completing(&mut ring, &read_end, &mut buf);
        let start = Instant::now();
        let got = submit_and_wait_until(&mut ring, 1, Some(start + Duration::from_millis(200)))
            .expect("io_uring_enter");
        let waited = start.elapsed();
        assert!(!got, "nothing completed");
        assert!(
            waited >= Duration::from_millis(200),
            "gave up before its deadline: {waited:?}"
        );
        // Then a completion that does come ends the next wait at once.
        use std::io::Write;
        (&_write_end).write_all(b"12345678").unwrap();
        let got =
            submit_and_wait_until(&mut ring, 1, Some(Instant::now() + Duration::from_secs(10)))
                .expect("io_uring_enter");
        assert!(got, "the read completed once the pipe had data");
        assert_eq!(ring.completion().next().map(|c| c.result()), Some(8));
    }
}
