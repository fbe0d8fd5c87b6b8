//! The latency chart every report draws: one SVG of two panels, a histogram and a CDF of the
//! round trips of each series, on logarithmic time axes.
//!
//! Drawn with plotters' SVG backend without any font feature: text is written as SVG `<text>`
//! for the browser to lay out, so no font file is read.

use plotters::coord::combinators::WithKeyPoints;
use plotters::prelude::*;

/// Colours of the series, floors first in a report's order (floor blue, path red, then more
/// for later paths).
const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Log-spaced bins per decade in the histogram panel.
const BINS_PER_DECADE: f64 = 40.0;
/// Points drawn per CDF.
const CDF_POINTS: usize = 1_000;

fn plot_err<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing the plot: {e:?}")
}

/// One SVG of two panels: a histogram (share of round trips per log-spaced bin, the x axis
/// logarithmic and ending at twice the largest p99.9 so the body shows) and a CDF over the
/// whole range (logarithmic x axis), every series in its own colour with a legend.
pub fn svg(title: &str, series: &[(&str, &[u64])]) -> Result<String, String> {
    let series: Vec<(&str, Vec<u64>)> = series
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(r, s)| {
            let mut v = s.to_vec();
            v.sort_unstable();
            (*r, v)
        })
        .collect();
    let to_us = |ns: u64| ns.max(1) as f64 / 1000.0;
    let lo = series.iter().map(|(_, s)| to_us(s[0])).fold(f64::INFINITY, f64::min);
    let hi = series.iter().map(|(_, s)| to_us(*s.last().expect("non-empty"))).fold(0.0, f64::max);
    let p999 = series.iter().map(|(_, s)| to_us(s[((s.len() - 1) as f64 * 0.999) as usize])).fold(0.0, f64::max);
    let (lo, hi) = if series.is_empty() { (0.1, 10.0) } else { (lo * 0.9, hi * 1.1) };
    let hist_hi = (p999 * 2.0).clamp(lo * 2.0, hi.max(lo * 2.0));
    let cdf_hi = hi.max(lo * 2.0);

    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1400, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let root = root.titled(title, ("sans-serif", 22)).map_err(plot_err)?;
        let (left, right) = root.split_horizontally(700);

        // Histogram: log-spaced bins from lo to hist_hi, share of each series' samples.
        let edges = log_edges(lo, hist_hi);
        let hists: Vec<Vec<f64>> = series.iter().map(|(_, s)| shares(s, &edges)).collect();
        let ymax = hists.iter().flat_map(|h| h.iter().copied()).fold(0.0, f64::max).max(1.0) * 1.1;
        let lines = series.iter().zip(&hists).map(|((label, _), h)| {
            let mut pts = Vec::with_capacity(h.len() * 2);
            for (b, &y) in h.iter().enumerate() {
                pts.push((edges[b], y));
                pts.push((edges[b + 1], y));
            }
            (label.to_string(), pts)
        });
        let caption = format!("histogram (x clipped at {hist_hi:.2} us = 2x the largest p99.9)");
        let y = Axis { desc: "% of round trips per bin", max: ymax, decimals: 1 };
        panel(&left, &caption, (lo, hist_hi), y, lines, SeriesLabelPosition::UpperRight)?;

        // CDF over everything, max included.
        let lines = series.iter().map(|(label, s)| {
            let n = s.len();
            let step = (n / CDF_POINTS).max(1);
            let mut pts: Vec<(f64, f64)> =
                (0..n).step_by(step).map(|k| (to_us(s[k]), (k + 1) as f64 * 100.0 / n as f64)).collect();
            pts.push((to_us(s[n - 1]), 100.0));
            (label.to_string(), pts)
        });
        let y = Axis { desc: "% of round trips at or below", max: 100.0, decimals: 0 };
        panel(&right, "CDF (whole range)", (lo, cdf_hi), y, lines, SeriesLabelPosition::LowerRight)?;
        root.present().map_err(plot_err)?;
    }
    Ok(out)
}

/// A panel's y axis: its label, top and tick decimals (it starts at 0).
struct Axis {
    desc: &'static str,
    max: f64,
    decimals: usize,
}

