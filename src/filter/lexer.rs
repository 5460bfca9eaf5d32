//! Splits a SQL filter or action expression into tokens, one at a time, each with its byte
//! offset.
//!
//! Tokens (SQL filter syntax): regular identifiers (a letter, then letters, digits or `_`),
//! `[delimited identifiers]` (`]]` for `]`), `"quoted identifiers"` (`""` for `"`),
//! `'string constants'` (`''` for `'`), integer constants (`1894`), decimal constants
//! (`1894.1204`, `2.0`) and approximate ones (`101.5E5`, `0.5E-2`), keywords (any case) and
//! the operators `= <> != < <= > >= + - * / %` with `( ) , . ;`.
//!
//! A JMS selector ([`Dialect::Jms`]) has the same strings and numbers, Java identifiers
//! (letters, digits, `_` and `$`, not starting with a digit) and no delimited or quoted
//! identifiers, parameters, `!=`, `%`, `;` or `.`; its keywords are JMS's (`BETWEEN` is one,
//! `EXISTS`, `SET` and `REMOVE` are names).

use std::borrow::Cow;
use std::fmt;

use super::error::SqlError;
use super::syntax::Dialect;

/// A reserved word, recognised in any letter case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keyword {
    And,
    Or,
    Not,
    In,
    Like,
    Escape,
    Is,
    Null,
    Exists,
    True,
    False,
    Set,
    Remove,
    Between,
}

impl Keyword {
    /// Whether the keyword is reserved in `dialect` (else it is a name there): `EXISTS`, `SET`
    /// and `REMOVE` are SQL's own, `BETWEEN` is JMS's.
    fn reserved_in(self, dialect: Dialect) -> bool {
        match self {
            Keyword::Exists | Keyword::Set | Keyword::Remove => dialect == Dialect::Sql,
            Keyword::Between => dialect == Dialect::Jms,
            _ => true,
        }
    }
}

/// Every keyword with its spelling.
const KEYWORDS: [(&str, Keyword); 14] = [
    ("AND", Keyword::And),
    ("OR", Keyword::Or),
    ("NOT", Keyword::Not),
    ("IN", Keyword::In),
    ("LIKE", Keyword::Like),
    ("ESCAPE", Keyword::Escape),
    ("IS", Keyword::Is),
    ("NULL", Keyword::Null),
    ("EXISTS", Keyword::Exists),
    ("TRUE", Keyword::True),
    ("FALSE", Keyword::False),
    ("SET", Keyword::Set),
    ("REMOVE", Keyword::Remove),
    ("BETWEEN", Keyword::Between),
];

/// One operator or punctuation mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Symbol {
    OpenParen,
    CloseParen,
    Comma,
    Dot,
    Semicolon,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Equal,
    NotEqual,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

impl Symbol {
    /// How the symbol is written.
    pub(super) fn text(self) -> &'static str {
        match self {
            Symbol::OpenParen => "(",
            Symbol::CloseParen => ")",
            Symbol::Comma => ",",
            Symbol::Dot => ".",
            Symbol::Semicolon => ";",
            Symbol::Plus => "+",
            Symbol::Minus => "-",
            Symbol::Star => "*",
            Symbol::Slash => "/",
            Symbol::Percent => "%",
            Symbol::Equal => "=",
            Symbol::NotEqual => "<>",
            Symbol::Less => "<",
            Symbol::LessOrEqual => "<=",
            Symbol::Greater => ">",
            Symbol::GreaterOrEqual => ">=",
        }
    }
}

