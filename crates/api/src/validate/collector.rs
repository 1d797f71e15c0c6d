//! Field paths ([`Seg`]) and the [`Collector`] the rules push their violations into, relative
//! to where they look; turned into [`Violation`]s or a `garde::Report` at the end.

use super::{InvalidSpec, Rule, Violation};

/// One segment of a field path: a key or a list index.
#[derive(Clone, Copy, Debug)]
pub(super) enum Seg {
    Key(&'static str),
    Index(usize),
}

struct Entry {
    path: Vec<Seg>,
    rule: Rule,
    message: String,
}

/// The violations found so far, with paths from `root` (after `prefix`).
pub(super) struct Collector {
    root: &'static str,
    prefix: Vec<Seg>,
    entries: Vec<Entry>,
}

/// Where the next violation goes ([`Collector::at`]).
pub(super) struct At<'a> {
    collector: &'a mut Collector,
    path: Vec<Seg>,
}

impl At<'_> {
    pub(super) fn push(self, rule: Rule, message: impl Into<String>) {
        self.collector.entries.push(Entry {
            path: self.path,
            rule,
            message: message.into(),
        });
    }
}

impl Collector {
    pub(super) fn new(root: &'static str) -> Self {
        Self {
            root,
            prefix: Vec::new(),
            entries: Vec::new(),
        }
    }

    pub(super) fn at(&mut self, segs: &[Seg]) -> At<'_> {
        let path = [self.prefix.as_slice(), segs].concat();
        At {
            collector: self,
            path,
        }
    }

    pub(super) fn nested(&self, segs: &[Seg]) -> Collector {
        Collector {
            root: self.root,
            prefix: [self.prefix.as_slice(), segs].concat(),
            entries: Vec::new(),
        }
    }

    pub(super) fn absorb(&mut self, other: Collector) {
        self.entries.extend(other.entries);
    }

    pub(super) fn violations(&self) -> Vec<Violation> {
        self.entries
            .iter()
            .map(|e| Violation {
                field: render(self.root, &e.path),
                rule: e.rule,
                message: e.message.clone(),
            })
            .collect()
    }

    pub(super) fn finish(self) -> Result<(), InvalidSpec> {
        let violations = self.violations();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(InvalidSpec { violations })
        }
    }

    pub(super) fn into_report(
        self,
        parent: &mut dyn FnMut() -> garde::Path,
        report: &mut garde::Report,
    ) {
        for e in self.entries {
            let mut path = parent();
            for seg in &e.path {
                path = match seg {
                    Seg::Key(k) => path.join(*k),
                    Seg::Index(i) => path.join(*i),
                };
            }
            report.append(path, garde::Error::new(e.message));
        }
    }
}

fn render(root: &str, path: &[Seg]) -> String {
    let mut out = root.to_string();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}
