//! `snbuf verify` and `snbuf recover`: check a burst, or cut a crashed one back to what is
//! provably intact.

use std::path::Path;

use snbuf_burst::recover::RecoverError;
use snbuf_burst::verify::BurstDirError;
use snbuf_burst::{recover_burst, verify_burst, End};
use snbuf_quantity::Bytes;

use crate::exit::{usage, Failure};
use snbuf_console::Table;

fn dir_error(e: BurstDirError) -> anyhow::Error {
    match e {
        BurstDirError::NotFound(_) | BurstDirError::NotADirectory(_) => usage(e.to_string()),
        other => anyhow::Error::new(other),
    }
}

fn ts(t: Option<u64>) -> String {
    t.map(|t| t.to_string()).unwrap_or_else(|| "-".into())
}

pub fn verify(dir: &Path, json: bool) -> anyhow::Result<()> {
    let report = verify_burst(dir).map_err(dir_error)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("reports serialise")
        );
    } else {
        println!(
            "burst {} in {} (state: {})",
            report.burst_id.as_deref().unwrap_or("?"),
            report.dir,
            report
                .state
                .map(|s| format!("{s:?}").to_lowercase())
                .unwrap_or_else(|| "no manifest".into())
        );
        let mut t = Table::new(&[
            ("link", true),
            ("chunks", true),
            ("frames", true),
            ("bytes", true),
            ("first ts", true),
            ("last ts", true),
            ("window", true),
            ("gaps", true),
            ("end", false),
        ]);
        for l in &report.links {
            t.row(vec![
                l.link.to_string(),
                l.chunks.to_string(),
                l.frames.to_string(),
                Bytes(l.payload_bytes).to_string(),
                ts(l.first_timestamp),
                ts(l.last_timestamp),
                l.coverage
                    .as_ref()
                    .map(|c| format!("{}/{}", c.frames_present, c.frames_in_window))
                    .unwrap_or_else(|| "-".into()),
                l.gaps.len().to_string(),
                match &l.end {
                    Some(End::Clean { .. }) => "clean".into(),
                    Some(End::TornTail { .. }) => "torn tail".into(),
                    Some(End::BadChunk { .. }) => "bad chunk".into(),
                    Some(End::FutureVersion { .. }) => "newer format".into(),
                    None => "unreadable".into(),
                },
            ]);
        }
        print!("{}", t.render());
        for l in &report.links {
            for g in &l.gaps {
                println!("  link {}: {}", l.link, g.describe());
            }
        }
        for p in &report.problems {
            println!("problem: {p}");
        }
        for l in &report.links {
            for p in &l.problems {
                println!("problem: link {} ({}): {p}", l.link, l.file);
            }
        }
        for t in &report.triggers {
            println!("{}", t.describe());
        }
        if !report.injected_faults.is_empty() {
            println!(
                "note: recorded with injected faults ({}): for tests, no evidence of durability",
                report.injected_faults.join(", ")
            );
        }
        let n =
            report.problems.len() + report.links.iter().map(|l| l.problems.len()).sum::<usize>();
        if report.valid {
            println!("valid: every chunk checks out and the window is accounted for");
        } else {
            println!("NOT VALID: {n} problem(s)");
        }
    }
    if report.valid {
        Ok(())
    } else {
        Err(anyhow::Error::new(Failure(format!(
            "{}: the burst has data problems",
            report.dir
        ))))
    }
}

pub fn recover(dir: &Path, dry_run: bool, json: bool) -> anyhow::Result<()> {
    let report = recover_burst(dir, dry_run).map_err(|e| match e {
        RecoverError::Dir(d) => dir_error(d),
        other => anyhow::Error::new(other),
    })?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("reports serialise")
        );
        return Ok(());
    }
    let verb = if dry_run { "would keep" } else { "kept" };
    if dry_run {
        println!("recover {} (dry run: nothing is changed)", report.dir);
    } else {
        println!("recover {}", report.dir);
    }
    for l in &report.links {
        let trimmed = if l.trimmed_zero_bytes > 0 {
            format!(", trimmed {} of unused zeros", Bytes(l.trimmed_zero_bytes))
        } else {
            String::new()
        };
        println!(
            "  link {}: {verb} {} chunk(s), {} frame(s), {}{trimmed}",
            l.link,
            l.kept_chunks,
            l.kept_frames,
            Bytes(l.kept_bytes)
        );
    }
    for d in &report.dropped {
        println!(
            "  {} {}: {} B from offset {}: {}",
            if dry_run { "would drop" } else { "dropped" },
            d.file,
            d.bytes,
            d.offset,
            d.why
        );
    }
    if let Some(p) = &report.manifest_problem {
        println!("  manifest was: {p}");
    }
    println!(
        "  manifest: {}",
        match (report.manifest_rebuilt, dry_run) {
            (true, true) => "would be rewritten (state: recovered)",
            (true, false) => "rewritten (state: recovered)",
            (false, _) => "unchanged",
        }
    );
    if !report.changed {
        println!("nothing to recover: the burst was already consistent");
    }
    Ok(())
}
