//! `snbuf plan`: the DUNE paper's Fig 6 as a tool. A unit whose medium writes slower than the
//! links deliver must hold the difference in DRAM for the whole recording:
//! DRAM = (input rate - output rate) x recording time; the medium must hold input x time.

use snbuf_console::say;
use snbuf_console::usage;
use snbuf_quantity::{Bytes, Rate};

use super::args::PlanArgs;
use crate::results::Results;
use crate::ThroughputResult;

fn rate(s: &str, what: &str) -> anyhow::Result<f64> {
    match snbuf_quantity::parse_rate_bytes_per_s(s) {
        Ok(0) => Err(usage(format!("{what} must be more than 0"))),
        Ok(r) => Ok(r as f64),
        Err(e) => Err(usage(format!("{what} '{s}': {e}"))),
    }
}

/// The best matching write figure in a `bench write --json` file, and where it came from.
fn from_bench(args: &PlanArgs) -> anyhow::Result<(f64, String)> {
    let path = args.bench.as_ref().expect("called with --bench");
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("--bench {}: {e}", path.display())))?;
    let doc: Results<ThroughputResult> = serde_json::from_str(&text).map_err(|e| {
        usage(format!(
            "--bench {}: not a results file of `snbuf bench write --json`: {e}",
            path.display()
        ))
    })?;
    if !doc.results.iter().any(|r| r.suite == "write") {
        return Err(usage(format!(
            "--bench {}: not a results file of `snbuf bench write --json` (it holds no write result{})",
            path.display(),
            if doc.suite.is_empty() {
                String::new()
            } else {
                format!("; its suite is {}", doc.suite)
            }
        )));
    }
    let best = doc
        .results
        .iter()
        .filter(|r| r.suite == "write")
        .filter(|r| args.method.as_ref().is_none_or(|m| r.method == *m))
        .filter(|r| args.block_size.is_none_or(|b| r.block_size_bytes == b))
        .max_by(|a, b| a.gib_per_s.total_cmp(&b.gib_per_s))
        .ok_or_else(|| {
            usage(format!(
                "--bench {}: no write result matches the method and block size given",
                path.display()
            ))
        })?;
    let mut why = format!(
        "{} at {} B with {} thread(s) in {}",
        best.method,
        best.block_size_bytes,
        best.threads,
        path.display()
    );
    if best.durability == "volatile" {
        why.push_str("; measured on a RAM-only medium, so not a durable rate");
    }
    Ok((best.gib_per_s * (1u64 << 30) as f64, why))
}

pub fn run(args: &PlanArgs) -> anyhow::Result<()> {
    let input = rate(&args.input_rate, "--input-rate")?;
    let (output, source) = match (&args.output_rate, &args.bench) {
        (Some(r), _) => (rate(r, "--output-rate")?, "given".to_string()),
        (None, Some(_)) => from_bench(args)?,
        (None, None) => {
            return Err(usage(
                "give the medium's rate: --output-rate RATE, or --bench results.json",
            ))
        }
    };
    let t = args.time.as_secs_f64();
    let deficit = (input - output).max(0.0);
    say!(
        "input    {} for {:.0} s: the medium must hold {}",
        Rate(input),
        t,
        Bytes((input * t) as u64)
    );
    say!("output   {} ({source})", Rate(output));
    if deficit == 0.0 {
        say!(
            "keeps up: yes, with {:.0}% headroom; DRAM needs only the latency buffer",
            (output / input - 1.0) * 100.0
        );
        return Ok(());
    }
    say!(
        "keeps up: no; the backlog grows at {} and needs {} of DRAM by the end, beyond the latency buffer",
        Rate(deficit),
        Bytes((deficit * t) as u64)
    );
    say!(
        "          after recording, the backlog drains in {:.0} s",
        deficit * t / output
    );
    say!("DRAM for the backlog vs recording time:");
    for f in [0.1, 0.25, 0.5, 0.75, 1.0] {
        say!("  {:6.0} s  {}", t * f, Bytes((deficit * t * f) as u64));
    }
    Ok(())
}
