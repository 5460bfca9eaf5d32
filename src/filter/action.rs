//! SQL rule actions: `SET` and `REMOVE` statements that edit a subscription's copy of a
//! message after its rule's filter selected it.
//!
//! Service Bus "Subscription Rule SQL Action Syntax": statements are `SET property =
//! expression` and `REMOVE property`, each optionally ended by `;` (so `SET a = 1; REMOVE b;`
//! and `SET a = 1 REMOVE b` are both one action), at most 32 of them. Referring to a
//! non-existent system property fails (here: when the action is parsed); a non-existent
//! application property is unknown, and `SET` stores it as NULL.
//!
//! Statements run in order, each seeing the edits of those before it (`SET a = 1; SET b = a`
//! sets `b` to 1); the documentation does not say otherwise.
//!
//! System properties: a Service Bus maintainer (Azure/azure-service-bus#180) states that rule
//! actions can modify every publicly settable system property (`ReplyTo`, `CorrelationId`,
//! ...). This broker supports the string-valued ones ([`SystemProperty`]); setting one to a
//! string or a uuid stores its text, to NULL (or `REMOVE`) clears it, and any other type is
//! an evaluation error. The others (`TimeToLive`, `ScheduledEnqueueTimeUtc`, `PartitionKey`,
//! and the read-only ones) are refused when the action is parsed.

use super::error::{EvalError, SqlError};
use super::eval::{self, Scalar, Scope};
use super::parser;
use super::syntax::{Property, Statement};
use super::value::Value;
use super::view::{names_equal, MessageView, SystemProperty};

/// A parsed SQL rule action.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlAction {
    expression: String,
    parameters: Vec<(String, Value)>,
    statements: Vec<Statement>,
}

/// One change an action makes to the subscription's copy of a message; apply them in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Edit {
    /// Set an application property: replace the entry with exactly this name, or append one.
    /// The name is spelled as the message spells it when the message has the property
    /// (names are case-insensitive), else as the action wrote it.
    SetProperty(String, Value),
    /// Remove the application property with exactly this name (as the message spells it).
    RemoveProperty(String),
    /// Set (`Some`) or clear (`None`) a system property.
    SetSystem(SystemProperty, Option<String>),
}

impl SqlAction {
    /// Parses `expression`.
    ///
    /// # Errors
    /// A [`SqlError`] with the byte offset and the reason when the action is not valid,
    /// including one that names an unsupported system property.
    pub fn parse(expression: &str) -> Result<SqlAction, SqlError> {
        SqlAction::parse_with(expression, Vec::new())
    }

    /// Parses `expression`, each `@name` in it standing for its value in `parameters`
    /// (Service Bus's `SqlRuleAction.Parameters`, names compared ignoring case).
    ///
    /// # Errors
    /// As [`SqlAction::parse`], and a parameter without a value.
    pub fn parse_with(
        expression: &str,
        parameters: Vec<(String, Value)>,
    ) -> Result<SqlAction, SqlError> {
        Ok(SqlAction {
            expression: expression.to_owned(),
            statements: parser::parse_statements(expression, &parameters)?,
            parameters,
        })
    }

    /// The expression as it was written.
    #[must_use]
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Its parameters, as given.
    #[must_use]
    pub fn parameters(&self) -> &[(String, Value)] {
        &self.parameters
    }

    /// The edits the action makes to `view`'s message. `REMOVE` of a property the message
    /// does not have makes no edit.
    ///
    /// # Errors
    /// An [`EvalError`] when a statement throws (a type mismatch, a division by zero, a
    /// system property set to a non-string, ...); no edit applies then.
    pub fn apply(&self, view: &MessageView) -> Result<Vec<Edit>, EvalError> {
        let mut edited = Edited {
            view,
            edits: Vec::with_capacity(self.statements.len()),
        };
        for statement in &self.statements {
            let edit = match statement {
                Statement::Set {
                    target: Property::Application(name),
                    value,
                } => {
                    let value = eval::operand(value, &edited)?.into_value();
                    Edit::SetProperty(edited.spelling(name).to_owned(), value)
                }
                Statement::Set {
                    target: Property::System(property),
                    value,
                } => Edit::SetSystem(
                    *property,
                    system_text(*property, eval::operand(value, &edited)?)?,
                ),
                Statement::Remove(Property::Application(name)) => {
                    let Some((spelling, _)) = edited.entry(name) else {
                        continue;
                    };
                    Edit::RemoveProperty(spelling.to_owned())
                }
                Statement::Remove(Property::System(property)) => Edit::SetSystem(*property, None),
            };
            edited.edits.push(edit);
        }
        Ok(edited.edits)
    }
}

