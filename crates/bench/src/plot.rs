//! The bench's plot, as a self-contained SVG: convergence time against N, and writes against N
//! next to their floors (both axes logarithmic, so a constant ratio is a constant gap).

use std::fmt::Write as _;

use super::report::Report;

/// One line of a panel.
struct Series {
    name: &'static str,
    color: &'static str,
    dashed: bool,
    points: Vec<(f64, f64)>,
    /// Point labels, when not the plain value.
    labels: Option<Vec<String>>,
}

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 470.0;

/// The SVG of `report`.
pub fn svg(report: &Report) -> String {
    let runs: Vec<_> = report.runs.iter().filter(|r| r.n > 0).collect();
    let time = vec![Series {
        name: "all graphs Ready",
        color: "#1f77b4",
        dashed: false,
        points: runs
            .iter()
            .filter_map(|r| r.convergence.seconds.map(|s| (r.n as f64, s)))
            .collect(),
        labels: Some(
            runs.iter()
                .filter_map(|r| r.convergence.seconds.map(|s| format!("{s:.1} s")))
                .collect(),
        ),
    }];
    let writes = vec![
        Series {
            name: "operator writes",
            color: "#d62728",
            dashed: false,
            points: runs
                .iter()
                .map(|r| (r.n as f64, r.convergence.writes as f64))
                .collect(),
            labels: Some(
                runs.iter()
                    .map(|r| {
                        format!(
                            "{} ({:.2}× floor)",
                            r.convergence.writes,
                            r.convergence.ratio()
                        )
                    })
                    .collect(),
            ),
        },
        Series {
            name: "writes + Events",
            color: "#ff7f0e",
            dashed: false,
            points: runs
                .iter()
                .map(|r| {
                    (
                        r.n as f64,
                        (r.convergence.writes + r.convergence.events) as f64,
                    )
                })
                .collect(),
            labels: None,
        },
        Series {
            name: "floor: children + graph status",
            color: "#2ca02c",
            dashed: true,
            points: runs
                .iter()
                .map(|r| (r.n as f64, r.convergence.floor as f64))
                .collect(),
            labels: None,
        },
        Series {
            name: "floor + component status",
            color: "#7f7f7f",
            dashed: true,
            points: runs
                .iter()
                .map(|r| (r.n as f64, r.convergence.floor_with_component_status as f64))
                .collect(),
            labels: None,
        },
    ];
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        o,
        "<rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"white\"/>"
    );
    panel(&mut o, 0.0, "Time to converge N graphs", "seconds", &time);
    panel(
        &mut o,
        WIDTH / 2.0,
        "Writes to converge N graphs",
        "requests",
        &writes,
    );
    o.push_str("</svg>\n");
    o
}

/// A log-log panel in the half of the image starting at `x0`.
fn panel(o: &mut String, x0: f64, title: &str, ylabel: &str, series: &[Series]) {
    let (left, right, top, bottom) = (x0 + 70.0, x0 + WIDTH / 2.0 - 20.0, 40.0, HEIGHT - 135.0);
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .collect();
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">{title}</text>",
        (left + right) / 2.0
    );
    if all.is_empty() {
        let _ = writeln!(
            o,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data</text>",
            (left + right) / 2.0,
            (top + bottom) / 2.0
        );
        return;
    }
    let (xlo, xhi) = decades(all.iter().map(|p| p.0).collect());
    let (ylo, yhi) = decades(all.iter().map(|p| p.1).collect());
    let axes = Axes {
        left,
        right,
        top,
        bottom,
        xlo,
        xhi,
        ylo,
        yhi,
    };
    let _ = writeln!(
        o,
        "<rect x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>",
        right - left,
        bottom - top
    );
    grid(o, &axes);
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">N (graphs, 3 components each)</text>",
        (left + right) / 2.0,
        bottom + 34.0
    );
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 {} {})\">{ylabel}</text>",
        x0 + 18.0,
        (top + bottom) / 2.0,
        x0 + 18.0,
        (top + bottom) / 2.0
    );
    for (i, s) in series.iter().enumerate() {
        line(o, &axes, i, s);
    }
}

/// The whole decades around `vals` (log10 of the lowest and highest), at least one apart.
fn decades(vals: Vec<f64>) -> (f64, f64) {
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = (lo.log10().floor(), hi.log10().ceil());
    if hi - lo < 1.0 {
        (lo, lo + 1.0)
    } else {
        (lo, hi)
    }
}

/// A panel's plot area and its logarithmic ranges (decades).
struct Axes {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    xlo: f64,
    xhi: f64,
    ylo: f64,
    yhi: f64,
}

