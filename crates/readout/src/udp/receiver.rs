//! The receiving side of network ingest: one thread polls every link's socket and reads what
//! each holds straight into its link's ring, coalesced buffers (UDP GRO) or a batch of
//! datagrams per `recvmmsg`; decides each frame's link (`Routing`), merges the frames
//! the kernel queued on another link's socket in time order, and counts each frame's continuity.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use snbuf_frames::{FrameLayout, SEQUENCE_MODULUS};

use super::messages::{control_messages, receive_messages, rxq_overflow, CONTROL_WORDS};
use super::{IngestCounters, LinkSocket, StreamTiming, UdpSource, RESYNC_AFTER};
use crate::latency_buffer::Producer;

/// Datagrams received per system call, at most (without GRO); with GRO, coalesced buffers
/// read from one socket before the receiver turns to the next.
const BATCH: usize = 64;
/// The largest UDP payload one coalesced buffer carries: an IPv6 packet's 65,535 B less the
/// UDP header (an IPv4 one carries 20 B less).
const MAX_COALESCED_PAYLOAD: usize = 65_535 - 8;
/// Coalesced buffers one system call takes at most, while they come full, unless the operator
/// sets another (`UdpSource::max_buffers_per_call`). One: taking several a call (`recvmmsg`)
/// saved no CPU on loopback at any rate from 0.2 to 4 GiB/s, beyond the spread between
/// repeats, and at 4 GiB/s lost more in 2 of 3 repeats (`bench/ingest.sh sweep`,
/// BENCHMARKS.md): the crossing costs little beside each buffer's own work in the kernel and
/// its copy. Where system calls cost more, 8 (half a MiB a call). Only buffers that come full
/// (as many frames as 64 KiB holds) grow a batch: a sender whose runs are shorter, or frames
/// so small that GRO's 64 segments fill first, keep one buffer a call.
pub const DEFAULT_RECEIVE_BATCH: usize = 1;

/// The most whole frames of `frame_bytes` a coalesced buffer can hold (1 for frames too large
/// to coalesce).
fn frames_per_buffer(frame_bytes: usize) -> usize {
    (MAX_COALESCED_PAYLOAD / frame_bytes.max(1)).max(1)
}
/// How long the receiver waits for data before it looks at its stop flag.
const POLL_MS: i32 = 100;

/// The longest nap between poll rounds unless the operator sets another (`UdpSource::max_nap`).
pub const DEFAULT_MAX_NAP: std::time::Duration = std::time::Duration::from_millis(2);

/// How long the receiver may sleep after draining every socket: waking for each small batch
/// can cost more than receiving it (perf showed poll's sleeps and wakeups high in the receive
/// thread's profile at 2 GB/s), and data that waits in the socket buffer comes
/// out in fuller receives. At most `max_nap` (`DEFAULT_MAX_NAP` unless set), and at most a sixteenth of the time the socket
/// buffer (`rcvbuf_bytes` granted, half of it for data) takes to fill at the link's expected
/// rate, so a stream even 16x faster than expected does not overflow it while the receiver
/// sleeps. No nap when the rate is not known.
pub(super) fn nap(
    rcvbuf_bytes: usize,
    bytes_per_s: f64,
    max_nap: std::time::Duration,
) -> std::time::Duration {
    if !(bytes_per_s.is_finite() && bytes_per_s > 0.0) {
        return std::time::Duration::ZERO;
    }
    let fill_s = rcvbuf_bytes as f64 / 2.0 / bytes_per_s;
    std::time::Duration::from_secs_f64(fill_s / 16.0).min(max_nap)
}

