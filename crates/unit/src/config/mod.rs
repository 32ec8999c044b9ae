//! What a unit is set up with (`RecordConfig`), and why a configuration is refused. Everything
//! is checked here, before any buffer is allocated or any file touched. The options as given
//! (`options::UnitOptions`) become a configuration in `from_options` (defaults, the DUNE
//! profile, the source), with the persistence method and writer threads chosen by
//! `write_plan`: the recorder's policy, which the command line only calls.

mod from_options;
pub mod options;
mod write_plan;

pub use from_options::{check_parent_dir, from_options, DEFAULT_OUTPUT};
pub use options::{SetupError, UnitOptions};
pub use write_plan::{plan_writes, Reasons, WritePlan};

use std::path::PathBuf;
use std::time::Duration;

use snbuf_frames::DetectorClock;
use snbuf_persist::fault::FaultPlan;
use snbuf_persist::{Method, SyncMode};
use snbuf_platform::memory::PageSize;
use snbuf_readout::udp::UdpSource;
use snbuf_readout::{FrameType, Payload};

/// Where the links' frames come from.
#[derive(Clone)]
pub enum Source {
    /// Emulated in this process: the frame type's emulated content or a replayed recording, on
    /// an absolute schedule.
    Emulated { payload: Payload },
    /// Received from the network, one frame per UDP datagram (`--source udp://ADDR:PORT`).
    Udp(UdpSource),
}

#[derive(Clone)]
pub struct RecordConfig {
    pub frame_type: FrameType,
    pub links: u32,
    /// The rate asked for; the links run at the nearest whole frame step on the detector's clock
    /// (`link_frames_per_s`).
    pub frames_per_s_per_link: f64,
    /// How much of each link the latency buffer holds.
    pub buffer: Duration,
    pub pre: Duration,
    pub post: Duration,
    pub trigger_after: Duration,
    pub method: Method,
    pub sync_mode: SyncMode,
    /// The bursts' home: each burst's directory and manifest, and the files of the links it
    /// keeps.
    pub output_dir: PathBuf,
    /// Further outputs (other devices) the links are spread over, round-robin after the home
    /// (`snbuf_burst::outputs`). Empty: every link on the home.
    pub more_outputs: Vec<PathBuf>,
    pub burst_id: String,
    pub writers: usize,
    pub cpus: Vec<usize>,
    pub page_size: PageSize,
    pub chunk_frames: u32,
    /// Chunks a writer appends per persist (fdatasync, fence): 1 acknowledges every chunk on its
    /// own; more keeps several writes in flight and flushes less often, acknowledging later.
    pub chunks_per_persist: u32,
    pub source: Source,
    /// The run the unit records for (written into every burst's manifest).
    pub run_number: Option<u32>,
    /// This unit's name (the fleet's unit id), written into every burst's manifest.
    pub unit_id: Option<String>,
    /// Each link's DUNE SourceID, in link order (link N is N when not given).
    pub source_ids: Vec<u32>,
    /// Where to keep the live state with each link's durable watermark while a burst records
    /// (see `status_file`); none by default.
    pub status_file: Option<PathBuf>,
    /// Faults injected into the links' sinks, for reliability tests (`--inject-fault`).
    pub faults: Vec<FaultPlan>,
    /// How long a writer waits for a write or flush it has in flight before it fails the link
    /// (`SinkConfig::completion_deadline`).
    pub completion_deadline: std::time::Duration,
    /// The longest window a trigger may ask for (pre + post): what bounds the data (and disk)
    /// one trigger can claim.
    pub max_window: Duration,
    /// The longest one burst grows to as triggers join it; the rest goes on as the next burst
    /// (`reach::join`). At least `max_window`.
    pub max_burst: Duration,
}

/// `--max-window` when not given: DUNE's 10 s before and 100 s after a supernova trigger, with
/// room to spare.
pub const DEFAULT_MAX_WINDOW: Duration = Duration::from_secs(120);

