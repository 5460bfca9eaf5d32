//! The parsed form of SQL filters and actions and of JMS selectors: conditions (three-valued)
//! and values.

use super::jms::JmsIdentifier;
use super::like::LikePattern;
use super::value::Value;
use super::view::SystemProperty;

/// The language an expression is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// Service Bus SQL filters and actions.
    Sql,
    /// JMS 2.0 message selectors (§3.8.1.1): Java identifiers, case-sensitive, naming JMS
    /// header fields or message properties; `BETWEEN`; no scopes, quoted names, functions,
    /// parameters, `EXISTS`, `%` or `!=`.
    Jms,
}

/// A condition: true, false or unknown for a message.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Condition {
    /// Known when the rule was parsed (`1=1`, `1=0`).
    Constant(Truth),
    /// `NOT c`.
    Not(Box<Condition>),
    /// `a AND b AND ...`, two or more.
    All(Vec<Condition>),
    /// `a OR b OR ...`, two or more.
    Any(Vec<Condition>),
    /// `left op right`.
    Compare {
        left: Operand,
        op: Comparison,
        right: Operand,
    },
    /// `operand IS [NOT] NULL`.
    IsNull { operand: Operand, negated: bool },
    /// `operand [NOT] IN (list)`.
    In {
        operand: Operand,
        list: Vec<Operand>,
        negated: bool,
    },
    /// `operand [NOT] LIKE pattern [ESCAPE escape]`.
    Like {
        operand: Operand,
        pattern: Pattern,
        negated: bool,
    },
    /// `EXISTS(property)`.
    Exists(Property),
    /// A value used as a condition (JMS: a boolean identifier): its truth when a boolean,
    /// unknown when NULL, false for any other type.
    Boolean(Operand),
}

/// A value-producing expression.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Operand {
    /// A constant.
    Literal(Value),
    /// A property of the message.
    Property(Property),
    /// An identifier of a JMS selector: a header field or a message property.
    Identifier(JmsIdentifier),
    /// `-operand` or `+operand`.
    Unary { op: Sign, operand: Box<Operand> },
    /// `left op right`.
    Arithmetic {
        left: Box<Operand>,
        op: Arithmetic,
        right: Box<Operand>,
    },
    /// `newid()`: a fresh uuid.
    NewId,
    /// `property(name)` or `p(name)`: the property `name` evaluates to.
    PropertyNamed(Box<Operand>),
}

/// A property reference, resolved when the rule is parsed.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Property {
    /// `sys.Name`.
    System(SystemProperty),
    /// `user.name` or `name`: an application property.
    Application(Box<str>),
}

/// The LIKE pattern and escape character.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Pattern {
    /// Both were constants: compiled when the rule was parsed.
    Compiled(LikePattern),
    /// Computed per message.
    Computed {
        pattern: Box<Operand>,
        escape: Option<Box<Operand>>,
    },
}

/// One statement of a SQL action.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Statement {
    /// `SET target = value`.
    Set { target: Property, value: Operand },
    /// `REMOVE target`.
    Remove(Property),
}

/// A three-valued truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Truth {
    True,
    False,
    Unknown,
}

impl Truth {
    /// `true` → True, `false` → False.
    pub(super) fn from_bool(value: bool) -> Truth {
        if value {
            Truth::True
        } else {
            Truth::False
        }
    }

    /// `NOT`: unknown stays unknown.
    pub(super) fn not(self) -> Truth {
        match self {
            Truth::True => Truth::False,
            Truth::False => Truth::True,
            Truth::Unknown => Truth::Unknown,
        }
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Comparison {
    Equal,
    NotEqual,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

impl Comparison {
    /// How the operator is written.
    pub(super) fn text(self) -> &'static str {
        match self {
            Comparison::Equal => "=",
            Comparison::NotEqual => "<>",
            Comparison::Less => "<",
            Comparison::LessOrEqual => "<=",
            Comparison::Greater => ">",
            Comparison::GreaterOrEqual => ">=",
        }
    }
}

/// A binary arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arithmetic {
    Add,
    Subtract,
    Multiply,
    Divide,
    Remainder,
}

impl Arithmetic {
    /// How the operator is written.
    pub(super) fn text(self) -> &'static str {
        match self {
            Arithmetic::Add => "+",
            Arithmetic::Subtract => "-",
            Arithmetic::Multiply => "*",
            Arithmetic::Divide => "/",
            Arithmetic::Remainder => "%",
        }
    }
}

/// A unary sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sign {
    Plus,
    Minus,
}
