//! The one way a `snbuf bench` command runs a suite: a progress bar over its steps, the run, its
//! table in human units, its notes (each once), its JSON (and any other file) kept on request,
//! and a result that checked itself wrong failing the command. A run that fails part way keeps
//! what it measured before failing. Each command says only what differs: how many steps, how to
//! run, how to render, what a note or a wrong result is.

use snbuf_console::{note, say};
use std::path::Path;

use crate::results::save;
use crate::Machine;
use serde::Serialize;

use snbuf_console::progress::{bar, steps};

/// Whether a result checked itself right, and what to say when one did not.
pub type ResultCheck<R> = (fn(&R) -> bool, &'static str);

/// Another place to keep the results (a CSV file).
pub type AlsoKeep<'a, R> = &'a dyn Fn(&[R]) -> anyhow::Result<()>;

/// A suite as a command runs it.
pub struct Suite<'a, R> {
    /// Its name in the JSON (`latency`, `join`, ...).
    pub name: &'static str,
    /// How many steps its runner reports (the progress bar's length).
    pub steps: u64,
    pub machine: &'a Machine,
    /// Where to keep the results as JSON, if asked.
    pub json: Option<&'a Path>,
    pub render: fn(&[R]) -> String,
    /// A result's notes, printed once each under the table.
    pub notes: fn(&R) -> &[String],
    pub verified: Option<ResultCheck<R>>,
    /// Another file to write the results to (a CSV), after the JSON.
    pub also: Option<AlsoKeep<'a, R>>,
}

/// No notes.
pub fn no_notes<R>(_: &R) -> &[String] {
    &[]
}

/// Runs `suite` through `run`, which gets the step callback that advances the progress bar and
/// the list to put each result in as it comes. When `run` fails, what it had put there is still
/// kept (JSON and `also`) before the error is returned.
pub fn run_suite<R: Serialize + Clone>(
    suite: Suite<'_, R>,
    run: impl FnOnce(&mut dyn FnMut(&str), &mut Vec<R>) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<R>> {
    let b = bar(suite.steps);
    let mut results = Vec::new();
    let ran = {
        let mut step = steps(&b);
        run(&mut step, &mut results)
    };
    if let Err(e) = ran {
        b.abandon();
        keep(&suite, &results)?;
        return Err(e);
    }
    b.finish_and_clear();
    snbuf_console::out::say_text(&(suite.render)(&results));
    let mut notes: Vec<&String> = results.iter().flat_map(|r| (suite.notes)(r)).collect();
    notes.sort();
    notes.dedup();
    for n in notes {
        say!("note: {n}");
    }
    keep(&suite, &results)?;
    if let Some((ok, wrong)) = suite.verified {
        if !results.iter().all(ok) {
            return Err(anyhow::anyhow!("{wrong} (see the notes)"));
        }
    }
    Ok(results)
}

/// The results written where the command was asked to keep them.
fn keep<R: Serialize + Clone>(suite: &Suite<'_, R>, results: &[R]) -> anyhow::Result<()> {
    if let Some(path) = suite.json {
        save(path, suite.name, suite.machine, results)?;
        note!("wrote {}", path.display());
    }
    if let Some(also) = suite.also {
        also(results)?;
    }
    Ok(())
}