/// What a token is.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum TokenKind<'s> {
    /// A regular identifier (which can also be a scope or a function name).
    Word(&'s str),
    /// A delimited (`[...]`) or quoted (`"..."`) identifier with its quoting removed.
    Delimited(Cow<'s, str>),
    /// A keyword.
    Keyword(Keyword),
    /// An integer constant, unsigned (a leading `-` is an operator).
    Integer(u64),
    /// A decimal or approximate number constant.
    Decimal(f64),
    /// A string constant with its quoting removed.
    Text(Cow<'s, str>),
    /// An operator or punctuation mark.
    Symbol(Symbol),
    /// A parameter (`@name`), named with its `@`.
    Parameter(&'s str),
    /// The end of the expression.
    End,
}

impl fmt::Display for TokenKind<'_> {
    /// Names the token for error messages ("expected ')' after IN list, found 'x'").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenKind::Word(name) => write!(f, "name '{name}'"),
            TokenKind::Parameter(name) => write!(f, "parameter {name}"),
            TokenKind::Delimited(name) => write!(f, "name '{name}'"),
            TokenKind::Keyword(keyword) => {
                let spelling = KEYWORDS
                    .iter()
                    .find(|(_, known)| known == keyword)
                    .map_or("?", |(spelling, _)| spelling);
                write!(f, "{spelling}")
            }
            TokenKind::Integer(n) => write!(f, "number {n}"),
            TokenKind::Decimal(n) => write!(f, "number {n}"),
            TokenKind::Text(text) => write!(f, "string '{text}'"),
            TokenKind::Symbol(symbol) => write!(f, "'{}'", symbol.text()),
            TokenKind::End => f.write_str("the end of the expression"),
        }
    }
}

/// A token and the byte offset where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token<'s> {
    pub(super) kind: TokenKind<'s>,
    pub(super) offset: usize,
}

/// Reads tokens from an expression, left to right.
pub(super) struct Lexer<'s> {
    source: &'s str,
    position: usize,
    dialect: Dialect,
}

impl<'s> Lexer<'s> {
    /// A lexer at the start of `source`.
    pub(super) fn new(source: &'s str, dialect: Dialect) -> Lexer<'s> {
        Lexer {
            source,
            position: 0,
            dialect,
        }
    }

    /// The next token; [`TokenKind::End`] (repeatedly) once the expression is used up.
    pub(super) fn next_token(&mut self) -> Result<Token<'s>, SqlError> {
        let rest = &self.source[self.position..];
        let trimmed = rest.trim_start();
        self.position += rest.len() - trimmed.len();
        let offset = self.position;
        let Some(first) = trimmed.chars().next() else {
            return Ok(Token {
                kind: TokenKind::End,
                offset,
            });
        };
        let sql = self.dialect == Dialect::Sql;
        let kind = match first {
            '\'' => TokenKind::Text(self.quoted('\'', '\'', "unterminated string literal")?),
            '"' if sql => {
                TokenKind::Delimited(self.quoted('"', '"', "unterminated quoted identifier")?)
            }
            '[' if sql => {
                let name =
                    self.quoted('[', ']', "unterminated delimited identifier: missing ']'")?;
                if name.is_empty() {
                    return Err(SqlError::new(offset, "empty delimited identifier '[]'"));
                }
                TokenKind::Delimited(name)
            }
            '0'..='9' => self.number()?,
            '.' if trimmed[1..].starts_with(|c: char| c.is_ascii_digit()) => self.number()?,
            c if c.is_alphabetic() || (!sql && matches!(c, '_' | '$')) => self.word(),
            '@' if sql => self.parameter(offset)?,
            _ => TokenKind::Symbol(self.symbol(first)?),
        };
        Ok(Token { kind, offset })
    }

