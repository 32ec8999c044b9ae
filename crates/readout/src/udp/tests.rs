//! The receiver's tests on real sockets: routing by stream, rerouted frames in time order, and
//! coalesced buffers (UDP GRO) split into the ring frame by frame, short, bad and mixed ones too.

use super::*;
use crate::latency_buffer::latency_buffer;
use crate::udp::socket::{bind_to, enable_gro, udp_socket};
use crate::udp::{check_routes, LinkSocket, StreamTiming, UdpSource};
use snbuf_platform::memory::PageSize;
use std::net::SocketAddr;

#[test]
fn the_nap_never_lets_a_socket_buffer_fill_at_16x_the_expected_rate() {
    let (mib, cap) = (1 << 20, DEFAULT_MAX_NAP);
    assert_eq!(nap(32 * mib, 0.0, cap), std::time::Duration::ZERO);
    assert_eq!(nap(32 * mib, f64::NAN, cap), std::time::Duration::ZERO);
    // WIBEth's own rate, 16 MiB asked (32 granted): the cap, or the operator's.
    assert_eq!(nap(32 * mib, 219.7e6, cap), cap);
    let off = std::time::Duration::ZERO;
    assert_eq!(nap(32 * mib, 219.7e6, off), off);
    // A longer nap asked for still cannot let the buffer fill: 16 MiB of data room at
    // 219.7 MB/s fills in 76 ms, so the nap stops at 4.8 ms, not the 50 ms asked.
    let long = nap(32 * mib, 219.7e6, std::time::Duration::from_millis(50));
    assert!(long > cap && long.as_secs_f64() * 16.0 * 219.7e6 <= 16.0 * mib as f64 * 1.0001);
    // A 100 Gb/s link into a 4 MiB buffer: 2 MiB of data room fills in 168 us at 12.5 GB/s.
    for (rcvbuf, rate) in [(4 * mib, 12.5e9), (256 * 1024, 1e9), (32 * mib, 10e9)] {
        let n = nap(rcvbuf, rate, cap).as_secs_f64();
        assert!(n <= cap.as_secs_f64());
        assert!(
            n * 16.0 * rate <= rcvbuf as f64 / 2.0 * 1.0001,
            "{rcvbuf} {rate}"
        );
    }
}

#[test]
fn routes_must_feed_every_link_once() {
    assert!(check_routes(&UdpSource::default_routes(3), 3).is_ok());
    assert!(check_routes(&[(0, 0), (1, 0)], 2).is_err());
    assert!(check_routes(&[(0, 0), (0, 1)], 2).is_err());
    assert!(check_routes(&[(0, 0)], 2).is_err());
    assert!(check_routes(&[(0, 0), (1, 5)], 2).is_err());
}

/// A socket on a port of its own, and where it listens.
fn bound() -> (LinkSocket, SocketAddr) {
    let fd = udp_socket("127.0.0.1:0".parse().unwrap(), false).unwrap();
    bind_to(&fd, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = std::net::UdpSocket::from(fd.try_clone().unwrap())
        .local_addr()
        .unwrap();
    let sock = LinkSocket {
        fd,
        link: 0,
        drops_seen: 0,
    };
    (sock, addr)
}

#[test]
fn a_frame_queued_on_another_links_socket_joins_its_link_in_time_order() {
    let t = snbuf_frames::FrameType::WibEth;
    let layout = t.layout();
    let mut rig = rig(2, 64, false);
    let (a0, a1) = (rig.addrs[0], rig.addrs[1]);
    let mut gen =
        crate::framegen::FrameGen::new(t, 1, &crate::framegen::Payload::Emulated).unwrap();
    gen.set_stream(1);
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let tpf = layout.ticks_per_frame;
    let frame =
        |g: &mut crate::framegen::FrameGen, k: u64| g.frame_at(1000 * tpf + k * tpf).to_vec();
    // Link 1's frames 0..6: frame 2 lands on link 0's socket (as the kernel's hash would
    // put it), frame 5 too, after everything else.
    for k in [0, 1, 3, 4] {
        tx.send_to(&frame(&mut gen, k), a1).unwrap();
    }
    tx.send_to(&frame(&mut gen, 2), a0).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    // Link 0's socket first: frame 2 waits, then link 1's socket's frames go in around it.
    assert_eq!(rig.rx.receive_batch(&mut rig.socks[0]), 1);
    assert_eq!(rig.rx.receive_batch(&mut rig.socks[1]), 4);
    tx.send_to(&frame(&mut gen, 5), a0).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(rig.rx.receive_batch(&mut rig.socks[0]), 1);
    // Nothing more comes on link 1's socket: at the next poll frame 5 goes in.
    rig.rx.round += 1;
    rig.rx.flush_rerouted(1, rig.rx.round);
    let b = &rig.buffers[1];
    assert_eq!(b.written(), 6, "every frame of link 1 is in its ring");
    for k in 0..6 {
        assert_eq!(b.timestamp_at(k).unwrap(), 1000 * tpf + k * tpf);
    }
    assert_eq!(rig.buffers[0].written(), 0);
    let c = rig.counters[1].snapshot();
    assert_eq!((c.frames, c.rerouted, c.dropped.out_of_order), (6, 2, 0));
    assert_eq!((c.sequence_gap_frames, c.timestamp_gap_frames), (0, 0));
}

/// Sends `payload` to `to` as one UDP_SEGMENT send of `segment`-byte datagrams (the last
/// may be shorter), as `snbuf emit` or a NIC's GRO would hand it over.
fn gso_send(tx: &std::net::UdpSocket, to: SocketAddr, payload: &[u8], segment: u16) {
    tx.connect(to).unwrap();
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: plain data, pointers set to live buffers below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: a size computation, then one cmsghdr written inside the 32-byte buffer.
    unsafe {
        msg.msg_controllen = libc::CMSG_SPACE(2) as _;
        let h = libc::CMSG_FIRSTHDR(&msg);
        (*h).cmsg_level = libc::SOL_UDP;
        (*h).cmsg_type = libc::UDP_SEGMENT;
        (*h).cmsg_len = libc::CMSG_LEN(2) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(h).cast::<u16>(), segment);
    }
    // SAFETY: sendmsg on a live socket with the message above.
    let n = unsafe { libc::sendmsg(tx.as_raw_fd(), &msg, 0) };
    assert_eq!(
        n,
        payload.len() as isize,
        "{}",
        std::io::Error::last_os_error()
    );
}

