//! The next burst's files, prepared in the background while the unit waits for a trigger (why:
//! the module `opening`), and taken by the trigger when they are ready in time.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use snbuf_persist::sink::SourceMemory;
use snbuf_persist::Sink;

use super::prepared::PreparedBurst;
use super::sinks::open_link_sink;
use super::sizing::{link_region, max_payload_bytes};
use super::{BurstFiles, OpenError};

/// How often a trigger looks whether the preparation it waits for is done.
const PREPARE_POLL: Duration = Duration::from_millis(2);

/// A prepared burst and what it was sized for.
pub struct Prepared {
    pub burst: PreparedBurst<Box<dyn Sink>>,
    /// Bytes of file per link.
    pub region_bytes: u64,
    /// Whether the medium keeps what a persist made durable through a power cut.
    pub survives_power_loss: bool,
}

/// Where the unit stands with its next burst.
#[derive(Default)]
pub enum NextBurst {
    #[default]
    None,
    /// Under way, or done (the thread's result holds the prepared burst).
    Preparing(JoinHandle<Result<Prepared, OpenError>>),
}

impl NextBurst {
    /// Starts preparing a burst for windows of `pre + post` (replacing any preparation); each
    /// link's chunks will come from its `sources` entry (its latency buffer).
    pub fn start(
        &mut self,
        files: &BurstFiles,
        pre: Duration,
        post: Duration,
        sources: Vec<SourceMemory>,
    ) {
        self.take(files.completion_deadline);
        let files = files.clone();
        let frames = files.window_frames(pre, post);
        let spawned = std::thread::Builder::new()
            .name("snbuf-prepare".into())
            .spawn(move || prepare(&files, frames, &sources));
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
    files: &BurstFiles,
    window_frames: u64,
    sources: &[SourceMemory],
) -> Result<Prepared, OpenError> {
    let plan = link_region(files, window_frames);
    let (region_bytes, stride) = (plan.region_bytes, plan.stride_bytes);
    if region_bytes == 0 {
        // No room for even a chunk: the trigger opens its files itself, and says why it cannot.
        return Err(OpenError::NoSpace {
            dir: files.home().clone(),
        });
    }
    let links: Vec<u32> = (0..files.links).collect();
    let mut survives_power_loss = true;
    let burst = PreparedBurst::prepare_on(
        &files.outputs,
        &links,
        files.frame_type.frame_bytes(),
        max_payload_bytes(files),
        |link, path| {
            let source = sources.get(link as usize).cloned();
            let sink = open_link_sink(files, link, path, region_bytes, stride, true, source)?;
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
            Err(OpenError::NoSpace {
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
