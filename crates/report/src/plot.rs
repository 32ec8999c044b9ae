//! Line and bar charts, each drawn twice from the same code: SVG (text as text, any size) and
//! PNG (for places that show only bitmaps). Axes carry their quantity and unit; every chart has
//! a legend.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::ReportError;

const SIZE: (u32, u32) = (900, 560);

/// One named series of (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub struct LineChart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Base-2 logarithmic x axis (block sizes).
    pub log2_x: bool,
    /// The y axis's range; None: from 0 to above the data's largest value.
    pub y_range: Option<(f64, f64)>,
    /// A dot on every point (measurements); off for dense series (waveforms).
    pub markers: bool,
    pub series: Vec<Series>,
}

pub struct BarChart<'a> {
    pub title: &'a str,
    pub y_label: &'a str,
    pub categories: Vec<String>,
    /// One value per category per series (NaN: no bar).
    pub series: Vec<(String, Vec<f64>)>,
}

/// Fonts for PNG text: the first of these that exists (Debian: fonts-dejavu-core).
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers a TrueType font, once: plotters measures text with it to lay a chart out, and
/// draws PNG text with it (SVG text is drawn by whatever shows the SVG).
fn ensure_font() -> Result<(), ReportError> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let path = FONT_PATHS
            .iter()
            .find(|p| Path::new(p).exists())
            .ok_or_else(|| {
                format!(
                    "no TrueType font for the PNG plots (looked for {}); install fonts-dejavu-core",
                    FONT_PATHS.join(", ")
                )
            })?;
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        // plotters keeps registered fonts for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{path}: not a font plotters can read"))
    })
    .clone()
    .map_err(ReportError::Font)
}

/// A chart that can draw itself on any backend.
trait Draw {
    fn draw<DB: DrawingBackend>(&self, area: DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Writes `stem.svg` and `stem.png` in `dir`; returns their paths.
fn both(dir: &Path, stem: &str, chart: &impl Draw) -> Result<(PathBuf, PathBuf), ReportError> {
    let svg = dir.join(format!("{stem}.svg"));
    let png = dir.join(format!("{stem}.png"));
    let fail = |e: String| ReportError::Plot(stem.into(), e);
    // Both backends measure text to lay the chart out.
    ensure_font()?;
    chart
        .draw(SVGBackend::new(&svg, SIZE).into_drawing_area())
        .map_err(fail)?;
    chart
        .draw(BitMapBackend::new(&png, SIZE).into_drawing_area())
        .map_err(fail)?;
    Ok((svg, png))
}

/// Draws the legend (top right, over a light box) and writes the picture out.
fn finish<'a, DB: DrawingBackend + 'a>(
    mut chart: ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|x| format!("{x:?}"))?;
    area.present().map_err(|x| format!("{x:?}"))
}

fn colour(i: usize) -> RGBColor {
    // Colour-blind-safe (Okabe-Ito), then repeated darker.
    const P: [(u8, u8, u8); 8] = [
        (0, 114, 178),
        (230, 159, 0),
        (0, 158, 115),
        (204, 121, 167),
        (86, 180, 233),
        (213, 94, 0),
        (240, 228, 66),
        (0, 0, 0),
    ];
    let (r, g, b) = P[i % P.len()];
    let k = 1 + (i / P.len()) as u8;
    RGBColor(r / k, g / k, b / k)
}

/// The top of the y axis: the data's maximum plus room above it for the legend's `series`
/// entries, so that the legend does not cover the data.
fn nice_max(v: f64, series: usize) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        1.0
    } else {
        v * (1.12 + 0.065 * series as f64)
    }
}

/// The x axis of a line chart (log2 where asked): every point's x, with a margin so that the
/// first and last are not drawn on the frame; a unit around a single x.
fn x_range(c: &LineChart) -> (f64, f64) {
    let tx = |x: f64| if c.log2_x { x.max(1.0).log2() } else { x };
    let xs = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (mut x0, mut x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| {
        (a.min(tx(x)), b.max(tx(x)))
    });
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 - x0 < 1e-9 {
        x0 -= 0.5;
        x1 += 0.5;
    }
    let pad = (x1 - x0) * 0.04;
    debug_assert!(pad > 0.0, "an x axis of some width");
    (x0 - pad, x1 + pad)
}

