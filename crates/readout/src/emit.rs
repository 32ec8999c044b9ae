//! `snbuf emit`: the detector as its own process. Frames in their frame type's own layout (the
//! emulated content, or replayed recordings: one file per link), one per UDP datagram, on the
//! absolute schedule of the detector's clock (`source::clock_from_epoch`: the frame type's own
//! clock, in step with the wall clock, or offset from it by `clock_offset_s` like a timing
//! system not set to NTP time). Each link's due frames go out as one UDP_SEGMENT (GSO) send: the
//! kernel cuts it into one datagram per frame, or, on loopback to a receiver with UDP_GRO, hands
//! it over whole; the links' sends go together in one `sendmmsg`. Where the kernel refuses GSO
//! (`--gso off`, or a device without it) each frame is its own message. Below the frame type's own rate
//! the link is sub-sampled (one frame every `frame_step_ticks`), never slowed: a second of what
//! it sends spans a second of the detector's clock. What was sent is summed up per link: frames,
//! first and last timestamp, and a CRC-32C of every byte in order.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use snbuf_frames::{DetectorClock, FrameType, HeaderKind};

use crate::framegen::{FrameGen, Payload, SourceError, PAYLOAD_VARIANTS};
use crate::source::clock_from_epoch;

/// Messages per `sendmmsg`, at most.
const BATCH: usize = 64;
/// The most UDP payload one GSO send may carry: a 64 KiB IPv4 packet less its IP and UDP
/// headers.
const MAX_GSO_BYTES: usize = 65_507;
/// Segments per GSO send, at most (the kernel's UDP_MAX_SEGMENTS).
const MAX_GSO_SEGMENTS: usize = 64;

/// What to send.
#[derive(Clone)]
pub struct EmitConfig {
    pub to: SocketAddr,
    pub frame_type: FrameType,
    /// Per link, where its frames come from (the emulated content, or its own recording).
    pub payloads: Vec<Payload>,
    /// Per link, the DAQEthHeader stream_id it sends under (emulated frames only; a recording
    /// keeps its own).
    pub streams: Vec<u8>,
    pub frames_per_s_per_link: f64,
    /// Seconds the sender's detector clock is ahead of the wall clock (negative: behind).
    pub clock_offset_s: f64,
    /// How long to send (None: until `stop`).
    pub duration: Option<Duration>,
    /// Keep a CRC-32C of every byte sent per link (costs a pass over the data).
    pub digest: bool,
    /// The CPU to send from. One CPU keeps the datagrams of a link in order: on loopback, a
    /// sender that moves between CPUs can have its datagrams delivered out of order, as a NIC
    /// spreading one flow over queues would.
    pub cpu: Option<usize>,
    /// Send each link's due frames as one UDP_SEGMENT (GSO) send where the kernel allows it.
    pub gso: bool,
}

/// What one link sent.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkDigest {
    pub link: u32,
    pub stream_id: Option<u8>,
    pub frames: u64,
    pub first_timestamp: Option<u64>,
    pub last_timestamp: Option<u64>,
    /// CRC-32C (Castagnoli) of every byte sent, in order (when asked for).
    pub crc32c: Option<u32>,
}

/// What a whole run sent.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EmitReport {
    pub links: Vec<LinkDigest>,
    /// Ticks between a link's frames, and the clock they count (Hz).
    pub frame_step_ticks: u64,
    pub clock_hz: u64,
    pub seconds: f64,
    pub bytes_per_s: f64,
    /// Datagrams the kernel refused at once (nobody listening, a full send queue).
    pub send_errors: u64,
    /// The most the sender fell behind its schedule (s).
    pub max_lag_s: f64,
    /// Whether frames went out in GSO sends, and why not when they were asked to and the kernel
    /// refused.
    pub gso: bool,
    pub gso_refused: Option<String>,
    /// Send calls made, and CPU seconds the sending thread spent.
    pub send_calls: u64,
    pub cpu_s: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("send to udp://{to}: {cause}")]
    Socket {
        to: SocketAddr,
        cause: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
}

