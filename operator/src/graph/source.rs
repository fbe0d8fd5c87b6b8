//! Where things are in a graph file: a small scanner that turns RON text into a tree of
//! nodes with byte spans, so that every semantic error can point at the line and column of
//! the entry it is about (serde drops positions once a value is deserialized).
//!
//! Guarantees:
//! - It never panics, whatever the input; text it cannot follow gives a [`ScanError`] with
//!   the offset where it stopped.
//! - Columns count characters from 1, as `ron`'s own error positions do, so positions from
//!   both agree.
//! - It only locates things: `ron` remains the judge of what the file means. Atoms (strings,
//!   numbers, identifiers) keep their source text; [`Node::as_str`] decodes strings with `ron`.

use std::fmt;

/// A byte range of the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

/// A value of the file with where it lies.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub span: Span,
    pub kind: NodeKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// `(..)` or `Name(..)`: a struct (`key: value` entries), a tuple, or a variant of either.
    /// `open` is the offset of the `(`.
    Group { name: Option<String>, body: Body, open: usize },
    /// `[..]`
    List(Vec<Node>),
    /// `{ key: value, .. }`
    Map(Vec<(Node, Node)>),
    /// A string, char, number or identifier, as written.
    Atom(Atom),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Fields(Vec<Field>),
    /// Positional items; `()` is an empty `Items`.
    Items(Vec<Node>),
}

/// One `key: value` entry of a struct.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub key: String,
    pub key_span: Span,
    pub value: Node,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Atom {
    /// A string literal (`"..."`, `r#"..."#`, `b"..."`) as written, quotes included.
    Str(String),
    Char(String),
    Number(String),
    Ident(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanError {
    pub offset: usize,
    pub message: String,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.offset)
    }
}

impl Node {
    /// The struct field `key`, looking through a variant name (`Soft(wire: ..)`) and a
    /// `Some(..)` wrapper.
    pub fn field(&self, key: &str) -> Option<&Field> {
        match &self.unwrap_some().kind {
            NodeKind::Group { body: Body::Fields(fields), .. } => fields.iter().find(|f| f.key == key),
            _ => None,
        }
    }

    /// The items of a list.
    pub fn items(&self) -> &[Node] {
        match &self.kind {
            NodeKind::List(items) => items,
            _ => &[],
        }
    }

    /// `Some(x)` as `x`; anything else as itself.
    pub fn unwrap_some(&self) -> &Node {
        match &self.kind {
            NodeKind::Group { name: Some(n), body: Body::Items(items), .. } if n == "Some" && items.len() == 1 => {
                items[0].unwrap_some()
            }
            _ => self,
        }
    }

    /// The decoded value of a string literal.
    pub fn as_str(&self) -> Option<String> {
        match &self.unwrap_some().kind {
            NodeKind::Atom(Atom::Str(text)) => ron::from_str::<String>(text).ok(),
            _ => None,
        }
    }

    /// The identifier this node is (`Inproc`, `true`, `None`).
    pub fn as_ident(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Atom(Atom::Ident(s)) => Some(s),
            _ => None,
        }
    }
}

/// Line and column (both from 1; columns in characters) of byte `offset` of `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = 1 + before.matches('\n').count();
    let col = 1 + before.chars().rev().take_while(|&c| c != '\n').count();
    (line, col)
}

/// The byte offset of `line`:`col` (as [`line_col`] counts them), clamped to the text.
pub fn offset_of(text: &str, line: usize, col: usize) -> usize {
    let mut off = 0;
    for _ in 1..line {
        match text[off..].find('\n') {
            Some(i) => off += i + 1,
            None => return text.len(),
        }
    }
    let rest = &text[off..];
    let end_of_line = rest.find('\n').unwrap_or(rest.len());
    let in_line: usize = rest[..end_of_line].chars().take(col.saturating_sub(1)).map(char::len_utf8).sum();
    off + in_line
}

/// The text of line `line` (from 1), without its newline.
pub fn line_text(text: &str, line: usize) -> &str {
    text.split('\n').nth(line.saturating_sub(1)).unwrap_or("").trim_end_matches('\r')
}

