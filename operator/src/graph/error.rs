//! Errors of a graph that is refused before anything starts ([`GraphErrors`]), and of a run
//! that did not get under way or ended early ([`RunError`]).
//!
//! A refused graph says what is wrong, which operator,
//! port or field, and where (`file:line:col`, or the `--set` it came from), with the line of
//! the file under it the way compilers show it (cut around the column when the line is
//! long). A position keeps a byte offset into the shared [`SourceFile`]; the line's text is
//! read only for the errors shown, and at most [`MAX_SHOWN`] errors are shown.

use std::fmt;
use std::sync::Arc;

pub use super::source::SourceFile;

/// Why a run did not start, or stopped before it could report.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Graph(#[from] GraphErrors),
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("cannot start {what}: {detail}")]
    Start { what: String, detail: String },
    #[error("peer control (ECB): {0}")]
    Ecb(#[from] crate::hsb::EcbError),
    #[error("{0}")]
    Peer(String),
}

impl From<crate::peer::PeerError> for RunError {
    fn from(e: crate::peer::PeerError) -> RunError {
        match e {
            crate::peer::PeerError::Config(c) => RunError::Config(c),
            crate::peer::PeerError::Start { what, detail } => RunError::Start { what, detail },
        }
    }
}

/// Errors [`GraphErrors`] shows; the rest are counted.
pub const MAX_SHOWN: usize = 20;
/// Characters of a source line shown under an error (the rest cut off around the column).
pub const SNIPPET_CHARS: usize = 120;

/// Where an error points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum At {
    /// Byte `offset` of `src`, at `line` and `col` (from 1, columns in characters).
    File { src: Arc<SourceFile>, offset: usize, line: usize, col: usize },
    /// The value given by `--set` (its `path=value`).
    Set(String),
    /// A graph built in memory (no file).
    Nowhere,
}

impl At {
    /// Byte `offset` of `src`.
    pub fn file(src: &Arc<SourceFile>, offset: usize) -> At {
        let (line, col) = src.line_col(offset);
        At::File { src: Arc::clone(src), offset, line, col }
    }
}

/// A graph that cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphError {
    pub at: At,
    pub message: String,
}

impl GraphError {
    pub fn new(at: At, message: impl Into<String>) -> GraphError {
        GraphError { at, message: message.into() }
    }

    /// `file:line:col`, when it points into a file.
    pub fn location(&self) -> Option<String> {
        match &self.at {
            At::File { src, line, col, .. } => Some(format!("{}:{line}:{col}", src.name)),
            _ => None,
        }
    }
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            At::File { src, offset, line, col } => {
                writeln!(f, "{}:{line}:{col}: {}", src.name, self.message)?;
                let gutter = line.to_string().len();
                let (text, pad) = src.snippet(*offset, SNIPPET_CHARS);
                writeln!(f, "{:gutter$} |", "")?;
                writeln!(f, "{line} | {text}")?;
                // The caret sits under column `col`.
                write!(f, "{:gutter$} | {pad}^", "")
            }
            At::Set(s) => write!(f, "--set {s}: {}", self.message),
            At::Nowhere => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for GraphError {}

/// Several errors found in one pass, reported together (the first is the headline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphErrors(pub Vec<GraphError>);

impl GraphErrors {
    pub fn first(&self) -> &GraphError {
        &self.0[0]
    }
}

impl fmt::Display for GraphErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().take(MAX_SHOWN).enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        if self.0.len() > MAX_SHOWN {
            let more = self.0.len() - MAX_SHOWN;
            write!(f, "\n... and {more} more error{}", if more == 1 { "" } else { "s" })?;
        }
        if self.0.len() > 1 {
            write!(f, "\n({} errors)", self.0.len())?;
        }
        Ok(())
    }
}

impl std::error::Error for GraphErrors {}

impl From<GraphError> for GraphErrors {
    fn from(e: GraphError) -> Self {
        GraphErrors(vec![e])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_a_caret_at_the_column() {
        let src = Arc::new(SourceFile::new("g.ron", &format!("{}    (name: \"x\")\n", "\n".repeat(11))));
        let e = GraphError::new(At::file(&src, 15), "unknown kind");
        let s = e.to_string();
        assert_eq!(s, "g.ron:12:5: unknown kind\n   |\n12 |     (name: \"x\")\n   |     ^");
        assert_eq!(e.location().as_deref(), Some("g.ron:12:5"));
    }

    #[test]
    fn keeps_tabs_and_counts_characters() {
        let src = Arc::new(SourceFile::new("g.ron", "\tçé x\r\n"));
        let e = GraphError::new(At::file(&src, 1 + 2 + 2 + 1), "here");
        assert_eq!(e.to_string(), "g.ron:1:5: here\n  |\n1 | \tçé x\n  | \t   ^");
    }

    #[test]
    fn long_lines_are_cut_around_the_column() {
        let line = format!("{}HERE{}", "a".repeat(10_000), "b".repeat(10_000));
        let src = Arc::new(SourceFile::new("g.ron", &line));
        let e = GraphError::new(At::file(&src, 10_000), "x");
        let shown = e.to_string();
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines[0], "g.ron:1:10001: x");
        assert!(lines[2].starts_with("1 | ...aaa") && lines[2].ends_with("bbb..."), "{shown}");
        assert!(lines[2].chars().count() <= SNIPPET_CHARS + 10, "{shown}");
        // The caret is under the `H`.
        let caret = lines[3].find('^').unwrap();
        assert_eq!(&lines[2][caret..caret + 4], "HERE", "{shown}");
        // Near either end of the line only that end is cut.
        let e = GraphError::new(At::file(&src, 3), "x").to_string();
        assert!(e.lines().nth(2).unwrap().starts_with("1 | aaa") && e.lines().nth(3).unwrap() == "  |    ^", "{e}");
        let e = GraphError::new(At::file(&src, line.len() - 1), "x").to_string();
        assert!(e.lines().nth(2).unwrap().starts_with("1 | ...") && e.lines().nth(2).unwrap().ends_with('b'), "{e}");
    }

    #[test]
    fn shows_the_first_errors_and_counts_the_rest() {
        let src = Arc::new(SourceFile::new("g.ron", &"x".repeat(1000)));
        let errors = GraphErrors((0..1000).map(|i| GraphError::new(At::file(&src, i), format!("error {i}"))).collect());
        let s = errors.to_string();
        assert_eq!(s.matches(": error ").count(), MAX_SHOWN, "{s}");
        assert!(s.ends_with(&format!("... and {} more errors\n(1000 errors)", 1000 - MAX_SHOWN)), "{s}");
        assert!(s.len() < MAX_SHOWN * 400, "{} bytes", s.len());
    }
}
