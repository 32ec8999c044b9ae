//! SIGTERM or SIGINT drains the unit: no more triggers, the burst in progress finished and
//! sealed, then the server's `run` returns (exit 0). Past the drain timeout the process exits 1,
//! the burst persisted as far as it got and recoverable. A second signal exits at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use snbuf_unit::server::control::Server;
use snbuf_unit::server::systemd::Notifier;

use crate::policy::SIGNAL_POLL;

/// Installs the handlers and starts the thread that drains `server` on the first signal;
/// the thread ends when `stopped` is set (the server stopped by itself).
pub fn drain_on_signals(
    server: Arc<Server>,
    timeout: Duration,
    stopped: Arc<AtomicBool>,
) -> std::io::Result<()> {
    assert!(timeout > Duration::ZERO, "a drain is given some time");
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // Registered first, so that it sees the flag the first signal set.
        signal_hook::flag::register_conditional_shutdown(sig, 1, term.clone())?;
        signal_hook::flag::register(sig, term.clone())?;
    }
    std::thread::Builder::new()
        .name("snbuf-signals".into())
        .spawn(move || {
            while !term.load(Ordering::Acquire) {
                if stopped.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(SIGNAL_POLL);
            }
            tracing::info!(
                "stopping: no more triggers; the burst in progress is finished first (at most {:.0} s; a second signal stops at once)",
                timeout.as_secs_f64()
            );
            if let Some(n) = Notifier::from_env() {
                n.notify("STOPPING=1");
            }
            server.begin_shutdown();
            let until = Instant::now() + timeout;
            while !stopped.load(Ordering::Acquire) {
                if Instant::now() >= until {
                    tracing::error!("stopping: the drain timed out; the burst in progress stays recoverable (`snbuf recover`)");
                    std::process::exit(1);
                }
                std::thread::sleep(SIGNAL_POLL);
            }
        })?;
    Ok(())
}
