//! Recursive-descent parser for SQL filter conditions and SQL action statements, and for JMS
//! message selectors ([`Dialect::Jms`]): the same grammar with `[NOT] BETWEEN`, identifiers
//! resolved to JMS header fields or properties, IN lists, LIKE patterns and escapes of string
//! literals only, no NULL constant, and a boolean identifier or constant as a condition.
//!
//! Precedence, loosest first: `OR`, `AND`, `NOT`, the comparisons (`= <> != < <= > >=`,
//! `IS [NOT] NULL`, `[NOT] IN`, `[NOT] LIKE`), `+ -`, `* / %`, unary `+ -`. Conditions and
//! values share one grammar (a `(` can open either) and are told apart as they combine: `AND`
//! wants conditions, `+` wants values, and a filter as a whole must be a condition.
//!
//! Limits (Service Bus quotas, "Size of SQL filters or actions"): an expression is at most
//! 1024 characters and an action at most 32 statements. Nesting (parentheses, `NOT`, unary
//! signs) is capped at 64 levels so that no expression can exhaust the stack.

use std::borrow::Cow;

use super::error::SqlError;
use super::eval;
use super::jms::JmsIdentifier;
use super::lexer::{Keyword, Lexer, Symbol, Token, TokenKind};
use super::like::LikePattern;
use super::syntax::{
    Arithmetic, Comparison, Condition, Dialect, Operand, Pattern, Property, Sign, Statement, Truth,
};
use super::value::Value;
use super::view::{names_equal, SystemProperty};

/// Longest expression, in characters (Service Bus: "Maximum length of filter condition
/// string: 1,024", and the same for rule actions).
const MAX_LENGTH: usize = 1024;
/// Most statements in one action (Service Bus: "Maximum number of expressions per rule
/// action: 32").
const MAX_STATEMENTS: usize = 32;
/// Deepest nesting of parentheses, `NOT` and unary signs.
const MAX_NESTING: usize = 64;

/// A filter's or action's parameters: each `@name` with the value it stands for.
pub type Parameters = [(String, Value)];

/// Parses a SQL filter expression into its condition, its `@name` parameters replaced by
/// their values.
pub(super) fn parse_condition(
    source: &str,
    parameters: &Parameters,
) -> Result<Condition, SqlError> {
    Parser::new(source, parameters, Dialect::Sql)?.whole_condition()
}

/// Parses a JMS message selector into its condition.
pub(super) fn parse_selector(source: &str) -> Result<Condition, SqlError> {
    Parser::new(source, &[], Dialect::Jms)?.whole_condition()
}

/// Parses a SQL action: `SET property = value` and `REMOVE property` statements, each
/// optionally ended by `;`; its `@name` parameters replaced by their values.
pub(super) fn parse_statements(
    source: &str,
    parameters: &Parameters,
) -> Result<Vec<Statement>, SqlError> {
    let mut parser = Parser::new(source, parameters, Dialect::Sql)?;
    let mut statements = Vec::new();
    loop {
        let offset = parser.token.offset;
        match parser.token.kind {
            TokenKind::End if !statements.is_empty() => return Ok(statements),
            TokenKind::Keyword(Keyword::Set | Keyword::Remove)
                if statements.len() == MAX_STATEMENTS =>
            {
                return Err(SqlError::new(
                    offset,
                    format!("an action can hold at most {MAX_STATEMENTS} statements"),
                ));
            }
            TokenKind::Keyword(Keyword::Set) => {
                parser.advance()?;
                let target = parser.property()?;
                parser.expect(Symbol::Equal, "after the property of SET")?;
                let value = parser.operand()?;
                statements.push(Statement::Set { target, value });
            }
            TokenKind::Keyword(Keyword::Remove) => {
                parser.advance()?;
                statements.push(Statement::Remove(parser.property()?));
            }
            _ => return Err(parser.unexpected("SET or REMOVE")),
        }
        if parser.token.kind == TokenKind::Symbol(Symbol::Semicolon) {
            parser.advance()?;
        }
    }
}

/// A parsed piece that is either a condition or a value, and where it starts.
struct Term {
    node: Node,
    offset: usize,
}

/// What a [`Term`] turned out to be.
enum Node {
    Condition(Condition),
    Operand(Operand),
}

impl Term {
    fn condition(condition: Condition, offset: usize) -> Term {
        Term {
            node: Node::Condition(condition),
            offset,
        }
    }

    fn operand(operand: Operand, offset: usize) -> Term {
        Term {
            node: Node::Operand(operand),
            offset,
        }
    }

