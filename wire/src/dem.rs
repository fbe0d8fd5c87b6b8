//! Loader for stim's detector error model (DEM) text format (docs/qec.md, "Inputs and outputs").
//!
//! Accepted: `error(p) targets` with `D#`, `L#` and `^` (the separator of a decomposed
//! error), `detector(coords) D#`, `logical_observable L#`, `shift_detectors(coords) N`,
//! `repeat N { ... }` (nested), `#` comments, blank lines, instruction tags
//! (`error[tag](p)`, ignored) and any letter case in instruction names, as stim does.
//!
//! Guarantees:
//! - `repeat` blocks are flattened and `shift_detectors` applied, exactly as stim's
//!   `DetectorErrorModel.flattened()` does: the result lists every error mechanism with
//!   absolute detector ids, in file order (the order matters for merging parallel edges,
//!   see rocelink-operator's `qec::graph`).
//! - A malformed file never panics: [`DemError`] names the 1-based line and the reason of
//!   the first error in the order the instructions run (file order; a `repeat` block's body
//!   at its closing brace).
//! - One pass: top-level instructions are flattened as they are read, so a flat DEM (stim's
//!   usual output) is never held twice.
//! - The expansion is bounded ([`MAX_FLAT_STEPS`]), so `repeat 1000000000 { ... }` is an
//!   error, not a hang, and so is the nesting ([`MAX_REPEAT_DEPTH`]), so a file of 100,000
//!   nested `repeat`s is an error, not a stack overflow.
//!
//! Shared by the decoder (rocelink-operator's `qec`) and the peer's syndrome replay
//! (fpga-sim), which reads the shot layout from the same parse.
//! - `num_detectors` and `num_observables` follow stim's `count_detectors` and
//!   `count_observables` (1 + the largest id mentioned anywhere, declarations included);
//!   this is the bit count of one shot in b8 files.
//!
//! Deliberate limits: observables are `u64` masks, so `L64` and above are refused;
//! probabilities must lie in [0, 1].

use thiserror::Error;

/// Most flattened steps (instructions executed plus loop iterations) a DEM may expand to:
/// bounds time and memory (~100 bytes per flattened error). A d=25, 25-round surface code
/// DEM has about half a million errors.
pub const MAX_FLAT_STEPS: u64 = 4_000_000;

/// How deep `repeat` blocks may nest (stim's own files nest one or two deep).
pub const MAX_REPEAT_DEPTH: usize = 64;

/// Detectors a shot may have (absolute ids below this): bounds what a hostile file can make
/// the loader allocate (a d=25, 25-round surface code has about 16 thousand).
pub const MAX_DETECTORS: usize = 1 << 20;

/// Observables are carried as `u64` masks.
pub const MAX_OBSERVABLES: usize = 64;

/// One `^`-separated part of an error: the detectors it flips and the observables it flips.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    /// Absolute detector ids, in the order written; a detector written twice cancels
    /// (detectors are parities), so each id appears at most once.
    pub detectors: Vec<u32>,
    /// Bit k set: observable `L k` flips.
    pub observables: u64,
}

/// One `error(p)` instruction after flattening.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorMechanism {
    /// Probability of the error.
    pub probability: f64,
    /// The `^`-separated components (one when the error is not decomposed).
    pub components: Vec<Component>,
    /// 1-based line of the instruction in the file (inside a `repeat`, the body's line).
    pub line: usize,
}

/// A flattened detector error model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DetectorErrorModel {
    /// Detectors in one shot: 1 + the largest detector id mentioned.
    pub num_detectors: usize,
    /// Observables: 1 + the largest observable id mentioned.
    pub num_observables: usize,
    /// Every error mechanism, in file order.
    pub errors: Vec<ErrorMechanism>,
    /// Coordinates of declared detectors (shifts applied); empty where none were given.
    pub detector_coords: Vec<Vec<f64>>,
}