impl Axes {
    fn px(&self, x: f64) -> f64 {
        self.left + (x.log10() - self.xlo) / (self.xhi - self.xlo) * (self.right - self.left)
    }

    fn py(&self, y: f64) -> f64 {
        self.bottom - (y.log10() - self.ylo) / (self.yhi - self.ylo) * (self.bottom - self.top)
    }
}

/// Decade grid lines and labels (with 2 and 5 between when there are few decades).
fn grid(o: &mut String, a: &Axes) {
    let (left, right, top, bottom) = (a.left, a.right, a.top, a.bottom);
    for (lo, hi, vertical) in [(a.xlo, a.xhi, true), (a.ylo, a.yhi, false)] {
        let few = hi - lo <= 2.0;
        let mut e = lo;
        while e <= hi + 1e-9 {
            for m in [1.0, 2.0, 5.0] {
                let v = m * 10f64.powf(e);
                if v.log10() > hi + 1e-9 || (m != 1.0 && !few) {
                    continue;
                }
                let label = if v >= 1.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v}")
                };
                let stroke = if m == 1.0 { "#ccc" } else { "#eee" };
                if vertical {
                    let x = a.px(v);
                    let _ = writeln!(
                        o,
                        "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{bottom}\" stroke=\"{stroke}\"/>\
                         <text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
                        bottom + 16.0
                    );
                } else {
                    let y = a.py(v);
                    let _ = writeln!(
                        o,
                        "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{right}\" y2=\"{y:.1}\" stroke=\"{stroke}\"/>\
                         <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
                        left - 6.0,
                        y + 4.0
                    );
                }
            }
            e += 1.0;
        }
    }
}

/// Series `i`: its line, its points with their labels, and its legend entry.
fn line(o: &mut String, a: &Axes, i: usize, s: &Series) {
    let pts: Vec<String> = s
        .points
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .map(|(x, y)| format!("{:.1},{:.1}", a.px(*x), a.py(*y)))
        .collect();
    let dash = if s.dashed {
        " stroke-dasharray=\"6 4\""
    } else {
        ""
    };
    if pts.len() > 1 {
        let _ = writeln!(
            o,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash}/>",
            pts.join(" "),
            s.color
        );
    }
    let shown = s
        .points
        .iter()
        .enumerate()
        .filter(|(_, (x, y))| *x > 0.0 && *y > 0.0);
    for (k, (x, y)) in shown {
        let label = match &s.labels {
            Some(labels) => labels.get(k).cloned().unwrap_or_default(),
            None if *y >= 100.0 => format!("{y:.0}"),
            None => format!("{y:.1}"),
        };
        let _ = writeln!(
            o,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{}\"><title>N={x}: {label}</title></circle>",
            a.px(*x),
            a.py(*y),
            s.color
        );
        if !s.dashed {
            // Right of the point, or left of it near the right edge.
            let (tx, anchor) = if a.px(*x) > a.right - 120.0 {
                (a.px(*x) - 6.0, "end")
            } else {
                (a.px(*x) + 6.0, "start")
            };
            let _ = writeln!(
                o,
                "<text x=\"{tx:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"{}\" text-anchor=\"{anchor}\" stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\">{label}</text>",
                a.py(*y) - 6.0,
                s.color
            );
        }
    }
    // Legend below the axis label, one line per series.
    let ly = a.bottom + 54.0 + 17.0 * i as f64;
    let lx = a.left;
    let _ = writeln!(
        o,
        "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{}\" stroke-width=\"2\"{dash}/>\
         <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
        lx + 22.0,
        s.color,
        lx + 27.0,
        ly + 4.0,
        s.name
    );
}

#[cfg(test)]
mod tests {
    use super::super::report::{Convergence, Machine, OperatorInfo, Report, Run, SCHEMA};
    use super::*;

    #[test]
    fn draws_points_and_floors() {
        let run = |n: usize, s: f64, w: u64| Run {
            n,
            convergence: Convergence {
                seconds: Some(s),
                writes: w,
                floor: w / 2,
                floor_with_component_status: w * 3 / 4,
                ..Default::default()
            },
            ..Default::default()
        };
        let report = Report {
            schema: SCHEMA,
            started_unix: 0,
            quick: false,
            machine: Machine::default(),
            operator: OperatorInfo::default(),
            mix: vec![],
            runs: vec![
                run(10, 8.0, 200),
                run(100, 30.0, 2000),
                run(1000, 400.0, 20000),
            ],
        };
        let svg = svg(&report);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 5);
        assert!(svg.contains("N=1000: 400.0 s"));
        assert!(svg.contains("20000 (2.00× floor)"));
        assert!(svg.contains("stroke-dasharray"));
    }
}
