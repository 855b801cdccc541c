//! The benchmark's chart: grouped bars in plain SVG (no plotting
//! dependency), and the day a results file is named after.

use std::fmt::Write;

/// One group of bars: its label, and each series' value (`None`: not
/// measured).
pub(crate) struct Group {
    pub(crate) label: String,
    pub(crate) values: Vec<Option<f64>>,
}

/// A panel of grouped bars.
pub(crate) struct Panel {
    pub(crate) title: String,
    /// What the values are, for the axis.
    pub(crate) unit: String,
    /// The series' names, in the order of each group's values.
    pub(crate) series: Vec<String>,
    pub(crate) groups: Vec<Group>,
}

const COLOURS: [&str; 5] = ["#3b6ea5", "#e0873a", "#7a7a7a", "#5a9e5a", "#b04a4a"];
const WIDTH: f64 = 1100.0;
const PANEL: f64 = 330.0;
const LEFT: f64 = 70.0;

/// The panels one above the other, with `caption` at the top.
pub(crate) fn draw(caption: &str, panels: &[Panel]) -> String {
    let height = 40.0 + PANEL * panels.len() as f64;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="22" font-size="14">{}</text>"#,
        escape(caption)
    );
    for (i, panel) in panels.iter().enumerate() {
        draw_panel(&mut svg, panel, 40.0 + PANEL * i as f64);
    }
    svg.push_str("</svg>\n");
    svg
}

/// Where each legend entry of `series` goes, from `left`: `(x, line)`,
/// each entry as wide as its name (about 6.2 px a character at 11 px),
/// on the next line when it would pass the chart's right edge.
fn legend_places(series: &[String], left: f64) -> Vec<(f64, u32)> {
    let mut places = Vec::with_capacity(series.len());
    let (mut x, mut line) = (left, 0);
    for name in series {
        let width = 14.0 + 6.2 * name.chars().count() as f64;
        if x > left && x + width > WIDTH - 20.0 {
            x = left;
            line += 1;
        }
        places.push((x, line));
        x += width + 24.0;
    }
    places
}

/// The height of a legend line.
const LEGEND_LINE: f64 = 14.0;

fn draw_panel(svg: &mut String, panel: &Panel, top: f64) {
    let places = legend_places(&panel.series, LEFT);
    let extra = f64::from(places.iter().map(|&(_, line)| line).max().unwrap_or(0)) * LEGEND_LINE;
    let plot_top = top + 48.0 + extra;
    let plot_height = PANEL - 100.0 - extra;
    let bottom = plot_top + plot_height;
    let max = panel
        .groups
        .iter()
        .flat_map(|g| g.values.iter().flatten())
        .fold(0.0_f64, |a, &b| a.max(b));
    let scale = nice_ceiling(max);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{}" font-size="13">{}</text>"#,
        top + 18.0,
        escape(&panel.title)
    );
    // The legend on the lines below the title.
    for (s, (name, &(x, line))) in panel.series.iter().zip(&places).enumerate() {
        let y = top + 26.0 + f64::from(line) * LEGEND_LINE;
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.1}" y="{y}" width="10" height="10" fill="{}"/><text x="{:.1}" y="{}">{}</text>"#,
            COLOURS[s % COLOURS.len()],
            x + 14.0,
            y + 9.0,
            escape(name)
        );
    }
    for tick in 0..=4 {
        let value = scale * f64::from(tick) / 4.0;
        let y = bottom - plot_height * f64::from(tick) / 4.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" x2="{}" y1="{y}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            WIDTH - 20.0,
            LEFT - 6.0,
            y + 4.0,
            short(value)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>"#,
        plot_top + plot_height / 2.0,
        plot_top + plot_height / 2.0,
        escape(&panel.unit)
    );
    let slot = (WIDTH - 20.0 - LEFT) / panel.groups.len().max(1) as f64;
    let bar = (slot * 0.8) / panel.series.len().max(1) as f64;
    for (g, group) in panel.groups.iter().enumerate() {
        let x0 = LEFT + slot * g as f64 + slot * 0.1;
        for (s, value) in group.values.iter().enumerate() {
            let Some(value) = value else { continue };
            let h = if scale > 0.0 {
                plot_height * value / scale
            } else {
                0.0
            };
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {}: {}</title></rect>"#,
                x0 + bar * s as f64,
                bottom - h,
                bar.max(1.0),
                h,
                COLOURS[s % COLOURS.len()],
                escape(&group.label),
                escape(&panel.series[s]),
                short(*value)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x0 + slot * 0.4,
            bottom + 14.0,
            escape(&group.label)
        );
    }
}

/// The smallest 1, 2 or 5 times a power of ten at or above `value`.
fn nice_ceiling(value: f64) -> f64 {
    if value <= 0.0 {
        return 1.0;
    }
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|&c| c >= value)
        .unwrap_or(10.0 * power)
}

/// `value` in a few characters: 1.2k, 3.4M.
fn short(value: f64) -> String {
    let (v, suffix) = if value >= 1e9 {
        (value / 1e9, "G")
    } else if value >= 1e6 {
        (value / 1e6, "M")
    } else if value >= 1e3 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}{suffix}")
    } else {
        format!("{v:.1}{suffix}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Today's date in UTC, `YYYY-MM-DD`.
pub(crate) fn today() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    civil(days)
}

/// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_dated_as_the_calendar_does() {
        assert_eq!(civil(0), "1970-01-01");
        assert_eq!(civil(59), "1970-03-01");
        assert_eq!(civil(11_016), "2000-02-29");
        assert_eq!(civil(20_791), "2026-12-04");
    }

    #[test]
    fn a_chart_has_a_bar_for_each_measured_value() {
        let panel = Panel {
            title: "t".into(),
            unit: "u".into(),
            series: vec!["a".into(), "b".into()],
            groups: vec![
                Group {
                    label: "q<1>".into(),
                    values: vec![Some(3.0), None],
                },
                Group {
                    label: "q2".into(),
                    values: vec![Some(1.5), Some(2.5)],
                },
            ],
        };
        let svg = draw("c", &[panel]);
        assert_eq!(svg.matches("<title>").count(), 3);
        assert!(svg.contains("q&lt;1&gt;"));
        assert_eq!(nice_ceiling(3.0), 5.0);
        assert_eq!(short(1_500_000.0), "1.5M");
    }

    #[test]
    fn a_legend_too_long_for_one_line_takes_two_within_the_chart() {
        let series: Vec<String> = [
            "Streamwork p1, at most once",
            "p1, exactly once (checkpoint every 500ms)",
            "p2, exactly once (checkpoint every 500ms)",
            "Feldera, published (16 cores / 16)",
            "Flink 1.13, published (throughput / cores)",
        ]
        .map(String::from)
        .to_vec();
        let places = legend_places(&series, LEFT);
        for ((x, _), name) in places.iter().zip(&series) {
            assert!(
                x + 14.0 + 6.2 * name.chars().count() as f64 <= WIDTH - 20.0,
                "{name}"
            );
        }
        assert_eq!(places.iter().map(|p| p.1).max(), Some(1));
        assert_eq!(places[0], (LEFT, 0));
    }
}