/// The text a system property is set to: strings and uuids as text, NULL clears.
fn system_text(property: SystemProperty, value: Scalar<'_>) -> Result<Option<String>, EvalError> {
    match value {
        Scalar::Null => Ok(None),
        Scalar::Text(text) => Ok(Some(text.into_owned())),
        Scalar::Uuid(id) => Ok(Some(id.to_string())),
        other => Err(EvalError::new(format!(
            "sys.{} must be set to a string, found {}",
            property.name(),
            other.kind()
        ))),
    }
}

/// The message as the statements run so far have edited it.
struct Edited<'v> {
    view: &'v MessageView,
    edits: Vec<Edit>,
}

impl Edited<'_> {
    /// The application property `name` (case-insensitively) and its spelling, after the
    /// edits so far; `None` when absent or removed.
    fn entry(&self, name: &str) -> Option<(&str, &Value)> {
        for edit in self.edits.iter().rev() {
            match edit {
                Edit::SetProperty(key, value) if names_equal(key, name) => {
                    return Some((key, value))
                }
                Edit::RemoveProperty(key) if names_equal(key, name) => return None,
                _ => {}
            }
        }
        self.view.application_entry(name)
    }

    /// How the message spells `name`, or `name` when it does not have the property.
    fn spelling<'a>(&'a self, name: &'a str) -> &'a str {
        self.entry(name).map_or(name, |(spelling, _)| spelling)
    }
}