impl EmitConfig {
    /// Whether this can be sent: a link or more, at a rate, of frames that fit a datagram.
    pub fn check(&self) -> Result<(), EmitError> {
        if self.payloads.is_empty() {
            return Err(EmitError::Config("no link to send".into()));
        }
        if !(self.frames_per_s_per_link.is_finite() && self.frames_per_s_per_link > 0.0) {
            return Err(SourceError::BadRate(self.frames_per_s_per_link).into());
        }
        // The detector's clock from the epoch in 64 bits: about 9,000 years of 62.5 MHz ticks.
        let clock_hz = DetectorClock::of(self.frame_type).hz() as f64;
        let detector_s = snbuf_quantity::now_unix_ns() as f64 / 1e9 + self.clock_offset_s;
        let ticks = detector_s * clock_hz;
        if ticks.is_nan() || ticks >= u64::MAX as f64 / 2.0 {
            return Err(EmitError::Config(format!(
                "--clock-offset {} s: the detector's clock would be past its 64-bit timestamps",
                self.clock_offset_s
            )));
        }
        let frame_bytes = self.frame_type.frame_bytes() as usize;
        if frame_bytes > MAX_GSO_BYTES {
            return Err(EmitError::Config(format!(
                "{frame_bytes} B frames do not fit a UDP datagram ({MAX_GSO_BYTES} B at most): DUNE sends one frame a datagram"
            )));
        }
        Ok(())
    }
}

/// Sends until `config.duration` has passed or `stop` is set; `progress` is told the frames
/// sent so far (all links) about once a second. The paced loop is one piece: its state (each
/// link's schedule, the batches, the counters) every step shares.
pub fn emit(
    config: &EmitConfig,
    stop: &AtomicBool,
    mut progress: impl FnMut(u64, Duration),
) -> Result<EmitReport, EmitError> {
    let t = config.frame_type;
    config.check()?;
    let clock = DetectorClock::of(t);
    let step = clock.frame_step_ticks(config.frames_per_s_per_link);
    let mut gens = generators(config, step)?;
    let socket_err = |cause| EmitError::Socket {
        to: config.to,
        cause,
    };
    let socket = connected_socket(config).map_err(socket_err)?;
    let fb = t.frame_bytes() as usize;
    let fps = clock.frames_per_s(step);
    let (start, first_ts) = clock_from_epoch(clock, step, config.clock_offset_s);
    let links = gens.len();
    let mut digests = empty_digests(config);
    let mut crcs: Vec<crc_fast::Digest> = (0..links)
        .map(|_| crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi))
        .collect();
    // Messages point straight at the generators' frames: a generator keeps each frame as it is
    // for PAYLOAD_VARIANTS calls, so a run holds at most that many frames per link. A run is
    // one GSO send; without GSO its frames are messages of their own, BATCH at most in all.
    let mut sender = Sender::new(socket, fb, config.gso);
    let run_max = run_max(config.gso, fb, links);
    let mut runs: Vec<Vec<*const u8>> = vec![Vec::with_capacity(run_max); links];
    let cpu0 = snbuf_platform::cpu::thread_cpu_seconds();
    let (mut sent, mut next, mut errors) = (0u64, 0u64, 0u64);
    let mut max_lag = Duration::ZERO;
    let mut next_report = Instant::now() + Duration::from_secs(1);
    let began = Instant::now();
    loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) || config.duration.is_some_and(|d| now >= start + d) {
            break;
        }
        let due = (now.saturating_duration_since(start).as_secs_f64() * fps) as u64;
        let next_due = start + Duration::from_secs_f64((next + 1) as f64 / fps);
        max_lag = max_lag.max(now.saturating_duration_since(next_due));
        // Frame k of every link, then k + 1: the links interleave as a detector's do.
        while next < due && !stop.load(Ordering::Relaxed) {
            let ts = first_ts + next * step;
            for (l, g) in gens.iter_mut().enumerate() {
                let frame = g.frame_at(ts);
                if config.digest {
                    crcs[l].update(frame);
                }
                let d = &mut digests[l];
                d.frames += 1;
                d.first_timestamp.get_or_insert(ts);
                d.last_timestamp = Some(ts);
                runs[l].push(frame.as_ptr());
            }
            next += 1;
            if runs[0].len() == run_max {
                errors += sender.send(&runs).map_err(socket_err)?;
                sent += (run_max * links) as u64;
                runs.iter_mut().for_each(Vec::clear);
            }
        }
        if !runs[0].is_empty() {
            errors += sender.send(&runs).map_err(socket_err)?;
            sent += (runs[0].len() * links) as u64;
            runs.iter_mut().for_each(Vec::clear);
        }
        if Instant::now() >= next_report {
            progress(sent, began.elapsed());
            next_report += Duration::from_secs(1);
        }
        let wake = start + Duration::from_secs_f64((next + 1) as f64 / fps);
        std::thread::sleep(
            wake.saturating_duration_since(Instant::now())
                .clamp(Duration::from_micros(100), Duration::from_millis(20)),
        );
    }
    finish_digests(&mut digests, crcs, config.digest);
    let seconds = began.elapsed().as_secs_f64();
    Ok(EmitReport {
        links: digests,
        frame_step_ticks: step,
        clock_hz: clock.hz(),
        seconds,
        bytes_per_s: sent as f64 * fb as f64 / seconds.max(1e-9),
        send_errors: errors,
        max_lag_s: max_lag.as_secs_f64(),
        gso: sender.gso,
        gso_refused: sender.gso_refused,
        send_calls: sender.calls,
        cpu_s: snbuf_platform::cpu::thread_cpu_seconds() - cpu0,
    })
}