pub fn line_chart(
    dir: &Path,
    stem: &str,
    c: &LineChart,
) -> Result<(PathBuf, PathBuf), ReportError> {
    struct Drawer<'a, 'b>(&'a LineChart<'b>);
    impl Draw for Drawer<'_, '_> {
        fn draw<DB: DrawingBackend>(&self, area: DrawingArea<DB, Shift>) -> Result<(), String> {
            let c = self.0;
            let e = |x: &dyn std::fmt::Debug| format!("{x:?}");
            area.fill(&WHITE).map_err(|x| e(&x))?;
            let ys = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
            let tx = |x: f64| if c.log2_x { x.max(1.0).log2() } else { x };
            let (x0, x1) = x_range(c);
            let (y0, y1) = c
                .y_range
                .unwrap_or_else(|| (0.0, nice_max(ys.fold(0.0, f64::max), c.series.len())));
            let mut chart = framed(&area, c.title, 46)
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|x| e(&x))?;
            let log2 = c.log2_x;
            // Counts (threads) get labels at whole numbers only, never "1 1 1 2 2".
            let whole = c
                .series
                .iter()
                .flat_map(|s| s.points.iter())
                .all(|p| p.0.fract() == 0.0);
            let fmt_x = move |v: &f64| {
                if log2 {
                    human_bytes(2f64.powf(*v))
                } else if !whole {
                    axis_number(*v, x1)
                } else if (v - v.round()).abs() < 1e-6 {
                    format!("{}", v.round())
                } else {
                    String::new()
                }
            };
            chart
                .configure_mesh()
                .x_desc(c.x_label)
                .y_desc(c.y_label)
                .x_label_formatter(&fmt_x)
                .y_label_formatter(&|v| axis_number(*v, y1.abs().max(y0.abs())))
                .light_line_style(WHITE.mix(0.0))
                .draw()
                .map_err(|x| e(&x))?;
            for (i, s) in c.series.iter().enumerate() {
                let col = colour(i);
                let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
                chart
                    .draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))
                    .map_err(|x| e(&x))?
                    .label(s.name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2))
                    });
                if c.markers {
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, col.filled())))
                        .map_err(|x| e(&x))?;
                }
            }
            finish(chart, &area)
        }
    }
    both(dir, stem, &Drawer(c))
}

pub fn bar_chart(dir: &Path, stem: &str, c: &BarChart) -> Result<(PathBuf, PathBuf), ReportError> {
    struct Drawer<'a, 'b>(&'a BarChart<'b>);
    impl Draw for Drawer<'_, '_> {
        fn draw<DB: DrawingBackend>(&self, area: DrawingArea<DB, Shift>) -> Result<(), String> {
            let c = self.0;
            let e = |x: &dyn std::fmt::Debug| format!("{x:?}");
            area.fill(&WHITE).map_err(|x| e(&x))?;
            let n = c.categories.len().max(1);
            let k = c.series.len().max(1);
            let y1 = nice_max(
                c.series
                    .iter()
                    .flat_map(|s| s.1.iter().copied())
                    .filter(|v| v.is_finite())
                    .fold(0.0, f64::max),
                c.series.len(),
            );
            let mut chart = framed(&area, c.title, 70)
                .build_cartesian_2d(0.0..n as f64, 0.0..y1)
                .map_err(|x| e(&x))?;
            let cats = c.categories.clone();
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n * 2 + 1)
                .x_label_formatter(&move |v: &f64| {
                    let i = (*v - 0.5).round();
                    if (v - 0.5 - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < cats.len() {
                        cats[i as usize].clone()
                    } else {
                        String::new()
                    }
                })
                .x_label_style(("sans-serif", 11))
                .y_desc(c.y_label)
                .y_label_formatter(&|v| axis_number(*v, y1))
                .draw()
                .map_err(|x| e(&x))?;
            let w = 0.8 / k as f64;
            for (si, (name, values)) in c.series.iter().enumerate() {
                let col = colour(si);
                chart
                    .draw_series(
                        values
                            .iter()
                            .enumerate()
                            .filter(|(_, v)| v.is_finite())
                            .map(|(ci, &v)| {
                                let x0 = ci as f64 + 0.1 + si as f64 * w;
                                Rectangle::new([(x0, 0.0), (x0 + w * 0.95, v)], col.filled())
                            }),
                    )
                    .map_err(|x| e(&x))?
                    .label(name.clone())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 14, y + 5)], col.filled())
                    });
            }
            finish(chart, &area)
        }
    }
    both(dir, stem, &Drawer(c))
}