/// One panel of [`svg`]: round trips on a logarithmic x axis over `x`, every line in its own
/// colour, with a legend at `legend`.
fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    x: (f64, f64),
    y: Axis,
    lines: impl Iterator<Item = (String, Vec<(f64, f64)>)>,
    legend: SeriesLabelPosition,
) -> Result<(), String> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(log_axis(x.0, x.1), 0.0..y.max)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("round trip (us, log scale)")
        .y_desc(y.desc)
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&|v| format!("{v:.*}", y.decimals))
        .draw()
        .map_err(plot_err)?;
    for (i, (label, pts)) in lines.enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(pts, colour.stroke_width(2)))
            .map_err(plot_err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(plot_err)
}

/// A logarithmic axis from `lo` to `hi` with ticks at 1, 2, 5 x 10^k (or every 10^k over
/// many decades, or every integer multiple over less than one), minor lines at every integer
/// multiple of 10^k.
fn log_axis(lo: f64, hi: f64) -> WithKeyPoints<LogCoord<f64>> {
    let (bold, light) = log_ticks(lo, hi);
    (lo..hi).log_scale().with_key_points(bold).with_light_points(light)
}

fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let within = |mults: &[f64]| -> Vec<f64> {
        let mut v = Vec::new();
        let mut decade = 10f64.powi(lo.log10().floor() as i32);
        while decade <= hi {
            for m in mults {
                let x = decade * m;
                if x >= lo && x <= hi {
                    v.push(x);
                }
            }
            decade *= 10.0;
        }
        v
    };
    let all: Vec<f64> = (1..10).map(f64::from).collect();
    let mut bold = within(&[1.0, 2.0, 5.0]);
    if bold.len() > 12 {
        bold = within(&[1.0]);
    } else if bold.len() < 3 {
        bold = within(&all);
    }
    let light = if (hi / lo).log10() <= 4.0 { within(&all) } else { Vec::new() };
    (bold, light)
}

/// An axis label in microseconds: as many decimals as small values need.
fn tick_label(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Bin edges (us) from `lo` to `hi`, [`BINS_PER_DECADE`] per decade.
fn log_edges(lo: f64, hi: f64) -> Vec<f64> {
    let n = (((hi / lo).log10() * BINS_PER_DECADE).ceil() as usize).max(1);
    let step = (hi / lo).powf(1.0 / n as f64);
    (0..=n).map(|i| lo * step.powi(i as i32)).collect()
}

/// The share (%) of `sorted` samples (ns) in each bin of `edges` (us); samples past the
/// last edge are in none.
fn shares(sorted: &[u64], edges: &[f64]) -> Vec<f64> {
    let mut counts = vec![0u64; edges.len() - 1];
    let mut b = 0;
    for &ns in sorted {
        let v = ns.max(1) as f64 / 1000.0;
        while b < counts.len() && v >= edges[b + 1] {
            b += 1;
        }
        if b == counts.len() {
            break;
        }
        if v >= edges[b] {
            counts[b] += 1;
        }
    }
    let n = sorted.len().max(1) as f64;
    counts.into_iter().map(|c| c as f64 * 100.0 / n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_series_with_its_label() {
        let s = svg("title", &[("floor", &[400, 420, 450][..]), ("path", &[1300, 1350, 9000][..])]).expect("svg");
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("floor") && s.contains("path") && s.contains("CDF") && s.contains("title"));
    }

    #[test]
    fn svg_without_samples_is_still_valid() {
        let s = svg("empty", &[("a path", &[][..])]).expect("svg");
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn log_ticks_are_readable() {
        let (bold, _) = log_ticks(0.3, 40.0);
        assert_eq!(bold, vec![0.5, 1.0, 2.0, 5.0, 10.0, 20.0]);
        let (bold, _) = log_ticks(150.0, 400.0);
        assert_eq!(bold, vec![200.0, 300.0, 400.0]);
        let (bold, light) = log_ticks(0.1, 1e6);
        assert_eq!(bold.len(), 8);
        assert!(light.is_empty());
    }

    #[test]
    fn bins_cover_the_samples() {
        let edges = log_edges(0.1, 10.0);
        assert_eq!(edges.len(), 81);
        assert!((edges[80] - 10.0).abs() < 1e-9);
        let s = shares(&[100, 1000, 1000, 50_000], &edges);
        assert!((s.iter().sum::<f64>() - 75.0).abs() < 1e-9, "{s:?}");
    }
}
