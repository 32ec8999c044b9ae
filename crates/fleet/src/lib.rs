//! snbuf-fleet: many units, one trigger. Over NATS (JetStream), a trigger reaches every
//! `snbuf serve --nats` unit, each reports a heartbeat into a status bucket and publishes its
//! burst events, and `snbuf fleet status` shows them all — including units that stopped
//! reporting. Without NATS a unit records exactly as before; with NATS unreachable it records
//! locally and reconnects in the background. Subjects, streams and messages: docs/FLEET.md.

#![forbid(unsafe_code)]

pub mod client;
pub mod connect;
pub mod delivery_bench;
pub mod journal;
pub mod layout;
mod link_state;
pub mod roles;
pub mod schema;
mod trigger_handling;
pub mod unit_link;

pub use client::{
    broadcast_trigger, fleet_status, recent_events, FleetError, NotAcknowledged, TriggerLookup,
    UnitView,
};
pub use connect::{NatsOptions, DEFAULT_NATS_URL};
pub use schema::{
    EventKind, EventReason, Heartbeat, JoinedEvent, TriggerMessage, UnitEvent, UnitState,
};
pub use unit_link::UnitLink;
