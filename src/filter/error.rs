//! The two ways a rule can fail: its text does not parse (when the rule is created), or its
//! evaluation against one message throws (each time it runs).

use std::fmt;

/// A SQL filter or action expression that does not parse: where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// Byte offset in the expression where the problem starts.
    pub offset: usize,
    /// What is wrong, e.g. "expected ')' after IN list".
    pub message: String,
}

impl SqlError {
    /// An error at byte `offset`.
    pub(super) fn new(offset: usize, message: impl Into<String>) -> SqlError {
        SqlError {
            offset,
            message: message.into(),
        }
    }
}

impl fmt::Display for SqlError {
    /// `{message} at position {n}`, `n` the 1-based byte position.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at position {}", self.message, self.offset + 1)
    }
}

impl std::error::Error for SqlError {}

/// A filter or action that threw while evaluating one message (Service Bus: a filter
/// evaluation exception), e.g. a type mismatch or a division by zero. The broker drops the
/// subscription's copy, or dead-letters it when the subscription dead-letters on filter
/// evaluation exceptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError {
    /// What went wrong, e.g. "division by zero".
    pub message: String,
}

impl EvalError {
    /// An error saying `message`.
    pub(super) fn new(message: impl Into<String>) -> EvalError {
        EvalError {
            message: message.into(),
        }
    }
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EvalError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_display_their_message_and_sql_errors_their_position() {
        assert_eq!(
            SqlError::new(4, "unterminated string literal").to_string(),
            "unterminated string literal at position 5"
        );
        assert_eq!(
            EvalError::new("division by zero").to_string(),
            "division by zero"
        );
    }
}