/// A matrix of values drawn as colours: `values[row][column]`, rows along the y axis from
/// `y_range.0` (row 0, at the bottom) to `y_range.1`, columns along x from `x_range.0` to
/// `x_range.1`. The cells are one bitmap (an embedded PNG in the SVG, so that a 256 x 800 map
/// is not 200 000 rectangles); axes and labels are drawn as on the other charts. Values are
/// clamped to `±scale` on a diverging blue-white-red map; NaN cells are grey (no data). Where
/// cells outnumber pixels, a pixel takes its cells' value farthest from 0, so nothing is hidden.
pub struct HeatMap<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub x_range: (f64, f64),
    pub y_range: (f64, f64),
    pub values: Vec<Vec<f64>>,
    pub scale: f64,
    /// What a colour means (the colour bar's label).
    pub value_label: &'a str,
}

/// The colour of `v` on a diverging map clamped to ±`scale`: blue below 0, white at 0, red above.
pub fn diverging(v: f64, scale: f64) -> (u8, u8, u8) {
    if v.is_nan() {
        return (170, 170, 170);
    }
    let t = (v / scale.max(f64::MIN_POSITIVE)).clamp(-1.0, 1.0);
    let fade = |c: f64| (255.0 - (255.0 - c) * t.abs()).round() as u8;
    if t >= 0.0 {
        (fade(178.0), fade(24.0), fade(43.0))
    } else {
        (fade(33.0), fade(102.0), fade(172.0))
    }
}

/// A chart with the report's frame: its title, margins, and room for the axes' labels
/// (`x_label_pixels` under the plot: more where the categories' names are long).
fn framed<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    x_label_pixels: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(x_label_pixels)
        .y_label_area_size(70);
    builder
}

