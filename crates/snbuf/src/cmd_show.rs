//! `snbuf show`: a burst as an HTML page of pictures (`snbuf_show`), with a progress bar while
//! it reads.

use snbuf_show::{show, ShowError, ShowOptions};

use crate::cli::ShowArgs;
use crate::exit::{read_error, usage};

pub fn run(args: &ShowArgs) -> anyhow::Result<()> {
    let dir = &args.burst_dir;
    if !dir.is_dir() {
        return Err(usage(format!("{}: not a burst directory", dir.display())));
    }
    let id = dir
        .file_name()
        .map_or("burst".into(), |n| n.to_string_lossy().into_owned());
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from(format!("show-{id}")));
    let absolute = |p: &std::path::Path| {
        std::path::absolute(p)
            .ok()
            .and_then(|a| a.canonicalize().ok().or(Some(a)))
    };
    if absolute(&out_dir)
        .zip(absolute(dir))
        .is_some_and(|(o, d)| o.starts_with(d))
    {
        return Err(usage(format!(
            "--out {}: inside the burst; snbuf adds nothing to a burst's directory",
            out_dir.display()
        )));
    }
    // A page is rewritten in place; any other directory's files are not snbuf's to replace.
    let foreign = std::fs::read_dir(&out_dir).is_ok_and(|mut e| e.next().is_some())
        && !out_dir.join("show.json").is_file();
    if foreign {
        return Err(usage(format!(
            "--out {}: a directory with other files in it (a page's directory holds show.json); give a new or empty one",
            out_dir.display()
        )));
    }
    let opts = ShowOptions {
        out_dir: out_dir.clone(),
        links: args.link.clone(),
        channel: args.channel,
        columns: args.columns as usize,
        bins: 200,
        export_state: snbuf_export::export_state(dir),
    };
    let bar = snbuf_console::progress::bytes_bar();
    let shown = show(dir, &opts, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .map_err(|e| match e {
        ShowError::Read(r) => read_error(r),
        ShowError::NoWindow(_) | ShowError::NoSuchChannel { .. } => usage(e.to_string()),
        other => anyhow::Error::new(other),
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string(&shown)?);
    }
    for l in &shown.links {
        let missing = l.expected_frames.saturating_sub(l.frames);
        let flagged = l
            .adc
            .as_ref()
            .map_or(0, |a| a.channels.iter().filter(|c| c.flag != "ok").count());
        eprintln!(
            "link {}: {} of {} frames, {} missing in {} gaps, {} channels flagged{}",
            l.link,
            l.frames,
            l.expected_frames,
            missing,
            l.gaps.len(),
            flagged,
            if l.skipped.is_empty() {
                String::new()
            } else {
                format!(", {} parts not read (see the page)", l.skipped.len())
            }
        );
    }
    eprintln!("page: {}", shown.page.display());
    Ok(())
}
