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
    let out_dir =
        snbuf_show::page_dir(dir, args.out.as_deref()).map_err(|e| usage(e.to_string()))?;
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
