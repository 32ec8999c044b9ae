//! Plain aligned tables for the terminal.

pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Columns aligned to the right (numbers).
    right: Vec<bool>,
}

impl Table {
    pub fn new(header: &[(&str, bool)]) -> Self {
        Table {
            header: header.iter().map(|(h, _)| h.to_string()).collect(),
            right: header.iter().map(|(_, r)| *r).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let n = self.header.len();
        let mut width = vec![0usize; n];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &Vec<String>, out: &mut String| {
            let parts: Vec<String> = (0..n)
                .map(|i| {
                    let c = cells.get(i).map(String::as_str).unwrap_or("");
                    let pad = width[i] - c.chars().count();
                    if self.right[i] {
                        format!("{}{}", " ".repeat(pad), c)
                    } else {
                        format!("{}{}", c, " ".repeat(pad))
                    }
                })
                .collect();
            out.push_str(parts.join("  ").trim_end());
            out.push('\n');
        };
        line(&self.header, &mut out);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(&rule.join("  "));
        out.push('\n');
        for r in &self.rows {
            line(r, &mut out);
        }
        out
    }
}
