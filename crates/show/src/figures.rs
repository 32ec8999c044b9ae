//! The page's figures, drawn with the report's plotting code (SVG and PNG each): the timeline
//! of every link, and per link with ADC values its heat map, waveform (whole window and around
//! the excursion), noise and baselines.

use std::path::Path;

use snbuf_report::plot::{heat_map, line_chart, HeatMap, LineChart, Series};
use snbuf_report::ReportError;

use crate::Shown;

/// A figure of a burst on its page: `stem`.svg and `stem`.png.
pub struct BurstFigure {
    pub stem: String,
    pub title: String,
    pub caption: String,
    /// The link it belongs to (None: the whole burst).
    pub link: Option<u32>,
}

fn finite_abs_max(v: impl Iterator<Item = f64>) -> f64 {
    v.filter(|x| x.is_finite()).fold(0.0, |m, x| m.max(x.abs()))
}

/// The figures drawn so far, in page order.
struct Figures<'a> {
    dir: &'a Path,
    out: Vec<BurstFigure>,
}

impl Figures<'_> {
    fn line(
        &mut self,
        stem: String,
        chart: &LineChart,
        caption: String,
        link: Option<u32>,
    ) -> Result<(), ReportError> {
        line_chart(self.dir, &stem, chart)?;
        self.out.push(BurstFigure {
            stem,
            title: chart.title.to_string(),
            caption,
            link,
        });
        Ok(())
    }

    /// ADC minus baseline against time, on a y axis symmetric about 0.
    fn signal(
        &mut self,
        stem: String,
        title: &str,
        series: Vec<Series>,
        caption: String,
        link: u32,
    ) -> Result<(), ReportError> {
        let amp = finite_abs_max(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        let amp = amp.max(1.0) * 1.3;
        let chart = LineChart {
            title,
            x_label: "time from the trigger (s)",
            y_label: "ADC - baseline",
            log2_x: false,
            y_range: Some((-amp, amp)),
            markers: false,
            series,
        };
        self.line(stem, &chart, caption, Some(link))
    }
}

/// One number of a channel's summary.
type ChannelValue = fn(&crate::ChannelStats) -> f64;

/// The share of a bin's expected frames that the burst holds, %.
fn recorded_pct(b: &crate::link_view::Bin) -> f64 {
    if b.expected == 0 {
        100.0
    } else {
        100.0 * b.recorded as f64 / b.expected as f64
    }
}

/// The figures in the order the page shows them, each with its caption: the timeline of every
/// link, then per link with ADC values its heat map, waveform and channels.
pub fn draw(dir: &Path, s: &Shown) -> Result<Vec<BurstFigure>, ReportError> {
    let mut f = Figures {
        dir,
        out: Vec::new(),
    };
    let timeline = LineChart {
        title: "Frames recorded along the window",
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
                    .map(|b| ((b.from_s + b.to_s) / 2.0, recorded_pct(b)))
                    .collect(),
            })
            .collect(),
    };
    f.line(
        "timeline".into(),
        &timeline,
        "Per link, the share of the frames its grid expects that the burst holds, in bins along the trigger window; a dip is a gap, where it happened.".into(),
        None,
    )?;
    for l in &s.links {
        if let (Some(adc), Some(wf)) = (&l.adc, &l.waveform) {
            draw_link(&mut f, s, l.link, adc, wf)?;
        }
    }
    Ok(f.out)
}

/// A link's heat map: every channel's samples over the window, minus its baseline.
fn draw_heat(
    f: &mut Figures,
    s: &Shown,
    n: u32,
    adc: &crate::link_view::AdcView,
    columns: usize,
) -> Result<(), ReportError> {
    let dir = f.dir;
    let stem = format!("link-{n}-heat");
    let t = format!("Link {n}: ADC minus baseline, channel x time");
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
            scale: finite_abs_max(adc.heat.iter().flatten().copied()).max(1.0),
            value_label: "ADC - baseline",
        },
    )?;
    f.out.push(BurstFigure {
        stem,
        title: t,
        caption: format!("Every channel's samples over the window, decimated to {} columns keeping each column's value farthest from the channel's baseline, so a one-sample spike still shows. Grey: no data (a gap).", columns),
        link: Some(n),
    });
    Ok(())
}

/// One link's ADC figures: heat map, waveform (and its zoom), noise and baseline per channel.
fn draw_link(
    f: &mut Figures,
    s: &Shown,
    n: u32,
    adc: &crate::link_view::AdcView,
    wf: &crate::Waveform,
) -> Result<(), ReportError> {
    draw_heat(f, s, n, adc, wf.column_s.len())?;
    let envelope = |name: &str, v: &Vec<f64>| Series {
        name: name.into(),
        points: wf
            .column_s
            .iter()
            .zip(v)
            .filter(|(_, y)| y.is_finite())
            .map(|(x, y)| (*x, *y))
            .collect(),
    };
    f.signal(
        format!("link-{n}-waveform"),
        &format!("Link {n}, channel {}: waveform", wf.channel),
        vec![
            envelope("largest per column", &wf.high),
            envelope("smallest per column", &wf.low),
        ],
        format!(
            "Channel {} ({}), baseline {:.0} ADC: its range in each column over the window.",
            wf.channel, wf.chosen, wf.baseline
        ),
        n,
    )?;
    if !wf.zoom.is_empty() {
        f.signal(
            format!("link-{n}-zoom"),
            &format!(
                "Link {n}, channel {}: around its largest excursion",
                wf.channel
            ),
            vec![Series {
                name: format!("channel {}", wf.channel),
                points: wf.zoom.clone(),
            }],
            "Every sample near the excursion, at full resolution.".into(),
            n,
        )?;
    }
    draw_channels(f, n, adc)?;
    Ok(())
}

/// A link's noise and baseline per channel, captioned with its flagged channels.
fn draw_channels(
    f: &mut Figures,
    n: u32,
    adc: &crate::link_view::AdcView,
) -> Result<(), ReportError> {
    let flagged: Vec<String> = adc
        .channels
        .iter()
        .filter(|c| c.flag != "ok")
        .map(|c| format!("{} ({})", c.channel, c.flag))
        .collect();
    let caption = if flagged.is_empty() {
        "No channel dead or noisy.".to_string()
    } else {
        format!("Flagged: {}.", flagged.join(", "))
    };
    let per_channel: [(&str, &str, ChannelValue); 2] = [
        ("noise", "RMS (ADC)", |c| c.rms),
        ("baseline", "median (ADC)", |c| c.baseline),
    ];
    for (what, unit, value) in per_channel {
        let chart = LineChart {
            title: &format!("Link {n}: {what} per channel"),
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
                    .map(|c| (c.channel as f64, value(c)))
                    .collect(),
            }],
        };
        f.line(format!("link-{n}-{what}"), &chart, caption.clone(), Some(n))?;
    }
    Ok(())
}
