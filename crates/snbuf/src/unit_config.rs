//! `snbuf record`'s and `snbuf serve`'s options handed to the unit crate, which decides what
//! unit they make (`snbuf_unit::config::from_options`), and the unit's figures in words for the
//! terminal.

use snbuf_unit::config::{from_options, Reasons, SetupError, UnitOptions};
use snbuf_unit::RecordConfig;

use crate::cli::UnitArgs;
use crate::exit::usage;

/// The recorder's configuration from a unit's options (the command line with its config file
/// merged in) and, for `record`, when its trigger fires. Refuses bad input before anything runs
/// (exit 2; a medium that cannot be probed, exit 1).
pub fn config_from_args(
    args: &UnitArgs,
    trigger_after: Option<std::time::Duration>,
) -> anyhow::Result<(RecordConfig, Reasons)> {
    let options = UnitOptions {
        links: args.links,
        frame: args.frame.clone(),
        source: args.source.clone(),
        streams: args.streams.clone(),
        header_version: args.header_version.clone(),
        rcvbuf: args.rcvbuf,
        gro: args.gro,
        receive_nap: args.receive_nap,
        receive_batch: args.receive_batch,
        run: args.run,
        unit: Some(crate::fleet_args::unit_id(args.unit.as_deref())?),
        source_ids: args.source_ids.clone(),
        rate_per_link: args.rate_per_link.clone(),
        buffer: args.buffer,
        pre: args.pre,
        post: args.post,
        trigger_after,
        method: args.method.clone(),
        writers: args.writers,
        chunk_frames: args.chunk_frames,
        chunks_per_persist: args.chunks_per_persist,
        cpus: args.cpus.clone(),
        page_size: args.page_size,
        replay: args.replay.clone(),
        output: args.output.clone(),
        burst_id: args.burst_id.clone(),
        profile: args.profile.clone(),
        status_file: args.status_file.clone(),
        inject_fault: args.inject_fault.clone(),
        completion_deadline: args.completion_deadline,
        max_window: args.max_window,
    };
    from_options(&options).map_err(|e| match e {
        SetupError::Usage(why) => usage(why),
        SetupError::Machine(why) => anyhow::anyhow!(why),
    })
}

/// A recorder error for the command line: the user's mistake (exit 2) or the machine's (exit 1).
pub fn record_error(e: snbuf_unit::RecordError) -> anyhow::Error {
    if e.is_usage() {
        usage(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

/// What a second is for this unit, and how its links sample the detector.
pub fn clock_line(config: &snbuf_unit::RecordConfig) -> String {
    format!(
        "detector clock {} MHz (a second of every window is {} ticks); a link's frames {} ticks apart: {}",
        config.clock().hz() as f64 / 1e6,
        config.clock().hz(),
        config.frame_step_ticks(),
        step_words(config.frame_step_ticks(), config.frame_type.ticks_per_frame())
    )
}

/// What frames `step` ticks apart are for a frame type whose own are `tpf` apart.
pub fn step_words(step: u64, tpf: u64) -> String {
    if step == tpf {
        "the frame type's own rate".to_string()
    } else if step > tpf {
        format!(
            "a sub-sampled detector, 1 frame in {:.1}",
            step as f64 / tpf as f64
        )
    } else {
        format!(
            "{:.2}x the frame type's own rate (frames overlap in time: a storage test, not a detector)",
            tpf as f64 / step as f64
        )
    }
}
