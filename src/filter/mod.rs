//! Topic subscription rules: the filter and action language of Azure Service Bus, parsed once
//! when a rule is created and evaluated for each message a topic routes.
//!
//! A rule's [`Filter`] is `True`, `False`, a [`CorrelationFilter`] (equality on named
//! properties) or a [`SqlFilter`]; a rule may also have a [`SqlAction`] that edits the
//! subscription's copy of a selected message ([`Edit`]). Both read a message through a
//! [`MessageView`] the connection task extracts once per message.
//!
//! Sources, all Microsoft Learn (learn.microsoft.com/azure/service-bus-messaging/...):
//! "Subscription Rule SQL Filter Syntax" (`service-bus-messaging-sql-filter`), "Subscription
//! Rule SQL Action Syntax" (`service-bus-messaging-sql-rule-action`), "Topic filters and
//! actions" (`topic-filters`), "Messages, payloads, and serialization" (the system property
//! names) and "Service Bus quotas" (the limits).
//!
//! # The SQL language
//!
//! * Properties: `sys.Name` is a system property ([`SystemProperty`]: `MessageId`,
//!   `CorrelationId`, `To`, `ReplyTo`, `Label` or `Subject`, `SessionId`, `ReplyToSessionId`,
//!   `ContentType`); `user.name` or a bare `name` is an application property. Names are
//!   case-insensitive. A regular name is a letter followed by letters, digits or `_`; any
//!   other name is written `[delimited]` (`]]` for `]`) or `"quoted"` (`""` for `"`).
//!   Keywords (`AND OR NOT IN LIKE ESCAPE IS NULL EXISTS TRUE FALSE SET REMOVE`, any case)
//!   are reserved and must be delimited to be used as names.
//! * An unknown `sys.` name, or one this broker does not support (the non-string and
//!   read-only ones, e.g. `sys.DeliveryCount`, `sys.TimeToLive`), is a syntax error: Service
//!   Bus says accessing a non-existent system property is an error. A missing application
//!   property is unknown.
//! * Constants: `'strings'` (`''` for `'`), integers (64-bit), decimals (`2.0`) and
//!   approximate numbers (`101.5E5`) as doubles, `TRUE`, `FALSE`, `NULL`.
//! * Conditions: `= <> != < <= > >=`, `AND OR NOT`, `[NOT] IN (...)`, `[NOT] LIKE pattern
//!   [ESCAPE 'c']` (`%` any run, `_` one character), `IS [NOT] NULL` (true for a missing or a
//!   null property), `EXISTS(property)`, parentheses. Values: `+ - * / %`, unary `+ -`,
//!   `newid()`, `property(name)` and `p(name)` (`name` a string such as `'sys.Label'`).
//! * Three-valued logic: NULL and missing properties are unknown in comparisons, arithmetic,
//!   `LIKE` and on the left of `IN`; `AND`/`OR` follow the documented truth tables and `NOT`
//!   unknown is unknown. Only true selects a message.
//! * Types: the page says operators "follow the same semantics as the C# operator binding in
//!   data type promotions and implicit conversions". So integers and doubles mix (the integer
//!   is promoted); strings, booleans and uuids support `=` and `<>` only, with ordinal,
//!   case-sensitive string equality; `+` also concatenates two strings. Anything C# would not
//!   bind (a string compared with or added to a number, `'a' < 'b'`), integer overflow and
//!   integer division by zero are evaluation errors ([`EvalError`]), not false: Service Bus
//!   reports them as filter evaluation exceptions, which a subscription can dead-letter.
//!   (Dead-letter queue overview, 2017 revision: the broker sets `DeadLetterReason` to the
//!   exception's type name and `DeadLetterErrorDescription` to its message; the current page
//!   lists no fixed value.)
//! * `1=1` and `1=0`, which the SDKs send for the True and False filters, are folded into
//!   constants when parsed.
//! * Limits (quotas): 1024 characters per filter or action, 32 statements per action; this
//!   broker also caps nesting at 64 levels. Syntax errors ([`SqlError`]) carry the byte
//!   offset where the problem is.
//!
//! * Parameters (`@name`, Service Bus's `Parameters` of a SQL filter or action) stand for the
//!   values the rule gives them, by name ignoring case ([`SqlFilter::parse_with`]); one
//!   without a value is a syntax error.
//!
//! Not supported: the system properties listed above as unsupported.
//!
//! # JMS selectors
//!
//! The same engine parses and evaluates JMS 2.0 message selectors in a dialect of their own
//! ([`JmsSelector`]: case-sensitive Java identifiers naming JMS header fields or properties,
//! `BETWEEN`, no scopes, functions or parameters, and comparisons of unlike types false
//! rather than errors).