impl Scope for Edited<'_> {
    fn system(&self, property: SystemProperty) -> Option<&str> {
        for edit in self.edits.iter().rev() {
            if let Edit::SetSystem(edited, text) = edit {
                if *edited == property {
                    return text.as_deref();
                }
            }
        }
        self.view.system(property)
    }

    fn application(&self, name: &str) -> Option<&Value> {
        self.entry(name).map(|(_, value)| value)
    }

    fn message(&self) -> &MessageView {
        self.view
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order() -> MessageView {
        MessageView {
            correlation_id: Some("high".into()),
            subject: Some("order".into()),
            application_properties: vec![
                ("Quantity".into(), Value::Int(10)),
                ("priority".into(), Value::String("high".into())),
                ("price".into(), Value::Float(2.5)),
            ],
            ..MessageView::default()
        }
    }

    fn apply(action: &str, view: &MessageView) -> Result<Vec<Edit>, EvalError> {
        SqlAction::parse(action)
            .unwrap_or_else(|error| panic!("{action}: {error}"))
            .apply(view)
    }

    fn set(name: &str, value: Value) -> Edit {
        Edit::SetProperty(name.into(), value)
    }

    #[test]
    fn the_documented_example_with_semicolons_and_a_trailing_one() {
        assert_eq!(
            apply(
                "SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';",
                &order()
            ),
            Ok(vec![
                set("Quantity", Value::Int(5)),
                Edit::RemoveProperty("priority".into()),
                Edit::SetSystem(SystemProperty::CorrelationId, Some("low".into())),
            ])
        );
    }

    #[test]
    fn semicolons_are_optional_and_keywords_any_case() {
        assert_eq!(
            apply("set a = 1 remove priority SeT b = 'x'", &order()),
            Ok(vec![
                set("a", Value::Int(1)),
                Edit::RemoveProperty("priority".into()),
                set("b", Value::String("x".into())),
            ])
        );
    }

    #[test]
    fn set_computes_from_other_properties_and_keeps_the_message_spelling() {
        assert_eq!(
            apply("SET total = price * quantity", &order()),
            Ok(vec![set("total", Value::Float(25.0))])
        );
        assert_eq!(
            apply("SET user.QUANTITY = 3", &order()),
            Ok(vec![set("Quantity", Value::Int(3))])
        );
        assert_eq!(
            apply("SET [my prop] = 'x'", &order()),
            Ok(vec![set("my prop", Value::String("x".into()))])
        );
    }

    #[test]
    fn statements_see_the_edits_before_them() {
        assert_eq!(
            apply("SET a = 1; SET b = a + 1; REMOVE a; SET c = a", &order()),
            Ok(vec![
                set("a", Value::Int(1)),
                set("b", Value::Int(2)),
                Edit::RemoveProperty("a".into()),
                set("c", Value::Null),
            ])
        );
        assert_eq!(
            apply("SET sys.Label = 'x'; SET copy = sys.Label", &order()),
            Ok(vec![
                Edit::SetSystem(SystemProperty::Subject, Some("x".into())),
                set("copy", Value::String("x".into())),
            ])
        );
    }

    #[test]
    fn missing_properties_set_null_and_removing_them_edits_nothing() {
        assert_eq!(
            apply("SET total = cost * quantity; REMOVE nothing", &order()),
            Ok(vec![set("total", Value::Null)])
        );
    }

    #[test]
    fn system_properties_take_strings_and_uuids_and_clear_with_null_or_remove() {
        assert_eq!(
            apply("SET sys.Label = sys.Label + '-eu'", &order()),
            Ok(vec![Edit::SetSystem(
                SystemProperty::Subject,
                Some("order-eu".into())
            )])
        );
        let edits = apply("SET sys.MessageId = newid()", &order()).expect("applies");
        let [Edit::SetSystem(SystemProperty::MessageId, Some(id))] = edits.as_slice() else {
            panic!("unexpected {edits:?}");
        };
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
        assert_eq!(
            apply("SET sys.To = NULL; REMOVE sys.ReplyTo", &order()),
            Ok(vec![
                Edit::SetSystem(SystemProperty::To, None),
                Edit::SetSystem(SystemProperty::ReplyTo, None),
            ])
        );
        assert_eq!(
            apply("SET sys.SessionId = 5", &order()),
            Err(EvalError::new(
                "sys.SessionId must be set to a string, found integer"
            ))
        );
    }

    #[test]
    fn a_statement_that_throws_fails_the_whole_action() {
        assert_eq!(
            apply("SET a = 1; SET b = quantity / 0", &order()),
            Err(EvalError::new("division by zero"))
        );
        assert_eq!(
            apply("SET b = priority + 1", &order()),
            Err(EvalError::new("'+' cannot combine string and integer"))
        );
    }

    #[test]
    fn unsupported_system_properties_are_refused_when_parsed() {
        let error = SqlAction::parse("SET sys.TimeToLive = 5").unwrap_err();
        assert_eq!(error.offset, 8);
        assert!(
            error
                .message
                .starts_with("system property sys.TimeToLive is not supported"),
            "{error}"
        );
        let error = SqlAction::parse("REMOVE sys.SequenceNumber").unwrap_err();
        assert_eq!(error.offset, 11);
        let error = SqlAction::parse("SET sys.Colour = 'x'").unwrap_err();
        assert!(
            error
                .message
                .starts_with("unknown system property sys.Colour"),
            "{error}"
        );
    }

    #[test]
    fn syntax_errors_name_the_place() {
        let error = |action: &str| SqlAction::parse(action).unwrap_err();
        assert_eq!(error(""), SqlError::new(0, "the expression is empty"));
        assert_eq!(
            error("SET a 1"),
            SqlError::new(6, "expected '=' after the property of SET, found number 1")
        );
        assert_eq!(
            error("SET a = 1;;"),
            SqlError::new(10, "expected SET or REMOVE, found ';'")
        );
        assert_eq!(
            error("UPDATE a"),
            SqlError::new(0, "expected SET or REMOVE, found name 'UPDATE'")
        );
        assert_eq!(
            error("SET a = b = 1"),
            SqlError::new(8, "expected a value, found a condition")
        );
        assert_eq!(
            error("REMOVE 'a'"),
            SqlError::new(7, "expected a property name, found string 'a'")
        );
    }

    #[test]
    fn at_most_32_statements() {
        let statements = |n: usize| vec!["SET a = 1"; n].join("; ");
        assert!(SqlAction::parse(&statements(32)).is_ok());
        let error = SqlAction::parse(&statements(33)).unwrap_err();
        assert_eq!(error.offset, 32 * "SET a = 1; ".len());
        assert_eq!(error.message, "an action can hold at most 32 statements");
    }

    #[test]
    fn the_expression_is_kept_as_written() {
        let action = SqlAction::parse("SET a = 'b';").expect("parses");
        assert_eq!(action.expression(), "SET a = 'b';");
    }
}