/// The receiving side of every link: its rings, and what decides where a datagram goes.
pub(super) struct Receiver {
    producers: Vec<Producer>,
    routing: Routing,
    /// Per link, its frames that the kernel queued on another link's socket, oldest first,
    /// each with the poll round it was found in. They wait for the link's own socket to deliver
    /// the frames sent before them, and go into the ring in time order.
    rerouted: Vec<VecDeque<(u64, Vec<u8>)>>,
    /// Poll rounds so far.
    round: u64,
    /// Per link, the coalesced buffers its next receive asks for: doubled up to `batch_max`
    /// while every buffer comes full, back to 1 at the first that does not.
    buffers_per_call: Vec<usize>,
    /// The most coalesced buffers a receive call takes (`UdpSource::max_buffers_per_call`).
    batch_max: usize,
    /// Where each message's bytes past its slots go (a short last segment): a frame's bytes
    /// per message of the largest call so far.
    tails: Vec<u8>,
    /// Whether the sockets hand over coalesced buffers (UDP_GRO).
    pub(super) gro: bool,
    /// How long the receiver sleeps after a round that drained every socket (`nap`).
    pub(super) nap: std::time::Duration,
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
    /// Per link, the step between its frames as its stream has them: the smallest rise seen
    /// from one timestamp to the next (a sender's own spacing, whatever rate the unit was
    /// configured for). Timestamp gaps count in it.
    step_seen: Vec<Option<u64>>,
    /// Per link, frames in a row that came from too far ahead.
    far_ahead: Vec<u32>,
}

