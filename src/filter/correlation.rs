//! Correlation filters: equality on named system and application properties.

use std::fmt;

use super::value::Value;
use super::view::{MessageView, SystemProperty};

/// A correlation filter: every property it names must equal the message's.
///
/// Semantics (Service Bus "Topic filters and actions", Correlation filters): a match exists
/// when the message's value for each named property equals the filter's; conditions are
/// combined with AND; string comparison is case-sensitive. System properties the filter does
/// not name (`None`) are not compared.
///
/// Equality is that of a hash lookup, not SQL `=`: values of different types never match
/// (the string `'2'` does not match the integer `2`, as Azure/azure-service-bus#401 reports;
/// nor, here, does `2` match `2.0`), and a message without the property does not match.
/// Application property names are matched case-insensitively, as in SQL filters.
///
/// A filter that names nothing is refused when a rule is created ([`CorrelationFilter::check`]):
/// the Service Bus SDKs refuse to send one (the Rust SDK: "Correlation filter must include
/// at least one entry").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CorrelationFilter {
    /// `sys.CorrelationId` must equal this.
    pub correlation_id: Option<String>,
    /// `sys.MessageId` must equal this.
    pub message_id: Option<String>,
    /// `sys.To` must equal this.
    pub to: Option<String>,
    /// `sys.ReplyTo` must equal this.
    pub reply_to: Option<String>,
    /// `sys.Label` must equal this.
    pub subject: Option<String>,
    /// `sys.SessionId` must equal this.
    pub session_id: Option<String>,
    /// `sys.ReplyToSessionId` must equal this.
    pub reply_to_session_id: Option<String>,
    /// `sys.ContentType` must equal this.
    pub content_type: Option<String>,
    /// Application properties that must each be present with an equal value.
    pub properties: Vec<(String, Value)>,
}

/// A correlation filter that names no property (refused when a rule is created).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmptyCorrelationFilter;

impl fmt::Display for EmptyCorrelationFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a correlation filter must name at least one property")
    }
}

impl std::error::Error for EmptyCorrelationFilter {}

impl CorrelationFilter {
    /// Checks the filter can be created: it must name at least one property.
    ///
    /// # Errors
    /// [`EmptyCorrelationFilter`] when it names none.
    pub fn check(&self) -> Result<(), EmptyCorrelationFilter> {
        if self.system_conditions().next().is_none() && self.properties.is_empty() {
            Err(EmptyCorrelationFilter)
        } else {
            Ok(())
        }
    }

    /// Whether `view` has every property the filter names, with an equal value. (A filter
    /// that names nothing matches every message; [`CorrelationFilter::check`] keeps such
    /// filters from being created.)
    #[must_use]
    pub fn matches(&self, view: &MessageView) -> bool {
        self.system_conditions()
            .all(|(property, wanted)| view.system(property) == Some(wanted))
            && self.properties.iter().all(|(name, wanted)| {
                view.application_property(name)
                    .is_some_and(|value| value == wanted)
            })
    }

