//! Network ingest: DUNE's Ethernet readout sends one frame per UDP datagram (WIBEth, TDEEth,
//! DAPHNE Ethernet streams, over jumbo frames), the streams of many links to one port. Each
//! datagram is received straight into its link's latency-buffer slot: no intermediate copy.
//!
//! How, with many links on one port: one socket per link, all bound to the port with
//! SO_REUSEPORT, and a classic BPF program on the group (SO_ATTACH_REUSEPORT_CBPF) that reads
//! the DAQEthHeader's stream_id from the datagram and returns the index of that link's socket.
//! The kernel so queues each stream on its own link's socket, and each receive call reads
//! datagrams straight into the next slots of that link's ring.
//!
//! Two ways to receive, per socket. With UDP GRO (the default, where the kernel grants it) the
//! kernel hands over a run of same-size datagrams of one flow as one coalesced buffer, with the
//! segment size in a control message: a NIC's GRO builds them, and on loopback a sender's
//! UDP_SEGMENT batch arrives whole. One `recvmsg` then reads a whole buffer into consecutive
//! ring slots (the slots are contiguous, so the frames fall each into its own), up to ~64 KiB
//! per call instead of one datagram. Without GRO, `recvmmsg` reads a batch of datagrams, one
//! slot each. Either way every frame is checked on its own, as below: a coalesced buffer is
//! split by its segment size, a short last segment is counted `short` and never kept, and a
//! buffer whose first segment was routed to one link may carry frames of another, which go to
//! their own link as rerouted ones do. A datagram of a stream that is not routed
//! lands on a socket the kernel picks; it is counted and dropped there. While the sockets bind
//! one by one, the kernel would spread datagrams over those bound by its hash: each socket
//! drops everything (a socket filter) until the whole group and its router are in place. Should
//! the kernel still queue a routed stream's datagram on another socket, the receiver moves it over and merges it in time order with the link's own
//! socket's datagrams, so that the link loses nothing by it (counted as `rerouted`).
//!
//! Loss at ingest is loss: the kernel's drops (SO_RXQ_OVFL: the kernel counts what it dropped
//! as it queued it, a datagram or a whole coalesced buffer, so with GRO it is a count of drop
//! events, not of frames: on Linux 6.18, 1,693 drops stood for 9,199 frames), datagrams of the wrong size or
//! header version, of an unknown stream, out of order, and gaps in each link's sequence numbers
//! and timestamps are counted per link (`IngestCounters`), live. Frames missing from a link's
//! buffer are counted lost again by the writers, by timestamp, if they fall in a window. The
//! frames lost, however the kernel counted its drops, are the sequence and timestamp gaps.
//!
//! One receive thread serves every link (poll over the sockets, a 100 ms timeout to see a
//! stop), or each socket its own thread where there are cores for it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use snbuf_frames::{FrameLayout, HeaderKind, SEQUENCE_MODULUS};

use crate::latency_buffer::Producer;

mod counters;
mod socket;

pub use counters::{IngestCounters, IngestSnapshot};
pub use socket::stream_router;
use socket::{
    accept_all, attach_stream_router, bind_to, drop_all, drops_so_far, enable_gro, set_int,
    set_rcvbuf, udp_socket,
};

/// Datagrams received per system call, at most (without GRO); with GRO, coalesced buffers
/// read from one socket before the receiver polls again.
const BATCH: usize = 64;
/// The largest coalesced buffer UDP GRO hands over: one IP packet's worth (64 KiB).
const MAX_COALESCED_BYTES: usize = 1 << 16;
/// Room for the control messages of one receive: SO_RXQ_OVFL's and UDP_GRO's (24 B each).
const CONTROL_WORDS: usize = 8;
/// How long the receiver waits for data before it looks at its stop flag.
const POLL_MS: i32 = 100;

/// Where and how to receive.
#[derive(Clone, Debug)]
pub struct UdpSource {
    pub bind: SocketAddr,
    /// The link each DAQEthHeader stream_id feeds: `(stream_id, link)`. Every link is fed by
    /// exactly one stream.
    pub routes: Vec<(u8, u32)>,
    /// The DAQEthHeader version frames must carry (None: any).
    pub header_version: Option<u8>,
    /// Socket receive buffer asked for, per link.
    pub rcvbuf_bytes: usize,
    /// Receive coalesced buffers (UDP_GRO) where the kernel allows it.
    pub gro: bool,
}

