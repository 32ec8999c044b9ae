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
        unit: Some(crate::fleet_args::unit_id(args.options.unit.as_deref())?),
        ..args.options.clone()
    };
    from_options(&options, trigger_after).map_err(|e| match e {
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