/// A receiver of `links` WIBEth links with rings of `slots`, its sockets (socket i feeds link
/// i; with UDP GRO on if `gro`), the rings' reading ends, and the counters.
struct Rig {
    rx: Receiver,
    socks: Vec<LinkSocket>,
    addrs: Vec<SocketAddr>,
    buffers: Vec<crate::latency_buffer::LatencyBuffer>,
    counters: Arc<Vec<IngestCounters>>,
}

fn rig(links: usize, slots: u64, gro: bool) -> Rig {
    let layout = snbuf_frames::FrameType::WibEth.layout();
    let (mut socks, mut addrs, mut producers, mut buffers) = (vec![], vec![], vec![], vec![]);
    for l in 0..links {
        let (mut s, a) = bound();
        if gro {
            enable_gro(&s.fd).unwrap();
        }
        s.link = l;
        socks.push(s);
        addrs.push(a);
        let (p, b) = latency_buffer(layout, slots, PageSize::Small4K).unwrap();
        producers.push(p);
        buffers.push(b);
    }
    let source = UdpSource {
        bind: addrs[0],
        routes: UdpSource::default_routes(links as u32),
        header_version: Some(crate::framegen::EMULATED_HEADER_VERSION),
        rcvbuf_bytes: 1 << 20,
        gro,
        max_nap: DEFAULT_MAX_NAP,
        max_buffers_per_call: DEFAULT_RECEIVE_BATCH,
    };
    let timing = StreamTiming {
        max_jump_ticks: u64::MAX / 2,
        bytes_per_s: 0.0,
    };
    let counters: Arc<Vec<IngestCounters>> =
        Arc::new((0..links).map(|_| IngestCounters::default()).collect());
    let mut rx = Receiver::new(&source, layout, timing, producers, counters.clone());
    rx.gro = gro;
    Rig {
        rx,
        socks,
        addrs,
        buffers,
        counters,
    }
}

/// Frame `k` of stream `stream` (frames 2048 ticks apart from tick 2048 * 1000).
fn wibeth_frame(stream: u8, k: u64) -> Vec<u8> {
    let t = snbuf_frames::FrameType::WibEth;
    let mut g =
        crate::framegen::FrameGen::new(t, stream as u32, &crate::framegen::Payload::Emulated)
            .unwrap();
    g.set_stream(stream);
    g.frame_at((1000 + k) * t.ticks_per_frame()).to_vec()
}

/// Receives on `sock` until a call brings nothing, within 2 s; returns the calls that did.
fn receive_all(rig: &mut Rig, sock: usize) -> usize {
    std::thread::sleep(std::time::Duration::from_millis(30));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut calls = 0;
    while rig.rx.receive_coalesced(&mut rig.socks[sock]) {
        calls += 1;
        assert!(
            std::time::Instant::now() < deadline,
            "still receiving after 2 s"
        );
    }
    calls
}