/// What the receiver expects of a stream's timestamps, in ticks of the detector's clock: the
/// unit that owns the clock decides (`snbuf_unit::links`).
#[derive(Clone, Copy, Debug)]
pub struct StreamTiming {
    /// Ticks between a link's frames: the frame type's own `ticks_per_frame` for a detector, more
    /// for a sub-sampled sender (`snbuf emit` below the type's rate). Timestamp gaps count in it.
    pub frame_step_ticks: u64,
    /// The furthest a frame's timestamp may lie ahead of the link's last one (or, for a link's
    /// first frame, of the newest frame of any link): further is not the detector's clock but
    /// garbage, which would wreck the buffer's time order. The buffer's span is the natural
    /// bound. A link that keeps sending from far ahead (a detector whose clock restarted) is
    /// followed after `RESYNC_AFTER` such frames in a row.
    pub max_jump_ticks: u64,
    /// Bytes per second a link is expected to send (the unit's configured rate): bounds how
    /// long the receiver may sleep between polls (`nap`). 0: unknown, never sleep.
    pub bytes_per_s: f64,
}

/// The longest nap between poll rounds.
const MAX_NAP: std::time::Duration = std::time::Duration::from_micros(500);

/// How long the receiver may sleep after draining every socket: waking for each small batch
/// costs more than receiving it (a fifth of the receive thread's time went to poll's sleeps
/// and wakeups at 2 GB/s, measured with perf), and data that waits in the socket buffer comes
/// out in fuller receives. At most `MAX_NAP`, and at most a sixteenth of the time the socket
/// buffer (`rcvbuf_bytes` granted, half of it for data) takes to fill at the link's expected
/// rate, so a stream even 16x faster than expected does not overflow it while the receiver
/// sleeps. No nap when the rate is not known.
fn nap(rcvbuf_bytes: usize, bytes_per_s: f64) -> std::time::Duration {
    if !(bytes_per_s.is_finite() && bytes_per_s > 0.0) {
        return std::time::Duration::ZERO;
    }
    let fill_s = rcvbuf_bytes as f64 / 2.0 / bytes_per_s;
    std::time::Duration::from_secs_f64(fill_s / 16.0).min(MAX_NAP)
}

/// Frames in a row from far ahead after which a link's new clock is believed.
pub const RESYNC_AFTER: u32 = 64;

impl UdpSource {
    /// Whether frames of `layout` can be received this way into `links` links: more than one
    /// link needs a DAQEthHeader to route by, and the routes must feed each link once.
    pub fn check(&self, layout: &FrameLayout, links: usize) -> Result<(), UdpError> {
        if links > 1 && layout.header != HeaderKind::DaqEth {
            return Err(UdpError::NoHeader(links));
        }
        check_routes(&self.routes, links)
    }

    /// stream_id N feeds link N, for `links` links.
    pub fn default_routes(links: u32) -> Vec<(u8, u32)> {
        (0..links).map(|l| (l as u8, l)).collect()
    }
}

/// Why ingest cannot start.
#[derive(Debug, thiserror::Error)]
pub enum UdpError {
    #[error("{op} on udp://{bind}: {cause}")]
    Socket {
        op: &'static str,
        bind: SocketAddr,
        cause: std::io::Error,
    },
    #[error("{0}")]
    Routes(String),
    #[error("network ingest into {0} links routes by the DAQEthHeader's stream_id, which only wibeth, tdeeth and daphneeth-stream frames carry: use one of those, or one link")]
    NoHeader(usize),
}

/// What the receiver obtained, for the operator.
#[derive(Clone, Debug)]
pub struct IngestInfo {
    /// Per link, the counters.
    pub counters: Arc<Vec<IngestCounters>>,
    /// The socket receive buffer the kernel granted (per link), and its cap for unprivileged
    /// processes (net.core.rmem_max).
    pub rcvbuf_bytes: usize,
    pub rmem_max_bytes: Option<u64>,
    /// How datagrams reach their link: "kernel (SO_REUSEPORT + BPF on stream_id)" or one socket.
    pub routing: &'static str,
    /// Whether the sockets receive coalesced buffers (UDP_GRO), and why not when it was asked
    /// for and the kernel refused.
    pub gro: bool,
    pub gro_refused: Option<String>,
}

