//! The server around a running unit (`snbuf serve`): the control socket and its typed
//! requests (`control`, a source of the unit's trigger desk, `crate::desk`), Prometheus
//! metrics over HTTP (`metrics`), and systemd's readiness,
//! watchdog and status (`systemd`). It drives the recorder (`crate::recorder::Unit`) and reads
//! its figures; the recorder knows nothing of it. (The status file stays with the recorder: a
//! recording writes it, with or without a service.)

pub mod control;
pub mod metrics;
pub mod systemd;
