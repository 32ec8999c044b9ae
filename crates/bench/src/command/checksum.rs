//! `snbuf bench checksum`: the CRC-32C implementations and a writer's copy-and-checksum
//! variants, as a table of GB/s and core-seconds per GiB (and JSON on request).

use crate::checksum::{self, ChecksumConfig, ChecksumResult};
use crate::{Machine, OpClock};
use anyhow::Context;
use snbuf_console::{note, say};
use snbuf_quantity::Bytes;

use super::args::ChecksumArgs;
use super::runner::{no_notes, run_suite, Suite};
use snbuf_console::usage;
use snbuf_console::Table;

pub fn run(args: ChecksumArgs) -> anyhow::Result<()> {
    if !args.dram_size.is_multiple_of(1 << 20) || args.passes == 0 {
        return Err(usage(
            "--dram-size must be a whole number of MiB, --passes at least 1",
        ));
    }
    let config = ChecksumConfig {
        dram_bytes: usize::try_from(args.dram_size).context("--dram-size")?,
        passes: args.passes,
        ..ChecksumConfig::default()
    };
    note!(
        "snbuf bench checksum: {} from DRAM per pass, fastest of {}",
        Bytes(args.dram_size),
        args.passes
    );
    let clock = OpClock::calibrate(std::time::Duration::from_millis(20));
    let machine = Machine::probe(&[], clock.describe(), env!("SNBUF_GIT_COMMIT"));
    let suite = Suite {
        name: "checksum",
        steps: checksum::steps(&config),
        machine: &machine,
        json: args.json.as_deref(),
        render,
        notes: no_notes,
        verified: None,
        also: None,
    };
    run_suite(suite, |step, out| {
        out.extend(checksum::run(&config, step).context("bench checksum")?);
        Ok(())
    })?;
    say!(
        "the recorder checksums data in cache with: {} (measured at its start, snbuf_platform::crc)",
        snbuf_platform::crc::in_cache().name()
    );
    Ok(())
}

fn render(results: &[ChecksumResult]) -> String {
    let mut t = Table::new(&[
        ("variant", false),
        ("source", false),
        ("GB/s", true),
        ("core-s/GiB", true),
    ]);
    for r in results {
        t.row(vec![
            r.variant.clone(),
            r.source.to_string(),
            format!("{:.1}", r.gb_per_s),
            format!("{:.3}", r.core_s_per_gib),
        ]);
    }
    t.render()
}
