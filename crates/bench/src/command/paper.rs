//! `snbuf bench paper` (the plan and its runs are `crate::paper`'s): one results directory with
//! one progress bar and the time left. `snbuf report` then turns it into figures and a report.

use snbuf_console::{note, say};
use std::path::Path;
use std::time::Duration;

use crate::paper::{Plan, Scale};
use crate::{BenchError, Machine, OpClock};
use anyhow::Context;
use snbuf_persist::Method;

use super::args::PaperArgs;
use snbuf_console::progress::{bar, steps};
use snbuf_console::usage;

pub fn run(args: PaperArgs) -> anyhow::Result<()> {
    let scale = if args.smoke {
        Scale::Smoke
    } else if args.quick {
        Scale::Quick
    } else {
        Scale::Full
    };
    for (flag, t) in [
        ("--target", Some(&args.target)),
        ("--second-target", args.second_target.as_ref()),
    ] {
        if let Some(t) = t {
            if !t.is_dir() {
                return Err(usage(format!("{flag} {}: not a directory", t.display())));
            }
        }
    }
    if args.out.exists()
        && std::fs::read_dir(&args.out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(usage(format!(
            "--out {}: exists and is not empty; results are never mixed with others",
            args.out.display()
        )));
    }
    let plan =
        Plan::new(&args.target, args.second_target.as_deref(), scale).map_err(|e| match e {
            BenchError::Config(_) | BenchError::Target { .. } => usage(e.to_string()),
            other => anyhow::Error::new(other),
        })?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let clock = OpClock::calibrate(Duration::from_millis(50));
    let mut paths: Vec<&Path> = vec![&args.target];
    if let Some(s) = &args.second_target {
        paths.push(s);
    }
    let machine = Machine::probe(&paths, clock.describe(), env!("SNBUF_GIT_COMMIT"));
    note!(
        "snbuf bench paper ({} scale, {}): {} on {}; results in {}",
        scale.name(),
        scale.about(),
        args.target.display(),
        machine.cpu_model,
        args.out.display()
    );
    let mut notes: Vec<String> = Vec::new();
    if !Method::Pmdk.compiled_in() {
        notes.push(
            "PMDK is not in this build: the app and sweeps run without it (Fig 7 shows one side); \
             build with `--features pmdk` (needs libpmem-dev) for the comparison"
                .into(),
        );
    }
    for n in &notes {
        note!("  note: {n}");
    }
    let b = bar(plan.steps());
    let run = plan.run(&args.out, &clock, &machine, &mut steps(&b))?;
    b.finish_and_clear();
    let meta = args.out.join("paper.json");
    std::fs::write(
        &meta,
        serde_json::to_string_pretty(&plan.describe(&run, &notes))? + "\n",
    )
    .with_context(|| format!("write {}", meta.display()))?;
    say!(
        "wrote {} in {:.0} s; next: snbuf report {} --out snbuf-report",
        args.out.display(),
        run.seconds,
        args.out.display()
    );
    if run.wrong > 0 {
        return Err(anyhow::anyhow!(
            "{} result(s) failed their check (see the notes in the JSON)",
            run.wrong
        ));
    }
    Ok(())
}