impl Receiver {
    pub(super) fn new(
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
                step_seen: vec![None; links],
                far_ahead: vec![0; links],
            },
            rerouted: vec![VecDeque::new(); links],
            round: 0,
            buffers_per_call: vec![1; links],
            batch_max: source.max_buffers_per_call.max(1),
            tails: Vec::new(),
            gro: false,
            nap: std::time::Duration::ZERO,
        }
    }

    pub(super) fn run(&mut self, sockets: &mut [LinkSocket], stop: &AtomicBool) {
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
                        // At most BATCH buffers (4 MiB) from one socket, then the next: a
                        // socket drained longer would let the others' buffers fill meanwhile.
                        let mut buffers = 0;
                        while buffers < BATCH {
                            let n = self.receive_buffers(&mut sockets[i]);
                            if n == 0 {
                                break;
                            }
                            buffers += n;
                        }
                        drained &= buffers < BATCH;
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
        let room = (self.producers[link].buffer().capacity_frames() / 2) as usize;
        debug_assert!(room > 0, "a ring holds at least two frames");
        room
    }

    /// Receives up to `BATCH` datagrams of one socket into its link's next slots, merged in
    /// time order with the link's frames that came by other sockets; returns how many arrived.
    fn receive_batch(&mut self, sock: &mut LinkSocket) -> usize {
        let link = sock.link;
        let fb = self.routing.layout.frame_bytes as usize;
        let (waiting, slots) = self.claim_behind_rerouted(link, BATCH);
        let batch = slots.len() - waiting;
        let mut iov: Vec<libc::iovec> = slots[waiting..]
            .iter()
            .map(|&p| libc::iovec {
                iov_base: p.cast(),
                iov_len: fb,
            })
            .collect();
        let mut control = vec![[0u64; CONTROL_WORDS]; batch];
        // SAFETY: each iovec points at a claimed, whole slot of `fb` bytes that no reader trusts
        // until it is kept and published.
        let (msgs, n) = unsafe { receive_messages(sock, iov.chunks_mut(1), &mut control) };
        assert!(n <= batch, "the kernel fills at most the messages offered");
        if n == 0 {
            self.producers[link].keep(0);
            return 0;
        }
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
        c.receive_calls.fetch_add(1, Ordering::Relaxed);
        self.count_kernel_drops(sock, drops);
        assert!(
            kept <= waiting + n,
            "no more frames kept than came and waited"
        );
        self.producers[link].keep(kept);
        self.producers[link].publish();
        n
    }

    /// `receive_buffers`, saying only whether anything came (the tests' view).
    #[cfg(test)]
    fn receive_coalesced(&mut self, sock: &mut LinkSocket) -> bool {
        self.receive_buffers(sock) > 0
    }

    /// Receives what one socket holds, one datagram or coalesced buffer (UDP GRO) a message,
    /// straight into its link's next consecutive slots, split by its segment size, each frame
    /// merged in time order with the link's frames that came by other sockets; returns how many
    /// buffers came.
    ///
    /// One message a call, or up to `batch_max` (one `recvmmsg`) while the socket's buffers
    /// come full (`buffers_per_call`). Each message is offered the slots of the
    /// most whole frames a coalesced buffer can hold (`frames_per_buffer`), then a tail of one
    /// frame's bytes outside the ring that catches a short last segment; the kernel fixes each
    /// message's place before it knows its size, so a message that comes short leaves empty
    /// slots, and the frames after it are moved down over them (`take_frame`): a second copy,
    /// which is why a partial buffer sends the socket back to one message a call.
    fn receive_buffers(&mut self, sock: &mut LinkSocket) -> usize {
        let link = sock.link;
        let fb = self.routing.layout.frame_bytes as usize;
        let per = frames_per_buffer(fb);
        let want = self.buffers_per_call[link].clamp(1, self.batch_max) * per;
        let (waiting, slots) = self.claim_behind_rerouted(link, want);
        let offered = slots.len() - waiting;
        // Messages of `per` slots each; the last takes what is left (a ring nearly full).
        let messages = (offered / per).max(1);
        let mut iov = self.offer(&slots[waiting..], messages, per);
        let mut control = vec![[0u64; CONTROL_WORDS]; messages];
        // SAFETY: the iovecs cover claimed, whole slots that no reader trusts until they are
        // kept and published, and the tails, which are not touched until the next call.
        let (msgs, received) = unsafe {
            receive_messages(sock, iov.iter_mut().map(|v| v.as_mut_slice()), &mut control)
        };
        assert!(
            received <= messages,
            "the kernel fills at most the messages offered"
        );
        if received == 0 {
            self.producers[link].keep(0);
            return 0;
        }
        let c = &self.routing.counters[link];
        c.receive_calls.fetch_add(1, Ordering::Relaxed);
        c.receives.fetch_add(received as u64, Ordering::Relaxed);
        let mut kept = 0;
        let mut drops = None;
        let mut all_full = received == messages;
        for (i, m) in msgs.iter().enumerate().take(received) {
            let (d, segment) = control_messages(&m.msg_hdr);
            drops = drops.max(d);
            let slots_here = if i + 1 == messages {
                offered - i * per
            } else {
                per
            };
            let whole = self.split_buffer(link, m, segment, slots_here);
            all_full &= whole == per;
            for j in 0..whole {
                self.take_frame(link, waiting + i * per + j, &mut kept);
            }
        }
        if let Some(drops) = drops {
            self.count_kernel_drops(sock, drops);
        }
        self.buffers_per_call[link] = if all_full {
            (self.buffers_per_call[link] * 2).min(self.batch_max)
        } else {
            1
        };
        assert!(
            kept <= waiting + offered,
            "no more frames kept than slots offered and frames waiting"
        );
        self.producers[link].keep(kept);
        self.producers[link].publish();
        received
    }

    /// The iovecs of `messages` messages over `slots` (claimed, in ring order): message i the
    /// slots `i * per ..`, the last every slot left, each then a tail of one frame outside the
    /// ring (`tails`).
    fn offer(&mut self, slots: &[*mut u8], messages: usize, per: usize) -> Vec<Vec<libc::iovec>> {
        let fb = self.routing.layout.frame_bytes as usize;
        // The tails are kept from call to call: allocating and zeroing them each time cost
        // more than the rest of the call's own work (perf).
        if self.tails.len() < messages * fb {
            self.tails.resize(messages * fb, 0);
        }
        let mut iov = Vec::with_capacity(messages);
        for (i, tail) in self.tails[..messages * fb].chunks_exact_mut(fb).enumerate() {
            let end = if i + 1 == messages {
                slots.len()
            } else {
                (i + 1) * per
            };
            let mut v: Vec<libc::iovec> = Vec::with_capacity(3);
            // The ring's slots lie back to back: one iovec, or two where the claim wraps.
            for &p in &slots[i * per..end] {
                match v.last_mut() {
                    Some(last) if (last.iov_base as *mut u8).wrapping_add(last.iov_len) == p => {
                        last.iov_len += fb
                    }
                    _ => v.push(libc::iovec {
                        iov_base: p.cast(),
                        iov_len: fb,
                    }),
                }
            }
            v.push(libc::iovec {
                iov_base: tail.as_mut_ptr().cast(),
                iov_len: fb,
            });
            debug_assert!(
                v.len() <= 3,
                "a claim wraps the ring at most once: two runs of slots, then the tail"
            );
            iov.push(v);
        }
        assert_eq!(iov.len(), messages, "an iovec list a message");
        iov
    }

    /// What one received message of `link` holds, counted: returns how many whole frames lie
    /// at the start of its slots (of `slots` offered), each to be taken.
    fn split_buffer(
        &self,
        link: usize,
        m: &libc::mmsghdr,
        segment: Option<u32>,
        slots: usize,
    ) -> usize {
        let fb = self.routing.layout.frame_bytes as usize;
        let n = m.msg_len as usize;
        let c = &self.routing.counters[link];
        // No UDP_GRO message: one datagram, its own length.
        let segment = segment.map_or(n, |s| s as usize).max(1);
        let mut cut = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        if cut && segment == n {
            // One datagram longer than every byte offered: longer than a frame.
            c.long.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        if segment != fb {
            // Segments of another size than a frame's: none is a frame.
            // An empty datagram counts as one too short.
            let segments = n.div_ceil(segment).max(1) as u64;
            let wrong = if segment < fb { &c.short } else { &c.long };
            wrong.fetch_add(segments, Ordering::Relaxed);
            return 0;
        }
        let mut whole = n / fb;
        if whole > slots {
            // A whole frame in the tail: the slots offered could not hold the buffer.
            whole = slots;
            cut = true;
        }
        if cut {
            c.truncated.fetch_add(1, Ordering::Relaxed);
        }
        if !n.is_multiple_of(fb) {
            // The last segment of a run may be shorter than the others: not a frame.
            c.short.fetch_add(1, Ordering::Relaxed);
        }
        if n / fb > 1 {
            c.coalesced.fetch_add(1, Ordering::Relaxed);
        }
        assert!(
            whole <= slots && whole * fb <= n,
            "only whole frames that came, in the slots offered"
        );
        whole
    }

    /// Claims `link`'s next slots for a receive of up to `want` frames, behind as many as the
    /// link's rerouted frames waiting (they may go before what arrives); returns how many
    /// those are, and every slot claimed. A ring too small to leave room puts the waiting
    /// frames in first.
    fn claim_behind_rerouted(&mut self, link: usize, want: usize) -> (usize, Vec<*mut u8>) {
        if self.rerouted[link].len() >= self.room(link) {
            self.flush_rerouted(link, u64::MAX);
        }
        let waiting = self.rerouted[link].len();
        assert!(
            waiting < self.room(link),
            "the waiting frames leave room to receive"
        );
        let receive = want.min(self.room(link) - waiting);
        let slots = self.producers[link].claim(waiting + receive);
        debug_assert_eq!(
            slots.len(),
            waiting + receive,
            "every slot asked is claimed"
        );
        (waiting, slots)
    }

    /// Counts what the kernel dropped on `sock` since its count was last seen (`drops`, its
    /// SO_RXQ_OVFL reading).
    fn count_kernel_drops(&self, sock: &mut LinkSocket, drops: u32) {
        self.routing.counters[sock.link].kernel_drops.fetch_add(
            drops.wrapping_sub(sock.drops_seen) as u64,
            Ordering::Relaxed,
        );
        sock.drops_seen = drops;
    }

    /// Takes claimed slot `at` of `link`'s last claim, a whole frame that came on its socket:
    /// routes it (a frame of another link is stashed for that link), puts the link's rerouted
    /// frames that go before it first, and keeps it in slot `kept` if it is one to keep.
    /// `kept <= at`: the first slots of the claim were left for the rerouted frames.
    fn take_frame(&mut self, link: usize, at: usize, kept: &mut usize) {
        assert!(
            *kept <= at,
            "a frame is kept at or before the slot it came in"
        );
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
        debug_assert!(
            q.len() <= self.room(link),
            "the frames waiting fit the room left"
        );
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
        assert!(kept <= ready, "no more frames kept than waited");
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
        debug_assert!(
            target.is_none_or(|t| t < self.counters.len()),
            "a stream routes to a link of this receiver"
        );
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
            let rise = ts - last_ts;
            let step = self.step_seen[link].map_or(rise, |s| s.min(rise));
            self.step_seen[link] = Some(step);
            let missing = rise / step;
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

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