    /// The term as a condition, or an error if it is a value. A JMS selector also takes a
    /// boolean identifier or constant for a condition (as Qpid JMS's parser does).
    fn into_condition(self, dialect: Dialect) -> Result<Condition, SqlError> {
        let Term { node, offset } = self;
        match (node, dialect) {
            (Node::Condition(condition), _) => Ok(condition),
            (Node::Operand(Operand::Literal(Value::Bool(flag))), Dialect::Jms) => {
                Ok(Condition::Constant(Truth::from_bool(flag)))
            }
            (Node::Operand(identifier @ Operand::Identifier(_)), Dialect::Jms) => {
                Ok(Condition::Boolean(identifier))
            }
            (Node::Operand(_), Dialect::Sql) => Err(SqlError::new(
                offset,
                "expected a condition (a comparison, IN, LIKE, IS NULL or EXISTS), found a value",
            )),
            (Node::Operand(_), Dialect::Jms) => Err(SqlError::new(
                offset,
                "expected a condition (a comparison, BETWEEN, IN, LIKE, IS NULL or a boolean \
                 identifier), found a value",
            )),
        }
    }

    /// The term as a value, or an error if it is a condition.
    fn into_operand(self) -> Result<Operand, SqlError> {
        match self.node {
            Node::Operand(operand) => Ok(operand),
            Node::Condition(_) => Err(SqlError::new(
                self.offset,
                "expected a value, found a condition",
            )),
        }
    }
}

/// The parser state: the lexer, the current token and the nesting depth.
struct Parser<'s> {
    lexer: Lexer<'s>,
    token: Token<'s>,
    nesting: usize,
    parameters: &'s Parameters,
    dialect: Dialect,
}

