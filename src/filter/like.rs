//! `LIKE` patterns: `%` matches any run of characters (also none), `_` exactly one character,
//! and the `ESCAPE` character makes the character after it literal
//! (`property LIKE 'ABC\%' ESCAPE '\'` matches `ABC%` only). Matching is case-sensitive.
//!
//! A pattern is compiled once; the common shapes (`'abc'`, `'abc%'`, `'%abc'`, `'%abc%'`)
//! match with one string comparison.

/// A compiled `LIKE` pattern.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LikePattern {
    shape: Shape,
}

/// How a pattern matches.
#[derive(Debug, Clone, PartialEq)]
enum Shape {
    /// No wildcards: equality.
    Exact(String),
    /// `literal%` (`%` alone is the empty prefix).
    Prefix(String),
    /// `%literal`.
    Suffix(String),
    /// `%literal%`.
    Contains(String),
    /// Anything else.
    General(Vec<Piece>),
}

/// One element of a general pattern.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    /// These characters.
    Literal(String),
    /// `_`.
    AnyOne,
    /// `%` (consecutive ones merged).
    AnyRun,
}

impl LikePattern {
    /// Compiles `pattern`, where `escape` (if any) makes the next character literal.
    ///
    /// # Errors
    /// The message when the pattern ends with the escape character.
    pub(super) fn compile(pattern: &str, escape: Option<char>) -> Result<LikePattern, String> {
        let mut pieces: Vec<Piece> = Vec::new();
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            let piece = if Some(c) == escape {
                let Some(literal) = chars.next() else {
                    return Err(format!(
                        "the LIKE pattern '{pattern}' ends with its escape character '{c}'"
                    ));
                };
                Piece::Literal(literal.to_string())
            } else {
                match c {
                    '%' => Piece::AnyRun,
                    '_' => Piece::AnyOne,
                    _ => Piece::Literal(c.to_string()),
                }
            };
            match (pieces.last_mut(), piece) {
                (Some(Piece::Literal(run)), Piece::Literal(more)) => run.push_str(&more),
                (Some(Piece::AnyRun), Piece::AnyRun) => {}
                (_, piece) => pieces.push(piece),
            }
        }
        let shape = match pieces.as_slice() {
            [] => Shape::Exact(String::new()),
            [Piece::Literal(text)] => Shape::Exact(text.clone()),
            [Piece::AnyRun] => Shape::Prefix(String::new()),
            [Piece::Literal(text), Piece::AnyRun] => Shape::Prefix(text.clone()),
            [Piece::AnyRun, Piece::Literal(text)] => Shape::Suffix(text.clone()),
            [Piece::AnyRun, Piece::Literal(text), Piece::AnyRun] => Shape::Contains(text.clone()),
            _ => Shape::General(pieces),
        };
        Ok(LikePattern { shape })
    }

    /// Whether `text` matches the pattern.
    pub(super) fn matches(&self, text: &str) -> bool {
        match &self.shape {
            Shape::Exact(literal) => text == literal,
            Shape::Prefix(literal) => text.starts_with(literal.as_str()),
            Shape::Suffix(literal) => text.ends_with(literal.as_str()),
            Shape::Contains(literal) => text.contains(literal.as_str()),
            Shape::General(pieces) => matches_pieces(pieces, text),
        }
    }
}

/// Matches `text` against `pieces` left to right; on a mismatch, the last `%` takes one more
/// character and matching resumes after it (linear in most patterns, quadratic at worst, no
/// allocation).
fn matches_pieces(pieces: &[Piece], text: &str) -> bool {
    let mut piece = 0;
    let mut at = 0;
    // The piece after the last `%` seen, and where in `text` that `%` stopped.
    let mut resume: Option<(usize, usize)> = None;
    loop {
        let advanced = match pieces.get(piece) {
            Some(Piece::AnyRun) => {
                resume = Some((piece + 1, at));
                Some(at)
            }
            Some(Piece::AnyOne) => text[at..].chars().next().map(|c| at + c.len_utf8()),
            Some(Piece::Literal(literal)) => text[at..]
                .starts_with(literal.as_str())
                .then(|| at + literal.len()),
            None if at == text.len() => return true,
            None => None,
        };
        if let Some(next) = advanced {
            piece += 1;
            at = next;
            continue;
        }
        let Some((after_run, run_end)) = resume else {
            return false;
        };
        let Some(c) = text[run_end..].chars().next() else {
            return false;
        };
        resume = Some((after_run, run_end + c.len_utf8()));
        piece = after_run;
        at = run_end + c.len_utf8();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn like(text: &str, pattern: &str) -> bool {
        LikePattern::compile(pattern, None)
            .expect("compiles")
            .matches(text)
    }

    fn like_escaped(text: &str, pattern: &str, escape: char) -> bool {
        LikePattern::compile(pattern, Some(escape))
            .expect("compiles")
            .matches(text)
    }

    #[test]
    fn percent_matches_any_run_including_none() {
        assert!(like("order-17", "order-%"));
        assert!(like("order-", "order-%"));
        assert!(!like("Order-17", "order-%"));
        assert!(like("my bus stop", "%bus%"));
        assert!(like("bus", "%bus%"));
        assert!(!like("bu s", "%bus%"));
        assert!(like("a.json", "%.json"));
        assert!(!like("a.json5", "%.json"));
        assert!(like("", "%"));
        assert!(like("anything", "%%"));
    }

    #[test]
    fn underscore_matches_exactly_one_character() {
        assert!(like("cat", "c_t"));
        assert!(like("cät", "c_t"));
        assert!(!like("ct", "c_t"));
        assert!(!like("cart", "c_t"));
        assert!(like("ab", "__"));
        assert!(!like("a", "__"));
    }

    #[test]
    fn without_wildcards_the_whole_text_must_be_equal() {
        assert!(like("eu", "eu"));
        assert!(!like("eu-west", "eu"));
        assert!(like("", ""));
        assert!(!like("x", ""));
    }

    #[test]
    fn general_patterns_backtrack() {
        assert!(like("abcbcd", "a%bcd"));
        assert!(like("mississippi", "m%iss%pi"));
        assert!(!like("mississippi", "m%iss%pix"));
        assert!(like("aXbYc", "a_b%c"));
        assert!(like("ab-cd-ef", "%-__-%"));
        assert!(!like("ab-cde-f", "%-__-%"));
        assert!(like("xaaab", "%a%b"));
        assert!(!like("xaaa", "%a%b"));
    }

    #[test]
    fn the_escape_character_makes_wildcards_literal() {
        assert!(like_escaped("ABC%", r"ABC\%", '\\'));
        assert!(!like_escaped("ABCD", r"ABC\%", '\\'));
        assert!(like_escaped("a_b", "a!_b", '!'));
        assert!(!like_escaped("axb", "a!_b", '!'));
        assert!(like_escaped(r"a\b", r"a\\b", '\\'));
        assert!(like_escaped("100% sure", "100!%%", '!'));
        // Without ESCAPE the backslash is an ordinary character.
        assert!(like(r"ABC\xyz", r"ABC\%"));
    }

    #[test]
    fn a_trailing_escape_character_is_refused() {
        assert_eq!(
            LikePattern::compile("abc!", Some('!')),
            Err("the LIKE pattern 'abc!' ends with its escape character '!'".to_owned())
        );
    }
}