mod action;
mod correlation;
pub mod description;
mod error;
mod eval;
mod jms;
mod lexer;
mod like;
mod parser;
mod selector;
mod sql;
mod syntax;
mod value;
mod view;

pub use action::{Edit, SqlAction};
pub use correlation::{CorrelationFilter, EmptyCorrelationFilter};
pub use error::{EvalError, SqlError};
pub use selector::JmsSelector;
pub use sql::SqlFilter;
pub use value::Value;
pub use view::{IdType, MessageView, SystemProperty};

/// A subscription rule's filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// Selects every message (the `$Default` rule's filter).
    True,
    /// Selects no message.
    False,
    /// A SQL condition.
    Sql(SqlFilter),
    /// Equality on named properties.
    Correlation(CorrelationFilter),
    /// A JMS message selector: the rule of a subscription made for a JMS consumer. Service
    /// Bus clients see it as a SQL filter of its text.
    Selector(JmsSelector),
}

impl Filter {
    /// The filter a SQL expression with its parameters is: `1=1` and `1=0` (spaces aside,
    /// with no parameters) are the true and false filters, as Service Bus describes them
    /// however they were declared or sent; any other expression is a SQL filter.
    ///
    /// # Errors
    /// As [`SqlFilter::parse_with`].
    pub fn sql(expression: &str, parameters: Vec<(String, Value)>) -> Result<Filter, SqlError> {
        match expression.replace(' ', "").as_str() {
            "1=1" if parameters.is_empty() => Ok(Filter::True),
            "1=0" if parameters.is_empty() => Ok(Filter::False),
            _ => SqlFilter::parse_with(expression, parameters).map(Filter::Sql),
        }
    }

    /// The filter a JMS message selector is: an empty or blank selector is no selector (JMS)
    /// and selects every message; any other is a [`JmsSelector`], even one that always
    /// holds, so that it keeps its text.
    ///
    /// # Errors
    /// As [`JmsSelector::parse`].
    pub fn selector(selector: &str) -> Result<Filter, SqlError> {
        if selector.trim().is_empty() {
            return Ok(Filter::True);
        }
        JmsSelector::parse(selector).map(Filter::Selector)
    }

    /// Whether the filter selects `view` (a JMS selector never throws).
    ///
    /// # Errors
    /// An [`EvalError`] when a SQL filter throws for this message.
    pub fn matches(&self, view: &MessageView) -> Result<bool, EvalError> {
        match self {
            Filter::True => Ok(true),
            Filter::False => Ok(false),
            Filter::Sql(filter) => filter.matches(view),
            Filter::Correlation(filter) => Ok(filter.matches(view)),
            Filter::Selector(selector) => Ok(selector.matches(view)),
        }
    }

    /// Whether the filter looks at the message at all (a true or false filter does not).
    pub fn reads_message(&self) -> bool {
        matches!(
            self,
            Filter::Sql(_) | Filter::Correlation(_) | Filter::Selector(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_filter_decides_by_its_own_rule() {
        let view = MessageView {
            subject: Some("red".into()),
            ..MessageView::default()
        };
        assert_eq!(Filter::True.matches(&view), Ok(true));
        assert_eq!(Filter::False.matches(&view), Ok(false));
        let sql = |expression| Filter::Sql(SqlFilter::parse(expression).expect("parses"));
        assert_eq!(sql("sys.Label = 'red'").matches(&view), Ok(true));
        assert_eq!(sql("sys.Label = 'blue'").matches(&view), Ok(false));
        assert!(sql("sys.Label = 1").matches(&view).is_err());
        let correlation = |subject: &str| {
            Filter::Correlation(CorrelationFilter {
                subject: Some(subject.into()),
                ..CorrelationFilter::default()
            })
        };
        assert_eq!(correlation("red").matches(&view), Ok(true));
        assert_eq!(correlation("blue").matches(&view), Ok(false));
    }
}