/// Frame `seq` of `buffer`, as it sits in the ring.
fn ring_frame(b: &crate::latency_buffer::LatencyBuffer, seq: u64) -> Vec<u8> {
    let mut out = vec![0u8; 7200];
    assert_eq!(b.read(seq, &mut out).unwrap(), 1);
    out
}

#[test]
fn a_coalesced_buffer_lands_frame_by_frame_in_consecutive_slots() {
    let mut rig = rig(1, 64, true);
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let frames: Vec<Vec<u8>> = (0..6).map(|k| wibeth_frame(0, k)).collect();
    gso_send(&tx, rig.addrs[0], &frames.concat(), 7200);
    assert_eq!(
        receive_all(&mut rig, 0),
        1,
        "one receive for the six frames"
    );
    let c = rig.counters[0].snapshot();
    assert_eq!((c.frames, c.receives, c.coalesced), (6, 1, 1));
    assert_eq!(
        (
            c.dropped.short,
            c.sequence_gap_frames,
            c.timestamp_gap_frames
        ),
        (0, 0, 0)
    );
    assert_eq!(rig.buffers[0].written(), 6);
    for (k, f) in frames.iter().enumerate() {
        assert_eq!(&ring_frame(&rig.buffers[0], k as u64), f, "frame {k}");
    }
}

#[test]
fn a_coalesced_run_that_wraps_the_ring_is_read_into_both_ends() {
    // 20 slots: claims of up to 10; the fourth buffer of 5 frames crosses the ring's end.
    let mut rig = rig(1, 20, true);
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let frames: Vec<Vec<u8>> = (0..27).map(|k| wibeth_frame(0, k)).collect();
    for run in frames.chunks(9) {
        gso_send(&tx, rig.addrs[0], &run.concat(), 7200);
        receive_all(&mut rig, 0);
    }
    let b = &rig.buffers[0];
    assert_eq!(b.written(), 27);
    assert_eq!(rig.counters[0].snapshot().sequence_gap_frames, 0);
    // The receiver's claim of its next slots has already retired as many of the oldest
    // frames; what is left spans the ring's end (slots 17..20, then 0..7).
    assert!(b.oldest() <= 19, "oldest {}", b.oldest());
    for k in b.oldest()..27 {
        assert_eq!(&ring_frame(b, k), &frames[k as usize], "frame {k}");
    }
}

#[test]
fn a_short_last_segment_is_counted_and_never_kept() {
    let mut rig = rig(1, 64, true);
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let frames: Vec<Vec<u8>> = (0..3).map(|k| wibeth_frame(0, k)).collect();
    let tail = wibeth_frame(0, 3)[..1000].to_vec();
    gso_send(&tx, rig.addrs[0], &[frames.concat(), tail].concat(), 7200);
    receive_all(&mut rig, 0);
    let c = rig.counters[0].snapshot();
    assert_eq!((c.frames, c.dropped.short, c.coalesced), (3, 1, 1));
    assert_eq!(rig.buffers[0].written(), 3);
    // Segments of another size than a frame's are none of them frames.
    gso_send(&tx, rig.addrs[0], &frames.concat(), 3600);
    receive_all(&mut rig, 0);
    let c = rig.counters[0].snapshot();
    assert_eq!((c.frames, c.dropped.short), (3, 1 + 6));
    assert_eq!(rig.buffers[0].written(), 3);
}

#[test]
fn a_bad_segment_inside_a_coalesced_buffer_is_counted_and_the_rest_kept() {
    let mut rig = rig(1, 64, true);
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let layout = snbuf_frames::FrameType::WibEth.layout();
    let mut frames: Vec<Vec<u8>> = (0..5).map(|k| wibeth_frame(0, k)).collect();
    let mut id = layout.identity(&frames[2]).unwrap();
    id.version = 5;
    layout.write_identity(&mut frames[2], &id);
    gso_send(&tx, rig.addrs[0], &frames.concat(), 7200);
    receive_all(&mut rig, 0);
    let c = rig.counters[0].snapshot();
    assert_eq!((c.frames, c.dropped.bad_version), (4, 1));
    assert_eq!(
        c.timestamp_gap_frames, 1,
        "the frame missing from the link is counted"
    );
    let b = &rig.buffers[0];
    assert_eq!(b.written(), 4);
    for (seq, k) in [0, 1, 3, 4].into_iter().enumerate() {
        assert_eq!(ring_frame(b, seq as u64), frames[k], "frame {k}");
    }
}

