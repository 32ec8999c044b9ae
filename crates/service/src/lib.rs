//! A unit as a long-running service (`snbuf serve`): the recorder and its control socket, the
//! exporter, Prometheus metrics, the fleet link, systemd and the signals, started in dependency
//! order by `Service::start` (a half-started unit never exists: what fails stops the start, and
//! what started is dropped), run by `Service::run` until a drain. The command line parses its
//! options into a `ServiceConfig` and calls these two; the figures the service lives by are in
//! `policy`.

pub mod export_link;
pub mod policy;
mod signals;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use snbuf_export::queue::ExportQueue;
use snbuf_export::{Destination, ExportOptions};
use snbuf_fleet::{NatsOptions, UnitLink};
use snbuf_quantity::{Bytes, Rate};
use snbuf_unit::config::Reasons;
use snbuf_unit::server::control::{ControlError, Server};
use snbuf_unit::server::{metrics, systemd};
use snbuf_unit::{RecordConfig, RecordError, Unit};

/// Everything a service is started with, checked by the caller (the options parsed).
pub struct ServiceConfig {
    /// The unit: links, buffers, method, outputs; its `burst_id` is the prefix of the bursts'
    /// names (`policy::burst_prefix`).
    pub unit: RecordConfig,
    /// Why the method and the writers are what they are, for the log.
    pub reasons: Reasons,
    /// The control socket (`snbuf trigger`, `snbuf status`).
    pub socket: PathBuf,
    /// Where to serve Prometheus metrics, if anywhere.
    pub metrics: Option<SocketAddr>,
    /// Where to export every finished burst, if anywhere.
    pub export: Option<(Destination, ExportOptions)>,
    /// The fleet to join: its servers, and this unit's id in it.
    pub fleet: Option<(NatsOptions, String)>,
    /// How long a drain may take (`policy::default_drain_timeout` when not given).
    pub drain_timeout: Duration,
}

/// Why a service did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Unit(#[from] RecordError),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("--metrics {addr}: {cause}")]
    Metrics {
        addr: SocketAddr,
        cause: std::io::Error,
    },
    #[error("{what}: {cause}")]
    Io {
        what: &'static str,
        cause: std::io::Error,
    },
}

impl ServiceError {
    /// Whether the options asked for what cannot be (exit 2), as opposed to the machine
    /// failing (exit 1).
    pub fn is_usage(&self) -> bool {
        match self {
            ServiceError::Unit(e) => e.is_usage(),
            ServiceError::Metrics { .. } => true,
            ServiceError::Control(_) | ServiceError::Io { .. } => false,
        }
    }
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> ServiceError {
    move |cause| ServiceError::Io { what, cause }
}

/// A started service: the server and what runs beside it, held until `run` returns.
pub struct Service {
    server: Arc<Server>,
    /// Set when the server stopped, for the threads that watch it.
    stopped: Arc<AtomicBool>,
    systemd: Option<std::thread::JoinHandle<()>>,
    /// Held for the life of the service: dropping it stops the fleet link.
    _fleet_link: Option<UnitLink>,
    _exporter: Option<Arc<ExportQueue>>,
}

impl Service {
    /// Starts the unit and everything around it, in dependency order: the unit, its socket, the
    /// exporter (which takes the bursts already sealed), the recovery of interrupted bursts, the
    /// metrics, the fleet link, the signal handlers, systemd.
    pub fn start(config: ServiceConfig) -> Result<Service, ServiceError> {
        let ServiceConfig {
            unit: record_config,
            reasons,
            socket,
            metrics: metrics_addr,
            export,
            fleet,
            drain_timeout,
        } = config;
        let unit = Unit::start(&record_config)?;
        let server = Arc::new(Server::bind(unit, &socket)?);
        let exporter = match export {
            Some((dest, opts)) => Some(start_exporter(&server, dest, opts)?),
            None => None,
        };
        // In the background, while the unit takes triggers, and once the exporter has looked
        // at the output (it took the sealed bursts there; an interrupted one is still
        // `recording`): the exporter and the fleet link take each recovered burst as a
        // finished one, once it is verified.
        server
            .desk()
            .recover_interrupted()
            .map_err(io("recovering interrupted bursts"))?;
        let metrics_at = match metrics_addr {
            Some(addr) => Some(start_metrics(addr, &server, exporter.clone(), &socket)?),
            None => None,
        };
        say_started(&server, &reasons, &socket, metrics_at);
        let fleet_link = match fleet {
            Some((opts, id)) => Some(start_fleet_link(opts, id, &server, exporter.clone())?),
            None => None,
        };
        let stopped = Arc::new(AtomicBool::new(false));
        signals::drain_on_signals(server.clone(), drain_timeout, stopped.clone())
            .map_err(io("signal handlers"))?;
        let systemd = systemd::Notifier::from_env().map(|n| {
            let stopped = stopped.clone();
            let ready_deadline = policy::ready_deadline(&record_config);
            let desk = server.desk().clone();
            std::thread::spawn(move || systemd::run(desk, n, stopped, ready_deadline))
        });
        Ok(Service {
            server,
            stopped,
            systemd,
            _fleet_link: fleet_link,
            _exporter: exporter,
        })
    }

