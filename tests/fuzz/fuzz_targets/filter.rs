//! # Fuzz target `filter`: the SQL filter and action language, `tidebus::filter`
//!
//! The first byte of an input picks what the rest is:
//!
//! - even: a `LIKE` case, pattern and text split at the first `0x00` (the pattern written
//!   into `p LIKE '…'`, with `ESCAPE '!'` when the byte is 2 mod 4). `SqlFilter` must agree
//!   with a reference matcher written here (the textbook table over pattern and text,
//!   quadratic, used on these short inputs only) on every pattern it accepts.
//! - odd: an expression, parsed as a filter and as an action and, when it parses, evaluated
//!   against a message whose properties `p`, `q` and `n` and system properties come from
//!   the input too.
//!
//! What it checks:
//!
//! - Nothing panics and nothing overflows the stack, whatever the expression.
//! - `LIKE` answers as the reference does (issue 32 replaced backtracking, quadratic in
//!   pattern × text, by a linear matcher).
//! - Time and memory: run with `-timeout=5 -malloc_limit_mb=64`.
//!
//! ## Running (from the repository root, stable toolchain)
//!
//! ```sh
//! RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir tests/fuzz filter \
//!     tests/fuzz/corpus/filter tests/fuzz/seeds/filter -- \
//!     -max_len=4096 -runs=10000000 -timeout=5 -malloc_limit_mb=64 \
//!     -dict=tests/fuzz/filter.dict
//! ```
//!
//! ## Findings
//!
//! Issue 32: 10 million executions (`-O --sanitizer none`, 267 s, 1,749 edges covered), none:
//! the linear `LIKE` agreed with the reference on every pattern the parser accepted.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tidebus::filter::{MessageView, SqlAction, SqlFilter, Value};

/// One unit of a pattern for the reference: a literal character, `_` or `%`.
#[derive(Clone, Copy, PartialEq)]
enum Unit {
    Char(char),
    One,
    Run,
}

/// The pattern's units, `None` when it ends with its escape character.
fn units(pattern: &str, escape: Option<char>) -> Option<Vec<Unit>> {
    let mut out = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        out.push(if Some(c) == escape {
            Unit::Char(chars.next()?)
        } else {
            match c {
                '%' => Unit::Run,
                '_' => Unit::One,
                c => Unit::Char(c),
            }
        });
    }
    Some(out)
}

/// The textbook matcher: `matched[i][j]` says whether the first `i` units match the first
/// `j` characters.
fn reference(units: &[Unit], text: &[char]) -> bool {
    let mut matched = vec![vec![false; text.len() + 1]; units.len() + 1];
    matched[0][0] = true;
    for i in 1..=units.len() {
        for j in 0..=text.len() {
            matched[i][j] = match units[i - 1] {
                Unit::Run => matched[i - 1][j] || (j > 0 && matched[i][j - 1]),
                Unit::One => j > 0 && matched[i - 1][j - 1],
                Unit::Char(c) => j > 0 && text[j - 1] == c && matched[i - 1][j - 1],
            };
        }
    }
    matched[units.len()][text.len()]
}

fn like_case(data: &[u8], escaped: bool) {
    let split = data.iter().position(|b| *b == 0).unwrap_or(data.len());
    let pattern = String::from_utf8_lossy(&data[..split]).into_owned();
    let text = String::from_utf8_lossy(data.get(split + 1..).unwrap_or_default()).into_owned();
    let escape = escaped.then_some('!');
    let quoted = pattern.replace('\'', "''");
    let expression = match escape {
        Some(_) => format!("p LIKE '{quoted}' ESCAPE '!'"),
        None => format!("p LIKE '{quoted}'"),
    };
    let Ok(filter) = SqlFilter::parse(&expression) else {
        return;
    };
    let Some(units) = units(&pattern, escape) else {
        panic!("a pattern ending with its escape character parsed: {expression}");
    };
    let view = MessageView {
        application_properties: vec![("p".to_owned(), Value::String(text.clone()))],
        ..MessageView::default()
    };
    let chars: Vec<char> = text.chars().collect();
    assert_eq!(
        filter.matches(&view),
        Ok(reference(&units, &chars)),
        "{expression} against {text:?}"
    );
}

fn expression_case(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (expression, values) = text.split_once('\n').unwrap_or((&text, ""));
    let mut parts = values.split('\n');
    let mut next = || parts.next().map(str::to_owned);
    let view = MessageView {
        message_id: next(),
        subject: next(),
        session_id: next(),
        application_properties: vec![
            ("p".to_owned(), Value::String(next().unwrap_or_default())),
            ("q".to_owned(), Value::String(next().unwrap_or_default())),
            ("n".to_owned(), Value::Int(expression.len() as i64)),
            ("f".to_owned(), Value::Float(values.len() as f64 / 3.0)),
            ("b".to_owned(), Value::Bool(expression.is_empty())),
            ("z".to_owned(), Value::Null),
        ],
        ..MessageView::default()
    };
    if let Ok(filter) = SqlFilter::parse(expression) {
        let _ = filter.matches(&view);
    }
    if let Ok(action) = SqlAction::parse(expression) {
        let _ = action.apply(&view);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => like_case(rest, false),
        2 => like_case(rest, true),
        _ => expression_case(rest),
    }
});
