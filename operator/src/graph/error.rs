//! Errors of a graph that is refused before anything starts: what is wrong, which operator,
//! port or field, and where (`file:line:col`, or the `--set` it came from), with the line of
//! the file under it the way compilers show it.

use std::fmt;

/// Where an error points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum At {
    /// Line and column (from 1, columns in characters) in `file`, with that line's text.
    File { file: String, line: usize, col: usize, text: String },
    /// The value given by `--set` (its `path=value`).
    Set(String),
    /// A graph built in memory (no file).
    Nowhere,
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
            At::File { file, line, col, .. } => Some(format!("{file}:{line}:{col}")),
            _ => None,
        }
    }
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            At::File { file, line, col, text } => {
                writeln!(f, "{file}:{line}:{col}: {}", self.message)?;
                let gutter = line.to_string().len();
                writeln!(f, "{:gutter$} |", "")?;
                writeln!(f, "{line} | {text}")?;
                // The caret sits under column `col`; tabs are kept so it lines up.
                let pad: String = text.chars().take(col.saturating_sub(1)).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
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
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
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
        let e = GraphError::new(At::File { file: "g.ron".into(), line: 12, col: 5, text: "    (name: \"x\")".into() }, "unknown kind");
        let s = e.to_string();
        assert_eq!(s, "g.ron:12:5: unknown kind\n   |\n12 |     (name: \"x\")\n   |     ^");
        assert_eq!(e.location().as_deref(), Some("g.ron:12:5"));
    }
}