/// A configuration that cannot run, said in the words of the command line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("at least one link is needed")]
    NoLinks,
    #[error("the rate per link must be more than 0")]
    NoRate,
    #[error("--pre {pre_s:.1}s is longer than --buffer {buffer_s:.1}s: the buffer cannot hold the data before the trigger")]
    PreLongerThanBuffer { pre_s: f64, buffer_s: f64 },
    #[error("--pre {pre_s:.1}s + --post {post_s:.1}s is longer than --max-window {max_s:.1}s")]
    WindowOverMax { pre_s: f64, post_s: f64, max_s: f64 },
    #[error("--max-burst {burst_s}s is shorter than --max-window {window_s}s: a trigger's own window must fit in a burst")]
    BurstUnderWindow { burst_s: f64, window_s: f64 },
    #[error("--writers must be between 1 and the number of links ({links})")]
    Writers { links: u32 },
    #[error("chunks need at least one frame")]
    NoChunkFrames,
    #[error("--chunks-per-persist must be at least 1")]
    NoChunksPerPersist,
    #[error("the buffer must hold at least two chunks; raise --buffer or the rate")]
    BufferBelowTwoChunks,
    #[error("no CPU to run on")]
    NoCpu,
    #[error(transparent)]
    BurstId(#[from] snbuf_burst::BurstError),
    #[error(transparent)]
    Source(#[from] snbuf_readout::SourceError),
    #[error(transparent)]
    Udp(#[from] snbuf_readout::udp::UdpError),
    #[error("{given} source ids for {links} links: give one per link")]
    SourceIds { given: usize, links: u32 },
}

impl RecordConfig {
    /// What a second is for this unit, and how its links sample the detector, in words.
    pub fn clock_line(&self) -> String {
        let clock = self.clock();
        format!(
            "detector clock {} MHz (a second of every window is {} ticks); a link's frames {} ticks apart: {}",
            clock.hz() as f64 / 1e6,
            clock.hz(),
            self.frame_step_ticks(),
            snbuf_frames::clock::step_words(
                self.frame_step_ticks(),
                self.frame_type.ticks_per_frame()
            )
        )
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.links == 0 {
            return Err(ConfigError::NoLinks);
        }
        if !(self.frames_per_s_per_link.is_finite() && self.frames_per_s_per_link > 0.0) {
            return Err(ConfigError::NoRate);
        }
        if self.pre > self.buffer {
            return Err(ConfigError::PreLongerThanBuffer {
                pre_s: self.pre.as_secs_f64(),
                buffer_s: self.buffer.as_secs_f64(),
            });
        }
        if self.pre + self.post > self.max_window {
            return Err(ConfigError::WindowOverMax {
                pre_s: self.pre.as_secs_f64(),
                post_s: self.post.as_secs_f64(),
                max_s: self.max_window.as_secs_f64(),
            });
        }
        if self.max_burst < self.max_window {
            return Err(ConfigError::BurstUnderWindow {
                burst_s: self.max_burst.as_secs_f64(),
                window_s: self.max_window.as_secs_f64(),
            });
        }
        if self.writers == 0 || self.writers as u32 > self.links {
            return Err(ConfigError::Writers { links: self.links });
        }
        if self.chunk_frames == 0 {
            return Err(ConfigError::NoChunkFrames);
        }
        if self.chunks_per_persist == 0 {
            return Err(ConfigError::NoChunksPerPersist);
        }
        if self.buffer_frames() < 2 * self.chunk_frames as u64 {
            return Err(ConfigError::BufferBelowTwoChunks);
        }
        if self.cpus.is_empty() {
            return Err(ConfigError::NoCpu);
        }
        snbuf_burst::check_burst_id(&self.burst_id)?;
        if !self.source_ids.is_empty() && self.source_ids.len() != self.links as usize {
            return Err(ConfigError::SourceIds {
                given: self.source_ids.len(),
                links: self.links,
            });
        }
        if let Source::Udp(u) = &self.source {
            u.check(&self.frame_type.layout(), self.links as usize)?;
        }
        Ok(())
    }

    /// Every output, the home first.
    pub fn outputs(&self) -> Vec<PathBuf> {
        std::iter::once(self.output_dir.clone())
            .chain(self.more_outputs.iter().cloned())
            .collect()
    }

    /// What opening this unit's bursts needs of its configuration.
    pub fn burst_files(&self) -> snbuf_burst::BurstFiles {
        snbuf_burst::BurstFiles {
            outputs: self.outputs(),
            links: self.links,
            frame_type: self.frame_type,
            link_frames_per_s: self.link_frames_per_s(),
            chunk_frames: self.chunk_frames,
            method: self.method,
            page_size: self.page_size,
            sync_mode: self.sync_mode,
            completion_deadline: self.completion_deadline,
            faults: self.faults.clone(),
            run_number: self.run_number,
            unit_id: self.unit_id.clone(),
        }
    }

    /// Link `link`'s DUNE SourceID.
    pub fn source_id(&self, link: u32) -> u32 {
        self.source_ids.get(link as usize).copied().unwrap_or(link)
    }

    /// Frames each link's latency buffer holds when full: `buffer` of the link, rounded up so
    /// that the ring ends on a block boundary (`chunk_cuts`).
    pub fn buffer_frames(&self) -> u64 {
        let frames = (self.buffer.as_secs_f64() * self.link_frames_per_s()).ceil() as u64;
        crate::chunk_cuts::ring_capacity_frames(frames, self.frame_bytes())
    }

    /// The detector's clock: every second of a window, a buffer or a rate is a second of it.
    pub fn clock(&self) -> DetectorClock {
        DetectorClock::of(self.frame_type)
    }

    /// Ticks between a link's frames: the frame type's own at its own rate, more for a
    /// sub-sampled link (`snbuf_frames::clock`).
    pub fn frame_step_ticks(&self) -> u64 {
        let step = self.clock().frame_step_ticks(self.frames_per_s_per_link);
        debug_assert!(step >= 1, "a link's frames are some ticks apart");
        step
    }

    /// Frames a second each link runs at: the rate asked for, to the nearest whole frame step.
    pub fn link_frames_per_s(&self) -> f64 {
        let frames_per_s = self.clock().frames_per_s(self.frame_step_ticks());
        debug_assert!(
            frames_per_s > 0.0 && frames_per_s.is_finite(),
            "a link runs at some frames a second"
        );
        frames_per_s
    }

    /// Bytes a second each link runs at.
    pub fn link_bytes_per_s(&self) -> f64 {
        let bytes_per_s = self.link_frames_per_s() * self.frame_bytes() as f64;
        debug_assert!(bytes_per_s > 0.0, "a link brings some bytes a second");
        bytes_per_s
    }

    pub fn frame_bytes(&self) -> u64 {
        self.frame_type.frame_bytes() as u64
    }
}
