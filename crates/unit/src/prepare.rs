//! The next burst's files, opened in the background while the unit waits for a trigger.
//!
//! A trigger must start persisting at once: the data before it keeps ageing in the latency
//! buffers. Opening a burst — allocating each link's file for the whole window and, on a mapped
//! medium, mapping and first-touching every page — takes time in proportion to the window
//! (about 1 s per 600 MiB on tmpfs here). So the unit prepares the burst of its configured
//! window ahead (`snbuf_burst::PreparedBurst`), and a trigger only renames the directory. A
//! trigger whose window is larger than prepared, or that arrives when nothing is prepared,
//! opens its files itself, without populating the mapping, as before.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use snbuf_burst::PreparedBurst;
use snbuf_persist::sink::SourceMemory;
use snbuf_persist::Sink;

use crate::config::RecordConfig;
use crate::error::RecordError;
use crate::link_files::{link_region, max_payload_bytes, open_link_sink};

/// How often a trigger looks whether the preparation it waits for is done.
const PREPARE_POLL: Duration = Duration::from_millis(2);

/// A prepared burst and what it was sized for.
pub(crate) struct Prepared {
    pub burst: PreparedBurst<Box<dyn Sink>>,
    /// Bytes of file per link.
    pub region_bytes: u64,
    /// Whether the medium keeps what a persist made durable through a power cut.
    pub survives_power_loss: bool,
}

/// The frames per link a burst prepared for windows of `pre + post` is sized for.
pub(crate) fn window_frames(config: &RecordConfig, pre: Duration, post: Duration) -> u64 {
    ((pre + post).as_secs_f64() * config.link_frames_per_s()).ceil() as u64 + 1
}

/// Where the unit stands with its next burst.
#[derive(Default)]
pub(crate) enum NextBurst {
    #[default]
    None,
    /// Under way, or done (the thread's result holds the prepared burst).
    Preparing(JoinHandle<Result<Prepared, RecordError>>),
}

impl NextBurst {
    /// Starts preparing a burst for windows of `pre + post` (replacing any preparation); each
    /// link's chunks will come from its `sources` entry (its latency buffer).
    pub fn start(
        &mut self,
        config: &RecordConfig,
        pre: Duration,
        post: Duration,
        sources: Vec<SourceMemory>,
    ) {
        self.take(config.completion_deadline);
        let config = config.clone();
        let frames = window_frames(&config, pre, post);
        let spawned = std::thread::Builder::new()
            .name("snbuf-prepare".into())
            .spawn(move || prepare(&config, frames, &sources));
        // Without a thread the trigger opens its own files, as when nothing was prepared.
        if let Ok(h) = spawned {
            *self = NextBurst::Preparing(h);
        }
    }

    /// The prepared burst, waiting up to `deadline` for a preparation under way (it does the
    /// work a trigger would otherwise do itself, and started earlier). `None` if nothing was
    /// prepared, the preparation failed, or it is not done by then: the trigger then opens its
    /// files, and reports any error itself. A preparation left behind (a stalled device) goes
    /// on by itself; its files are removed when it ends (`PreparedBurst`'s drop).
    pub fn take(&mut self, deadline: Duration) -> Option<Prepared> {
        let h = match std::mem::take(self) {
            NextBurst::None => return None,
            NextBurst::Preparing(h) => h,
        };
        let give_up = Instant::now() + deadline;
        while !h.is_finished() {
            if Instant::now() >= give_up {
                if !deadline.is_zero() {
                    tracing::warn!(
                        waited_s = deadline.as_secs_f64(),
                        "the next burst's files are not ready in time: the trigger opens its own"
                    );
                }
                return None;
            }
            std::thread::sleep(PREPARE_POLL);
        }
        h.join().ok().and_then(|r| r.ok())
    }

    pub fn is_preparing(&self) -> bool {
        matches!(self, NextBurst::Preparing(h) if !h.is_finished())
    }

    pub fn state(&self) -> &'static str {
        match self {
            NextBurst::None => "none",
            _ if self.is_preparing() => "preparing",
            NextBurst::Preparing(_) => "ready",
        }
    }
}

fn prepare(
    config: &RecordConfig,
    window_frames: u64,
    sources: &[SourceMemory],
) -> Result<Prepared, RecordError> {
    let plan = link_region(config, window_frames);
    let (region_bytes, stride) = (plan.region_bytes, plan.stride_bytes);
    if region_bytes == 0 {
        // No room for even a chunk: the trigger opens its files itself, and says why it cannot.
        return Err(RecordError::NoSpace {
            dir: config.output_dir.clone(),
        });
    }
    let links: Vec<u32> = (0..config.links).collect();
    let mut survives_power_loss = true;
    let burst = PreparedBurst::prepare_on(
        &config.outputs(),
        &links,
        config.frame_type.frame_bytes(),
        max_payload_bytes(config),
        |link, path| {
            let source = sources.get(link as usize).cloned();
            let sink = open_link_sink(config, link, path, region_bytes, stride, true, source)?;
            survives_power_loss &= sink.report().durability.survives_power_loss();
            Ok(sink)
        },
    )?;
    Ok(Prepared {
        burst,
        region_bytes,
        survives_power_loss,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preparation_stuck_on_its_device_is_left_at_the_deadline() {
        let (stuck, release) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            let _ = release.recv_timeout(Duration::from_secs(30));
            Err(RecordError::NoSpace {
                dir: std::path::PathBuf::from("/nowhere"),
            })
        });
        let mut next = NextBurst::Preparing(h);
        let asked = Instant::now();
        assert!(next.take(Duration::from_millis(100)).is_none());
        let waited = asked.elapsed();
        assert!(
            waited < Duration::from_secs(10),
            "the trigger went on without it ({waited:?})"
        );
        assert_eq!(next.state(), "none");
        drop(stuck);
    }
}