#[test]
fn a_coalesced_buffer_mixing_streams_sends_each_frame_to_its_link() {
    let mut rig = rig(2, 64, true);
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // Stream 0 and stream 1 alternate in one buffer that arrives on link 0's socket.
    let frames: Vec<Vec<u8>> = (0..8).map(|k| wibeth_frame((k % 2) as u8, k / 2)).collect();
    gso_send(&tx, rig.addrs[0], &frames.concat(), 7200);
    receive_all(&mut rig, 0);
    // Link 1's socket has nothing: at the next poll round its rerouted frames go in.
    rig.rx.round += 1;
    rig.rx.flush_rerouted(1, rig.rx.round);
    for link in 0..2u64 {
        let b = &rig.buffers[link as usize];
        assert_eq!(b.written(), 4, "link {link}");
        for k in 0..4 {
            assert_eq!(
                ring_frame(b, k),
                frames[(2 * k + link) as usize],
                "link {link} frame {k}"
            );
        }
    }
    let (c0, c1) = (rig.counters[0].snapshot(), rig.counters[1].snapshot());
    assert_eq!((c0.frames, c1.frames, c1.rerouted), (4, 4, 4));
    assert_eq!(c1.sequence_gap_frames + c1.dropped.out_of_order, 0);
}

#[test]
fn full_buffers_come_several_a_call_and_a_short_one_among_them_leaves_no_hole() {
    // 128 slots (64 a claim): a full buffer (9 frames) makes the next call ask for two. Six
    // buffers wait: 9, 9, 4, 9, 9 and 1 frames. The first call takes a 9; the second two,
    // 9 and 4 (a short one: one at a time again); the third a 9; the fourth two, 9 and 1,
    // the 1 landing where a full buffer would have: no hole either way.
    let mut rig = rig(1, 128, true);
    rig.rx.batch_max = 8;
    // Room for the six buffers at once (the default holds about three).
    crate::udp::socket::set_rcvbuf(&rig.socks[0].fd, 2 << 20).unwrap();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let frames: Vec<Vec<u8>> = (0..41).map(|k| wibeth_frame(0, k)).collect();
    let mut at = 0;
    for n in [9, 9, 4, 9, 9, 1] {
        gso_send(&tx, rig.addrs[0], &frames[at..at + n].concat(), 7200);
        at += n;
    }
    let calls = receive_all(&mut rig, 0);
    let c = rig.counters[0].snapshot();
    assert_eq!(c.kernel_drops, 0);
    assert_eq!((c.frames, c.receives, c.coalesced), (41, 6, 5));
    assert_eq!(c.receive_calls as usize, calls);
    // 9 | 9 + 4 (two asked, the 4 is short) | 9 | 9 + 1 (two asked after a full one).
    assert_eq!(calls, 4, "full buffers share a call");
    assert_eq!(
        (c.dropped.short, c.truncated, c.sequence_gap_frames),
        (0, 0, 0)
    );
    assert_eq!(rig.buffers[0].written(), 41);
    // A short buffer before full ones in one call: 3, then 9 and 9, asked for eight at once.
    // The 9s were received 6 and 15 slots later than they belong, and move down.
    let more: Vec<Vec<u8>> = (41..62).map(|k| wibeth_frame(0, k)).collect();
    let mut at = 0;
    for n in [3, 9, 9] {
        gso_send(&tx, rig.addrs[0], &more[at..at + n].concat(), 7200);
        at += n;
    }
    rig.rx.buffers_per_call[0] = 8;
    assert_eq!(receive_all(&mut rig, 0), 1, "one call for the three");
    let c = rig.counters[0].snapshot();
    assert_eq!((c.frames, c.receives, c.receive_calls), (62, 9, 5));
    assert_eq!(rig.buffers[0].written(), 62);
    for (k, f) in frames.iter().chain(&more).enumerate() {
        assert_eq!(&ring_frame(&rig.buffers[0], k as u64), f, "frame {k}");
    }
}

#[test]
fn an_empty_datagram_is_counted_too_short() {
    let mut rig = rig(1, 64, true);
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&[], rig.addrs[0]).unwrap();
    tx.send_to(&wibeth_frame(0, 0), rig.addrs[0]).unwrap();
    receive_all(&mut rig, 0);
    let c = rig.counters[0].snapshot();
    assert_eq!((c.frames, c.dropped.short, c.receives), (1, 1, 2));
}

#[test]
fn the_receiver_is_worded_with_its_cpu_interface_and_nap() {
    assert_eq!(
        crate::udp::receiver_words(
            Some(3),
            Some("eth1 (NUMA node 1)"),
            std::time::Duration::from_micros(500)
        ),
        "on CPU 3, interface eth1 (NUMA node 1); sleeps up to 500 us between polls"
    );
    assert_eq!(
        crate::udp::receiver_words(None, None, std::time::Duration::ZERO),
        "on CPU ?, every interface (0.0.0.0); never sleeps between polls (--receive-nap off)"
    );
}