/// What is wrong with a DEM, and where.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("DEM line {line}: {kind}")]
pub struct DemError {
    /// 1-based line number.
    pub line: usize,
    /// The reason.
    pub kind: DemErrorKind,
}

/// The reason a DEM line was refused.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum DemErrorKind {
    /// Not one of the instructions listed in the module docs.
    #[error("unknown instruction `{0}`")]
    UnknownInstruction(String),
    /// Parenthesised arguments that do not parse.
    #[error("bad arguments: {0}")]
    BadArguments(String),
    /// A target that is not `D#`, `L#` or `^`, or not allowed for this instruction.
    #[error("bad target `{target}` for `{instruction}`")]
    BadTarget {
        /// The instruction.
        instruction: &'static str,
        /// The target as written.
        target: String,
    },
    /// A probability outside [0, 1].
    #[error("error probability {0} is not in [0, 1]")]
    BadProbability(f64),
    /// `^` at the start or end of an error, or two in a row.
    #[error("empty component (misplaced `^`)")]
    EmptyComponent,
    /// An observable index of 64 or more.
    #[error("observable L{0} is beyond L63 (observables are 64-bit masks)")]
    TooManyObservables(u64),
    /// A detector id of [`MAX_DETECTORS`] or more after shifting.
    #[error("detector id {0} is beyond the {MAX_DETECTORS} detectors a shot may have")]
    DetectorTooLarge(u64),
    /// `repeat` without a count, with a zero count, or without `{`.
    #[error("bad repeat: {0}")]
    BadRepeat(String),
    /// A `}` with no open `repeat`.
    #[error("`}}` without an open `repeat` block")]
    UnbalancedClose,
    /// End of file inside a `repeat` block (the line is the `repeat`'s).
    #[error("`repeat` block is never closed")]
    UnclosedRepeat,
    /// `repeat` blocks nested deeper than [`MAX_REPEAT_DEPTH`].
    #[error("`repeat` blocks nest deeper than {MAX_REPEAT_DEPTH}")]
    TooDeep,
    /// The expansion exceeds [`MAX_FLAT_STEPS`].
    #[error("repeat blocks expand beyond {MAX_FLAT_STEPS} steps")]
    TooLarge,
}

impl DemErrorKind {
    fn at(self, line: usize) -> DemError {
        DemError { line, kind: self }
    }
}

/// A parsed instruction inside a `repeat` block, kept to run once per iteration (top-level
/// instructions run as they are parsed).
#[derive(Debug)]
enum Instr {
    Error { line: usize, p: f64, targets: RawTargets },
    Detector { line: usize, coords: Vec<f64>, ids: Vec<u64> },
    Observable { line: usize, ids: Vec<u64> },
    Shift { line: usize, coords: Vec<f64>, by: u64 },
    Repeat { line: usize, count: u64, body: Vec<Instr> },
}

/// An error's targets as written: the detector ids of all its components in one list, and
/// each component's end in it with its observables.
#[derive(Debug, Clone, Default)]
struct RawTargets {
    detectors: Vec<u64>,
    components: Vec<(usize, u64)>,
}

impl DetectorErrorModel {
    /// Parses and flattens DEM text.
    pub fn parse(text: &str) -> Result<Self, DemError> {
        let mut f = Flattener::default();
        parse_program(text, &mut f)?;
        let mut detector_coords = f.coords;
        detector_coords.resize(f.num_detectors as usize, Vec::new());
        Ok(DetectorErrorModel {
            num_detectors: f.num_detectors as usize,
            num_observables: f.num_observables as usize,
            errors: f.errors,
            detector_coords,
        })
    }

    /// Detectors per time step, when every detector has coordinates and the last coordinate
    /// (stim's time) never decreases along detector ids, as in stim's generated circuits:
    /// e.g. `[12, 24, 24, 24, 24, 12]` for d=5 memory-Z. The sums are the bit offsets of
    /// each round in a shot (what a replay sends per `enqueue_syndromes`). `None` otherwise.
    pub fn detectors_per_round(&self) -> Option<Vec<usize>> {
        let mut rounds: Vec<usize> = Vec::new();
        let mut last_t = f64::NEG_INFINITY;
        for c in &self.detector_coords {
            let t = *c.last()?;
            if t < last_t {
                return None;
            }
            if t > last_t || rounds.is_empty() {
                rounds.push(0);
                last_t = t;
            }
            if let Some(r) = rounds.last_mut() {
                *r += 1;
            }
        }
        Some(rounds)
    }
}

