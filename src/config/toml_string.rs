//! Where a character of a TOML string value stands in the file. A value loses its quotes, its
//! escapes and, in multi-line strings, a leading newline and line-ending backslashes, so an
//! offset in the value is not an offset in the text: this module re-reads the string as
//! written to map one onto the other.

/// The byte offset in `token` (a TOML string as written, delimiters included) of the character
/// at byte `offset` of `value`, the string it decodes to. An offset at or past the end of
/// `value` maps to the closing delimiter. Exact for the four kinds of TOML strings, escapes and
/// line-ending backslashes included; `None` when re-reading `token` does not give `value`
/// (not a string, or a form this reader does not know).
pub(super) fn offset_in_token(token: &str, value: &str, offset: usize) -> Option<usize> {
    let decoded = decode(token).filter(|decoded| decoded.value == value)?;
    Some(decoded.sources.get(offset).copied().unwrap_or(decoded.end))
}

/// A string as decoded, with where each of its bytes came from.
struct Decoded {
    value: String,
    /// For each byte of `value`, the offset in the token of the character (or escape) that
    /// produced it.
    sources: Vec<usize>,
    /// The offset of the closing delimiter.
    end: usize,
}

impl Decoded {
    fn push(&mut self, c: char, source: usize) {
        self.value.push(c);
        self.sources
            .extend(std::iter::repeat_n(source, c.len_utf8()));
    }
}

/// Decodes a basic (`"`), literal (`'`), multi-line basic (`"""`) or multi-line literal
/// (`'''`) string as TOML 1.0 does (toml normalises CRLF to LF).
fn decode(token: &str) -> Option<Decoded> {
    let delimiter = ["\"\"\"", "'''", "\"", "'"]
        .into_iter()
        .find(|d| token.len() >= 2 * d.len() && token.starts_with(d) && token.ends_with(d))?;
    let literal = delimiter.starts_with('\'');
    let end = token.len() - delimiter.len();
    let mut position = delimiter.len();
    if delimiter.len() == 3 {
        position += newline_length(&token[position..end]);
    }
    let mut decoded = Decoded {
        value: String::new(),
        sources: Vec::new(),
        end,
    };
    while position < end {
        let rest = &token[position..end];
        let (produced, length) = match rest.chars().next()? {
            '\\' if !literal => escape(rest)?,
            '\r' if rest.starts_with("\r\n") => (Some('\n'), 2),
            c => (Some(c), c.len_utf8()),
        };
        if let Some(c) = produced {
            decoded.push(c, position);
        }
        position += length;
    }
    Some(decoded)
}

/// The character an escape at the start of `text` stands for (`None` for a line-ending
/// backslash, which stands for nothing) and the escape's length in bytes; `None` for an escape
/// TOML does not have.
fn escape(text: &str) -> Option<(Option<char>, usize)> {
    let after = &text[1..];
    let simple = match after.chars().next()? {
        'b' => '\u{8}',
        't' => '\t',
        'n' => '\n',
        'f' => '\u{c}',
        'r' => '\r',
        '"' => '"',
        '\\' => '\\',
        'u' => return unicode_escape(after, 4),
        'U' => return unicode_escape(after, 8),
        _ => return line_ending_backslash(after).map(|length| (None, 1 + length)),
    };
    Some((Some(simple), 2))
}

/// `\uXXXX` or `\UXXXXXXXX`: `after` starts at the `u`.
fn unicode_escape(after: &str, digits: usize) -> Option<(Option<char>, usize)> {
    let hex = after.get(1..1 + digits)?;
    let c = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
    Some((Some(c), 2 + digits))
}

/// A backslash ending a line trims the whitespace after it up to the next other character,
/// newlines included: the length of what it trims, or `None` if no newline follows.
fn line_ending_backslash(after: &str) -> Option<usize> {
    let blanks = after.len() - after.trim_start_matches([' ', '\t']).len();
    newline_length(&after[blanks..]).checked_sub(1)?;
    let trimmed = after.trim_start_matches([' ', '\t', '\r', '\n']);
    Some(after.len() - trimmed.len())
}

/// The length of the newline `text` starts with: 2 for CRLF, 1 for LF, else 0.
fn newline_length(text: &str) -> usize {
    if text.starts_with("\r\n") {
        2
    } else {
        usize::from(text.starts_with('\n'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The string toml decodes `token` to.
    fn toml_value(token: &str) -> String {
        let table: toml::Table = toml::from_str(&format!("s = {token}")).expect("valid TOML");
        table["s"].as_str().expect("a string").to_owned()
    }

    /// Maps every byte offset of the value and checks each lands on the character (or escape)
    /// that produced it.
    fn sources(token: &str) -> Vec<usize> {
        let value = toml_value(token);
        (0..=value.len())
            .map(|offset| offset_in_token(token, &value, offset).expect("mapped"))
            .collect()
    }

    #[test]
    fn every_kind_of_string_decodes_as_toml_does() {
        for token in [
            r#""plain""#,
            r#""""#,
            "'literal \\n stays'",
            r#""tab\there \"quoted\" back\\slash \u00e9 \U0001F600 \b\f\r\n""#,
            "\"\"\"\nfirst newline trimmed\nsecond kept\"\"\"",
            "\"\"\"\r\nCRLF\r\nbecomes LF\"\"\"",
            "\"\"\"line \\\n     continued \\   \r\n\n  twice\"\"\"",
            "\"\"\"ends with quotes\"\"\"\"\"",
            "'''\nmulti 'literal' \\ \r\nlines'''",
            "\"héllo wörld\"",
        ] {
            let value = toml_value(token);
            let decoded = decode(token).expect("decoded");
            assert_eq!(decoded.value, value, "{token:?}");
            assert_eq!(decoded.sources.len(), value.len(), "{token:?}");
        }
    }

    #[test]
    fn plain_and_literal_strings_map_one_to_one_after_the_quote() {
        assert_eq!(sources(r#""a = 'b'""#), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(sources("'a\\b'"), [1, 2, 3, 4]);
    }

    #[test]
    fn an_escape_maps_to_its_backslash() {
        // "a\tb\u00e9c": a, \t (2 bytes of text), b, é (2 bytes of value, 6 of text), c.
        assert_eq!(
            sources(r#""a\tb\u00e9c""#),
            [1, 2, 4, 5, 5, 11, 12],
            "é is two bytes of the value, both from the escape at 5"
        );
    }

    #[test]
    fn multi_byte_characters_map_each_byte_to_the_character() {
        assert_eq!(sources("\"é=1\""), [1, 1, 3, 4, 5]);
    }

    #[test]
    fn multi_line_strings_skip_the_first_newline_and_trimmed_whitespace() {
        let token = "\"\"\"\nab \\\n   cd\"\"\"";
        // Value "ab cd": a at 4, b at 5, ' ' at 6, c at 12, d at 13, end at the closing quotes.
        assert_eq!(sources(token), [4, 5, 6, 12, 13, 14]);
        let literal = "'''\r\nx\r\ny'''";
        // Value "x\ny": x at 5, the CRLF at 6, y at 8.
        assert_eq!(sources(literal), [5, 6, 8, 9]);
    }

    #[test]
    fn a_token_that_does_not_give_the_value_is_not_mapped() {
        assert_eq!(offset_in_token(r#""abc""#, "abd", 0), None);
        assert_eq!(offset_in_token("abc", "abc", 0), None, "not a string");
        assert_eq!(
            offset_in_token(r#""a\qb""#, "aqb", 0),
            None,
            "unknown escape"
        );
    }
}