impl<'s> Parser<'s> {
    /// A parser at the first token of `source` (written in `dialect`), once its length is
    /// checked.
    fn new(
        source: &'s str,
        parameters: &'s Parameters,
        dialect: Dialect,
    ) -> Result<Parser<'s>, SqlError> {
        if let Some((offset, _)) = source.char_indices().nth(MAX_LENGTH) {
            return Err(SqlError::new(
                offset,
                format!("the expression is longer than {MAX_LENGTH} characters"),
            ));
        }
        if source.trim().is_empty() {
            return Err(SqlError::new(0, "the expression is empty"));
        }
        let mut lexer = Lexer::new(source, dialect);
        let token = lexer.next_token()?;
        Ok(Parser {
            lexer,
            token,
            nesting: 0,
            parameters,
            dialect,
        })
    }

    /// Moves to the next token, returning the current one.
    fn advance(&mut self) -> Result<Token<'s>, SqlError> {
        let next = self.lexer.next_token()?;
        Ok(std::mem::replace(&mut self.token, next))
    }

    /// Whether the current token is `symbol`.
    fn at(&self, symbol: Symbol) -> bool {
        self.token.kind == TokenKind::Symbol(symbol)
    }

    /// Whether the current token is `keyword`.
    fn at_keyword(&self, keyword: Keyword) -> bool {
        self.token.kind == TokenKind::Keyword(keyword)
    }

    /// Consumes `symbol`, or fails with "expected '{symbol}' {context}".
    fn expect(&mut self, symbol: Symbol, context: &str) -> Result<(), SqlError> {
        if self.at(symbol) {
            self.advance()?;
            Ok(())
        } else {
            Err(self.unexpected(&format!("'{}' {context}", symbol.text())))
        }
    }

    /// "expected {wanted}, found {current token}" at the current token.
    fn unexpected(&self, wanted: &str) -> SqlError {
        SqlError::new(
            self.token.offset,
            format!("expected {wanted}, found {}", self.token.kind),
        )
    }

    /// Enters one more level of nesting that starts at `offset`.
    fn nest(&mut self, offset: usize) -> Result<(), SqlError> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(SqlError::new(
                offset,
                format!("the expression is nested more than {MAX_NESTING} levels deep"),
            ));
        }
        Ok(())
    }

    /// The expression, a condition up to its end.
    fn whole_condition(&mut self) -> Result<Condition, SqlError> {
        let condition = self.condition()?;
        if self.token.kind != TokenKind::End {
            return Err(self.unexpected(match self.dialect {
                Dialect::Sql => "AND, OR or the end of the filter",
                Dialect::Jms => "AND, OR or the end of the selector",
            }));
        }
        Ok(condition)
    }

    /// A whole condition.
    fn condition(&mut self) -> Result<Condition, SqlError> {
        self.or()?.into_condition(self.dialect)
    }

    /// A whole value.
    fn operand(&mut self) -> Result<Operand, SqlError> {
        self.or()?.into_operand()
    }

    /// `and (OR and)*`.
    fn or(&mut self) -> Result<Term, SqlError> {
        let first = self.and()?;
        if !self.at_keyword(Keyword::Or) {
            return Ok(first);
        }
        let offset = first.offset;
        let mut any = vec![first.into_condition(self.dialect)?];
        while self.at_keyword(Keyword::Or) {
            self.advance()?;
            any.push(self.and()?.into_condition(self.dialect)?);
        }
        Ok(Term::condition(Condition::Any(any), offset))
    }

    /// `not (AND not)*`.
    fn and(&mut self) -> Result<Term, SqlError> {
        let first = self.not()?;
        if !self.at_keyword(Keyword::And) {
            return Ok(first);
        }
        let offset = first.offset;
        let mut all = vec![first.into_condition(self.dialect)?];
        while self.at_keyword(Keyword::And) {
            self.advance()?;
            all.push(self.not()?.into_condition(self.dialect)?);
        }
        Ok(Term::condition(Condition::All(all), offset))
    }

    /// `NOT not | comparison`.
    fn not(&mut self) -> Result<Term, SqlError> {
        if !self.at_keyword(Keyword::Not) {
            return self.comparison();
        }
        let offset = self.advance()?.offset;
        self.nest(offset)?;
        let negated = self.not()?.into_condition(self.dialect)?;
        self.nesting -= 1;
        Ok(Term::condition(Condition::Not(Box::new(negated)), offset))
    }

    /// `additive [op additive | IS [NOT] NULL | [NOT] IN (...) | [NOT] LIKE ... | [NOT]
    /// BETWEEN ...]` (`BETWEEN` in JMS selectors only).
    fn comparison(&mut self) -> Result<Term, SqlError> {
        let left = self.additive()?;
        let offset = left.offset;
        let op = match self.token.kind {
            TokenKind::Symbol(Symbol::Equal) => Comparison::Equal,
            TokenKind::Symbol(Symbol::NotEqual) => Comparison::NotEqual,
            TokenKind::Symbol(Symbol::Less) => Comparison::Less,
            TokenKind::Symbol(Symbol::LessOrEqual) => Comparison::LessOrEqual,
            TokenKind::Symbol(Symbol::Greater) => Comparison::Greater,
            TokenKind::Symbol(Symbol::GreaterOrEqual) => Comparison::GreaterOrEqual,
            TokenKind::Keyword(Keyword::Is) => {
                self.advance()?;
                let negated = self.at_keyword(Keyword::Not);
                if negated {
                    self.advance()?;
                }
                if !self.at_keyword(Keyword::Null) {
                    return Err(self.unexpected(if negated {
                        "NULL after IS NOT"
                    } else {
                        "NULL or NOT NULL after IS"
                    }));
                }
                self.advance()?;
                let operand = left.into_operand()?;
                return Ok(Term::condition(
                    Condition::IsNull { operand, negated },
                    offset,
                ));
            }
            TokenKind::Keyword(Keyword::In) => return self.in_list(left, false),
            TokenKind::Keyword(Keyword::Like) => return self.like(left, false),
            TokenKind::Keyword(Keyword::Between) => return self.between(left, false),
            TokenKind::Keyword(Keyword::Not) => {
                self.advance()?;
                return match self.token.kind {
                    TokenKind::Keyword(Keyword::In) => self.in_list(left, true),
                    TokenKind::Keyword(Keyword::Like) => self.like(left, true),
                    TokenKind::Keyword(Keyword::Between) => self.between(left, true),
                    _ if self.dialect == Dialect::Jms => {
                        Err(self.unexpected("IN, LIKE or BETWEEN after NOT"))
                    }
                    _ => Err(self.unexpected("IN or LIKE after NOT")),
                };
            }
            _ => return Ok(left),
        };
        self.advance()?;
        let left = (left.into_operand()?, offset);
        let right = self.additive()?;
        let right_offset = right.offset;
        let condition = self.compare(left, op, (right.into_operand()?, right_offset))?;
        Ok(Term::condition(condition, offset))
    }

    /// `left op right`, each value with its offset. Two constants fold to a constant (`1=1`
    /// and `1=0`, the TrueFilter and FalseFilter) unless comparing them throws, so that it
    /// throws for every message as it should. In a JMS selector, `< <= > >=` compare numbers:
    /// a string or boolean constant on either side is refused (JMS 2.0 §3.8.1.1: "String and
    /// Boolean comparison is restricted to = and <>", as Qpid JMS's parser checks).
    fn compare(
        &self,
        (left, left_offset): (Operand, usize),
        op: Comparison,
        (right, right_offset): (Operand, usize),
    ) -> Result<Condition, SqlError> {
        let orders = !matches!(op, Comparison::Equal | Comparison::NotEqual);
        if self.dialect == Dialect::Jms && orders {
            for (operand, offset) in [(&left, left_offset), (&right, right_offset)] {
                let kind = match operand {
                    Operand::Literal(Value::String(_)) => "string",
                    Operand::Literal(Value::Bool(_)) => "boolean",
                    _ => continue,
                };
                return Err(SqlError::new(
                    offset,
                    format!(
                        "'{}' compares numbers: a {kind} can be compared with = and <> only",
                        op.text()
                    ),
                ));
            }
        }
        Ok(match (&left, &right) {
            (Operand::Literal(l), Operand::Literal(r)) => {
                eval::compare_values(self.dialect, l, op, r)
                    .map_or(Condition::Compare { left, op, right }, Condition::Constant)
            }
            _ => Condition::Compare { left, op, right },
        })
    }

    /// `[NOT] BETWEEN low AND high`, the current token being `BETWEEN`: `value >= low AND
    /// value <= high`, and NOT BETWEEN `value < low OR value > high` (JMS 2.0 §3.8.1.1).
    fn between(&mut self, value: Term, negated: bool) -> Result<Term, SqlError> {
        let offset = value.offset;
        let value = value.into_operand()?;
        self.advance()?;
        let low_offset = self.token.offset;
        let low = self.additive()?.into_operand()?;
        if !self.at_keyword(Keyword::And) {
            return Err(self.unexpected("AND between the bounds of BETWEEN"));
        }
        self.advance()?;
        let high_offset = self.token.offset;
        let high = self.additive()?.into_operand()?;
        let (below, above) = match negated {
            false => (Comparison::GreaterOrEqual, Comparison::LessOrEqual),
            true => (Comparison::Less, Comparison::Greater),
        };
        let both = vec![
            self.compare((value.clone(), offset), below, (low, low_offset))?,
            self.compare((value, offset), above, (high, high_offset))?,
        ];
        let condition = match negated {
            false => Condition::All(both),
            true => Condition::Any(both),
        };
        Ok(Term::condition(condition, offset))
    }

    /// `[NOT] IN ( value [, value]* )`, the current token being `IN`. In a JMS selector, an
    /// identifier `IN` string literals.
    fn in_list(&mut self, left: Term, negated: bool) -> Result<Term, SqlError> {
        let offset = left.offset;
        let operand = left.into_operand()?;
        if self.dialect == Dialect::Jms && !matches!(operand, Operand::Identifier(_)) {
            return Err(SqlError::new(
                offset,
                "the left side of IN must be an identifier",
            ));
        }
        self.advance()?;
        self.expect(Symbol::OpenParen, "after IN")?;
        if self.at(Symbol::CloseParen) {
            return Err(self.unexpected("a value in the IN list"));
        }
        let mut list = Vec::new();
        loop {
            list.push(self.value_or_string("the list of IN holds string literals only")?);
            match self.token.kind {
                TokenKind::Symbol(Symbol::Comma) => {
                    self.advance()?;
                }
                TokenKind::Symbol(Symbol::CloseParen) => {
                    self.advance()?;
                    break;
                }
                _ => return Err(self.unexpected("',' or ')' after IN list")),
            }
        }
        Ok(Term::condition(
            Condition::In {
                operand,
                list,
                negated,
            },
            offset,
        ))
    }

    /// `[NOT] LIKE pattern [ESCAPE escape]`, the current token being `LIKE`. Constant patterns
    /// are compiled here, so their errors are syntax errors; a JMS selector has no others.
    fn like(&mut self, left: Term, negated: bool) -> Result<Term, SqlError> {
        let offset = left.offset;
        let operand = left.into_operand()?;
        self.advance()?;
        let pattern_offset = self.token.offset;
        let pattern =
            self.value_or_string("the LIKE pattern of a JMS selector is a string literal")?;
        let escape = if self.at_keyword(Keyword::Escape) {
            self.advance()?;
            let escape_offset = self.token.offset;
            let escape =
                self.value_or_string("the ESCAPE character must be a string of one character")?;
            Some((escape_offset, escape))
        } else {
            None
        };
        let pattern = match (pattern, escape) {
            (Operand::Literal(Value::String(text)), None) => Pattern::Compiled(
                LikePattern::compile(&text, None)
                    .map_err(|message| SqlError::new(pattern_offset, message))?,
            ),
            (
                Operand::Literal(Value::String(text)),
                Some((escape_offset, Operand::Literal(Value::String(escape)))),
            ) => {
                let mut chars = escape.chars();
                let (Some(escape), None) = (chars.next(), chars.next()) else {
                    return Err(SqlError::new(
                        escape_offset,
                        "the ESCAPE character must be a string of one character",
                    ));
                };
                Pattern::Compiled(
                    LikePattern::compile(&text, Some(escape))
                        .map_err(|message| SqlError::new(pattern_offset, message))?,
                )
            }
            (Operand::Literal(value), _) if !matches!(value, Value::Null | Value::String(_)) => {
                return Err(SqlError::new(
                    pattern_offset,
                    "the LIKE pattern must be a string",
                ));
            }
            (_, Some((escape_offset, Operand::Literal(value))))
                if !matches!(value, Value::Null | Value::String(_)) =>
            {
                return Err(SqlError::new(
                    escape_offset,
                    "the ESCAPE character must be a string of one character",
                ));
            }
            (pattern, escape) => Pattern::Computed {
                pattern: Box::new(pattern),
                escape: escape.map(|(_, escape)| Box::new(escape)),
            },
        };
        Ok(Term::condition(
            Condition::Like {
                operand,
                pattern,
                negated,
            },
            offset,
        ))
    }

    /// A value in SQL; in a JMS selector, a string literal, anything else refused with
    /// `refusal` (an IN list, a LIKE pattern and its escape take nothing else there).
    fn value_or_string(&mut self, refusal: &str) -> Result<Operand, SqlError> {
        if self.dialect == Dialect::Sql {
            return self.additive()?.into_operand();
        }
        let token = self.advance()?;
        match token.kind {
            TokenKind::Text(text) => Ok(Operand::Literal(Value::String(text.into_owned()))),
            kind => Err(SqlError::new(
                token.offset,
                format!("{refusal}, found {kind}"),
            )),
        }
    }

    /// `multiplicative ((+|-) multiplicative)*`.
    fn additive(&mut self) -> Result<Term, SqlError> {
        let mut left = self.multiplicative()?;
        loop {
            let op = match self.token.kind {
                TokenKind::Symbol(Symbol::Plus) => Arithmetic::Add,
                TokenKind::Symbol(Symbol::Minus) => Arithmetic::Subtract,
                _ => return Ok(left),
            };
            self.advance()?;
            let right = self.multiplicative()?;
            left = arithmetic(left, op, right)?;
        }
    }

    /// `unary ((*|/|%) unary)*`.
    fn multiplicative(&mut self) -> Result<Term, SqlError> {
        let mut left = self.unary()?;
        loop {
            let op = match self.token.kind {
                TokenKind::Symbol(Symbol::Star) => Arithmetic::Multiply,
                TokenKind::Symbol(Symbol::Slash) => Arithmetic::Divide,
                TokenKind::Symbol(Symbol::Percent) => Arithmetic::Remainder,
                _ => return Ok(left),
            };
            self.advance()?;
            let right = self.unary()?;
            left = arithmetic(left, op, right)?;
        }
    }

    /// `(+|-) unary | primary`. A sign on a number constant is folded into it, which is also
    /// how `-9223372036854775808` is written.
    fn unary(&mut self) -> Result<Term, SqlError> {
        let sign = match self.token.kind {
            TokenKind::Symbol(Symbol::Plus) => Sign::Plus,
            TokenKind::Symbol(Symbol::Minus) => Sign::Minus,
            _ => return self.primary(),
        };
        let offset = self.advance()?.offset;
        if let (Sign::Minus, TokenKind::Integer(magnitude)) = (sign, &self.token.kind) {
            let value = i64::try_from(-i128::from(*magnitude))
                .map_err(|_| SqlError::new(offset, "integer constant out of range"))?;
            self.advance()?;
            return Ok(Term::operand(Operand::Literal(Value::Int(value)), offset));
        }
        self.nest(offset)?;
        let operand = self.unary()?.into_operand()?;
        self.nesting -= 1;
        let operand = match (sign, operand) {
            (Sign::Plus, literal @ Operand::Literal(Value::Int(_) | Value::Float(_))) => literal,
            (Sign::Minus, Operand::Literal(Value::Float(n))) => Operand::Literal(Value::Float(-n)),
            (op, operand) => Operand::Unary {
                op,
                operand: Box::new(operand),
            },
        };
        Ok(Term::operand(operand, offset))
    }

    /// A constant, a property, a function call, `EXISTS(property)` or a parenthesised term.
    fn primary(&mut self) -> Result<Term, SqlError> {
        let offset = self.token.offset;
        let literal = match &self.token.kind {
            TokenKind::Integer(n) => Value::Int(i64::try_from(*n).map_err(|_| {
                SqlError::new(
                    offset,
                    "integer constant out of range (64-bit signed integers)",
                )
            })?),
            TokenKind::Decimal(n) => Value::Float(*n),
            TokenKind::Text(text) => Value::String(text.to_string()),
            TokenKind::Parameter(name) => {
                let given = self
                    .parameters
                    .iter()
                    .find(|(p, _)| p.eq_ignore_ascii_case(name));
                let Some((_, value)) = given else {
                    let message = format!("parameter {name} has no value");
                    return Err(SqlError::new(offset, message));
                };
                value.clone()
            }
            TokenKind::Keyword(Keyword::True) => Value::Bool(true),
            TokenKind::Keyword(Keyword::False) => Value::Bool(false),
            TokenKind::Keyword(Keyword::Null) if self.dialect == Dialect::Jms => {
                return Err(SqlError::new(
                    offset,
                    "NULL is not a value in a JMS selector: test for it with IS NULL or IS NOT \
                     NULL",
                ));
            }
            TokenKind::Keyword(Keyword::Null) => Value::Null,
            TokenKind::Keyword(Keyword::Exists) => {
                self.advance()?;
                self.expect(Symbol::OpenParen, "after EXISTS")?;
                let property = self.property()?;
                self.expect(Symbol::CloseParen, "after the property of EXISTS")?;
                return Ok(Term::condition(Condition::Exists(property), offset));
            }
            TokenKind::Symbol(Symbol::OpenParen) => {
                self.advance()?;
                self.nest(offset)?;
                let inner = self.or()?;
                self.expect(
                    Symbol::CloseParen,
                    &format!("to close the '(' at position {}", offset + 1),
                )?;
                self.nesting -= 1;
                return Ok(Term {
                    node: inner.node,
                    offset,
                });
            }
            TokenKind::Word(name) if self.dialect == Dialect::Jms => {
                let identifier = JmsIdentifier::resolve(name)
                    .map_err(|message| SqlError::new(offset, message))?;
                self.advance()?;
                return Ok(Term::operand(Operand::Identifier(identifier), offset));
            }
            TokenKind::Word(word) => {
                let word: &'s str = word;
                self.advance()?;
                let operand = if self.at(Symbol::OpenParen) {
                    self.call(word, offset)?
                } else if self.at(Symbol::Dot) {
                    self.advance()?;
                    Operand::Property(self.scoped(word, offset)?)
                } else {
                    Operand::Property(Property::Application(word.into()))
                };
                return Ok(Term::operand(operand, offset));
            }
            TokenKind::Delimited(_) => {
                return Ok(Term::operand(Operand::Property(self.property()?), offset));
            }
            _ => return Err(self.unexpected("a value")),
        };
        self.advance()?;
        Ok(Term::operand(Operand::Literal(literal), offset))
    }

    /// `newid()`, `property(name)` or `p(name)`: the function `name` (at `offset`), the
    /// current token being the `(` after it.
    fn call(&mut self, name: &str, offset: usize) -> Result<Operand, SqlError> {
        self.advance()?;
        self.nest(offset)?;
        let call = if names_equal(name, "newid") {
            Operand::NewId
        } else if names_equal(name, "property") || names_equal(name, "p") {
            Operand::PropertyNamed(Box::new(self.operand()?))
        } else {
            return Err(SqlError::new(
                offset,
                format!("unknown function '{name}' (functions: newid(), property(name), p(name))"),
            ));
        };
        self.expect(
            Symbol::CloseParen,
            &format!("to close the call of {name}()"),
        )?;
        self.nesting -= 1;
        Ok(call)
    }

    /// `[sys. | user.] name`, the current token being the first name.
    fn property(&mut self) -> Result<Property, SqlError> {
        let token = self.advance()?;
        match token.kind {
            TokenKind::Word(word) if self.at(Symbol::Dot) => {
                self.advance()?;
                self.scoped(word, token.offset)
            }
            TokenKind::Word(word) => Ok(Property::Application(word.into())),
            TokenKind::Delimited(name) => Ok(Property::Application(name.into())),
            kind => Err(SqlError::new(
                token.offset,
                format!("expected a property name, found {kind}"),
            )),
        }
    }

    /// The name after `scope.`, the current token being that name.
    fn scoped(&mut self, scope: &str, scope_offset: usize) -> Result<Property, SqlError> {
        let system = names_equal(scope, "sys");
        if !system && !names_equal(scope, "user") {
            return Err(SqlError::new(
                scope_offset,
                format!("unknown property scope '{scope}.' (scopes are sys. and user.)"),
            ));
        }
        let token = self.advance()?;
        let name = match token.kind {
            TokenKind::Word(word) => Cow::Borrowed(word),
            TokenKind::Delimited(name) => name,
            kind => {
                return Err(SqlError::new(
                    token.offset,
                    format!("expected a property name after '{scope}.', found {kind}"),
                ))
            }
        };
        if system {
            SystemProperty::resolve(&name)
                .map(Property::System)
                .map_err(|message| SqlError::new(token.offset, message))
        } else {
            Ok(Property::Application(name.into()))
        }
    }
}