pub fn heat_map(dir: &Path, stem: &str, c: &HeatMap) -> Result<(PathBuf, PathBuf), ReportError> {
    struct Drawer<'a, 'b>(&'a HeatMap<'b>);
    impl Draw for Drawer<'_, '_> {
        fn draw<DB: DrawingBackend>(&self, area: DrawingArea<DB, Shift>) -> Result<(), String> {
            let c = self.0;
            let e = |x: &dyn std::fmt::Debug| format!("{x:?}");
            area.fill(&WHITE).map_err(|x| e(&x))?;
            let (main, bar) = area.split_horizontally(SIZE.0 - 110);
            let (x0, x1) = c.x_range;
            let (y0, y1) = c.y_range;
            let mut chart = framed(&main, c.title, 46)
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|x| e(&x))?;
            chart
                .configure_mesh()
                .disable_mesh()
                .x_desc(c.x_label)
                .y_desc(c.y_label)
                .x_label_formatter(&|v| axis_number(*v, x1.abs().max(x0.abs())))
                .y_label_formatter(&|v| axis_number(*v, y1.abs().max(y0.abs())))
                .draw()
                .map_err(|x| e(&x))?;
            let (px, py) = chart.plotting_area().dim_in_pixel();
            let rows = c.values.len().max(1);
            let cols = c.values.first().map_or(1, |r| r.len().max(1));
            let mut rgb = vec![0u8; px as usize * py as usize * 3];
            // Each pixel shows, of the cells it covers, the one farthest from 0: with more
            // columns than pixels, a one-column spike still colours its pixel.
            let span = |i: usize, pixels: usize, n: usize| {
                let a = i * n / pixels;
                a..((i + 1) * n / pixels).max(a + 1).min(n)
            };
            for y in 0..py as usize {
                // Pixel row 0 is the top: the last matrix rows.
                let r = span(py as usize - 1 - y, py as usize, rows);
                for x in 0..px as usize {
                    let cs = span(x, px as usize, cols);
                    let v = r
                        .clone()
                        .flat_map(|row| cs.clone().map(move |col| (row, col)))
                        .filter_map(|(row, col)| c.values.get(row)?.get(col).copied())
                        .filter(|v| !v.is_nan())
                        .max_by(|a, b| a.abs().total_cmp(&b.abs()));
                    let (red, g, b) = diverging(v.unwrap_or(f64::NAN), c.scale);
                    let at = (y * px as usize + x) * 3;
                    rgb[at..at + 3].copy_from_slice(&[red, g, b]);
                }
            }
            let cells = BitMapElement::with_owned_buffer((x0, y1), (px, py), rgb)
                .ok_or("heat map bitmap of the wrong size")?;
            chart
                .draw_series(std::iter::once(cells))
                .map_err(|x| e(&x))?;
            // The colour bar: -scale at the bottom, +scale at the top.
            let mut legend = ChartBuilder::on(&bar)
                .margin_top(60)
                .margin_bottom(60)
                .margin_right(14)
                .y_label_area_size(60)
                .build_cartesian_2d(0.0..1.0, -c.scale..c.scale)
                .map_err(|x| e(&x))?;
            legend
                .configure_mesh()
                .disable_mesh()
                .disable_x_axis()
                .y_desc(c.value_label)
                .y_label_style(("sans-serif", 12))
                .axis_desc_style(("sans-serif", 14))
                .y_label_formatter(&|v| axis_number(*v, c.scale))
                .draw()
                .map_err(|x| e(&x))?;
            let steps = 64;
            legend
                .draw_series((0..steps).map(|i| {
                    let a = -c.scale + 2.0 * c.scale * i as f64 / steps as f64;
                    let b = a + 2.0 * c.scale / steps as f64;
                    let (r, g, bl) = diverging((a + b) / 2.0, c.scale);
                    Rectangle::new([(0.0, a), (1.0, b)], RGBColor(r, g, bl).filled())
                }))
                .map_err(|x| e(&x))?;
            area.present().map_err(|x| format!("{x:?}"))
        }
    }
    both(dir, stem, &Drawer(c))
}

/// An axis label with as many decimals as the axis's range needs.
fn axis_number(v: f64, axis_max: f64) -> String {
    if axis_max >= 100.0 {
        format!("{v:.0}")
    } else if axis_max >= 10.0 {
        format!("{v:.1}")
    } else if axis_max >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// 256 B, 4 KiB, 5568 B, 1 MiB: exact sizes for labels (a 5568 B frame is not "5 KiB").
pub fn human_bytes(b: f64) -> String {
    let b = b.round() as u64;
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1024 && b.is_multiple_of(1024) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_column_spike_colours_its_pixel_however_many_columns_share_it() {
        // 5000 columns on a ~700-pixel-wide plot: one cell at +100, all else 0.
        let cols = 5000;
        let mut values = vec![vec![0.0; cols]; 4];
        values[2][3334] = 100.0;
        let dir = tempfile::tempdir().unwrap();
        let (_, png) = heat_map(
            dir.path(),
            "h",
            &HeatMap {
                title: "t",
                x_label: "x",
                y_label: "y",
                x_range: (0.0, 1.0),
                y_range: (0.0, 4.0),
                values,
                scale: 100.0,
                value_label: "v",
            },
        )
        .unwrap();
        // The full-scale red of +100 is in the picture (outside the colour bar too: the bar's
        // top cell is 63/64 of the scale, a lighter red).
        let img = std::fs::read(&png).unwrap();
        let decoded = image_pixels(&img);
        let red = diverging(100.0, 100.0);
        let bar_top = diverging(100.0 * 63.0 / 64.0, 100.0);
        assert_ne!(red, bar_top);
        assert!(decoded.contains(&red), "the spike is drawn");
    }

    /// The RGB pixels of a PNG.
    fn image_pixels(png: &[u8]) -> Vec<(u8, u8, u8)> {
        let decoder = ::png::Decoder::new(png);
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let step = info.color_type.samples();
        buf[..info.buffer_size()]
            .chunks_exact(step)
            .map(|p| (p[0], p[1], p[2]))
            .collect()
    }
}