/// A bound socket and the link it feeds.
struct LinkSocket {
    fd: OwnedFd,
    link: usize,
    /// The kernel's drop counter as last seen.
    drops_seen: u32,
}

/// Binds a socket per link and starts receiving into `producers` (one per link, in link
/// order) on a thread of its own, which first runs `on_thread_start` (to pin it and set its
/// priority), until `stop` is set.
pub fn start(
    source: &UdpSource,
    layout: FrameLayout,
    timing: StreamTiming,
    producers: Vec<Producer>,
    on_thread_start: impl FnOnce() + Send + 'static,
    stop: Arc<AtomicBool>,
) -> Result<(IngestInfo, std::thread::JoinHandle<()>), UdpError> {
    let links = producers.len();
    source.check(&layout, links)?;
    let bind = source.bind;
    let err = |op: &'static str| move |cause| UdpError::Socket { op, bind, cause };
    let mut sockets = Vec::new();
    // Bound in route order: the group's socket index i is link routes[i].1.
    let order: Vec<usize> = if links == 1 {
        vec![0]
    } else {
        source.routes.iter().map(|&(_, l)| l as usize).collect()
    };
    let mut granted = 0;
    let mut gro = source.gro;
    let mut gro_refused = None;
    for &link in &order {
        let fd = udp_socket(bind, links > 1).map_err(err("open a socket"))?;
        granted = set_rcvbuf(&fd, source.rcvbuf_bytes).map_err(err("set SO_RCVBUF"))?;
        set_int(&fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1).map_err(err("set SO_RXQ_OVFL"))?;
        if gro {
            if let Err(e) = enable_gro(&fd) {
                // A kernel without UDP GRO (before 5.0): datagrams one by one, as before.
                gro = false;
                gro_refused = Some(format!("the kernel refused UDP_GRO ({e})"));
            }
        }
        if links > 1 {
            drop_all(&fd).map_err(err("set a socket filter"))?;
        }
        bind_to(&fd, bind).map_err(err("bind"))?;
        sockets.push(LinkSocket {
            fd,
            link,
            drops_seen: 0,
        });
    }
    if links > 1 {
        attach_stream_router(&sockets[0].fd, &source.routes)
            .map_err(err("attach the stream router (SO_ATTACH_REUSEPORT_CBPF)"))?;
        // Every stream now goes to its own socket: open them. What they dropped until now came
        // before ingest began, and is not counted as loss.
        for s in &mut sockets {
            accept_all(&s.fd).map_err(err("remove the socket filter"))?;
            s.drops_seen = drops_so_far(&s.fd).map_err(err("read SO_MEMINFO"))?;
        }
    }
    if !gro {
        // The sockets granted GRO before a refusal would hand coalesced buffers to a receiver
        // that reads datagrams one slot each: all of the group go without.
        for s in sockets.iter().filter(|_| source.gro) {
            let _ = set_int(&s.fd, libc::SOL_UDP, libc::UDP_GRO, 0);
        }
    }
    let counters: Arc<Vec<IngestCounters>> =
        Arc::new((0..links).map(|_| IngestCounters::default()).collect());
    let info = IngestInfo {
        counters: counters.clone(),
        rcvbuf_bytes: granted,
        rmem_max_bytes: std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        routing: if links > 1 {
            "kernel (SO_REUSEPORT + BPF on stream_id)"
        } else {
            "one socket"
        },
        gro,
        gro_refused,
    };
    let mut rx = Receiver::new(source, layout, timing, producers, counters);
    rx.gro = gro;
    rx.nap = nap(granted, timing.bytes_per_s);
    let handle = std::thread::Builder::new()
        .name("snbuf-udp".into())
        .spawn(move || {
            on_thread_start();
            rx.run(&mut sockets, &stop);
        })
        .map_err(err("start the receive thread"))?;
    Ok((info, handle))
}

fn check_routes(routes: &[(u8, u32)], links: usize) -> Result<(), UdpError> {
    let mut seen_link = vec![false; links];
    let mut seen_stream = [false; 256];
    for &(s, l) in routes {
        let l = l as usize;
        if l >= links {
            return Err(UdpError::Routes(format!(
                "stream {s} is routed to link {l}, but there are {links} links"
            )));
        }
        if std::mem::replace(&mut seen_link[l], true) {
            return Err(UdpError::Routes(format!(
                "link {l} is fed by two streams: each link takes one"
            )));
        }
        if std::mem::replace(&mut seen_stream[s as usize], true) {
            return Err(UdpError::Routes(format!("stream {s} is routed twice")));
        }
    }
    if let Some(l) = seen_link.iter().position(|s| !s) {
        return Err(UdpError::Routes(format!("no stream is routed to link {l}")));
    }
    Ok(())
}

