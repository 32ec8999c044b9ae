//! The HTML page: one file beside its figures, nothing fetched from elsewhere. What the burst
//! is, what was not read, then the timeline and each link's pictures and tables.

use std::fmt::Write;

use crate::figures::BurstFigure;
use crate::Shown;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn figure(html: &mut String, f: &BurstFigure) {
    let _ = writeln!(
        html,
        "<figure id=\"{stem}\"><img src=\"{stem}.svg\" alt=\"{title}\" onerror=\"this.setAttribute('data-broken','1')\"><figcaption><b>{title}.</b> {caption} (<a href=\"{stem}.png\">PNG</a>)</figcaption></figure>",
        stem = f.stem,
        title = esc(&f.title),
        caption = esc(&f.caption),
    );
}

/// The page top to bottom, in the order it reads: the burst's identity, what was not read, the
/// timeline and the links' counts, then each link's figures.
pub fn html(s: &Shown, figures: &[BurstFigure]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>burst {id}</title>\n<style>\nbody{{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}}\ntable{{border-collapse:collapse;margin:0.5em 0 1.5em}}\ntd,th{{border:1px solid #bbb;padding:3px 8px;text-align:right}}\nth{{background:#eee}}\ntd:first-child,th:first-child,#identity td{{text-align:left}}\nfigure{{margin:1.5em 0}}\nfigure img{{width:100%;border:1px solid #ddd}}\n.warn{{color:#a00}}\n</style>\n</head>\n<body>\n<h1>Burst {id}</h1>\n",
        id = esc(&s.burst_id)
    );
    identity_table(&mut h, s);
    skipped_note(&mut h, s);
    h.push_str("<h2>Frames along the window</h2>\n");
    for f in figures.iter().filter(|f| f.link.is_none()) {
        figure(&mut h, f);
    }
    links_table(&mut h, s);
    for l in &s.links {
        link_section(&mut h, s, l, figures);
    }
    h.push_str("<p>The numbers behind every figure: <a href=\"show.json\">show.json</a>.</p>\n</body>\n</html>\n");
    h
}

/// Run, unit, state, frame type, window, verdicts and the links' sources.
fn identity_table(h: &mut String, s: &Shown) {
    let run = s.run_number.map_or("-".into(), |r| r.to_string());
    let unit = s.unit.clone().unwrap_or_else(|| "-".into());
    let sources: Vec<String> = s
        .links
        .iter()
        .map(|l| match l.identity {
            Some(i) => format!(
                "link {}: SourceID {} (crate {}, slot {}, stream {})",
                l.link, i.source_id, i.crate_id, i.slot_id, i.stream_id
            ),
            None => format!("link {}: no identity recorded", l.link),
        })
        .collect();
    h.push_str("<table id=\"identity\">\n");
    for (k, v) in [
        ("run", run),
        ("unit", unit),
        ("state", s.state.clone()),
        ("frame type", s.frame_type.clone()),
        (
            "window",
            format!(
                "{:+.3} s to {:+.3} s around the trigger (timestamp {}, {} Hz clock)",
                s.window_s.0, s.window_s.1, s.trigger_timestamp, s.clock_hz
            ),
        ),
        ("verified", s.verified.clone()),
        ("exported", s.exported.clone()),
        ("sources", sources.join("; ")),
    ] {
        let _ = writeln!(h, "<tr><th>{k}</th><td>{}</td></tr>", esc(&v));
    }
    h.push_str("</table>\n");
}

/// Whether every chunk of the window was read, and if not, what was not.
fn skipped_note(h: &mut String, s: &Shown) {
    let skipped: Vec<String> = s
        .links
        .iter()
        .flat_map(|l| {
            l.skipped
                .iter()
                .map(move |x| format!("link {}: {x}", l.link))
        })
        .collect();
    if skipped.is_empty() {
        h.push_str(
            "<p id=\"skipped\">Every chunk in the window was read and its checksum matched.</p>\n",
        );
    } else {
        h.push_str("<p class=\"warn\">Only verified chunks are shown. Not read:</p>\n<ul id=\"skipped\" class=\"warn\">\n");
        for x in &skipped {
            let _ = writeln!(h, "<li>{}</li>", esc(x));
        }
        h.push_str("</ul>\n");
    }
}

/// Per link: frames held, expected and missing, the recorder's loss, and the gaps.
fn links_table(h: &mut String, s: &Shown) {
    h.push_str("<table id=\"links\">\n<tr><th>link</th><th>frames</th><th>expected</th><th>missing</th><th>lost (recorder)</th><th>gaps</th></tr>\n");
    for l in &s.links {
        let gaps: Vec<String> = l
            .gaps
            .iter()
            .map(|g| {
                format!(
                    "{:+.4} s to {:+.4} s ({} frames)",
                    g.from_s, g.to_s, g.frames
                )
            })
            .collect();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            l.link,
            l.frames,
            l.expected_frames,
            l.expected_frames.saturating_sub(l.frames),
            l.lost_frames_recorded,
            if gaps.is_empty() {
                "none".into()
            } else {
                esc(&gaps.join("; "))
            }
        );
    }
    h.push_str("</table>\n");
}

/// One link's section: its figures and its flagged channels.
fn link_section(h: &mut String, s: &Shown, l: &crate::LinkShown, figures: &[BurstFigure]) {
    let _ = writeln!(h, "<h2 id=\"link-{0}\">Link {0}</h2>", l.link);
    let Some(adc) = &l.adc else {
        let _ = writeln!(
            h,
            "<p>No ADC display: snbuf does not decode the samples of {} frames.</p>",
            esc(&s.frame_type)
        );
        return;
    };
    for f in figures.iter().filter(|f| f.link == Some(l.link)) {
        figure(h, f);
    }
    let flagged: Vec<_> = adc.channels.iter().filter(|c| c.flag != "ok").collect();
    let _ = writeln!(
        h,
        "<p>{} channels, samples {:.2} ticks apart; {} flagged (dead: RMS below {} ADC; noisy: RMS above {} times the link's median).</p>",
        adc.channels.len(),
        adc.ticks_per_sample,
        flagged.len(),
        crate::link_view::DEAD_RMS,
        crate::link_view::NOISY_FACTOR
    );
    if !flagged.is_empty() {
        h.push_str("<table class=\"flagged\">\n<tr><th>channel</th><th>flag</th><th>baseline</th><th>RMS</th></tr>\n");
        for c in flagged {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.2}</td></tr>",
                c.channel, c.flag, c.baseline, c.rms
            );
        }
        h.push_str("</table>\n");
    }
}
