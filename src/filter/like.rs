//! `LIKE` patterns: `%` matches any run of characters (also none), `_` exactly one character,
//! and the `ESCAPE` character makes the character after it literal
//! (`property LIKE 'ABC\%' ESCAPE '\'` matches `ABC%` only). Matching is case-sensitive.
//!
//! A pattern is compiled once into the parts between its `%`s. Matching takes time linear in
//! the text, whatever the pattern: the first part must match at the start, the last at the
//! end, and each part between is found at its leftmost place after the one before (taking the
//! leftmost place never loses a match). A part without `_` is found by a substring search; a
//! part with `_` by a shift-and scan, which costs one step per character of text and 64
//! characters of the part. A pattern holds at most [`MAX_PATTERN_CHARS`] characters, so one
//! rule cannot make a message cost more than that many steps per character of its operand.

use std::collections::HashMap;

/// The longest pattern, in characters: an expression's own length limit. A pattern computed
/// from a message's properties is held to it too.
pub(super) const MAX_PATTERN_CHARS: usize = 1024;

/// A compiled `LIKE` pattern: the parts between its `%`s, in order. Without `%` the one part
/// must match the whole text; with, the first must match at the start, the last at the end,
/// and those between anywhere in order.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LikePattern {
    parts: Vec<Part>,
}

/// A run of pattern characters between `%`s.
#[derive(Debug, Clone, PartialEq)]
struct Part {
    /// `None` for `_`.
    units: Vec<Option<char>>,
    /// The same as a string, when the part has no `_`.
    literal: Option<String>,
    /// For a part with `_`, the shift-and masks: bit `i` of a character's mask is set where
    /// unit `i` matches it; characters absent from the map match only the `_` units.
    masks: HashMap<char, Vec<u64>>,
    /// The mask of the `_` units.
    any: Vec<u64>,
}

impl Part {
    fn new(units: Vec<Option<char>>) -> Part {
        let literal = units.iter().copied().collect::<Option<String>>();
        let words = units.len().div_ceil(64);
        let mut any = vec![0u64; words];
        let mut masks: HashMap<char, Vec<u64>> = HashMap::new();
        if literal.is_none() {
            for (index, unit) in units.iter().enumerate() {
                if unit.is_none() {
                    any[index / 64] |= 1 << (index % 64);
                }
            }
            for (index, unit) in units.iter().enumerate() {
                if let Some(c) = unit {
                    masks.entry(*c).or_insert_with(|| any.clone())[index / 64] |= 1 << (index % 64);
                }
            }
        }
        Part {
            units,
            literal,
            masks,
            any,
        }
    }

    /// Where the part ends when it matches `text` at byte `at`.
    fn match_at(&self, text: &str, at: usize) -> Option<usize> {
        if let Some(literal) = &self.literal {
            return text[at..]
                .starts_with(literal.as_str())
                .then(|| at + literal.len());
        }
        let mut chars = text[at..].chars();
        let mut end = at;
        for unit in &self.units {
            let c = chars.next()?;
            if unit.is_some_and(|unit| unit != c) {
                return None;
            }
            end += c.len_utf8();
        }
        Some(end)
    }

    /// Where the part's leftmost match in `text` at or after byte `at` ends.
    fn find_from(&self, text: &str, at: usize) -> Option<usize> {
        if let Some(literal) = &self.literal {
            return text[at..]
                .find(literal.as_str())
                .map(|start| at + start + literal.len());
        }
        let last = self.units.len() - 1;
        let mut state = vec![0u64; self.any.len()];
        for (offset, c) in text[at..].char_indices() {
            let mask = self.masks.get(&c).unwrap_or(&self.any);
            let mut carry = 1;
            for (word, mask) in state.iter_mut().zip(mask) {
                let shifted = (*word << 1) | carry;
                carry = *word >> 63;
                *word = shifted & mask;
            }
            if state[last / 64] & (1 << (last % 64)) != 0 {
                return Some(at + offset + c.len_utf8());
            }
        }
        None
    }
}