/// Bytes between two marks of [`SourceFile`]'s character count.
const CHAR_MARK: usize = 256;

/// A graph file's text, shared by every position that points into it, with an index of
/// where its lines start: the line and column of an offset cost a binary search (and at most
/// [`CHAR_MARK`] bytes of counting on a line that is not ASCII), whatever the file's size or
/// the length of its lines; the text around a position is cut out only when an error is
/// shown ([`SourceFile::snippet`]).
pub struct SourceFile {
    /// The file's name as errors give it.
    pub name: String,
    pub text: String,
    /// Byte offset of the start of each line (the first is 0).
    line_starts: Vec<usize>,
    /// Characters in `text[..k * CHAR_MARK]` (empty when the text is ASCII).
    char_marks: Vec<usize>,
}

impl SourceFile {
    pub fn new(name: &str, text: &str) -> SourceFile {
        let b = text.as_bytes();
        let mut line_starts = vec![0];
        line_starts.extend(b.iter().enumerate().filter(|(_, &c)| c == b'\n').map(|(i, _)| i + 1));
        let char_marks = if text.is_ascii() {
            Vec::new()
        } else {
            let mut marks = Vec::with_capacity(b.len() / CHAR_MARK + 1);
            let mut n = 0;
            for chunk in b.chunks(CHAR_MARK) {
                marks.push(n);
                n += chunk.iter().filter(|&&c| !is_continuation(c)).count();
            }
            marks.push(n);
            marks
        };
        SourceFile { name: name.to_string(), text: text.to_string(), line_starts, char_marks }
    }

    /// `offset` clamped to the text and moved back to a character boundary.
    fn clamp(&self, offset: usize) -> usize {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        offset
    }

    /// Characters in `text[..offset]`.
    fn chars_before(&self, offset: usize) -> usize {
        if self.char_marks.is_empty() {
            return offset;
        }
        let k = offset / CHAR_MARK;
        self.char_marks[k]
            + self.text.as_bytes()[k * CHAR_MARK..offset].iter().filter(|&&c| !is_continuation(c)).count()
    }

    /// Line and column (both from 1; columns in characters) of byte `offset`, as
    /// [`line_col`] counts them.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = self.clamp(offset);
        let line = self.line_starts.partition_point(|&s| s <= offset);
        let start = self.line_starts[line - 1];
        (line, 1 + self.chars_before(offset) - self.chars_before(start))
    }

    /// Byte range of line `line` (from 1), without its newline (and `\r`).
    fn line_range(&self, line: usize) -> (usize, usize) {
        let i = line.clamp(1, self.line_starts.len()) - 1;
        let start = self.line_starts[i];
        let end = self.line_starts.get(i + 1).map_or(self.text.len(), |&next| next - 1);
        let end = if end > start && self.text.as_bytes()[end - 1] == b'\r' { end - 1 } else { end };
        (start, end)
    }

    /// The line holding byte `offset`, cut to at most `max` characters around it (`...`
    /// marks the cuts), and the characters before `offset` in what is returned (where a
    /// caret goes). Costs `max` characters, not the line's length.
    pub fn snippet(&self, offset: usize, max: usize) -> (String, String) {
        let offset = self.clamp(offset);
        let (line, _) = self.line_col(offset);
        let (ls, le) = self.line_range(line);
        let offset = offset.clamp(ls, le);
        let t = &self.text;
        let back = |from: usize, n: usize| -> (usize, usize) {
            let (mut at, mut taken) = (from, 0);
            while at > ls && taken < n {
                at -= 1;
                while !t.is_char_boundary(at) {
                    at -= 1;
                }
                taken += 1;
            }
            (at, taken)
        };
        let forward = |from: usize, n: usize| -> (usize, usize) {
            let (mut at, mut taken) = (from, 0);
            while at < le && taken < n {
                at += t[at..].chars().next().map_or(1, char::len_utf8);
                taken += 1;
            }
            (at, taken)
        };
        let (mut start, before) = back(offset, max / 2);
        let (end, after) = forward(offset, max - before);
        if before + after < max {
            start = back(start, max - before - after).0;
        }
        let cut_start = start > ls;
        let cut_end = end < le;
        let mut shown = String::with_capacity(end - start + 6);
        let mut pad = String::new();
        if cut_start {
            shown.push_str("...");
            pad.push_str("   ");
        }
        shown.push_str(&t[start..end]);
        if cut_end {
            shown.push_str("...");
        }
        // Tabs are kept so the caret lines up under them.
        pad.extend(t[start..offset].chars().map(|c| if c == '\t' { '\t' } else { ' ' }));
        (shown, pad)
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

impl fmt::Debug for SourceFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SourceFile({}, {} bytes)", self.name, self.text.len())
    }
}