    /// Serves until a drain (a signal, or a `shutdown` request) has sealed the burst in
    /// progress; then stops what runs beside the server.
    pub fn run(self) {
        self.server.run();
        self.stopped.store(true, Ordering::Release);
        if let Some(h) = self.systemd {
            let _ = h.join();
        }
        tracing::info!("snbuf serve: stopped");
    }
}

/// The export queue, told of every burst the server finishes and those left unexported.
fn start_exporter(
    server: &Arc<Server>,
    dest: Destination,
    opts: ExportOptions,
) -> Result<Arc<ExportQueue>, ServiceError> {
    match snbuf_export::probe(&dest) {
        Ok(()) => tracing::info!("export to {}", dest.describe()),
        Err(e) => tracing::warn!(
            "export: {} is unreachable ({e}); recording locally, exports are tried again every 10 s",
            dest.describe()
        ),
    }
    let queue = Arc::new(
        ExportQueue::start(dest, opts, policy::SECOND_READ_BACK_AFTER)
            .map_err(io("the exporter"))?,
    );
    export_link::follow_bursts(server.desk(), queue.clone()).map_err(io("the exporter"))?;
    Ok(queue)
}

/// Metrics over HTTP, the exporter's beside the unit's. A port that cannot be bound stops the
/// start, and leaves no socket behind (nothing ran yet).
fn start_metrics(
    addr: SocketAddr,
    server: &Arc<Server>,
    exporter: Option<Arc<ExportQueue>>,
    socket: &std::path::Path,
) -> Result<SocketAddr, ServiceError> {
    let extra: metrics::ExtraMetrics = match exporter {
        Some(q) => Arc::new(move || q.metrics_text()),
        None => Arc::new(String::new),
    };
    metrics::serve(addr, server.desk().clone(), extra).map_err(|cause| {
        let _ = std::fs::remove_file(socket);
        ServiceError::Metrics { addr, cause }
    })
}

/// The fleet link: triggers from NATS, heartbeats and events. NATS out of reach is said and
/// tried again in the background; the unit records locally meanwhile.
fn start_fleet_link(
    opts: NatsOptions,
    id: String,
    server: &Arc<Server>,
    exporter: Option<Arc<ExportQueue>>,
) -> Result<UnitLink, ServiceError> {
    let url = opts.describe();
    let reporter = exporter.map(|q| {
        Arc::new(export_link::ExporterReport(q)) as Arc<dyn snbuf_fleet::unit_link::ExportReporter>
    });
    let (link, unreachable) = UnitLink::start(opts, id.clone(), server.desk().clone(), reporter)
        .map_err(io("the fleet link"))?;
    match unreachable {
        Some(e) => tracing::warn!("fleet: {e}"),
        None => tracing::info!("fleet: unit {id} on {url}"),
    }
    Ok(link)
}

/// What was started, in the log: the unit's figures, its clock, where to reach it.
fn say_started(
    server: &Server,
    reasons: &Reasons,
    socket: &std::path::Path,
    metrics: Option<SocketAddr>,
) {
    let config = server.unit().config();
    tracing::info!(
        "snbuf serve: {} links of {} at {} each, buffer {:.1} s ({}), method {} ({}), {} writer thread(s) ({})",
        config.links,
        config.frame_type,
        Rate(config.link_bytes_per_s()),
        config.buffer.as_secs_f64(),
        Bytes(server.unit().buffer_memory_bytes()),
        config.method,
        reasons.method,
        config.writers,
        reasons.writers
    );
    tracing::info!("{}", config.clock_line());
    tracing::info!(
        "control socket {} (mode 0600); bursts go to {}",
        socket.display(),
        config.output_dir.display()
    );
    tracing::info!(
        "trigger with: snbuf trigger --socket {} --wait",
        socket.display()
    );
    if let Some(addr) = metrics {
        tracing::info!("metrics at http://{addr}/metrics");
    }
}
