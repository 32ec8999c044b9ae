//! snbuf-unit: a readout unit as a running service. Links feed their latency buffers
//! (`snbuf-readout`); a trigger opens a timestamp window; writer threads persist it as a burst
//! (`snbuf-burst`) through the persistence engine (`snbuf-persist`), with every frame of the
//! window either durable or counted lost.
//!
//! The recorder, by concept: `config` (what a unit is set up with), `links` (the thread that
//! fills the latency buffers, emulated or from the network), `link_rates` (each link's clock and
//! byte rate, measured against its configuration), `chunk_cuts` (a link's frames cut into chunks
//! on whole blocks of its buffer), `window` (trigger-window arithmetic, pure), `counters`
//! (per-link figures and the durable watermark), `writers` (the threads that persist a window; a
//! burst's files are sized, prepared ahead and opened by `snbuf_burst::opening`, from
//! `RecordConfig::burst_files`), `window_job` (what each writer is given), `window_writer` (what
//! each of them does), `watchdog` (a writer stuck in the kernel, given up), `reach` (the window
//! of the burst being recorded, which joins move out), `recorder` (the running unit), `one_shot`
//! (`snbuf record`: one recording start to end), `summary` (what it came to), `status_file` (the
//! live state as JSON), `interrupted` (bursts a stopped unit left unsealed, recovered at the
//! next start), `error` (why a unit could not start or a trigger not be recorded). The trigger
//! desk (`desk`): the one place triggers are taken, from any source, with typed decisions; what
//! they are asked and answered in (`protocol`). Around it, the service shell of `snbuf serve`
//! (`server`): `control` (the Unix socket, a source of the desk), `metrics` (Prometheus),
//! `systemd` (readiness, watchdog and status for `Type=notify`).

#![forbid(unsafe_code)]

pub mod chunk_cuts;
pub mod config;
pub mod counters;
pub mod desk;
pub mod error;
pub mod interrupted;
pub mod link_rates;
pub mod links;
pub mod one_shot;
pub mod protocol;
mod reach;
pub mod recorder;
pub mod server;
pub mod status_file;
pub mod summary;
mod watchdog;
pub mod window;
mod window_job;
mod window_writer;
mod writers;

pub use config::{ConfigError, RecordConfig, Source};
pub use counters::{LinkCounters, Progress};
pub use error::RecordError;
pub use one_shot::record;
pub use reach::Opening;
pub use recorder::Unit;
pub use summary::{RecordResult, RecordSummary};
pub use window::{TriggerAt, WindowError};