/// The receiving side of every link: its rings, and what decides where a datagram goes.
struct Receiver {
    producers: Vec<Producer>,
    routing: Routing,
    /// Per link, its frames that the kernel queued on another link's socket, oldest first,
    /// each with the poll round it was found in. They wait for the link's own socket to deliver
    /// the frames sent before them, and go into the ring in time order.
    rerouted: Vec<VecDeque<(u64, Vec<u8>)>>,
    /// Poll rounds so far.
    round: u64,
    /// Whether the sockets hand over coalesced buffers (UDP_GRO).
    gro: bool,
    /// How long the receiver sleeps after a round that drained every socket (`nap`).
    nap: std::time::Duration,
}

struct Routing {
    layout: FrameLayout,
    stream_to_link: [Option<usize>; 256],
    /// One link: every datagram is its, whatever its header says of streams.
    single: bool,
    header_version: Option<u8>,
    counters: Arc<Vec<IngestCounters>>,
    /// Per link, the timestamp and sequence number of the last frame kept.
    last: Vec<Option<(u64, Option<u64>)>>,
    /// The newest timestamp kept on any link.
    newest: Option<u64>,
    max_jump_ticks: u64,
    frame_step_ticks: u64,
    /// Per link, frames in a row that came from too far ahead.
    far_ahead: Vec<u32>,
}

impl Receiver {
    fn new(
        source: &UdpSource,
        layout: FrameLayout,
        timing: StreamTiming,
        producers: Vec<Producer>,
        counters: Arc<Vec<IngestCounters>>,
    ) -> Receiver {
        let links = producers.len();
        let mut stream_to_link = [None; 256];
        for &(s, l) in &source.routes {
            stream_to_link[s as usize] = Some(l as usize);
        }
        Receiver {
            producers,
            routing: Routing {
                layout,
                stream_to_link,
                single: links == 1,
                header_version: source.header_version,
                counters,
                last: vec![None; links],
                newest: None,
                max_jump_ticks: timing.max_jump_ticks,
                frame_step_ticks: timing.frame_step_ticks.max(1),
                far_ahead: vec![0; links],
            },
            rerouted: vec![VecDeque::new(); links],
            round: 0,
            gro: false,
            nap: std::time::Duration::ZERO,
        }
    }