    /// The system properties the filter names, with the values they must have.
    fn system_conditions(&self) -> impl Iterator<Item = (SystemProperty, &str)> {
        [
            (SystemProperty::CorrelationId, &self.correlation_id),
            (SystemProperty::MessageId, &self.message_id),
            (SystemProperty::To, &self.to),
            (SystemProperty::ReplyTo, &self.reply_to),
            (SystemProperty::Subject, &self.subject),
            (SystemProperty::SessionId, &self.session_id),
            (SystemProperty::ReplyToSessionId, &self.reply_to_session_id),
            (SystemProperty::ContentType, &self.content_type),
        ]
        .into_iter()
        .filter_map(|(property, wanted)| wanted.as_deref().map(|wanted| (property, wanted)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order() -> MessageView {
        MessageView {
            correlation_id: Some("high".into()),
            subject: Some("red".into()),
            reply_to: Some("johndoe@contoso.com".into()),
            application_properties: vec![
                ("Color".into(), Value::String("Red".into())),
                ("version".into(), Value::Int(2)),
            ],
            ..MessageView::default()
        }
    }

    #[test]
    fn every_named_system_property_must_be_equal() {
        let filter = CorrelationFilter {
            subject: Some("red".into()),
            correlation_id: Some("high".into()),
            ..CorrelationFilter::default()
        };
        assert!(filter.matches(&order()));
        let other = MessageView {
            correlation_id: Some("low".into()),
            ..order()
        };
        assert!(!filter.matches(&other));
    }

    #[test]
    fn string_comparison_is_case_sensitive_and_absent_means_no_match() {
        let shouting = CorrelationFilter {
            subject: Some("RED".into()),
            ..CorrelationFilter::default()
        };
        assert!(!shouting.matches(&order()));
        let to = CorrelationFilter {
            to: Some("orders".into()),
            ..CorrelationFilter::default()
        };
        assert!(!to.matches(&order()));
    }

    #[test]
    fn each_system_field_is_compared_with_its_own_property() {
        let view = MessageView {
            message_id: Some("m".into()),
            correlation_id: Some("c".into()),
            to: Some("t".into()),
            reply_to: Some("r".into()),
            subject: Some("s".into()),
            session_id: Some("g".into()),
            reply_to_session_id: Some("rg".into()),
            content_type: Some("application/json".into()),
            ..MessageView::default()
        };
        let all = CorrelationFilter {
            message_id: view.message_id.clone(),
            correlation_id: view.correlation_id.clone(),
            to: view.to.clone(),
            reply_to: view.reply_to.clone(),
            subject: view.subject.clone(),
            session_id: view.session_id.clone(),
            reply_to_session_id: view.reply_to_session_id.clone(),
            content_type: view.content_type.clone(),
            properties: Vec::new(),
        };
        assert!(all.matches(&view));
        // Swapping any two values breaks the match: each field reads its own property.
        let swapped = CorrelationFilter {
            session_id: view.reply_to_session_id.clone(),
            reply_to_session_id: view.session_id.clone(),
            ..all.clone()
        };
        assert!(!swapped.matches(&view));
        let swapped = CorrelationFilter {
            to: view.reply_to.clone(),
            reply_to: view.to.clone(),
            ..all
        };
        assert!(!swapped.matches(&view));
    }

    #[test]
    fn application_properties_match_by_any_case_name_and_exact_typed_value() {
        let filter = |name: &str, value: Value| CorrelationFilter {
            properties: vec![(name.into(), value)],
            ..CorrelationFilter::default()
        };
        assert!(filter("color", Value::String("Red".into())).matches(&order()));
        assert!(!filter("color", Value::String("red".into())).matches(&order()));
        assert!(filter("VERSION", Value::Int(2)).matches(&order()));
        assert!(!filter("version", Value::String("2".into())).matches(&order()));
        assert!(!filter("version", Value::Float(2.0)).matches(&order()));
        assert!(!filter("size", Value::Null).matches(&order()));
    }

    #[test]
    fn system_and_application_conditions_are_combined_with_and() {
        let filter = CorrelationFilter {
            subject: Some("red".into()),
            reply_to: Some("johndoe@contoso.com".into()),
            properties: vec![("color".into(), Value::String("Red".into()))],
            ..CorrelationFilter::default()
        };
        assert!(filter.matches(&order()));
        let blue = MessageView {
            application_properties: vec![("color".into(), Value::String("Blue".into()))],
            ..order()
        };
        assert!(!filter.matches(&blue));
    }

    #[test]
    fn a_filter_that_names_nothing_is_refused() {
        assert_eq!(
            CorrelationFilter::default().check(),
            Err(EmptyCorrelationFilter)
        );
        let named = CorrelationFilter {
            content_type: Some("application/json".into()),
            ..CorrelationFilter::default()
        };
        assert_eq!(named.check(), Ok(()));
        let properties_only = CorrelationFilter {
            properties: vec![("x".into(), Value::Int(1))],
            ..CorrelationFilter::default()
        };
        assert_eq!(properties_only.check(), Ok(()));
    }
}