/// The most frames of a link one send carries: a GSO send's segments, or without GSO its share
/// of a batch of messages; never more than a generator keeps unchanged.
fn run_max(gso: bool, frame_bytes: usize, links: usize) -> usize {
    assert!(frame_bytes > 0 && links > 0);
    let most = if gso {
        (MAX_GSO_BYTES / frame_bytes).clamp(1, MAX_GSO_SEGMENTS)
    } else {
        (BATCH / links).max(1)
    };
    most.min(PAYLOAD_VARIANTS as usize)
}

/// Each link's digest completed with its CRC, when one was asked for.
fn finish_digests(digests: &mut [LinkDigest], crcs: Vec<crc_fast::Digest>, digest: bool) {
    assert_eq!(digests.len(), crcs.len(), "a CRC per link");
    for (d, c) in digests.iter_mut().zip(crcs) {
        d.crc32c = digest.then(|| c.finalize() as u32);
    }
}

/// Each link's digest before anything is sent.
fn empty_digests(config: &EmitConfig) -> Vec<LinkDigest> {
    (0..config.payloads.len())
        .map(|l| LinkDigest {
            link: l as u32,
            stream_id: config.streams.get(l).copied(),
            ..LinkDigest::default()
        })
        .collect()
}

/// Each link's frame generator, on the sender's step, its stream set where the frames carry one.
fn generators(config: &EmitConfig, step: u64) -> Result<Vec<FrameGen>, EmitError> {
    let layout = config.frame_type.layout();
    let mut gens = Vec::new();
    for (link, p) in config.payloads.iter().enumerate() {
        let mut g = FrameGen::new(config.frame_type, link as u32, p)?.with_frame_step(step);
        if let (Payload::Emulated, Some(&stream), HeaderKind::DaqEth) =
            (p, config.streams.get(link), layout.header)
        {
            g.set_stream(stream);
        }
        gens.push(g);
    }
    assert_eq!(gens.len(), config.payloads.len(), "a generator per link");
    Ok(gens)
}

/// A UDP socket connected to the receiver, this thread pinned first where asked.
fn connected_socket(config: &EmitConfig) -> std::io::Result<UdpSocket> {
    let bind: SocketAddr = if config.to.is_ipv4() {
        "0.0.0.0:0".parse().expect("an address")
    } else {
        "[::]:0".parse().expect("an address")
    };
    if let Some(cpu) = config.cpu {
        snbuf_platform::cpu::pin_current_thread(cpu)?;
    }
    let socket = UdpSocket::bind(bind)?;
    socket.connect(config.to)?;
    Ok(socket)
}

/// The sending socket, and how it sends.
struct Sender {
    socket: UdpSocket,
    frame_bytes: usize,
    /// Whether runs go out as GSO sends (until the kernel refuses one).
    gso: bool,
    gso_refused: Option<String>,
    /// `sendmmsg` calls made.
    calls: u64,
}

/// One message: its frames, and whether they go as one GSO send.
struct Message {
    iov: Vec<libc::iovec>,
    gso: bool,
}

impl Sender {
    fn new(socket: UdpSocket, frame_bytes: usize, gso: bool) -> Sender {
        // (UDP_SEGMENT's size is a u16.)
        assert!(
            frame_bytes > 0 && frame_bytes <= u16::MAX as usize,
            "a datagram's frame"
        );
        Sender {
            socket,
            frame_bytes,
            gso,
            gso_refused: None,
            calls: 0,
        }
    }