impl PartialEq for SourceFile {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other) || (self.name == other.name && self.text == other.text)
    }
}

impl Eq for SourceFile {}

/// Scans a whole RON document (attributes like `#![enable(..)]`, one value, trailing
/// whitespace and comments).
pub fn parse(text: &str) -> Result<Node, ScanError> {
    let mut s = Scanner { b: text.as_bytes(), text, pos: 0, depth: 0 };
    s.skip_ws()?;
    while s.peek() == Some(b'#') {
        s.skip_attribute()?;
        s.skip_ws()?;
    }
    let v = s.value()?;
    s.skip_ws()?;
    if s.pos < s.b.len() {
        return Err(s.err("unexpected text after the value"));
    }
    Ok(v)
}

/// Nesting deeper than this is refused rather than recursed into (no stack overflow).
const MAX_DEPTH: usize = 128;

struct Scanner<'a> {
    b: &'a [u8],
    text: &'a str,
    pos: usize,
    depth: usize,
}

impl Scanner<'_> {
    fn err(&self, message: &str) -> ScanError {
        ScanError { offset: self.pos, message: message.into() }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn peek_at(&self, n: usize) -> Option<u8> {
        self.b.get(self.pos + n).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), ScanError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected `{}`", c as char)))
        }
    }

    /// Whitespace, `// ..` and (nested) `/* .. */` comments.
    fn skip_ws(&mut self) -> Result<(), ScanError> {
        loop {
            match self.peek() {
                Some(c) if c.is_ascii_whitespace() => self.pos += 1,
                Some(b'/') if self.peek_at(1) == Some(b'/') => {
                    while let Some(c) = self.peek() {
                        if c == b'\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                Some(b'/') if self.peek_at(1) == Some(b'*') => {
                    let start = self.pos;
                    self.pos += 2;
                    let mut depth = 1;
                    while depth > 0 {
                        match (self.peek(), self.peek_at(1)) {
                            (Some(b'*'), Some(b'/')) => {
                                depth -= 1;
                                self.pos += 2;
                            }
                            (Some(b'/'), Some(b'*')) => {
                                depth += 1;
                                self.pos += 2;
                            }
                            (Some(_), _) => self.pos += 1,
                            (None, _) => {
                                return Err(ScanError { offset: start, message: "unterminated block comment".into() })
                            }
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    /// `#![enable(..)]`: skipped up to its closing `]`.
    fn skip_attribute(&mut self) -> Result<(), ScanError> {
        while let Some(c) = self.peek() {
            self.pos += 1;
            if c == b']' {
                return Ok(());
            }
        }
        Err(self.err("unterminated attribute"))
    }

    fn value(&mut self) -> Result<Node, ScanError> {
        self.skip_ws()?;
        let start = self.pos;
        let Some(c) = self.peek() else { return Err(self.err("expected a value")) };
        match c {
            b'(' => self.group(start, None),
            b'[' => {
                self.enter()?;
                self.pos += 1;
                let items = self.sequence(b']')?;
                self.depth -= 1;
                Ok(Node { span: Span { start, end: self.pos }, kind: NodeKind::List(items) })
            }
            b'{' => {
                self.enter()?;
                self.pos += 1;
                let entries = self.map()?;
                self.depth -= 1;
                Ok(Node { span: Span { start, end: self.pos }, kind: NodeKind::Map(entries) })
            }
            b'"' => {
                self.string()?;
                Ok(self.atom(start, Atom::Str))
            }
            b'b' if self.peek_at(1) == Some(b'"') => {
                self.pos += 1;
                self.string()?;
                Ok(self.atom(start, Atom::Str))
            }
            b'r' | b'b' if self.is_raw_string() => {
                self.raw_string()?;
                Ok(self.atom(start, Atom::Str))
            }
            b'\'' => {
                self.char_literal()?;
                Ok(self.atom(start, Atom::Char))
            }
            b'0'..=b'9' | b'+' | b'-' | b'.' => {
                self.number();
                Ok(self.atom(start, Atom::Number))
            }
            c if c == b'_' || c.is_ascii_alphabetic() || c >= 0x80 => {
                let name = self.ident()?;
                let after = self.pos;
                self.skip_ws()?;
                if self.peek() == Some(b'(') {
                    self.group(start, Some(name))
                } else {
                    self.pos = after;
                    Ok(Node { span: Span { start, end: after }, kind: NodeKind::Atom(Atom::Ident(name)) })
                }
            }
            _ => Err(self.err("expected a value")),
        }
    }

    fn enter(&mut self) -> Result<(), ScanError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        Ok(())
    }

    fn atom(&self, start: usize, make: fn(String) -> Atom) -> Node {
        Node { span: Span { start, end: self.pos }, kind: NodeKind::Atom(make(self.text[start..self.pos].to_string())) }
    }

    /// `(` at `self.pos`: a struct if it starts with `ident :`, a tuple otherwise.
    fn group(&mut self, start: usize, name: Option<String>) -> Result<Node, ScanError> {
        self.enter()?;
        let open = self.pos;
        self.expect(b'(')?;
        self.skip_ws()?;
        let body = if self.starts_field()? { Body::Fields(self.fields()?) } else { Body::Items(self.sequence(b')')?) };
        self.depth -= 1;
        Ok(Node { span: Span { start, end: self.pos }, kind: NodeKind::Group { name, body, open } })
    }

    /// Whether the text at `self.pos` is `ident :` (a struct field), without moving.
    fn starts_field(&mut self) -> Result<bool, ScanError> {
        let save = self.pos;
        let is = match self.peek() {
            Some(c) if c == b'_' || c.is_ascii_alphabetic() || c >= 0x80 => {
                if self.is_raw_string() {
                    false
                } else {
                    self.ident()?;
                    self.skip_ws()?;
                    self.peek() == Some(b':') && self.peek_at(1) != Some(b':')
                }
            }
            _ => false,
        };
        self.pos = save;
        Ok(is)
    }

    fn fields(&mut self) -> Result<Vec<Field>, ScanError> {
        let mut fields = Vec::new();
        loop {
            self.skip_ws()?;
            if self.peek() == Some(b')') {
                self.pos += 1;
                return Ok(fields);
            }
            let kstart = self.pos;
            let key = self.ident()?;
            let key_span = Span { start: kstart, end: self.pos };
            self.skip_ws()?;
            self.expect(b':')?;
            let value = self.value()?;
            fields.push(Field { key, key_span, value });
            self.skip_ws()?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b')') => {}
                _ => return Err(self.err("expected `,` or `)`")),
            }
        }
    }

    fn sequence(&mut self, close: u8) -> Result<Vec<Node>, ScanError> {
        let mut items = Vec::new();
        loop {
            self.skip_ws()?;
            if self.peek() == Some(close) {
                self.pos += 1;
                return Ok(items);
            }
            items.push(self.value()?);
            self.skip_ws()?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(c) if c == close => {}
                _ => return Err(self.err(&format!("expected `,` or `{}`", close as char))),
            }
        }
    }

    fn map(&mut self) -> Result<Vec<(Node, Node)>, ScanError> {
        let mut entries = Vec::new();
        loop {
            self.skip_ws()?;
            if self.peek() == Some(b'}') {
                self.pos += 1;
                return Ok(entries);
            }
            let k = self.value()?;
            self.skip_ws()?;
            self.expect(b':')?;
            let v = self.value()?;
            entries.push((k, v));
            self.skip_ws()?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err(self.err("expected `,` or `}`")),
            }
        }
    }

    /// An identifier, or a raw identifier `r#name`.
    fn ident(&mut self) -> Result<String, ScanError> {
        let start = self.pos;
        if self.peek() == Some(b'r') && self.peek_at(1) == Some(b'#') {
            self.pos += 2;
        }
        let body = self.pos;
        while let Some(c) = self.peek() {
            if c == b'_' || c.is_ascii_alphanumeric() || c >= 0x80 {
                self.pos += 1;
            } else {
                break;
            }
        }
        // Never stop inside a UTF-8 sequence: bytes >= 0x80 were taken whole above.
        if self.pos == body {
            self.pos = start;
            return Err(self.err("expected an identifier"));
        }
        Ok(self.text.get(body..self.pos).unwrap_or("").to_string())
    }

    fn string(&mut self) -> Result<(), ScanError> {
        let start = self.pos;
        self.expect(b'"')?;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                b'\\' => self.pos += 1,
                b'"' => return Ok(()),
                _ => {}
            }
        }
        Err(ScanError { offset: start, message: "unterminated string".into() })
    }

    fn is_raw_string(&self) -> bool {
        let mut i = self.pos;
        if self.b.get(i) == Some(&b'b') {
            i += 1;
        }
        if self.b.get(i) != Some(&b'r') {
            return false;
        }
        i += 1;
        while self.b.get(i) == Some(&b'#') {
            i += 1;
        }
        self.b.get(i) == Some(&b'"')
    }

    fn raw_string(&mut self) -> Result<(), ScanError> {
        let start = self.pos;
        if self.peek() == Some(b'b') {
            self.pos += 1;
        }
        self.pos += 1; // r
        let mut hashes = 0;
        while self.peek() == Some(b'#') {
            hashes += 1;
            self.pos += 1;
        }
        self.expect(b'"')?;
        while let Some(c) = self.peek() {
            self.pos += 1;
            if c == b'"' && (0..hashes).all(|k| self.peek_at(k) == Some(b'#')) {
                self.pos += hashes;
                return Ok(());
            }
        }
        Err(ScanError { offset: start, message: "unterminated raw string".into() })
    }

    fn char_literal(&mut self) -> Result<(), ScanError> {
        let start = self.pos;
        self.pos += 1;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                b'\\' => self.pos += 1,
                b'\'' => return Ok(()),
                _ => {}
            }
        }
        Err(ScanError { offset: start, message: "unterminated char".into() })
    }

    /// Digits, signs, `.`, `_`, exponents, suffixes (`1_000`, `-1.5e-3`, `0x1f`, `3u8`).
    fn number(&mut self) {
        let start = self.pos;
        let mut prev = 0u8;
        while let Some(c) = self.peek() {
            let sign = c == b'+' || c == b'-';
            let hex =
                self.text.get(start..self.pos).is_some_and(|t| t.trim_start_matches(['+', '-']).starts_with("0x"));
            let ok = c.is_ascii_alphanumeric()
                || c == b'_'
                || c == b'.'
                || (sign && self.pos == start)
                || (sign && matches!(prev, b'e' | b'E') && !hex);
            if !ok {
                break;
            }
            self.pos += 1;
            prev = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r##"#![enable(implicit_some)]
// a comment
Graph(
    name: "x", /* block /* nested */ */
    nic: Soft(wire: Udp(bind: "1.2.3.4:5")),
    run: (stop: Count(1_000), rate: -1.5e-3, c: 'x', raw: r#"a"b"#),
    operators: [
        (name: "a", kind: "K", params: (p: Some(3))),
        (name: "b\"q", kind: "L"),
    ],
    empty: (),
    tuple: (1, 2,),
    map: { "k": [1, 2] },
)
"##;

    #[test]
    fn finds_fields_items_and_positions() {
        let n = parse(DOC).unwrap();
        assert!(matches!(&n.kind, NodeKind::Group { name: Some(g), .. } if g == "Graph"));
        let ops = &n.field("operators").unwrap().value;
        assert_eq!(ops.items().len(), 2);
        let b = &ops.items()[1];
        assert_eq!(line_col(DOC, b.span.start), (9, 9));
        assert_eq!(b.field("name").unwrap().value.as_str().as_deref(), Some("b\"q"));
        let p = ops.items()[0].field("params").unwrap().value.field("p").unwrap();
        assert_eq!(p.value.unwrap_some().kind, NodeKind::Atom(Atom::Number("3".into())));
        let wire = &n.field("nic").unwrap().value.field("wire").unwrap().value;
        assert_eq!(wire.field("bind").unwrap().value.as_str().as_deref(), Some("1.2.3.4:5"));
        let run = &n.field("run").unwrap().value;
        assert_eq!(run.field("rate").unwrap().value.kind, NodeKind::Atom(Atom::Number("-1.5e-3".into())));
        assert_eq!(run.field("raw").unwrap().value.kind, NodeKind::Atom(Atom::Str("r#\"a\"b\"#".into())));
        assert!(
            matches!(n.field("empty").unwrap().value.kind, NodeKind::Group { body: Body::Items(ref v), .. } if v.is_empty())
        );
    }

    #[test]
    fn line_col_and_offset_agree_and_count_characters() {
        let t = "ab\nçd(\n  x";
        for off in [0, 1, 3, 5, 6, 8, 9, t.len()] {
            let (l, c) = line_col(t, off);
            assert_eq!(offset_of(t, l, c), off, "offset {off} -> {l}:{c}");
        }
        assert_eq!(line_col(t, 6), (2, 3)); // `(` after the two-byte ç: columns count characters
        assert_eq!(line_text(t, 3), "  x");
    }

    #[test]
    fn the_line_index_agrees_with_line_col() {
        // Lines longer than a mark, characters of 1 to 4 bytes across marks, `\r\n`, an empty
        // last line.
        let long: String = (0..3000).map(|i| ['a', 'ç', '€', '😀', '\t'][i % 5]).collect();
        let texts = [
            String::new(),
            "x".into(),
            "ab\nçd(\n  x".into(),
            format!("{long}\r\n{long}\n\n{long}\n"),
            "a".repeat(5000),
        ];
        for t in &texts {
            let f = SourceFile::new("t", t);
            for off in (0..=t.len()).chain([t.len() + 7]) {
                assert_eq!(f.line_col(off), line_col(t, off), "offset {off} of a {}-byte text", t.len());
            }
        }
    }

    #[test]
    fn snippets_are_the_line_around_the_offset() {
        let f = SourceFile::new("t", "first\r\n\tsecond line\nlast");
        assert_eq!(f.snippet(8, 120), ("\tsecond line".to_string(), "\t".to_string()));
        assert_eq!(f.snippet(5, 120), ("first".to_string(), "     ".to_string()));
        assert_eq!(f.snippet(100, 120), ("last".to_string(), "    ".to_string()));
        let long = format!("{}X{}", "é".repeat(1000), "b".repeat(1000));
        let f = SourceFile::new("t", &long);
        let (shown, pad) = f.snippet(2000, 20);
        assert_eq!(shown, format!("...{}X{}...", "é".repeat(10), "b".repeat(9)));
        assert_eq!(pad.len(), 13);
        let (shown, pad) = f.snippet(long.len(), 20);
        assert_eq!((shown, pad.len()), (format!("...{}", "b".repeat(20)), 23));
    }

    #[test]
    fn bad_text_is_an_error_not_a_panic() {
        for bad in ["", "(", "(a: ", "[1, 2", "\"abc", "/* x", "(a: 1 b: 2)", "(1) 2", "r#\"x\"", "'a", "é(", "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("] {
            let _ = parse(bad);
        }
        assert!(parse("(a: 1 b: 2)").is_err());
        assert!(parse(&"[".repeat(10_000)).is_err());
    }
}