    fn run(&mut self, sockets: &mut [LinkSocket], stop: &AtomicBool) {
        let mut fds: Vec<libc::pollfd> = sockets
            .iter()
            .map(|s| libc::pollfd {
                fd: s.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // Whether the last round read every socket empty.
        let mut drained = true;
        while !stop.load(Ordering::Relaxed) {
            // Let data gather before the next poll: fewer wakeups, fuller receives (see `nap`).
            if drained && !self.nap.is_zero() {
                std::thread::sleep(self.nap);
            }
            drained = true;
            self.round += 1;
            // SAFETY: `fds` is a valid array of pollfd of the length given.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_MS) };
            if ready < 0 {
                continue;
            }
            // A rerouted frame found before this poll, of a link whose socket has nothing now:
            // whatever the link sent before it had been queued by then, and is read. Its turn.
            for (s, p) in sockets.iter().zip(&fds) {
                if p.revents & libc::POLLIN == 0 {
                    self.flush_rerouted(s.link, self.round);
                }
            }
            for (i, p) in fds.iter_mut().enumerate() {
                if p.revents & libc::POLLIN != 0 {
                    // Drain what is queued, a batch at a time, before polling again.
                    if self.gro {
                        let mut calls = 0;
                        while calls < BATCH && self.receive_coalesced(&mut sockets[i]) {
                            calls += 1;
                        }
                        drained &= calls < BATCH;
                    } else {
                        while self.receive_batch(&mut sockets[i]) == BATCH {}
                    }
                }
                p.revents = 0;
            }
        }
    }

    /// The most frames the receiver may claim of a link's ring at once.
    fn room(&self, link: usize) -> usize {
        (self.producers[link].buffer().capacity_frames() / 2) as usize
    }

    /// Receives up to `BATCH` datagrams of one socket into its link's next slots, merged in
    /// time order with the link's frames that came by other sockets; returns how many arrived.
    fn receive_batch(&mut self, sock: &mut LinkSocket) -> usize {
        let link = sock.link;
        let fb = self.routing.layout.frame_bytes as usize;
        if self.rerouted[link].len() >= self.room(link) {
            // No room left to receive in (a tiny ring): the waiting frames go first.
            self.flush_rerouted(link, u64::MAX);
        }
        // The first `waiting` slots are for rerouted frames that may go before the batch.
        let waiting = self.rerouted[link].len();
        let batch = BATCH.min(self.room(link) - waiting);
        let slots = self.producers[link].claim(waiting + batch);
        let mut iov: Vec<libc::iovec> = slots[waiting..]
            .iter()
            .map(|&p| libc::iovec {
                iov_base: p.cast(),
                iov_len: fb,
            })
            .collect();
        // Room for one SO_RXQ_OVFL control message per datagram.
        let mut control = vec![[0u64; 8]; batch];
        // SAFETY: mmsghdr is plain data; every pointer set below outlives the call.
        let mut msgs: Vec<libc::mmsghdr> =
            (0..batch).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (i, m) in msgs.iter_mut().enumerate() {
            m.msg_hdr.msg_iov = &mut iov[i];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = control[i].as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = std::mem::size_of::<[u64; 8]>() as _;
        }
        // SAFETY: each iovec points at a claimed, whole slot of `fb` bytes that no reader trusts
        // until it is kept and published; the control buffers and headers live across the call.
        let n = unsafe {
            libc::recvmmsg(
                sock.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                batch as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n <= 0 {
            self.producers[link].keep(0);
            return 0;
        }
        let n = n as usize;
        // Frames kept so far: slot `kept` is the next to fill. It never passes the slot being
        // read (kept <= rerouted frames taken + batch frames kept <= waiting + i).
        let mut kept = 0;
        let mut drops = sock.drops_seen;
        for (i, m) in msgs.iter().enumerate().take(n) {
            if let Some(d) = rxq_overflow(&m.msg_hdr) {
                drops = drops.max(d);
            }
            let c = &self.routing.counters[link];
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                c.long.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if (m.msg_len as usize) < fb {
                c.short.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.take_frame(link, waiting + i, &mut kept);
        }
        let c = &self.routing.counters[link];
        c.receives.fetch_add(n as u64, Ordering::Relaxed);
        c.kernel_drops.fetch_add(
            drops.wrapping_sub(sock.drops_seen) as u64,
            Ordering::Relaxed,
        );
        sock.drops_seen = drops;
        self.producers[link].keep(kept);
        self.producers[link].publish();
        n
    }

    /// Receives one datagram or coalesced buffer (UDP GRO) of one socket straight into its
    /// link's next consecutive slots, split by its segment size, each frame merged in time
    /// order with the link's frames that came by other sockets; returns whether anything came.
    fn receive_coalesced(&mut self, sock: &mut LinkSocket) -> bool {
        let link = sock.link;
        let fb = self.routing.layout.frame_bytes as usize;
        if self.rerouted[link].len() >= self.room(link) {
            self.flush_rerouted(link, u64::MAX);
        }
        let waiting = self.rerouted[link].len();
        let offered = MAX_COALESCED_BYTES
            .div_ceil(fb)
            .min(self.room(link) - waiting);
        let slots = self.producers[link].claim(waiting + offered);
        // The ring's slots lie back to back: one iovec, or two where the claim wraps the end.
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(2);
        for &p in &slots[waiting..] {
            match iov.last_mut() {
                Some(v) if (v.iov_base as *mut u8).wrapping_add(v.iov_len) == p => v.iov_len += fb,
                _ => iov.push(libc::iovec {
                    iov_base: p.cast(),
                    iov_len: fb,
                }),
            }
        }
        let mut control = [0u64; CONTROL_WORDS];
        // SAFETY: msghdr is plain data; its pointers are set below to buffers that outlive the
        // call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: the iovecs cover claimed, whole slots that no reader trusts until they are
        // kept and published; the control buffer and header live across the call.
        let n = unsafe { libc::recvmsg(sock.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n <= 0 {
            self.producers[link].keep(0);
            return false;
        }
        let n = n as usize;
        let (drops, segment) = control_messages(&msg);
        if let Some(drops) = drops {
            self.routing.counters[link].kernel_drops.fetch_add(
                drops.wrapping_sub(sock.drops_seen) as u64,
                Ordering::Relaxed,
            );
            sock.drops_seen = drops;
        }
        // No UDP_GRO message: one datagram, its own length.
        let segment = segment.map_or(n, |s| s as usize).max(1);
        let c = &self.routing.counters[link];
        c.receives.fetch_add(1, Ordering::Relaxed);
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            if segment == n {
                // One datagram longer than every slot offered: longer than a frame.
                c.long.fetch_add(1, Ordering::Relaxed);
                self.producers[link].keep(0);
                return true;
            }
            c.truncated.fetch_add(1, Ordering::Relaxed);
        }
        let mut kept = 0;
        if segment == fb {
            let whole = n / fb;
            if !n.is_multiple_of(fb) {
                // The last segment of a run may be shorter than the others: not a frame.
                c.short.fetch_add(1, Ordering::Relaxed);
            }
            if whole > 1 {
                c.coalesced.fetch_add(1, Ordering::Relaxed);
            }
            for i in 0..whole {
                self.take_frame(link, waiting + i, &mut kept);
            }
        } else {
            // Segments of another size than a frame's: none is a frame.
            let segments = n.div_ceil(segment) as u64;
            let wrong = if segment < fb { &c.short } else { &c.long };
            wrong.fetch_add(segments, Ordering::Relaxed);
        }
        self.producers[link].keep(kept);
        self.producers[link].publish();
        true
    }

    /// Takes claimed slot `at` of `link`'s last claim, a whole frame that came on its socket:
    /// routes it (a frame of another link is stashed for that link), puts the link's rerouted
    /// frames that go before it first, and keeps it in slot `kept` if it is one to keep.
    /// `kept <= at`: the first slots of the claim were left for the rerouted frames.
    fn take_frame(&mut self, link: usize, at: usize, kept: &mut usize) {
        let frame = self.producers[link].claimed_slot(at);
        let Some(target) = self.routing.route(link, frame) else {
            return;
        };
        if target != link {
            let frame = frame.to_vec();
            self.stash(target, frame);
            return;
        }
        let ts = self.routing.layout.timestamp(frame);
        while self.rerouted[link]
            .front()
            .is_some_and(|(_, f)| self.routing.layout.timestamp(f) < ts)
        {
            let (_, f) = self.rerouted[link].pop_front().expect("a frame");
            if self.routing.admit(link, &f) {
                self.producers[link].fill_claimed(*kept, &f);
                *kept += 1;
            }
        }
        if self
            .routing
            .admit(link, self.producers[link].claimed_slot(at))
        {
            if at != *kept {
                self.producers[link].move_claimed(at, *kept);
            }
            *kept += 1;
        }
    }

    /// Keeps a frame of `link` that came by another link's socket until its turn.
    fn stash(&mut self, link: usize, frame: Vec<u8>) {
        self.routing.counters[link]
            .rerouted
            .fetch_add(1, Ordering::Relaxed);
        if self.rerouted[link].len() >= self.room(link) / 2 {
            // Too many waiting: the link's socket is not delivering; waiting longer helps no one.
            self.flush_rerouted(link, u64::MAX);
        }
        let ts = self.routing.layout.timestamp(&frame);
        let q = &mut self.rerouted[link];
        let at = q.partition_point(|(_, f)| self.routing.layout.timestamp(f) <= ts);
        q.insert(at, (self.round, frame));
    }

    /// Puts `link`'s rerouted frames found before poll round `before` into its ring.
    fn flush_rerouted(&mut self, link: usize, before: u64) {
        let ready = self.rerouted[link]
            .iter()
            .take_while(|(r, _)| *r < before)
            .count();
        if ready == 0 {
            return;
        }
        self.producers[link].claim(ready);
        let mut kept = 0;
        for (_, f) in self.rerouted[link].drain(..ready) {
            if self.routing.admit(link, &f) {
                self.producers[link].fill_claimed(kept, &f);
                kept += 1;
            }
        }
        self.producers[link].keep(kept);
        self.producers[link].publish();
    }
}

impl Routing {
    /// The link a whole-sized datagram received on `link`'s socket belongs to, or None (counted
    /// on `link`) when no link takes it.
    fn route(&self, link: usize, frame: &[u8]) -> Option<usize> {
        let l = self.layout;
        let id = l.identity(frame);
        if let (Some(v), Some(id)) = (self.header_version, id) {
            if v != id.version {
                self.counters[link]
                    .bad_version
                    .fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        if self.single {
            return Some(link);
        }
        let target = self.stream_to_link[id.unwrap_or_default().stream_id as usize];
        if target.is_none() {
            self.counters[link]
                .unknown_stream
                .fetch_add(1, Ordering::Relaxed);
        }
        target
    }

    /// Whether `link`'s next frame, in arrival order, is one to keep; counts what it says of
    /// the link's continuity.
    fn admit(&mut self, link: usize, frame: &[u8]) -> bool {
        let l = self.layout;
        let c = &self.counters[link];
        let ts = l.timestamp(frame);
        let seq = l.sequence(frame);
        let reference = self.last[link].map(|(t, _)| t).or(self.newest);
        if reference.is_some_and(|r| ts > r.saturating_add(self.max_jump_ticks)) {
            self.far_ahead[link] += 1;
            if self.far_ahead[link] < RESYNC_AFTER {
                c.implausible_timestamp.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            // The link's clock really moved on (a restart): follow it.
            self.last[link] = None;
        }
        self.far_ahead[link] = 0;
        if let Some((last_ts, last_seq)) = self.last[link] {
            if ts <= last_ts {
                // A frame older than the one before would break the buffer's time order.
                c.out_of_order.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            let missing = (ts - last_ts) / self.frame_step_ticks;
            if missing > 1 {
                c.timestamp_gap_frames
                    .fetch_add(missing - 1, Ordering::Relaxed);
            }
            if let (Some(s), Some(p)) = (seq, last_seq) {
                let gap = (s + SEQUENCE_MODULUS - p - 1) % SEQUENCE_MODULUS;
                c.sequence_gap_frames.fetch_add(gap, Ordering::Relaxed);
            }
        }
        self.last[link] = Some((ts, seq));
        self.newest = Some(self.newest.map_or(ts, |n| n.max(ts)));
        c.frames.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(frame.len() as u64, Ordering::Relaxed);
        true
    }
}

/// The kernel's count of drops on the socket, from a received message's SO_RXQ_OVFL control
/// message.
fn rxq_overflow(h: &libc::msghdr) -> Option<u32> {
    control_messages(h).0
}

/// What a received message's control messages say: the socket's drop count (SO_RXQ_OVFL) and
/// the segment size of a coalesced buffer (UDP_GRO).
fn control_messages(h: &libc::msghdr) -> (Option<u32>, Option<u32>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency_buffer::latency_buffer;
    use snbuf_persist::memory::PageSize;

    #[test]
    fn the_nap_never_lets_a_socket_buffer_fill_at_16x_the_expected_rate() {
        let mib = 1 << 20;
        assert_eq!(nap(32 * mib, 0.0), std::time::Duration::ZERO);
        assert_eq!(nap(32 * mib, f64::NAN), std::time::Duration::ZERO);
        // WIBEth's own rate, 16 MiB asked (32 granted): the cap.
        assert_eq!(nap(32 * mib, 219.7e6), MAX_NAP);
        // A 100 Gb/s link into a 4 MiB buffer: 2 MiB of data room fills in 168 us at 12.5 GB/s.
        for (rcvbuf, rate) in [(4 * mib, 12.5e9), (256 * 1024, 1e9), (32 * mib, 10e9)] {
            let n = nap(rcvbuf, rate).as_secs_f64();
            assert!(n <= MAX_NAP.as_secs_f64());
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
        let (mut s0, a0) = bound();
        let (mut s1, a1) = bound();
        s1.link = 1;
        let mut producers = Vec::new();
        let mut buffers = Vec::new();
        for _ in 0..2 {
            let (p, b) = latency_buffer(layout, 64, PageSize::Small4K).unwrap();
            producers.push(p);
            buffers.push(b);
        }
        let source = UdpSource {
            bind: a0,
            routes: UdpSource::default_routes(2),
            header_version: None,
            rcvbuf_bytes: 1 << 20,
            gro: false,
        };
        let timing = StreamTiming {
            frame_step_ticks: layout.ticks_per_frame,
            max_jump_ticks: u64::MAX / 2,
            bytes_per_s: 0.0,
        };
        let counters = Arc::new(vec![IngestCounters::default(), IngestCounters::default()]);
        let mut rx = Receiver::new(&source, layout, timing, producers, counters.clone());
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
        assert_eq!(rx.receive_batch(&mut s0), 1);
        assert_eq!(rx.receive_batch(&mut s1), 4);
        tx.send_to(&frame(&mut gen, 5), a0).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(rx.receive_batch(&mut s0), 1);
        // Nothing more comes on link 1's socket: at the next poll frame 5 goes in.
        rx.round += 1;
        rx.flush_rerouted(1, rx.round);
        let b = &buffers[1];
        assert_eq!(b.written(), 6, "every frame of link 1 is in its ring");
        for k in 0..6 {
            assert_eq!(b.timestamp_at(k).unwrap(), 1000 * tpf + k * tpf);
        }
        assert_eq!(buffers[0].written(), 0);
        let c = counters[1].snapshot();
        assert_eq!((c.frames, c.rerouted, c.out_of_order), (6, 2, 0));
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

    /// A receiver of `links` WIBEth links with rings of `slots`, its sockets with UDP GRO on
    /// (socket i feeds link i), the rings' reading ends, and the counters.
    struct GroRig {
        rx: Receiver,
        socks: Vec<LinkSocket>,
        addrs: Vec<SocketAddr>,
        buffers: Vec<crate::latency_buffer::LatencyBuffer>,
        counters: Arc<Vec<IngestCounters>>,
    }

    fn gro_rig(links: usize, slots: u64) -> GroRig {
        let layout = snbuf_frames::FrameType::WibEth.layout();
        let (mut socks, mut addrs, mut producers, mut buffers) = (vec![], vec![], vec![], vec![]);
        for l in 0..links {
            let (mut s, a) = bound();
            enable_gro(&s.fd).unwrap();
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
            gro: true,
        };
        let timing = StreamTiming {
            frame_step_ticks: layout.ticks_per_frame,
            max_jump_ticks: u64::MAX / 2,
            bytes_per_s: 0.0,
        };
        let counters: Arc<Vec<IngestCounters>> =
            Arc::new((0..links).map(|_| IngestCounters::default()).collect());
        let mut rx = Receiver::new(&source, layout, timing, producers, counters.clone());
        rx.gro = true;
        GroRig {
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
    fn receive_all(rig: &mut GroRig, sock: usize) -> usize {
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
        let mut rig = gro_rig(1, 64);
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
            (c.short, c.sequence_gap_frames, c.timestamp_gap_frames),
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
        let mut rig = gro_rig(1, 20);
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
        let mut rig = gro_rig(1, 64);
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let frames: Vec<Vec<u8>> = (0..3).map(|k| wibeth_frame(0, k)).collect();
        let tail = wibeth_frame(0, 3)[..1000].to_vec();
        gso_send(&tx, rig.addrs[0], &[frames.concat(), tail].concat(), 7200);
        receive_all(&mut rig, 0);
        let c = rig.counters[0].snapshot();
        assert_eq!((c.frames, c.short, c.coalesced), (3, 1, 1));
        assert_eq!(rig.buffers[0].written(), 3);
        // Segments of another size than a frame's are none of them frames.
        gso_send(&tx, rig.addrs[0], &frames.concat(), 3600);
        receive_all(&mut rig, 0);
        let c = rig.counters[0].snapshot();
        assert_eq!((c.frames, c.short), (3, 1 + 6));
        assert_eq!(rig.buffers[0].written(), 3);
    }

    #[test]
    fn a_bad_segment_inside_a_coalesced_buffer_is_counted_and_the_rest_kept() {
        let mut rig = gro_rig(1, 64);
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let layout = snbuf_frames::FrameType::WibEth.layout();
        let mut frames: Vec<Vec<u8>> = (0..5).map(|k| wibeth_frame(0, k)).collect();
        let mut id = layout.identity(&frames[2]).unwrap();
        id.version = 5;
        layout.write_identity(&mut frames[2], &id);
        gso_send(&tx, rig.addrs[0], &frames.concat(), 7200);
        receive_all(&mut rig, 0);
        let c = rig.counters[0].snapshot();
        assert_eq!((c.frames, c.bad_version), (4, 1));
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
        let mut rig = gro_rig(2, 64);
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
        assert_eq!(c1.sequence_gap_frames + c1.out_of_order, 0);
    }
}