/// Splits a line into (instruction name, optional args text, rest).
fn split_instruction(s: &str) -> Result<(&str, Option<&str>, &str), DemErrorKind> {
    let name_end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
    let name = &s[..name_end];
    let mut rest = &s[name_end..];
    if name.is_empty() {
        return Err(DemErrorKind::UnknownInstruction(s.to_string()));
    }
    // stim 1.15+ tags: `error[tag](p)`; decoders ignore them.
    if let Some(r) = rest.strip_prefix('[') {
        let close = r.find(']').ok_or_else(|| DemErrorKind::BadArguments("unclosed tag `[`".into()))?;
        rest = &r[close + 1..];
    }
    let mut args = None;
    let trimmed = rest.trim_start();
    if let Some(r) = trimmed.strip_prefix('(') {
        let close = r.find(')').ok_or_else(|| DemErrorKind::BadArguments("unclosed `(`".into()))?;
        args = Some(&r[..close]);
        rest = &r[close + 1..];
    } else if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return Err(DemErrorKind::UnknownInstruction(s.to_string()));
    }
    Ok((name, args, rest))
}

fn parse_args(args: Option<&str>) -> Result<Vec<f64>, DemErrorKind> {
    let mut out = Vec::new();
    parse_args_into(args, &mut out)?;
    Ok(out)
}

/// [`parse_args`] into a reused buffer (cleared first).
fn parse_args_into(args: Option<&str>, out: &mut Vec<f64>) -> Result<(), DemErrorKind> {
    out.clear();
    let Some(a) = args else { return Ok(()) };
    if a.trim().is_empty() {
        return Ok(());
    }
    for x in a.split(',') {
        let x = x.trim();
        let v = x.parse::<f64>().ok().filter(|v| v.is_finite());
        out.push(v.ok_or_else(|| DemErrorKind::BadArguments(format!("`{x}` is not a number")))?);
    }
    Ok(())
}

/// An error's targets (`D#`, `L#`, `^`) into `raw` (cleared first).
fn parse_error_targets(targets: &[&str], raw: &mut RawTargets) -> Result<(), DemErrorKind> {
    raw.detectors.clear();
    raw.components.clear();
    let mut observables = 0u64;
    let mut empty = true;
    for t in targets {
        if *t == "^" {
            if empty {
                return Err(DemErrorKind::EmptyComponent);
            }
            raw.components.push((raw.detectors.len(), observables));
            observables = 0;
            empty = true;
        } else if let Some(d) = parse_id(t, 'D') {
            raw.detectors.push(d);
            empty = false;
        } else if let Some(l) = parse_id(t, 'L') {
            if l >= MAX_OBSERVABLES as u64 {
                return Err(DemErrorKind::TooManyObservables(l));
            }
            observables ^= 1 << l;
            empty = false;
        } else {
            return Err(bad_target("error", t));
        }
    }
    if empty {
        if !raw.components.is_empty() {
            return Err(DemErrorKind::EmptyComponent);
        }
    } else {
        raw.components.push((raw.detectors.len(), observables));
    }
    Ok(())
}

