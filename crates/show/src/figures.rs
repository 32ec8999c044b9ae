//! The page's figures, drawn with the report's plotting code (SVG and PNG each): the timeline
//! of every link, and per link with ADC values its heat map, waveform (whole window and around
//! the excursion), noise and baselines.

use std::path::Path;

use snbuf_report::plot::{heat_map, line_chart, HeatMap, LineChart, Series};
use snbuf_report::ReportError;

use crate::Shown;

/// A figure on the page: `stem`.svg and `stem`.png.
pub struct Figure {
    pub stem: String,
    pub title: String,
    pub caption: String,
    /// The link it belongs to (None: the whole burst).
    pub link: Option<u32>,
}

fn finite_abs_max(v: impl Iterator<Item = f64>) -> f64 {
    v.filter(|x| x.is_finite()).fold(0.0, |m, x| m.max(x.abs()))
}

/// One piece: the figures in the order the page shows them, each with its caption.
pub fn draw(dir: &Path, s: &Shown) -> Result<Vec<Figure>, ReportError> {
    let mut out = Vec::new();
    let t = "Frames recorded along the window".to_string();
    line_chart(
        dir,
        "timeline",
        &LineChart {
            title: &t,
            x_label: "time from the trigger (s, detector clock)",
            y_label: "% of expected frames",
            log2_x: false,
            y_range: Some((0.0, 100.0 * (1.15 + 0.07 * s.links.len() as f64))),
            markers: false,
            series: s
                .links
                .iter()
                .map(|l| Series {
                    name: format!("link {}", l.link),
                    points: l
                        .timeline
                        .iter()
                        .map(|b| {
                            let pct = if b.expected == 0 {
                                100.0
                            } else {
                                100.0 * b.recorded as f64 / b.expected as f64
                            };
                            ((b.from_s + b.to_s) / 2.0, pct)
                        })
                        .collect(),
                })
                .collect(),
        },
    )?;
    out.push(Figure {
        stem: "timeline".into(),
        title: t,
        caption: "Per link, the share of the frames its grid expects that the burst holds, in bins along the trigger window; a dip is a gap, where it happened.".into(),
        link: None,
    });
    for l in &s.links {
        let (Some(adc), Some(wf)) = (&l.adc, &l.waveform) else {
            continue;
        };
        let n = l.link;
        let stem = format!("link-{n}-heat");
        let t = format!("Link {n}: ADC minus baseline, channel x time");
        let scale = finite_abs_max(adc.heat.iter().flatten().copied()).max(1.0);
        heat_map(
            dir,
            &stem,
            &HeatMap {
                title: &t,
                x_label: "time from the trigger (s)",
                y_label: "channel",
                x_range: s.window_s,
                y_range: (0.0, adc.channels.len() as f64),
                values: adc.heat.clone(),
                scale,
                value_label: "ADC - baseline",
            },
        )?;
        out.push(Figure {
            stem,
            title: t,
            caption: format!("Every channel's samples over the window, decimated to {} columns keeping each column's value farthest from the channel's baseline, so a one-sample spike still shows. Grey: no data (a gap).", wf.column_s.len()),
            link: Some(n),
        });
        let stem = format!("link-{n}-waveform");
        let t = format!("Link {n}, channel {}: waveform", wf.channel);
        let amp = finite_abs_max(wf.low.iter().chain(&wf.high).copied()).max(1.0) * 1.3;
        let pts = |v: &Vec<f64>| -> Vec<(f64, f64)> {
            wf.column_s
                .iter()
                .zip(v)
                .filter(|(_, y)| y.is_finite())
                .map(|(x, y)| (*x, *y))
                .collect()
        };
        line_chart(
            dir,
            &stem,
            &LineChart {
                title: &t,
                x_label: "time from the trigger (s)",
                y_label: "ADC - baseline",
                log2_x: false,
                y_range: Some((-amp, amp)),
                markers: false,
                series: vec![
                    Series {
                        name: "largest per column".into(),
                        points: pts(&wf.high),
                    },
                    Series {
                        name: "smallest per column".into(),
                        points: pts(&wf.low),
                    },
                ],
            },
        )?;
        out.push(Figure {
            stem,
            title: t,
            caption: format!(
                "Channel {} ({}), baseline {:.0} ADC: its range in each column over the window.",
                wf.channel, wf.chosen, wf.baseline
            ),
            link: Some(n),
        });
        if !wf.zoom.is_empty() {
            let stem = format!("link-{n}-zoom");
            let t = format!(
                "Link {n}, channel {}: around its largest excursion",
                wf.channel
            );
            let amp = finite_abs_max(wf.zoom.iter().map(|p| p.1)).max(1.0) * 1.3;
            line_chart(
                dir,
                &stem,
                &LineChart {
                    title: &t,
                    x_label: "time from the trigger (s)",
                    y_label: "ADC - baseline",
                    log2_x: false,
                    y_range: Some((-amp, amp)),
                    markers: false,
                    series: vec![Series {
                        name: format!("channel {}", wf.channel),
                        points: wf.zoom.clone(),
                    }],
                },
            )?;
            out.push(Figure {
                stem,
                title: t,
                caption: "Every sample near the excursion, at full resolution.".into(),
                link: Some(n),
            });
        }
        let flagged: Vec<String> = adc
            .channels
            .iter()
            .filter(|c| c.flag != "ok")
            .map(|c| format!("{} ({})", c.channel, c.flag))
            .collect();
        for (what, unit, f) in [
            (
                "noise",
                "RMS (ADC)",
                (|c: &crate::ChannelStats| c.rms) as fn(&_) -> f64,
            ),
            ("baseline", "median (ADC)", |c: &crate::ChannelStats| {
                c.baseline
            }),
        ] {
            let stem = format!("link-{n}-{what}");
            let t = format!("Link {n}: {what} per channel");
            line_chart(
                dir,
                &stem,
                &LineChart {
                    title: &t,
                    x_label: "channel",
                    y_label: unit,
                    log2_x: false,
                    y_range: None,
                    markers: true,
                    series: vec![Series {
                        name: what.into(),
                        points: adc
                            .channels
                            .iter()
                            .filter(|c| c.samples > 0)
                            .map(|c| (c.channel as f64, f(c)))
                            .collect(),
                    }],
                },
            )?;
            out.push(Figure {
                stem,
                title: t,
                caption: if flagged.is_empty() {
                    "No channel dead or noisy.".into()
                } else {
                    format!("Flagged: {}.", flagged.join(", "))
                },
                link: Some(n),
            });
        }
    }
    Ok(out)
}
