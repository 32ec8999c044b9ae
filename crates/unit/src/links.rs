//! The unit's links: a thread that fills the latency buffers, and never waits for storage. Either
//! the emulator (frames on an absolute schedule of the emulated detector clock) or the network
//! receiver (frames as the detector sends them, one per UDP datagram, straight into the rings).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use snbuf_platform::cpu::{self, ThreadCpuClock};
use snbuf_readout::udp::{self, IngestInfo};
use snbuf_readout::{Emulator, Producer};

use crate::config::{ConfigError, RecordConfig, Source};
use crate::error::RecordError;

/// The links come before the writers for the CPU. Real links never wait (a readout card's DMA);
/// the emulation must not either, or the input is slower than set and a keep-up test proves
/// nothing. With ten busy writers on two cores the scheduler kept the emulation up to 69 ms
/// from its schedule at 5 GB/s, against 6-9 ms with this order. The links' thread raises its
/// own priority where that is allowed (root or CAP_SYS_NICE); elsewhere the writers lower theirs.
const LINKS_NICE: i32 = -10;

/// Frames produced and frames skipped (an emulator more than a second late), per link.
pub type SourceTotals = (u64, u64);

/// The running links.
pub(crate) struct Links {
    stop: Arc<AtomicBool>,
    emulator: Option<JoinHandle<SourceTotals>>,
    receiver: Option<JoinHandle<()>>,
    /// The links' thread's CPU clock (ingest cost).
    pub clock: Option<ThreadCpuClock>,
    /// The longest a due frame waited for the emulator, in ns, since the last reset.
    pub max_lag_ns: Arc<AtomicU64>,
    /// Whether the links' thread got its higher priority (else writers lower theirs).
    pub favoured: Arc<AtomicBool>,
    /// The network receiver's counters and settings.
    pub ingest: Option<IngestInfo>,
}

/// Starts filling `producers` (one per link, in link order) from the configured source.
pub(crate) fn start(config: &RecordConfig, producers: Vec<Producer>) -> Result<Links, RecordError> {
    assert_eq!(
        producers.len(),
        config.links as usize,
        "a producer per link"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let max_lag_ns = Arc::new(AtomicU64::new(0));
    let favoured = Arc::new(AtomicBool::new(false));
    let cpu_id = config.cpus[0];
    let thread_error = |thread: &str| {
        let thread = thread.to_string();
        move |cause| RecordError::Thread { thread, cause }
    };
    match &config.source {
        Source::Emulated { payload } => {
            let ft = config.frame_type;
            let (start, first_ts) = emulated_clock(config);
            let mut emulator = Emulator::new(
                ft,
                config.frame_step_ticks(),
                payload.clone(),
                (0..config.links).zip(producers).collect(),
                first_ts,
            )
            .map_err(ConfigError::from)?;
            let (stop2, lag2, favoured2) = (stop.clone(), max_lag_ns.clone(), favoured.clone());
            // Named threads, so `top -H` and profilers show which part of the unit is busy.
            let h = std::thread::Builder::new()
                .name("snbuf-links".into())
                .spawn(move || {
                    let _ = cpu::pin_current_thread(cpu_id);
                    favoured2.store(
                        cpu::set_current_thread_nice(LINKS_NICE).is_ok(),
                        Ordering::Relaxed,
                    );
                    emulator.start_at(start);
                    emulator.run(&stop2, &lag2);
                    (emulator.produced_per_link(), emulator.skipped_per_link())
                })
                .map_err(thread_error("link emulation"))?;
            Ok(Links {
                clock: ThreadCpuClock::of(&h),
                emulator: Some(h),
                receiver: None,
                stop,
                max_lag_ns,
                favoured,
                ingest: None,
            })
        }
        Source::Udp(u) => {
            let favoured2 = favoured.clone();
            // The receiver copies every byte out of the NIC's buffers: on the NIC's node that
            // copy stays on one socket. Elsewhere (one node, loopback, a node sysfs does not
            // give, none of --cpus there) the first of --cpus.
            let nic = snbuf_platform::numa::nic_of(u.bind.ip());
            let node = nic.as_ref().and_then(|n| n.node);
            let near =
                snbuf_platform::numa::cpus_near(node, &snbuf_platform::numa::nodes(), &config.cpus);
            let cpu_id = near.first().copied().unwrap_or(cpu_id);
            // Like the emulation, the receiver comes before the writers for the CPU: a
            // receiver that falls behind loses datagrams in the kernel.
            let on_start = move || {
                let _ = cpu::pin_current_thread(cpu_id);
                favoured2.store(
                    cpu::set_current_thread_nice(LINKS_NICE).is_ok(),
                    Ordering::Relaxed,
                );
            };
            // The unit's clock decides what a jump too far is (a link's step is its own).
            let timing = udp::StreamTiming {
                max_jump_ticks: config.clock().ticks(config.buffer),
                bytes_per_s: config.link_bytes_per_s(),
            };
            let (mut info, h) = udp::start(
                u,
                config.frame_type.layout(),
                timing,
                producers,
                on_start,
                stop.clone(),
            )
            .map_err(ConfigError::from)?;
            info.nic = nic;
            info.receive_cpu = Some(cpu_id);
            Ok(Links {
                clock: ThreadCpuClock::of(&h),
                emulator: None,
                receiver: Some(h),
                stop,
                max_lag_ns,
                favoured,
                ingest: Some(info),
            })
        }
    }
}

/// The emulated detector clock is the frame type's own (62.5 MHz for DUNE's timing system),
/// counting from the Unix epoch in step with the wall clock, whatever the rate: frame k of a link
/// whose frames are `step` apart has timestamp k x step and is due when the clock reads it. Units
/// started at different times agree on time, so one trigger is the same window on all of them,
/// and `snbuf emit` keeps the same clock. Returns when the emulator starts (it makes frame k when
/// k + 1 frame periods have passed) and the first frame's timestamp.
pub fn emulated_clock(config: &RecordConfig) -> (Instant, u64) {
    let step = config.frame_step_ticks();
    let (start, first_ts) = snbuf_readout::source::clock_from_epoch(config.clock(), step, 0.0);
    debug_assert!(
        first_ts.is_multiple_of(step),
        "frame k has timestamp k x step"
    );
    (start, first_ts)
}

impl Links {
    /// Stops the links' thread and waits for it.
    pub fn stop(&mut self) -> SourceTotals {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.receiver.take() {
            let _ = h.join();
        }
        self.emulator
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or((0, 0))
    }
}

impl Drop for Links {
    fn drop(&mut self) {
        self.stop();
    }
}