fn parse_id(target: &str, prefix: char) -> Option<u64> {
    let digits = target.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn bad_target(instruction: &'static str, target: &str) -> DemErrorKind {
    DemErrorKind::BadTarget { instruction, target: target.to_string() }
}

/// Parses `text` line by line, running each top-level instruction as it comes (a `repeat`
/// block at its closing brace) and keeping only the open blocks' bodies: a flat DEM is never
/// held twice, and an error line allocates only what the flattened model keeps.
fn parse_program(text: &str, f: &mut Flattener) -> Result<(), DemError> {
    // The open blocks: (repeat line, count, body so far).
    let mut stack: Vec<(usize, u64, Vec<Instr>)> = Vec::new();
    // Buffers reused from line to line.
    let mut targets: Vec<&str> = Vec::new();
    let mut args: Vec<f64> = Vec::new();
    let mut raw = RawTargets::default();
    // Lines are searched for a comment only in a file that has one (one scan of the text).
    let comments = text.contains('#');
    for (idx, line_text) in text.lines().enumerate() {
        let line = idx + 1;
        let code = if comments { line_text.split('#').next().unwrap_or("") } else { line_text };
        let s = code.trim();
        if s.is_empty() {
            continue;
        }
        if s == "}" {
            let Some((rline, count, body)) = stack.pop() else {
                return Err(DemErrorKind::UnbalancedClose.at(line));
            };
            let instr = Instr::Repeat { line: rline, count, body };
            match stack.last_mut() {
                Some(top) => top.2.push(instr),
                None => f.run_one(&instr)?,
            }
            continue;
        }
        let (name, arg_text, rest) = split_instruction(s).map_err(|k| k.at(line))?;
        targets.clear();
        targets.extend(rest.split_whitespace());
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        let instr = if is("error") {
            parse_args_into(arg_text, &mut args).map_err(|k| k.at(line))?;
            let [p] = args[..] else {
                return Err(DemErrorKind::BadArguments("`error` takes exactly one probability".into()).at(line));
            };
            if !(0.0..=1.0).contains(&p) {
                return Err(DemErrorKind::BadProbability(p).at(line));
            }
            parse_error_targets(&targets, &mut raw).map_err(|k| k.at(line))?;
            if stack.is_empty() {
                f.error(line, p, &raw)?;
                continue;
            }
            Instr::Error { line, p, targets: raw.clone() }
        } else if is("detector") {
            let coords = parse_args(arg_text).map_err(|k| k.at(line))?;
            let ids = targets
                .iter()
                .map(|t| parse_id(t, 'D').ok_or_else(|| bad_target("detector", t).at(line)))
                .collect::<Result<Vec<_>, _>>()?;
            Instr::Detector { line, coords, ids }
        } else if is("logical_observable") {
            if arg_text.is_some() {
                return Err(DemErrorKind::BadArguments("`logical_observable` takes no arguments".into()).at(line));
            }
            let ids = targets
                .iter()
                .map(|t| match parse_id(t, 'L') {
                    Some(l) if l >= MAX_OBSERVABLES as u64 => Err(DemErrorKind::TooManyObservables(l).at(line)),
                    Some(l) => Ok(l),
                    None => Err(bad_target("logical_observable", t).at(line)),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Instr::Observable { line, ids }
        } else if is("shift_detectors") {
            let coords = parse_args(arg_text).map_err(|k| k.at(line))?;
            let by = match targets[..] {
                [] => 0,
                [t] => t.parse::<u64>().map_err(|_| bad_target("shift_detectors", t).at(line))?,
                _ => return Err(bad_target("shift_detectors", &targets.join(" ")).at(line)),
            };
            Instr::Shift { line, coords, by }
        } else if is("repeat") {
            if arg_text.is_some() {
                return Err(DemErrorKind::BadRepeat("takes no arguments".into()).at(line));
            }
            // `repeat N {` (stim writes the brace on the same line).
            let (count_text, brace) = match targets[..] {
                [c, "{"] => (c, true),
                [c] if c.ends_with('{') => (c.trim_end_matches('{'), true),
                [c] => (c, false),
                _ => ("", false),
            };
            if !brace {
                return Err(DemErrorKind::BadRepeat("expected `repeat N {`".into()).at(line));
            }
            let count = count_text
                .parse::<u64>()
                .map_err(|_| DemErrorKind::BadRepeat(format!("`{count_text}` is not a count")).at(line))?;
            if count == 0 {
                return Err(DemErrorKind::BadRepeat("count must be at least 1".into()).at(line));
            }
            // (the flattening recurses once per level)
            if stack.len() >= MAX_REPEAT_DEPTH {
                return Err(DemErrorKind::TooDeep.at(line));
            }
            stack.push((line, count, Vec::new()));
            continue;
        } else {
            return Err(DemErrorKind::UnknownInstruction(name.to_string()).at(line));
        };
        match stack.last_mut() {
            Some(top) => top.2.push(instr),
            None => f.run_one(&instr)?,
        }
    }
    match stack.last() {
        Some(open) => Err(DemErrorKind::UnclosedRepeat.at(open.0)),
        None => Ok(()),
    }
}

#[derive(Default)]
struct Flattener {
    offset: u64,
    coord_shift: Vec<f64>,
    num_detectors: u64,
    num_observables: u64,
    errors: Vec<ErrorMechanism>,
    coords: Vec<Vec<f64>>,
    steps: u64,
}

impl Flattener {
    fn step(&mut self, line: usize) -> Result<(), DemError> {
        self.steps += 1;
        if self.steps > MAX_FLAT_STEPS {
            return Err(DemErrorKind::TooLarge.at(line));
        }
        Ok(())
    }

    fn detector(&mut self, id: u64, line: usize) -> Result<u32, DemError> {
        let abs = id
            .checked_add(self.offset)
            .filter(|&a| a < MAX_DETECTORS as u64)
            .ok_or_else(|| DemErrorKind::DetectorTooLarge(id.saturating_add(self.offset)).at(line))?;
        self.num_detectors = self.num_detectors.max(abs + 1);
        Ok(abs as u32)
    }

    /// One flattened error: its components' detectors shifted, a detector written twice in
    /// a component cancelled (detectors are parities).
    fn error(&mut self, line: usize, p: f64, raw: &RawTargets) -> Result<(), DemError> {
        self.step(line)?;
        let mut out = Vec::with_capacity(raw.components.len());
        let mut start = 0;
        for &(end, observables) in &raw.components {
            let mut detectors: Vec<u32> = Vec::with_capacity(end - start);
            for &d in &raw.detectors[start..end] {
                let abs = self.detector(d, line)?;
                if let Some(i) = detectors.iter().position(|&x| x == abs) {
                    detectors.remove(i);
                } else {
                    detectors.push(abs);
                }
            }
            start = end;
            if observables != 0 {
                let top = 64 - u64::from(observables.leading_zeros());
                self.num_observables = self.num_observables.max(top);
            }
            out.push(Component { detectors, observables });
        }
        self.errors.push(ErrorMechanism { probability: p, components: out, line });
        Ok(())
    }

    fn run_one(&mut self, instr: &Instr) -> Result<(), DemError> {
        match instr {
            Instr::Error { line, p, targets } => self.error(*line, *p, targets)?,
            Instr::Detector { line, coords, ids } => {
                self.step(*line)?;
                for &id in ids {
                    let abs = self.detector(id, *line)? as usize;
                    if self.coords.len() <= abs {
                        self.coords.resize(abs + 1, Vec::new());
                    }
                    self.coords[abs] = coords
                        .iter()
                        .enumerate()
                        .map(|(k, c)| c + self.coord_shift.get(k).copied().unwrap_or(0.0))
                        .collect();
                }
            }
            Instr::Observable { line, ids } => {
                self.step(*line)?;
                for &l in ids {
                    self.num_observables = self.num_observables.max(l + 1);
                }
            }
            Instr::Shift { line, coords, by } => {
                self.step(*line)?;
                self.offset = self
                    .offset
                    .checked_add(*by)
                    .filter(|&o| o < u32::MAX as u64)
                    .ok_or_else(|| DemErrorKind::DetectorTooLarge(*by).at(*line))?;
                if self.coord_shift.len() < coords.len() {
                    self.coord_shift.resize(coords.len(), 0.0);
                }
                for (s, c) in self.coord_shift.iter_mut().zip(coords) {
                    *s += c;
                }
            }
            Instr::Repeat { line, count, body } => {
                for _ in 0..*count {
                    self.step(*line)?;
                    for instr in body {
                        self.run_one(instr)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> DemError {
        DetectorErrorModel::parse(text).unwrap_err()
    }

    #[test]
    fn parses_errors_detectors_observables() {
        let dem = DetectorErrorModel::parse(
            "# a comment\n\
             error(0.1) D0 D1 ^ D2 L0  # trailing comment\n\
             ERROR[tag](0.2) D3 L1\n\
             detector(1, 2, 0) D0\n\
             detector D5\n\
             logical_observable L2\n",
        )
        .unwrap();
        assert_eq!(dem.num_detectors, 6);
        assert_eq!(dem.num_observables, 3);
        assert_eq!(dem.errors.len(), 2);
        let e = &dem.errors[0];
        assert_eq!((e.probability, e.line), (0.1, 2));
        assert_eq!(e.components[0].detectors, [0, 1]);
        assert_eq!(e.components[1].detectors, [2]);
        assert_eq!(e.components[1].observables, 1);
        assert_eq!(dem.errors[1].components[0].observables, 0b10);
        assert_eq!(dem.detector_coords[0], [1.0, 2.0, 0.0]);
        assert!(dem.detector_coords[5].is_empty());
    }

    #[test]
    fn repeat_and_shift_flatten_like_stim() {
        let text = "error(0.1) D0\n\
                    detector(0, 0) D0\n\
                    repeat 3 {\n\
                        error(0.2) D0 D1\n\
                        shift_detectors(0, 1) 1\n\
                        detector(0, 0) D0\n\
                    }\n\
                    error(0.3) D0 L0\n";
        let dem = DetectorErrorModel::parse(text).unwrap();
        let flat: Vec<(f64, Vec<u32>)> =
            dem.errors.iter().map(|e| (e.probability, e.components[0].detectors.clone())).collect();
        assert_eq!(flat, [(0.1, vec![0]), (0.2, vec![0, 1]), (0.2, vec![1, 2]), (0.2, vec![2, 3]), (0.3, vec![3]),]);
        assert_eq!(dem.num_detectors, 4);
        assert_eq!(dem.detector_coords[3], [0.0, 3.0]);
        assert_eq!(dem.errors[4].line, 8);
        assert_eq!(dem.detectors_per_round(), Some(vec![1, 1, 1, 1]));
    }

    #[test]
    fn nested_repeats() {
        let dem = DetectorErrorModel::parse("repeat 2 {\n repeat 3 {\n  error(0.01) D0\n  shift_detectors 1\n }\n}\n")
            .unwrap();
        assert_eq!(dem.errors.len(), 6);
        assert_eq!(dem.num_detectors, 6);
    }

    #[test]
    fn duplicate_detectors_cancel() {
        let dem = DetectorErrorModel::parse("error(0.1) D0 D1 D0").unwrap();
        assert_eq!(dem.errors[0].components[0].detectors, [1]);
    }

    #[test]
    fn malformed_lines_name_line_and_reason() {
        let e = err("error(0.1) D0\nerrror(0.1) D1\n");
        assert_eq!(e.line, 2);
        assert_eq!(e.kind, DemErrorKind::UnknownInstruction("errror".into()));
        assert_eq!(e.to_string(), "DEM line 2: unknown instruction `errror`");
        assert_eq!(err("error(1.5) D0").kind, DemErrorKind::BadProbability(1.5));
        assert!(matches!(err("error(x) D0").kind, DemErrorKind::BadArguments(_)));
        assert!(matches!(err("error(0.1, 0.2) D0").kind, DemErrorKind::BadArguments(_)));
        assert!(matches!(err("error D0").kind, DemErrorKind::BadArguments(_)));
        assert!(matches!(err("error(0.1 D0").kind, DemErrorKind::BadArguments(_)));
        assert!(matches!(err("error(0.1) D0 X3").kind, DemErrorKind::BadTarget { .. }));
        assert!(matches!(err("error(0.1) D-1").kind, DemErrorKind::BadTarget { .. }));
        assert_eq!(err("error(0.1) ^ D0").kind, DemErrorKind::EmptyComponent);
        assert_eq!(err("error(0.1) D0 ^").kind, DemErrorKind::EmptyComponent);
        assert_eq!(err("error(0.1) D0 ^ ^ D1").kind, DemErrorKind::EmptyComponent);
        assert_eq!(err("error(0.1) L64").kind, DemErrorKind::TooManyObservables(64));
        assert!(matches!(err("detector(0) L0").kind, DemErrorKind::BadTarget { .. }));
        assert!(matches!(err("logical_observable D0").kind, DemErrorKind::BadTarget { .. }));
        assert!(matches!(err("shift_detectors x").kind, DemErrorKind::BadTarget { .. }));
        assert!(matches!(err("repeat 0 {\n}").kind, DemErrorKind::BadRepeat(_)));
        assert!(matches!(err("repeat 3\n").kind, DemErrorKind::BadRepeat(_)));
        assert!(matches!(err("repeat x {\n}").kind, DemErrorKind::BadRepeat(_)));
        let e = err("error(0.1) D0\n}\n");
        assert_eq!((e.line, e.kind), (2, DemErrorKind::UnbalancedClose));
        let e = err("\nrepeat 2 {\nerror(0.1) D0\n");
        assert_eq!((e.line, e.kind), (2, DemErrorKind::UnclosedRepeat));
        let e = err("error(0.1) D4294967295");
        assert!(matches!(e.kind, DemErrorKind::DetectorTooLarge(_)));
        // bounded allocation: a declaration far out is refused, not allocated for
        let e = err(&format!("detector(0) D{MAX_DETECTORS}"));
        assert!(matches!(e.kind, DemErrorKind::DetectorTooLarge(_)));
        assert!(DetectorErrorModel::parse(&format!("detector(0) D{}", MAX_DETECTORS - 1)).is_ok());
        // deep nesting is an error at the first level too deep, not a stack overflow
        let e = err(&"repeat 1 {\n".repeat(100_000));
        assert_eq!((e.line, e.kind), (MAX_REPEAT_DEPTH + 1, DemErrorKind::TooDeep));
    }

    #[test]
    fn the_first_error_in_file_order_is_reported() {
        // a detector beyond the limit (found flattening) before a bad line (found parsing)
        let e = err(&format!("error(0.1) D{MAX_DETECTORS}\nerrror(0.1) D1\n"));
        assert_eq!((e.line, e.kind), (1, DemErrorKind::DetectorTooLarge(MAX_DETECTORS as u64)));
        // a repeat block's body runs at its closing brace, so a bad line before it comes first
        let e = err(&format!("repeat 2 {{\n error(0.1) D{MAX_DETECTORS}\n errror D0\n}}\n"));
        assert_eq!((e.line, e.kind), (3, DemErrorKind::UnknownInstruction("errror".into())));
    }

    #[test]
    fn runaway_repeat_is_refused() {
        let e = err("repeat 1000000000 {\n repeat 1000000000 {\n  shift_detectors 0\n }\n}\n");
        assert_eq!(e.kind, DemErrorKind::TooLarge);
    }

    #[test]
    fn junk_never_panics() {
        for s in [
            "",
            "(",
            ")",
            "error(",
            "error()",
            "error(0.1)",
            "[",
            "error[",
            "error[x",
            "}{",
            "repeat",
            "repeat {",
            "detector(nan) D0",
            "error(inf) D0",
            "\u{feff}error(0.1) D0",
            "é",
            "error(0.1)D0",
            "D0",
            "shift_detectors(1) 1 2",
        ] {
            let _ = DetectorErrorModel::parse(s);
        }
        assert!(DetectorErrorModel::parse("error()").is_err());
    }
}