impl LikePattern {
    /// Compiles `pattern`, where `escape` (if any) makes the next character literal.
    ///
    /// # Errors
    /// The message when the pattern ends with the escape character or is longer than
    /// [`MAX_PATTERN_CHARS`].
    pub(super) fn compile(pattern: &str, escape: Option<char>) -> Result<LikePattern, String> {
        if pattern.chars().nth(MAX_PATTERN_CHARS).is_some() {
            return Err(format!(
                "the LIKE pattern is longer than {MAX_PATTERN_CHARS} characters"
            ));
        }
        let mut parts = vec![Vec::new()];
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            let units = parts.last_mut().expect("one part at least");
            if Some(c) == escape {
                let Some(literal) = chars.next() else {
                    return Err(format!(
                        "the LIKE pattern '{pattern}' ends with its escape character '{c}'"
                    ));
                };
                units.push(Some(literal));
            } else {
                match c {
                    '%' => parts.push(Vec::new()),
                    '_' => units.push(None),
                    _ => units.push(Some(c)),
                }
            }
        }
        let count = parts.len();
        let parts = parts
            .into_iter()
            .enumerate()
            // `%%` leaves an empty part between, which matches anywhere.
            .filter(|(index, units)| *index == 0 || *index == count - 1 || !units.is_empty())
            .map(|(_, units)| Part::new(units))
            .collect();
        Ok(LikePattern { parts })
    }

    /// Whether `text` matches the pattern.
    pub(super) fn matches(&self, text: &str) -> bool {
        let (head, rest) = self.parts.split_first().expect("one part at least");
        let Some(mut at) = head.match_at(text, 0) else {
            return false;
        };
        let Some((tail, middle)) = rest.split_last() else {
            return at == text.len();
        };
        for part in middle {
            match part.find_from(text, at) {
                Some(end) => at = end,
                None => return false,
            }
        }
        let tail_chars = tail.units.len();
        let tail_start = if tail_chars == 0 {
            text.len()
        } else {
            match text.char_indices().rev().nth(tail_chars - 1) {
                Some((start, _)) => start,
                None => return false,
            }
        };
        tail_start >= at && tail.match_at(text, tail_start) == Some(text.len())
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
    fn parts_with_underscores_are_found_at_their_leftmost_place() {
        assert!(like("xxabyabzc", "%ab_ab_c"));
        assert!(like("ab", "a%b"));
        assert!(!like("a", "a%a"));
        assert!(like("aa", "a%a"));
        assert!(like("-é-ü-", "%é_ü%"));
        assert!(!like("-é-ü-", "%é__ü%"));
        assert!(like("ab-cd-ef", "__%__%__"));
        assert!(!like("ab-c", "__%__%__"));
        let long_part = format!("%{}b", "a_".repeat(100));
        assert!(like(&format!("x{}b", "ab".repeat(100)), &long_part));
        assert!(!like(&"a".repeat(10_000), &long_part));
    }

    /// One rule cannot stall a topic: `'%a_a_…(500 times)…b'` against a megabyte of `a`s took
    /// 1.45 s per message when a mismatch backtracked to the last `%`; it is one pass now.
    #[test]
    fn matching_is_linear_in_the_text() {
        let pattern =
            LikePattern::compile(&format!("%{}b", "a_".repeat(500)), None).expect("compiles");
        let text = "a".repeat(1 << 20);
        let started = std::time::Instant::now();
        assert!(!pattern.matches(&text));
        eprintln!(
            "a megabyte against 1002 characters: {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn patterns_longer_than_1024_characters_are_refused() {
        assert!(LikePattern::compile(&"_".repeat(MAX_PATTERN_CHARS), None).is_ok());
        assert_eq!(
            LikePattern::compile(&"_".repeat(MAX_PATTERN_CHARS + 1), None),
            Err("the LIKE pattern is longer than 1024 characters".to_owned())
        );
    }

    #[test]
    fn a_trailing_escape_character_is_refused() {
        assert_eq!(
            LikePattern::compile("abc!", Some('!')),
            Err("the LIKE pattern 'abc!' ends with its escape character '!'".to_owned())
        );
    }
}
