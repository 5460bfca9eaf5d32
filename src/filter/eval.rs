//! Evaluates parsed conditions and values against one message, without allocating for the
//! common cases (strings are borrowed from the message or the rule).
//!
//! Unknowns (SQL filter syntax, "Property evaluation semantics"): a missing application
//! property is unknown, and so is NULL here; an arithmetic, comparison or `LIKE` with an
//! unknown operand is unknown, as is `IN` with an unknown left side; `AND`, `OR` and `NOT`
//! follow the three-valued tables (`NOT` unknown is unknown). Only true selects a message.
//!
//! Types (SQL filter syntax, "Operator binding semantics": comparison and arithmetic operators
//! "follow the same semantics as the C# operator binding in data type promotions and implicit
//! conversions"):
//!
//! * integers and numbers compare and compute with each other, the integer promoted to a
//!   double; integer arithmetic is 64-bit, `/` truncates, and overflow or a division (or `%`)
//!   by zero is an evaluation error; number arithmetic follows IEEE 754 (`1.0 / 0` is
//!   infinity);
//! * strings, booleans and uuids support `=` and `<>` among themselves (C# defines no ordering
//!   operator for them); `+` concatenates two strings; timestamps compare with timestamps;
//! * any other mix, e.g. a string compared with or added to a number, has no C# implicit
//!   conversion, so it is an evaluation error (a filter evaluation exception), not false.
//!   String comparison is ordinal and case-sensitive, as C# `==` is.

use std::borrow::Cow;
use std::cmp::Ordering;

use fe2o3_amqp::types::primitives::SimpleValue;

use super::error::EvalError;
use super::like::LikePattern;
use super::syntax::{
    Arithmetic, Comparison, Condition, Dialect, Operand, Pattern, Property, Sign, Truth,
};
use super::value::Value;
use super::view::{MessageView, SystemProperty};

/// What conditions and values read a message through: the message itself, or the message
/// with an action's earlier statements applied.
pub(super) trait Scope {
    /// The system property, `None` when the message has none.
    fn system(&self, property: SystemProperty) -> Option<&str>;
    /// The application property `name` (matched case-insensitively).
    fn application(&self, name: &str) -> Option<&Value>;
    /// The message as it arrived, whose fields a JMS selector reads (only SQL actions edit a
    /// message, and they read no JMS identifiers).
    fn message(&self) -> &MessageView;
}

impl Scope for MessageView {
    fn system(&self, property: SystemProperty) -> Option<&str> {
        MessageView::system(self, property)
    }

    fn application(&self, name: &str) -> Option<&Value> {
        self.application_property(name)
    }

    fn message(&self) -> &MessageView {
        self
    }
}

/// A value during evaluation, borrowing from the message or the rule where it can.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Scalar<'a> {
    /// NULL, or unknown (a missing property): they behave alike in every operator.
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(Cow<'a, str>),
    Timestamp(i64),
    Uuid(uuid::Uuid),
    Other(&'a SimpleValue),
}

impl<'a> Scalar<'a> {
    /// `value` borrowed.
    pub(super) fn of(value: &'a Value) -> Scalar<'a> {
        match value {
            Value::Null => Scalar::Null,
            Value::Bool(flag) => Scalar::Bool(*flag),
            Value::Int(n) => Scalar::Int(*n),
            Value::Float(n) => Scalar::Float(*n),
            Value::String(text) => Scalar::Text(Cow::Borrowed(text)),
            Value::Timestamp(ms) => Scalar::Timestamp(*ms),
            Value::Uuid(id) => Scalar::Uuid(*id),
            Value::Other(other) => Scalar::Other(other),
        }
    }

    /// The owned value (unknown becomes NULL).
    pub(super) fn into_value(self) -> Value {
        match self {
            Scalar::Null => Value::Null,
            Scalar::Bool(flag) => Value::Bool(flag),
            Scalar::Int(n) => Value::Int(n),
            Scalar::Float(n) => Value::Float(n),
            Scalar::Text(text) => Value::String(text.into_owned()),
            Scalar::Timestamp(ms) => Value::Timestamp(ms),
            Scalar::Uuid(id) => Value::Uuid(id),
            Scalar::Other(other) => Value::Other(other.clone()),
        }
    }

    /// The type's name for error messages.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Scalar::Null => "NULL",
            Scalar::Bool(_) => "boolean",
            Scalar::Int(_) => "integer",
            Scalar::Float(_) => "number",
            Scalar::Text(_) => "string",
            Scalar::Timestamp(_) => "timestamp",
            Scalar::Uuid(_) => "uuid",
            Scalar::Other(SimpleValue::Binary(_)) => "binary",
            Scalar::Other(
                SimpleValue::Decimal32(_) | SimpleValue::Decimal64(_) | SimpleValue::Decimal128(_),
            ) => "decimal",
            Scalar::Other(_) => "described value",
        }
    }
}

