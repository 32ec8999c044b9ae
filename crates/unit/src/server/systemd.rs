//! A unit under systemd (`Type=notify`, deploy/snbuf.service): READY=1 once the latency buffers
//! hold enough to serve a trigger's `pre` and the next burst's files are prepared; WATCHDOG=1
//! only while the links' data keeps arriving (a stalled source stops the pings, and systemd
//! restarts the unit); STATUS= lines a person reads in `systemctl status`; STOPPING=1 when a
//! stop begins. The protocol is sd_notify(3): datagrams to the socket in $NOTIFY_SOCKET. Without
//! that variable nothing is sent.

use crate::protocol::RecordingBurst;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::desk::TriggerDesk;

/// Where systemd listens, if it does.
pub struct Notifier {
    socket: UnixDatagram,
    addr: std::os::unix::net::SocketAddr,
}

impl Notifier {
    /// From $NOTIFY_SOCKET (a path, or `@name` in the abstract namespace); None when unset.
    pub fn from_env() -> Option<Notifier> {
        let target = std::env::var_os("NOTIFY_SOCKET")?;
        let target = target.to_string_lossy().into_owned();
        let addr = if let Some(name) = target.strip_prefix('@') {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name).ok()?
        } else {
            std::os::unix::net::SocketAddr::from_pathname(&target).ok()?
        };
        let socket = UnixDatagram::unbound().ok()?;
        Some(Notifier { socket, addr })
    }

    /// Sends `state` (`READY=1`, `STATUS=...`); a systemd that is gone is not an error.
    pub fn notify(&self, state: &str) {
        let _ = self.socket.send_to_addr(state.as_bytes(), &self.addr);
    }
}

/// How often to ping the watchdog: half of $WATCHDOG_USEC, if set.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Reports the unit to systemd until `stop` is set: READY once it can serve a trigger (or
/// `ready_deadline` passed, saying why), then STATUS about once a second and WATCHDOG pings
/// while the links' newest timestamp moves.
pub fn run(
    desk: Arc<TriggerDesk>,
    notifier: Notifier,
    stop: Arc<AtomicBool>,
    ready_deadline: Duration,
) {
    let started = Instant::now();
    let unit = desk.unit();
    let config = unit.config();
    // Validated when the unit started (`RecordConfig::validate`).
    assert!(config.frames_per_s_per_link > 0.0, "links run at some rate");
    let pre_frames = (config.pre.as_secs_f64() * config.frames_per_s_per_link).ceil() as u64;
    let mut ready = false;
    let watchdog = watchdog_interval();
    let mut last_ping = Instant::now();
    let mut last_newest = unit.newest_timestamp();
    let mut last_status = String::new();
    while !stop.load(Ordering::Acquire) {
        let progress = unit.progress("status");
        debug_assert_eq!(
            progress.links.len(),
            config.links as usize,
            "figures per link"
        );
        let filled = progress
            .links
            .iter()
            .map(|l| l.buffer_fill_frames)
            .min()
            .unwrap_or(0);
        let prepared = unit.next_burst_state() != "preparing";
        if !ready && ((filled >= pre_frames && prepared) || started.elapsed() >= ready_deadline) {
            ready = true;
            if filled < pre_frames || !prepared {
                notifier.notify(&format!(
                    "STATUS=ready after {:.0} s without a full buffer ({filled} of {pre_frames} frames) or prepared files",
                    ready_deadline.as_secs_f64()
                ));
            }
            notifier.notify("READY=1");
        }
        let status = status_line(&desk, filled, pre_frames, ready);
        if status != last_status {
            notifier.notify(&format!("STATUS={status}"));
            last_status = status;
        }
        if let Some(every) = watchdog {
            let newest = unit.newest_timestamp();
            // Alive means data still arrives: a link source that stalled gets no ping.
            if newest != last_newest && last_ping.elapsed() >= every {
                notifier.notify("WATCHDOG=1");
                last_ping = Instant::now();
                last_newest = newest;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn status_line(desk: &TriggerDesk, filled: u64, pre_frames: u64, ready: bool) -> String {
    let unit = desk.unit();
    let c = unit.config();
    if desk.stopping() {
        return "stopping: finishing the burst being recorded".into();
    }
    if let Some(RecordingBurst { burst_id: id, .. }) = desk.recording() {
        let p = unit.progress("recording");
        let durable: u64 = p.links.iter().map(|l| l.durable_frames).sum();
        let lost: u64 = p.links.iter().map(|l| l.lost_frames).sum();
        return format!("recording burst {id}: {durable} frames durable, {lost} lost");
    }
    if !ready {
        return format!(
            "filling buffers: {filled} of {pre_frames} frames ({} links)",
            c.links
        );
    }
    let (total, _) = desk.recent_bursts();
    format!(
        "ready for a trigger: {} links, {:.1} s buffered; {total} bursts so far",
        c.links,
        c.buffer.as_secs_f64()
    )
}