    /// Sends each link's run of frames (each `frame_bytes`, in a generator that keeps them as
    /// they are while this runs), in order within the link; returns how many frames the kernel
    /// refused (nobody listening on the port, a full queue). Other errors end the run.
    fn send(&mut self, runs: &[Vec<*const u8>]) -> std::io::Result<u64> {
        let fb = self.frame_bytes;
        let iov = |p: &*const u8| libc::iovec {
            iov_base: *p as *mut libc::c_void,
            iov_len: fb,
        };
        let mut messages = Vec::new();
        for run in runs.iter().filter(|r| !r.is_empty()) {
            if self.gso && run.len() > 1 {
                messages.push(Message {
                    iov: run.iter().map(iov).collect(),
                    gso: true,
                });
            } else {
                messages.extend(run.iter().map(|p| Message {
                    iov: vec![iov(p)],
                    gso: false,
                }));
            }
        }
        let mut refused = 0;
        for chunk in messages.chunks_mut(BATCH) {
            refused += self.send_messages(chunk)?;
        }
        Ok(refused)
    }

    fn send_messages(&mut self, messages: &mut [Message]) -> std::io::Result<u64> {
        let n = messages.len();
        assert!(n <= BATCH, "one sendmmsg batch at most");
        // One UDP_SEGMENT control message each: the segment size, a u16.
        let mut control = vec![[0u64; 4]; n];
        let mut msgs = message_headers(messages, &mut control, self.frame_bytes);
        let mut done = 0;
        let mut refused = 0;
        while done < n {
            self.calls += 1;
            // SAFETY: the headers point at iovecs over frames that their generators leave
            // unchanged until after this call, and at live control buffers.
            let rc = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    msgs[done..].as_mut_ptr(),
                    (n - done) as u32,
                    0,
                )
            };
            if rc >= 0 {
                done += rc as usize;
                continue;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // A receiver not (yet) listening: a detector sends regardless.
                Some(libc::ECONNREFUSED) | Some(libc::ENOBUFS) => {
                    refused += messages[done].iov.len() as u64;
                    done += 1;
                }
                // The kernel or the route cannot segment (no GSO, no checksum offload on the
                // device): the rest go as one datagram per message from now on.
                Some(libc::EIO)
                | Some(libc::EINVAL)
                | Some(libc::EOPNOTSUPP)
                | Some(libc::ENOPROTOOPT)
                    if messages[done].gso =>
                {
                    self.gso = false;
                    self.gso_refused = Some(format!("the kernel refused UDP_SEGMENT ({e})"));
                    let rest: Vec<Vec<*const u8>> = messages[done..]
                        .iter()
                        .map(|m| m.iov.iter().map(|v| v.iov_base as *const u8).collect())
                        .collect();
                    return Ok(refused + self.send(&rest)?);
                }
                _ => return Err(e),
            }
        }
        Ok(refused)
    }
}

/// The headers of a sendmmsg over `messages`, each GSO message's segment size (`frame_bytes`)
/// in its own `control` buffer: they point into both, which must outlive them.
fn message_headers(
    messages: &mut [Message],
    control: &mut [[u64; 4]],
    frame_bytes: usize,
) -> Vec<libc::mmsghdr> {
    let n = messages.len();
    assert!(control.len() == n && frame_bytes <= u16::MAX as usize);
    // SAFETY: mmsghdr is plain data; its pointers are set below to live iovecs and control
    // buffers.
    let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
    for ((m, message), c) in msgs
        .iter_mut()
        .zip(messages.iter_mut())
        .zip(control.iter_mut())
    {
        m.msg_hdr.msg_iov = message.iov.as_mut_ptr();
        m.msg_hdr.msg_iovlen = message.iov.len() as _;
        if message.gso {
            m.msg_hdr.msg_control = c.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is a size computation.
            m.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
            // SAFETY: the control buffer (32 B) holds one cmsghdr with 2 bytes of data
            // (CMSG_SPACE(2) = 24 B); the header points at it.
            unsafe {
                let h = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                (*h).cmsg_level = libc::SOL_UDP;
                (*h).cmsg_type = libc::UDP_SEGMENT;
                (*h).cmsg_len = libc::CMSG_LEN(2) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(h).cast::<u16>(), frame_bytes as u16);
            }
        }
    }
    msgs
}