/// The truth of `condition`, written in `dialect`, for the message `scope` reads.
///
/// A JMS selector never throws on a type: comparing values of unlike types is false (JMS 2.0
/// §3.8.1.1), and so is `LIKE` on a value that is not a string; `IN` on one is unknown (both
/// as Qpid JMS evaluates them).
pub(super) fn condition<S: Scope>(
    condition: &Condition,
    scope: &S,
    dialect: Dialect,
) -> Result<Truth, EvalError> {
    let jms = dialect == Dialect::Jms;
    match condition {
        Condition::Constant(truth) => Ok(*truth),
        Condition::Not(inner) => Ok(self::condition(inner, scope, dialect)?.not()),
        Condition::All(all) => {
            let mut truth = Truth::True;
            for each in all {
                match self::condition(each, scope, dialect)? {
                    Truth::False => return Ok(Truth::False),
                    Truth::Unknown => truth = Truth::Unknown,
                    Truth::True => {}
                }
            }
            Ok(truth)
        }
        Condition::Any(any) => {
            let mut truth = Truth::False;
            for each in any {
                match self::condition(each, scope, dialect)? {
                    Truth::True => return Ok(Truth::True),
                    Truth::Unknown => truth = Truth::Unknown,
                    Truth::False => {}
                }
            }
            Ok(truth)
        }
        Condition::Compare { left, op, right } => compare_in(
            dialect,
            &operand(left, scope)?,
            *op,
            &operand(right, scope)?,
        ),
        Condition::IsNull { operand, negated } => {
            let null = matches!(self::operand(operand, scope)?, Scalar::Null);
            Ok(Truth::from_bool(null != *negated))
        }
        Condition::In {
            operand,
            list,
            negated,
        } => {
            let value = self::operand(operand, scope)?;
            if value == Scalar::Null || (jms && !matches!(value, Scalar::Text(_))) {
                return Ok(Truth::Unknown);
            }
            let mut truth = Truth::False;
            for item in list {
                match compare(&value, Comparison::Equal, &self::operand(item, scope)?)? {
                    Truth::True => {
                        truth = Truth::True;
                        break;
                    }
                    Truth::Unknown => truth = Truth::Unknown,
                    Truth::False => {}
                }
            }
            Ok(if *negated { truth.not() } else { truth })
        }
        Condition::Like {
            operand,
            pattern,
            negated,
        } => {
            let text = match self::operand(operand, scope)? {
                Scalar::Null => return Ok(Truth::Unknown),
                Scalar::Text(text) => text,
                _ if jms => return Ok(Truth::from_bool(*negated)),
                other => {
                    return Err(EvalError::new(format!(
                        "LIKE needs a string, found {}",
                        other.kind()
                    )))
                }
            };
            let matched = match pattern {
                Pattern::Compiled(pattern) => pattern.matches(&text),
                Pattern::Computed { pattern, escape } => {
                    match computed_pattern(pattern, escape.as_deref(), scope)? {
                        Some(pattern) => pattern.matches(&text),
                        None => return Ok(Truth::Unknown),
                    }
                }
            };
            Ok(Truth::from_bool(matched != *negated))
        }
        Condition::Exists(property) => Ok(Truth::from_bool(match property {
            Property::System(property) => scope.system(*property).is_some(),
            Property::Application(name) => scope.application(name).is_some(),
        })),
        Condition::Boolean(value) => Ok(match operand(value, scope)? {
            Scalar::Null => Truth::Unknown,
            Scalar::Bool(flag) => Truth::from_bool(flag),
            _ => Truth::False,
        }),
    }
}