/// `left op right` for two values.
fn arithmetic(left: Term, op: Arithmetic, right: Term) -> Result<Term, SqlError> {
    let offset = left.offset;
    let operand = Operand::Arithmetic {
        left: Box::new(left.into_operand()?),
        op,
        right: Box::new(right.into_operand()?),
    };
    Ok(Term::operand(operand, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A condition without parameters.
    fn parse_condition(source: &str) -> Result<Condition, SqlError> {
        super::parse_condition(source, &[])
    }
    use crate::filter::syntax::Truth;

    /// The error `source` fails to parse with, as (offset, message).
    fn error(source: &str) -> (usize, String) {
        let error = parse_condition(source).expect_err(source);
        (error.offset, error.message)
    }

    fn fails(source: &str, offset: usize, message: &str) {
        assert_eq!(error(source), (offset, message.to_owned()), "{source}");
    }

    #[test]
    fn the_true_and_false_filters_fold_to_constants() {
        assert_eq!(parse_condition("1=1"), Ok(Condition::Constant(Truth::True)));
        assert_eq!(
            parse_condition("1=0"),
            Ok(Condition::Constant(Truth::False))
        );
        assert_eq!(
            parse_condition(" 1 = 1 "),
            Ok(Condition::Constant(Truth::True))
        );
        // A constant comparison that throws is kept, to throw for each message.
        assert!(matches!(
            parse_condition("1 = 'a'"),
            Ok(Condition::Compare { .. })
        ));
    }

    #[test]
    fn and_or_chains_are_flat() {
        let chain = vec!["a = 1"; 100].join(" OR ");
        let Ok(Condition::Any(any)) = parse_condition(&chain) else {
            panic!("not a flat OR");
        };
        assert_eq!(any.len(), 100);
        let Ok(Condition::All(all)) = parse_condition("a = 1 AND b = 2 AND c = 3") else {
            panic!("not a flat AND");
        };
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn and_binds_tighter_than_or_and_not_tighter_than_and() {
        let Ok(Condition::Any(any)) = parse_condition("a = 1 OR NOT b = 2 AND c = 3") else {
            panic!("OR is not the root");
        };
        assert!(matches!(any[0], Condition::Compare { .. }));
        let Condition::All(all) = &any[1] else {
            panic!("AND is not under OR");
        };
        assert!(matches!(all[0], Condition::Not(_)));
    }

    #[test]
    fn scopes_and_quoted_names_resolve_to_properties() {
        let property = |source: &str| match parse_condition(&format!("EXISTS({source})")) {
            Ok(Condition::Exists(property)) => property,
            other => panic!("{source}: {other:?}"),
        };
        let application = |name: &str| Property::Application(name.into());
        assert_eq!(property("region"), application("region"));
        assert_eq!(property("user.region"), application("region"));
        assert_eq!(property("USER.[my prop]"), application("my prop"));
        assert_eq!(property("[HR-EmployeeID]"), application("HR-EmployeeID"));
        assert_eq!(
            property("\"Contoso & Northwind\""),
            application("Contoso & Northwind")
        );
        assert_eq!(property("sys"), application("sys"));
        assert_eq!(
            property("Sys.label"),
            Property::System(SystemProperty::Subject)
        );
        assert_eq!(
            property("sys.[ReplyToSessionId]"),
            Property::System(SystemProperty::ReplyToSessionId)
        );
    }

    #[test]
    fn misplaced_conditions_and_values() {
        fails(
            "region",
            0,
            "expected a condition (a comparison, IN, LIKE, IS NULL or EXISTS), found a value",
        );
        fails(
            "a = 1 AND b + 1",
            10,
            "expected a condition (a comparison, IN, LIKE, IS NULL or EXISTS), found a value",
        );
        fails("(a = 1) + 1", 0, "expected a value, found a condition");
        fails("a = (b = 1)", 4, "expected a value, found a condition");
        fails(
            "a = 1 = 1",
            6,
            "expected AND, OR or the end of the filter, found '='",
        );
        fails(
            "a = 1 b",
            6,
            "expected AND, OR or the end of the filter, found name 'b'",
        );
        fails("a == 1", 3, "expected a value, found '='");
        fails(
            "a = ",
            4,
            "expected a value, found the end of the expression",
        );
        fails("escape = '!'", 0, "expected a value, found ESCAPE");
        fails("", 0, "the expression is empty");
        fails("  ", 0, "the expression is empty");
    }

    #[test]
    fn errors_in_in_lists() {
        fails(
            "region IN ('eu', 'us'",
            21,
            "expected ',' or ')' after IN list, found the end of the expression",
        );
        fails(
            "region IN ('eu' 'us')",
            16,
            "expected ',' or ')' after IN list, found string 'us'",
        );
        fails(
            "region IN 'eu'",
            10,
            "expected '(' after IN, found string 'eu'",
        );
        fails(
            "region IN ()",
            11,
            "expected a value in the IN list, found ')'",
        );
        fails(
            "region NOT = 'eu'",
            11,
            "expected IN or LIKE after NOT, found '='",
        );
    }

    #[test]
    fn errors_in_is_exists_and_parentheses() {
        fails(
            "a IS 1",
            5,
            "expected NULL or NOT NULL after IS, found number 1",
        );
        fails("a IS NOT TRUE", 9, "expected NULL after IS NOT, found TRUE");
        fails(
            "EXISTS region",
            7,
            "expected '(' after EXISTS, found name 'region'",
        );
        fails("EXISTS(1)", 7, "expected a property name, found number 1");
        fails(
            "EXISTS(a OR",
            9,
            "expected ')' after the property of EXISTS, found OR",
        );
        fails(
            "(a = 1 AND (b = 2)",
            18,
            "expected ')' to close the '(' at position 1, found the end of the expression",
        );
        fails(
            "a = 1)",
            5,
            "expected AND, OR or the end of the filter, found ')'",
        );
    }

    #[test]
    fn errors_in_property_names() {
        fails(
            "foo.bar = 1",
            0,
            "unknown property scope 'foo.' (scopes are sys. and user.)",
        );
        fails(
            "sys. = 1",
            5,
            "expected a property name after 'sys.', found '='",
        );
        let (offset, message) = error("sys.Colour = 'red'");
        assert_eq!(offset, 4);
        assert!(
            message.starts_with("unknown system property sys.Colour"),
            "{message}"
        );
        let (offset, message) = error("x = 1 OR sys.DeliveryCount > 3");
        assert_eq!(offset, 13);
        assert!(
            message.starts_with("system property sys.DeliveryCount is not supported"),
            "{message}"
        );
    }

    #[test]
    fn errors_in_like() {
        fails("a LIKE 5", 7, "the LIKE pattern must be a string");
        fails(
            "a LIKE 'x' ESCAPE 'ab'",
            18,
            "the ESCAPE character must be a string of one character",
        );
        fails(
            "a LIKE 'x' ESCAPE 1",
            18,
            "the ESCAPE character must be a string of one character",
        );
        fails(
            "a NOT LIKE 'x!' ESCAPE '!'",
            11,
            "the LIKE pattern 'x!' ends with its escape character '!'",
        );
    }

    #[test]
    fn errors_in_functions_and_constants() {
        fails(
            "foo(1) = 1",
            0,
            "unknown function 'foo' (functions: newid(), property(name), p(name))",
        );
        fails(
            "newid(1) = 1",
            6,
            "expected ')' to close the call of newid(), found number 1",
        );
        fails(
            "a = 9223372036854775808",
            4,
            "integer constant out of range (64-bit signed integers)",
        );
        fails("a = 'it''s", 4, "unterminated string literal");
        fails("a = @value", 4, "parameter @value has no value");
        assert_eq!(
            parse_condition("a = -9223372036854775808"),
            Ok(Condition::Compare {
                left: Operand::Property(Property::Application("a".into())),
                op: Comparison::Equal,
                right: Operand::Literal(Value::Int(i64::MIN)),
            })
        );
    }

    #[test]
    fn expressions_longer_than_1024_characters_are_refused() {
        let longest = format!("a = '{}'", "x".repeat(1024 - 6));
        assert!(parse_condition(&longest).is_ok());
        fails(
            &format!("{longest} "),
            1024,
            "the expression is longer than 1024 characters",
        );
        // Characters, not bytes: 1024 two-byte letters are within the limit.
        let wide = format!("a = '{}'", "é".repeat(1024 - 6));
        assert!(parse_condition(&wide).is_ok());
        fails(
            &format!("{wide}é"),
            wide.len(),
            "the expression is longer than 1024 characters",
        );
    }

    #[test]
    fn hostile_nesting_is_an_error_not_a_stack_overflow() {
        fails(
            &"(".repeat(100_000),
            1024,
            "the expression is longer than 1024 characters",
        );
        let nested = |depth: usize| format!("{}a = 1{}", "(".repeat(depth), ")".repeat(depth));
        assert!(parse_condition(&nested(64)).is_ok());
        fails(
            &nested(65),
            64,
            "the expression is nested more than 64 levels deep",
        );
        fails(
            &format!("{}a = 1", "NOT ".repeat(65)),
            256,
            "the expression is nested more than 64 levels deep",
        );
        fails(
            &format!("a = {}b", "- ".repeat(65)),
            132,
            "the expression is nested more than 64 levels deep",
        );
        fails(
            &format!("{}1) = 1", "p(".repeat(65)),
            128,
            "the expression is nested more than 64 levels deep",
        );
    }

    #[test]
    fn parameters_stand_for_their_values_by_name_ignoring_case() {
        let parameters = [
            ("@Level".to_owned(), Value::Int(2)),
            ("@when".to_owned(), Value::Timestamp(5)),
        ];
        assert_eq!(
            super::parse_condition("a = @level", &parameters),
            Ok(Condition::Compare {
                left: Operand::Property(Property::Application("a".into())),
                op: Comparison::Equal,
                right: Operand::Literal(Value::Int(2)),
            })
        );
        let statements = parse_statements("SET b = @WHEN", &parameters).expect("parses");
        assert_eq!(
            statements,
            vec![Statement::Set {
                target: Property::Application("b".into()),
                value: Operand::Literal(Value::Timestamp(5)),
            }]
        );
    }
}
