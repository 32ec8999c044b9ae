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
//! UDP_SEGMENT batch arrives whole. One receive call then reads a whole buffer into consecutive
//! ring slots (the slots are contiguous, so the frames fall each into its own), up to ~64 KiB
//! instead of one datagram, or with `max_buffers_per_call` several full buffers (see
//! `receiver`). Without GRO, `recvmmsg` reads a batch of datagrams, one
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
//! events, not of frames: one drop may stand for several frames), datagrams of the wrong size or
//! header version, of an unknown stream, out of order, and gaps in each link's sequence numbers
//! and timestamps are counted per link (`IngestCounters`), live. Frames missing from a link's
//! buffer are counted lost again by the writers, by timestamp, if they fall in a window. The
//! frames lost, however the kernel counted its drops, are the sequence and timestamp gaps.
//!
//! One receive thread serves every link (poll over the sockets, a 100 ms timeout to see a
//! stop), or each socket its own thread where there are cores for it.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use snbuf_frames::{FrameLayout, HeaderKind};

use crate::latency_buffer::Producer;

mod counters;
mod messages;
mod receiver;
mod socket;

pub use counters::{DroppedDatagrams, IngestCounters, IngestSnapshot};
use receiver::{nap, Receiver};
pub use receiver::{DEFAULT_MAX_NAP, DEFAULT_RECEIVE_BATCH};
pub use socket::stream_router;
use socket::{
    accept_all, attach_stream_router, bind_to, drop_all, drops_so_far, enable_gro, set_int,
    set_rcvbuf, udp_socket,
};

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
    /// The longest the receiver sleeps after a poll round that drained every socket
    /// (`DEFAULT_MAX_NAP`; zero: never, for the lowest latency at the cost of a wakeup per
    /// small batch). Whatever is set, a nap stays within a sixteenth of the socket buffer's
    /// fill time at the expected rate, so it cannot overflow the buffer.
    pub max_nap: std::time::Duration,
    /// With GRO: the most coalesced buffers one receive call takes, while they come full
    /// (`DEFAULT_RECEIVE_BATCH`; 1: one call per buffer).
    pub max_buffers_per_call: usize,
}

/// What the receiver expects of a stream's timestamps, in ticks of the detector's clock: the
/// unit that owns the clock decides (`snbuf_unit::links`).
#[derive(Clone, Copy, Debug)]
pub struct StreamTiming {
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
    /// The longest the receiver sleeps between poll rounds (see `UdpSource::max_nap`).
    pub nap: std::time::Duration,
    /// Where the unit placed the receive thread (the caller's `on_thread_start` pins it):
    /// the interface holding the bound address with its NUMA node, and the CPU.
    pub nic: Option<snbuf_platform::numa::Nic>,
    pub receive_cpu: Option<usize>,
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
    assert_eq!(
        layout.frame_bytes as usize,
        producers
            .first()
            .map_or(layout.frame_bytes as usize, |p| p.buffer().frame_bytes()),
        "the links' slots are the layout's frames"
    );
    let OpenSockets {
        mut sockets,
        granted,
        gro,
        gro_refused,
    } = open_sockets(source, links)?;
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
        nap: nap(granted, timing.bytes_per_s, source.max_nap),
        nic: None,
        receive_cpu: None,
    };
    let mut rx = Receiver::new(source, layout, timing, producers, counters);
    rx.gro = gro;
    rx.nap = info.nap;
    let handle = std::thread::Builder::new()
        .name("snbuf-udp".into())
        .spawn(move || {
            on_thread_start();
            rx.run(&mut sockets, &stop);
        })
        .map_err(|cause| UdpError::Socket {
            op: "start the receive thread",
            bind: source.bind,
            cause,
        })?;
    Ok((info, handle))
}

/// A socket per link, bound and routed: what the kernel granted them.
struct OpenSockets {
    sockets: Vec<LinkSocket>,
    /// The receive buffer granted, per socket.
    granted: usize,
    /// Whether they receive coalesced buffers, and why not where GRO was asked for.
    gro: bool,
    gro_refused: Option<String>,
}

/// Binds a socket per link on `source.bind` (in route order: the group's socket i is link
/// `routes[i].1`), and with several links routes each stream to its own (`attach_stream_router`).
fn open_sockets(source: &UdpSource, links: usize) -> Result<OpenSockets, UdpError> {
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
    assert_eq!(
        sockets.len(),
        links,
        "a socket per link (the routes checked)"
    );
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
    Ok(OpenSockets {
        sockets,
        granted,
        gro,
        gro_refused,
    })
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

/// How the terminal words the receiver's placement, the same in `record`'s summary and in
/// `status`: the CPU its thread runs on, the interface it listens on, its nap between polls.
///
/// "on CPU 0, interface lo (no NUMA node); sleeps up to 500 us between polls". `nic` is the
/// interface as `Nic` displays it; None: bound to every interface.
pub fn receiver_words(cpu: Option<usize>, nic: Option<&str>, nap: std::time::Duration) -> String {
    format!(
        "on CPU {}, {}; {}",
        cpu.map_or("?".into(), |c| c.to_string()),
        nic.map_or("every interface (0.0.0.0)".into(), |n| format!(
            "interface {n}"
        )),
        if nap.is_zero() {
            "never sleeps between polls (--receive-nap off)".into()
        } else {
            format!("sleeps up to {} us between polls", nap.as_micros())
        }
    )
}