/// A `LIKE` pattern computed for this message; `None` when the pattern or escape is unknown.
fn computed_pattern<S: Scope>(
    pattern: &Operand,
    escape: Option<&Operand>,
    scope: &S,
) -> Result<Option<LikePattern>, EvalError> {
    let pattern = match operand(pattern, scope)? {
        Scalar::Null => return Ok(None),
        Scalar::Text(text) => text,
        other => {
            return Err(EvalError::new(format!(
                "the LIKE pattern must be a string, found {}",
                other.kind()
            )))
        }
    };
    let escape = match escape.map(|escape| operand(escape, scope)).transpose()? {
        None => None,
        Some(Scalar::Null) => return Ok(None),
        Some(Scalar::Text(text)) => {
            let mut chars = text.chars();
            match (chars.next(), chars.next()) {
                (Some(escape), None) => Some(escape),
                _ => {
                    return Err(EvalError::new(format!(
                        "the ESCAPE character must be one character, found '{text}'"
                    )))
                }
            }
        }
        Some(other) => {
            return Err(EvalError::new(format!(
                "the ESCAPE character must be a string, found {}",
                other.kind()
            )))
        }
    };
    LikePattern::compile(&pattern, escape)
        .map(Some)
        .map_err(EvalError::new)
}

/// The value of `operand` for the message `scope` reads.
pub(super) fn operand<'a, S: Scope>(
    operand: &'a Operand,
    scope: &'a S,
) -> Result<Scalar<'a>, EvalError> {
    match operand {
        Operand::Literal(value) => Ok(Scalar::of(value)),
        Operand::Property(property) => Ok(property_value(property, scope)),
        Operand::Identifier(identifier) => Ok(identifier.value(scope.message())),
        Operand::Unary { op, operand } => signed(*op, self::operand(operand, scope)?),
        Operand::Arithmetic { left, op, right } => arithmetic(
            self::operand(left, scope)?,
            *op,
            self::operand(right, scope)?,
        ),
        Operand::NewId => Ok(Scalar::Uuid(uuid::Uuid::new_v4())),
        Operand::PropertyNamed(name) => match self::operand(name, scope)? {
            Scalar::Null => Ok(Scalar::Null),
            Scalar::Text(name) => named_property(&name, scope),
            other => Err(EvalError::new(format!(
                "property() needs a string name, found {}",
                other.kind()
            ))),
        },
    }
}

/// The value of a property reference: NULL when the message does not have it.
fn property_value<'a, S: Scope>(property: &Property, scope: &'a S) -> Scalar<'a> {
    match property {
        Property::System(property) => scope
            .system(*property)
            .map_or(Scalar::Null, |text| Scalar::Text(Cow::Borrowed(text))),
        Property::Application(name) => scope.application(name).map_or(Scalar::Null, Scalar::of),
    }
}

/// `property(name)`: `name` is `sys.Name`, `user.name` or an application property's name.
fn named_property<'a, S: Scope>(name: &str, scope: &'a S) -> Result<Scalar<'a>, EvalError> {
    let scoped = |scope: &str| {
        name.get(..scope.len())
            .filter(|prefix| prefix.eq_ignore_ascii_case(scope))
            .map(|_| &name[scope.len()..])
    };
    let property = if let Some(system) = scoped("sys.") {
        Property::System(SystemProperty::resolve(system).map_err(EvalError::new)?)
    } else {
        Property::Application(scoped("user.").unwrap_or(name).into())
    };
    Ok(property_value(&property, scope))
}

/// `+value` or `-value`.
fn signed(sign: Sign, value: Scalar<'_>) -> Result<Scalar<'_>, EvalError> {
    match (sign, value) {
        (_, Scalar::Null) => Ok(Scalar::Null),
        (Sign::Plus, number @ (Scalar::Int(_) | Scalar::Float(_))) => Ok(number),
        (Sign::Minus, Scalar::Int(n)) => n
            .checked_neg()
            .map(Scalar::Int)
            .ok_or_else(|| EvalError::new("integer overflow in unary '-'")),
        (Sign::Minus, Scalar::Float(n)) => Ok(Scalar::Float(-n)),
        (sign, other) => Err(EvalError::new(format!(
            "unary '{}' needs a number, found {}",
            if sign == Sign::Plus { '+' } else { '-' },
            other.kind()
        ))),
    }
}

/// `left op right`.
fn arithmetic<'a>(
    left: Scalar<'a>,
    op: Arithmetic,
    right: Scalar<'a>,
) -> Result<Scalar<'a>, EvalError> {
    let overflow = || EvalError::new(format!("integer overflow in '{}'", op.text()));
    match (left, right) {
        (Scalar::Null, _) | (_, Scalar::Null) => Ok(Scalar::Null),
        (Scalar::Int(a), Scalar::Int(b)) => {
            if b == 0 && matches!(op, Arithmetic::Divide | Arithmetic::Remainder) {
                return Err(EvalError::new("division by zero"));
            }
            let result = match op {
                Arithmetic::Add => a.checked_add(b),
                Arithmetic::Subtract => a.checked_sub(b),
                Arithmetic::Multiply => a.checked_mul(b),
                Arithmetic::Divide => a.checked_div(b),
                Arithmetic::Remainder => a.checked_rem(b),
            };
            result.map(Scalar::Int).ok_or_else(overflow)
        }
        (Scalar::Text(a), Scalar::Text(b)) if op == Arithmetic::Add => {
            Ok(Scalar::Text(Cow::Owned(a.into_owned() + &b)))
        }
        (left, right) => match (number(&left), number(&right)) {
            (Some(a), Some(b)) => Ok(Scalar::Float(match op {
                Arithmetic::Add => a + b,
                Arithmetic::Subtract => a - b,
                Arithmetic::Multiply => a * b,
                Arithmetic::Divide => a / b,
                Arithmetic::Remainder => a % b,
            })),
            _ => Err(EvalError::new(format!(
                "'{}' cannot combine {} and {}",
                op.text(),
                left.kind(),
                right.kind()
            ))),
        },
    }
}

