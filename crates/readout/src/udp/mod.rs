//! Network ingest: DUNE's Ethernet readout sends one frame per UDP datagram (WIBEth, TDEEth,
//! DAPHNE Ethernet streams, over jumbo frames), the streams of many links to one port. Each
//! datagram is received straight into its link's latency-buffer slot: no intermediate copy.
//!
//! How, with many links on one port: one socket per link, all bound to the port with
//! SO_REUSEPORT, and a classic BPF program on the group (SO_ATTACH_REUSEPORT_CBPF) that reads
//! the DAQEthHeader's stream_id from the datagram and returns the index of that link's socket.
//! The kernel so queues each stream on its own link's socket, and `recvmmsg` reads a batch of
//! datagrams into the next slots of that link's ring. A datagram of a stream that is not routed
//! lands on a socket the kernel picks; it is counted and dropped there. While the sockets bind
//! one by one, the kernel would spread datagrams over those bound by its hash: each socket
//! drops everything (a socket filter) until the whole group and its router are in place. Should
//! the kernel still queue a routed stream's datagram on another socket, the receiver moves it over and merges it in time order with the link's own
//! socket's datagrams, so that the link loses nothing by it (counted as `rerouted`).
//!
//! Loss at ingest is loss: the kernel's drops (SO_RXQ_OVFL), datagrams of the wrong size or
//! header version, of an unknown stream, out of order, and gaps in each link's sequence numbers
//! and timestamps are counted per link (`IngestCounters`), live. Frames missing from a link's
//! buffer are counted lost again by the writers, by timestamp, if they fall in a window.
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
    accept_all, attach_stream_router, bind_to, drop_all, drops_so_far, set_int, set_rcvbuf,
    udp_socket,
};

/// Datagrams received per system call, at most.
const BATCH: usize = 64;
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
    for &link in &order {
        let fd = udp_socket(bind, links > 1).map_err(err("open a socket"))?;
        granted = set_rcvbuf(&fd, source.rcvbuf_bytes).map_err(err("set SO_RCVBUF"))?;
        set_int(&fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1).map_err(err("set SO_RXQ_OVFL"))?;
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
    };
    let mut rx = Receiver::new(source, layout, timing, producers, counters);
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
        while !stop.load(Ordering::Relaxed) {
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
                    while self.receive_batch(&mut sockets[i]) == BATCH {}
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
            let at = waiting + i;
            let frame = self.producers[link].claimed_slot(at);
            let Some(target) = self.routing.route(link, frame) else {
                continue;
            };
            if target != link {
                let frame = frame.to_vec();
                self.stash(target, frame);
                continue;
            }
            let ts = self.routing.layout.timestamp(frame);
            while self.rerouted[link]
                .front()
                .is_some_and(|(_, f)| self.routing.layout.timestamp(f) < ts)
            {
                let (_, f) = self.rerouted[link].pop_front().expect("a frame");
                if self.routing.admit(link, &f) {
                    self.producers[link].fill_claimed(kept, &f);
                    kept += 1;
                }
            }
            if self
                .routing
                .admit(link, self.producers[link].claimed_slot(at))
            {
                if at != kept {
                    self.producers[link].move_claimed(at, kept);
                }
                kept += 1;
            }
        }
        let c = &self.routing.counters[link];
        c.kernel_drops.fetch_add(
            drops.wrapping_sub(sock.drops_seen) as u64,
            Ordering::Relaxed,
        );
        sock.drops_seen = drops;
        self.producers[link].keep(kept);
        self.producers[link].publish();
        n
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

/// The kernel's count of datagrams dropped on the socket, from a received message's
/// SO_RXQ_OVFL control message.
fn rxq_overflow(h: &libc::msghdr) -> Option<u32> {
    // SAFETY: walking the control messages the kernel wrote into the buffer `h` describes,
    // with the libc macros that bound every step by msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_RXQ_OVFL {
                return Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<u32>()));
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency_buffer::latency_buffer;
    use snbuf_persist::memory::PageSize;

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
        };
        let timing = StreamTiming {
            frame_step_ticks: layout.ticks_per_frame,
            max_jump_ticks: u64::MAX / 2,
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
}