    /// A token quoted by `open` ... `close`, where a doubled `close` stands for one.
    fn quoted(
        &mut self,
        open: char,
        close: char,
        unterminated: &str,
    ) -> Result<Cow<'s, str>, SqlError> {
        let start = self.position;
        let body = &self.source[start + open.len_utf8()..];
        let mut text: Option<String> = None;
        let mut copied = 0;
        let mut chars = body.char_indices();
        while let Some((at, c)) = chars.next() {
            if c != close {
                continue;
            }
            if body[at + close.len_utf8()..].starts_with(close) {
                // A doubled closing mark: keep one, skip the other.
                let unescaped = text.get_or_insert_with(String::new);
                unescaped.push_str(&body[copied..=at]);
                copied = at + 2 * close.len_utf8();
                chars.next();
                continue;
            }
            self.position = start + open.len_utf8() + at + close.len_utf8();
            return Ok(match text {
                None => Cow::Borrowed(&body[..at]),
                Some(mut unescaped) => {
                    unescaped.push_str(&body[copied..at]);
                    Cow::Owned(unescaped)
                }
            });
        }
        Err(SqlError::new(start, unterminated))
    }

    /// An integer, decimal or approximate number constant.
    fn number(&mut self) -> Result<TokenKind<'s>, SqlError> {
        let start = self.position;
        let bytes = self.source.as_bytes();
        let digits = |mut at: usize| {
            while bytes.get(at).is_some_and(u8::is_ascii_digit) {
                at += 1;
            }
            at
        };
        let mut end = digits(start);
        let mut integer = true;
        if bytes.get(end) == Some(&b'.') {
            integer = false;
            end = digits(end + 1);
        }
        if matches!(bytes.get(end), Some(b'e' | b'E')) {
            integer = false;
            let mut exponent = end + 1;
            if matches!(bytes.get(exponent), Some(b'+' | b'-')) {
                exponent += 1;
            }
            let exponent_end = digits(exponent);
            if exponent_end == exponent {
                return Err(SqlError::new(
                    start,
                    "malformed number: the exponent has no digits",
                ));
            }
            end = exponent_end;
        }
        if self.source[end..].starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.') {
            return Err(SqlError::new(start, "malformed number"));
        }
        let text = &self.source[start..end];
        self.position = end;
        if integer {
            text.parse::<u64>().map(TokenKind::Integer).map_err(|_| {
                SqlError::new(
                    start,
                    "integer constant out of range (64-bit signed integers)",
                )
            })
        } else {
            match text.parse::<f64>() {
                Ok(n) if n.is_finite() => Ok(TokenKind::Decimal(n)),
                _ => Err(SqlError::new(start, "number constant out of range")),
            }
        }
    }

    /// A parameter: `@` and a word.
    fn parameter(&mut self, offset: usize) -> Result<TokenKind<'s>, SqlError> {
        let start = self.position;
        let rest = &self.source[start + 1..];
        let end = rest
            .char_indices()
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '_'))
            .map_or(rest.len(), |(at, _)| at);
        if end == 0 {
            return Err(SqlError::new(offset, "'@' without a parameter name"));
        }
        self.position = start + 1 + end;
        Ok(TokenKind::Parameter(&self.source[start..start + 1 + end]))
    }

    /// A keyword or an identifier: a regular identifier in SQL, a Java identifier (letters,
    /// digits, `_` and `$`, not starting with a digit) in a JMS selector.
    fn word(&mut self) -> TokenKind<'s> {
        let start = self.position;
        let rest = &self.source[start..];
        let java = self.dialect == Dialect::Jms;
        let end = rest
            .char_indices()
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '_' || (java && *c == '$')))
            .map_or(rest.len(), |(at, _)| at);
        let word = &rest[..end];
        self.position = start + end;
        match KEYWORDS.iter().find(|(spelling, keyword)| {
            keyword.reserved_in(self.dialect) && spelling.eq_ignore_ascii_case(word)
        }) {
            Some((_, keyword)) => TokenKind::Keyword(*keyword),
            None => TokenKind::Word(word),
        }
    }

    /// An operator or punctuation mark starting with `first`; a JMS selector has no `!=`,
    /// `%`, `;` or `.` (scopes).
    fn symbol(&mut self, first: char) -> Result<Symbol, SqlError> {
        let start = self.position;
        let second = self.source[start + first.len_utf8()..].chars().next();
        let jms = self.dialect == Dialect::Jms;
        let unexpected = || SqlError::new(start, format!("unexpected character '{first}'"));
        let (symbol, length) = match (first, second) {
            ('!' | '%' | ';' | '.', _) if jms => return Err(unexpected()),
            ('<', Some('>')) | ('!', Some('=')) => (Symbol::NotEqual, 2),
            ('<', Some('=')) => (Symbol::LessOrEqual, 2),
            ('>', Some('=')) => (Symbol::GreaterOrEqual, 2),
            ('<', _) => (Symbol::Less, 1),
            ('>', _) => (Symbol::Greater, 1),
            ('=', _) => (Symbol::Equal, 1),
            ('(', _) => (Symbol::OpenParen, 1),
            (')', _) => (Symbol::CloseParen, 1),
            (',', _) => (Symbol::Comma, 1),
            ('.', _) => (Symbol::Dot, 1),
            (';', _) => (Symbol::Semicolon, 1),
            ('+', _) => (Symbol::Plus, 1),
            ('-', _) => (Symbol::Minus, 1),
            ('*', _) => (Symbol::Star, 1),
            ('/', _) => (Symbol::Slash, 1),
            ('%', _) => (Symbol::Percent, 1),
            _ => return Err(unexpected()),
        };
        self.position = start + length;
        Ok(symbol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every token of `source` up to the end, with offsets.
    fn tokens(source: &str) -> Result<Vec<(TokenKind<'_>, usize)>, SqlError> {
        tokens_in(source, Dialect::Sql)
    }

    /// Every token of a JMS selector up to the end, with offsets.
    fn jms_tokens(source: &str) -> Result<Vec<(TokenKind<'_>, usize)>, SqlError> {
        tokens_in(source, Dialect::Jms)
    }

    /// Every token of `source` in `dialect` up to the end, with offsets.
    fn tokens_in(source: &str, dialect: Dialect) -> Result<Vec<(TokenKind<'_>, usize)>, SqlError> {
        let mut lexer = Lexer::new(source, dialect);
        let mut all = Vec::new();
        loop {
            let token = lexer.next_token()?;
            if token.kind == TokenKind::End {
                return Ok(all);
            }
            all.push((token.kind, token.offset));
        }
    }

    fn kinds(source: &str) -> Vec<TokenKind<'_>> {
        tokens(source)
            .expect("lexes")
            .into_iter()
            .map(|(kind, _)| kind)
            .collect()
    }

    fn word(name: &str) -> TokenKind<'_> {
        TokenKind::Word(name)
    }

    fn delimited(name: &str) -> TokenKind<'_> {
        TokenKind::Delimited(Cow::Borrowed(name))
    }

    fn text(value: &str) -> TokenKind<'_> {
        TokenKind::Text(Cow::Borrowed(value))
    }

    #[test]
    fn tokens_carry_their_byte_offsets() {
        assert_eq!(
            tokens("région = 'eu'").expect("lexes"),
            vec![
                (word("région"), 0),
                (TokenKind::Symbol(Symbol::Equal), 8),
                (text("eu"), 10),
            ]
        );
    }

    #[test]
    fn keywords_in_any_case_and_identifiers() {
        assert_eq!(
            kinds("not Exists IS nULL Colour_2 ÉtAt"),
            vec![
                TokenKind::Keyword(Keyword::Not),
                TokenKind::Keyword(Keyword::Exists),
                TokenKind::Keyword(Keyword::Is),
                TokenKind::Keyword(Keyword::Null),
                word("Colour_2"),
                word("ÉtAt"),
            ]
        );
    }

    #[test]
    fn strings_and_quoted_names_unescape_doubled_quotes() {
        assert_eq!(kinds("'it''s'"), vec![text("it's")]);
        assert_eq!(kinds("''''"), vec![text("'")]);
        assert_eq!(kinds("''"), vec![text("")]);
        assert_eq!(kinds("'a;b'"), vec![text("a;b")]);
        assert_eq!(
            kinds(r#""Contoso & ""Northwind""""#),
            vec![TokenKind::Delimited(Cow::Owned(
                r#"Contoso & "Northwind""#.to_owned()
            ))]
        );
        assert_eq!(
            kinds("[Property With Space] [HR-EmployeeID] [a]]b]"),
            vec![
                delimited("Property With Space"),
                delimited("HR-EmployeeID"),
                delimited("a]b"),
            ]
        );
    }

    #[test]
    fn unterminated_quotes_point_at_the_opening_mark() {
        assert_eq!(
            tokens("a = 'it''s"),
            Err(SqlError::new(4, "unterminated string literal"))
        );
        assert_eq!(
            tokens("\"name = 1"),
            Err(SqlError::new(0, "unterminated quoted identifier"))
        );
        assert_eq!(
            tokens("x + [name"),
            Err(SqlError::new(
                4,
                "unterminated delimited identifier: missing ']'"
            ))
        );
        assert_eq!(
            tokens("[]"),
            Err(SqlError::new(0, "empty delimited identifier '[]'"))
        );
    }

    #[test]
    fn integer_decimal_and_approximate_numbers() {
        assert_eq!(
            kinds("1894 2 1894.1204 2.0 101.5E5 0.5E-2 1e3 .5 7."),
            vec![
                TokenKind::Integer(1894),
                TokenKind::Integer(2),
                TokenKind::Decimal(1894.1204),
                TokenKind::Decimal(2.0),
                TokenKind::Decimal(101.5e5),
                TokenKind::Decimal(0.005),
                TokenKind::Decimal(1000.0),
                TokenKind::Decimal(0.5),
                TokenKind::Decimal(7.0),
            ]
        );
        assert_eq!(
            kinds("9223372036854775808"),
            vec![TokenKind::Integer(1 << 63)]
        );
    }

    #[test]
    fn malformed_and_out_of_range_numbers() {
        assert_eq!(
            tokens("a = 18446744073709551616"),
            Err(SqlError::new(
                4,
                "integer constant out of range (64-bit signed integers)"
            ))
        );
        assert_eq!(
            tokens("1e999"),
            Err(SqlError::new(0, "number constant out of range"))
        );
        assert_eq!(
            tokens("x > 2e"),
            Err(SqlError::new(
                4,
                "malformed number: the exponent has no digits"
            ))
        );
        assert_eq!(tokens("12abc"), Err(SqlError::new(0, "malformed number")));
        assert_eq!(tokens("1.2.3"), Err(SqlError::new(0, "malformed number")));
    }

    #[test]
    fn every_operator() {
        assert_eq!(
            kinds("= <> != < <= > >= + - * / % ( ) , . ;"),
            [
                Symbol::Equal,
                Symbol::NotEqual,
                Symbol::NotEqual,
                Symbol::Less,
                Symbol::LessOrEqual,
                Symbol::Greater,
                Symbol::GreaterOrEqual,
                Symbol::Plus,
                Symbol::Minus,
                Symbol::Star,
                Symbol::Slash,
                Symbol::Percent,
                Symbol::OpenParen,
                Symbol::CloseParen,
                Symbol::Comma,
                Symbol::Dot,
                Symbol::Semicolon,
            ]
            .map(TokenKind::Symbol)
        );
        assert_eq!(
            kinds("a<=-1"),
            vec![
                word("a"),
                TokenKind::Symbol(Symbol::LessOrEqual),
                TokenKind::Symbol(Symbol::Minus),
                TokenKind::Integer(1),
            ]
        );
    }

    #[test]
    fn scoped_names_are_three_tokens() {
        assert_eq!(
            kinds("sys.Label"),
            vec![word("sys"), TokenKind::Symbol(Symbol::Dot), word("Label"),]
        );
    }

    #[test]
    fn jms_selectors_have_java_identifiers_and_their_own_keywords() {
        let jms: Vec<_> = jms_tokens("$price _x a$1 Exists set between NOT ÉtAt")
            .expect("lexes")
            .into_iter()
            .map(|(kind, _)| kind)
            .collect();
        assert_eq!(
            jms,
            vec![
                word("$price"),
                word("_x"),
                word("a$1"),
                word("Exists"),
                word("set"),
                TokenKind::Keyword(Keyword::Between),
                TokenKind::Keyword(Keyword::Not),
                word("ÉtAt"),
            ]
        );
        // BETWEEN is no SQL filter keyword.
        assert_eq!(kinds("between"), vec![word("between")]);
    }

    #[test]
    fn jms_selectors_refuse_the_sql_only_tokens() {
        for (source, offset, character) in [
            ("[a] = 1", 0, '['),
            ("\"a\" = 1", 0, '"'),
            ("a = @p", 4, '@'),
            ("a != 1", 2, '!'),
            ("a % 2 = 1", 2, '%'),
            ("a = 1;", 5, ';'),
            ("sys.Label = 'x'", 3, '.'),
        ] {
            assert_eq!(
                jms_tokens(source),
                Err(SqlError::new(
                    offset,
                    format!("unexpected character '{character}'")
                )),
                "{source}"
            );
        }
        assert_eq!(
            jms_tokens(".5 <> 1.").expect("lexes"),
            vec![
                (TokenKind::Decimal(0.5), 0),
                (TokenKind::Symbol(Symbol::NotEqual), 3),
                (TokenKind::Decimal(1.0), 6),
            ]
        );
    }

    #[test]
    fn stray_characters_are_refused_and_parameters_named() {
        assert_eq!(
            tokens("a ! b"),
            Err(SqlError::new(2, "unexpected character '!'"))
        );
        assert_eq!(
            tokens("a = _x"),
            Err(SqlError::new(4, "unexpected character '_'"))
        );
        assert_eq!(
            tokens("a = @"),
            Err(SqlError::new(4, "'@' without a parameter name"))
        );
        assert_eq!(
            kinds("@p_1=1"),
            vec![
                TokenKind::Parameter("@p_1"),
                TokenKind::Symbol(Symbol::Equal),
                TokenKind::Integer(1),
            ]
        );
    }
}