/// An integer or number as a double (C#'s implicit `long` to `double` conversion).
#[allow(clippy::cast_precision_loss)]
fn number(value: &Scalar<'_>) -> Option<f64> {
    match value {
        Scalar::Int(n) => Some(*n as f64),
        Scalar::Float(n) => Some(*n),
        _ => None,
    }
}

/// `left op right` for two constants in `dialect` (used to fold `1=1` when a rule is parsed).
pub(super) fn compare_values(
    dialect: Dialect,
    left: &Value,
    op: Comparison,
    right: &Value,
) -> Result<Truth, EvalError> {
    compare_in(dialect, &Scalar::of(left), op, &Scalar::of(right))
}

/// `left op right` in `dialect`: where SQL throws on the types, JMS is false ("If the
/// comparison of non-like type values is attempted, the value of the operation is false").
fn compare_in(
    dialect: Dialect,
    left: &Scalar<'_>,
    op: Comparison,
    right: &Scalar<'_>,
) -> Result<Truth, EvalError> {
    match compare(left, op, right) {
        Err(_) if dialect == Dialect::Jms => Ok(Truth::False),
        result => result,
    }
}

/// `left op right`.
fn compare(left: &Scalar<'_>, op: Comparison, right: &Scalar<'_>) -> Result<Truth, EvalError> {
    let ordering = match (left, right) {
        (Scalar::Null, _) | (_, Scalar::Null) => return Ok(Truth::Unknown),
        (Scalar::Int(a), Scalar::Int(b)) | (Scalar::Timestamp(a), Scalar::Timestamp(b)) => {
            Some(a.cmp(b))
        }
        (Scalar::Text(a), Scalar::Text(b)) => return equality(a == b, op, left),
        (Scalar::Bool(a), Scalar::Bool(b)) => return equality(a == b, op, left),
        (Scalar::Uuid(a), Scalar::Uuid(b)) => return equality(a == b, op, left),
        _ => match (number(left), number(right)) {
            // NaN is unordered: only `<>` holds.
            (Some(a), Some(b)) => a.partial_cmp(&b),
            _ => {
                return Err(EvalError::new(format!(
                    "'{}' cannot compare {} with {}",
                    op.text(),
                    left.kind(),
                    right.kind()
                )))
            }
        },
    };
    Ok(Truth::from_bool(match op {
        Comparison::Equal => ordering == Some(Ordering::Equal),
        Comparison::NotEqual => ordering != Some(Ordering::Equal),
        Comparison::Less => ordering == Some(Ordering::Less),
        Comparison::LessOrEqual => matches!(ordering, Some(Ordering::Less | Ordering::Equal)),
        Comparison::Greater => ordering == Some(Ordering::Greater),
        Comparison::GreaterOrEqual => {
            matches!(ordering, Some(Ordering::Greater | Ordering::Equal))
        }
    }))
}

/// `=` or `<>` for a type without ordering; other operators are an error.
fn equality(equal: bool, op: Comparison, operand: &Scalar<'_>) -> Result<Truth, EvalError> {
    match op {
        Comparison::Equal => Ok(Truth::from_bool(equal)),
        Comparison::NotEqual => Ok(Truth::from_bool(!equal)),
        _ => Err(EvalError::new(format!(
            "'{}' cannot order {} values (they support = and <> only)",
            op.text(),
            operand.kind()
        ))),
    }
}
