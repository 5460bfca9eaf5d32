//! A topic's fan-out (design.md D7): each subscription's rules pick whether a message gets a
//! copy there, and what the copy's application properties become.
//!
//! Service Bus semantics (Microsoft, "Topic filters and actions"): the rules of a
//! subscription are OR-ed; a rule whose filter cannot be evaluated sends the copy to the
//! subscription's dead-letter queue with reason `FilterEvaluationException` when the
//! subscription says so, else counts as not matching. Tidebus keeps one copy per
//! subscription (a lane holds one message per sequence number): where Service Bus makes an
//! extra copy for each matching rule with an action, Tidebus applies the actions of every
//! matching rule, in rule order, to the one copy, and names the first such rule in the copy's
//! `RuleName` property.

use bytes::Bytes;
use fe2o3_amqp::types::primitives::SimpleValue;

use crate::entity::handle::LaneId;
use crate::filter::{Edit, Filter, MessageView, SqlAction};
use crate::message::{self, MessageError};

/// The application property naming the rule whose action shaped a copy.
pub const RULE_NAME_PROPERTY: &str = "RuleName";
/// The dead-letter reason of a copy whose filter could not be evaluated.
pub const FILTER_EVALUATION_EXCEPTION: &str = "FilterEvaluationException";

/// One rule of a subscription: a filter, and optionally an action on matching messages.
#[derive(Debug)]
pub struct Rule {
    /// Its name, unique in the subscription.
    pub name: String,
    /// Which messages it selects.
    pub filter: Filter,
    /// What it changes on the copies it selects.
    pub action: Option<SqlAction>,
}

/// A subscription as the fan-out sees it: its lane and its rules.
#[derive(Debug)]
pub struct Route {
    /// The subscription's lane.
    pub lane: LaneId,
    /// Its rules, in the order they were created.
    pub rules: Vec<Rule>,
    /// Whether a copy whose filter fails to evaluate is dead-lettered (else dropped).
    pub dead_letter_on_filter_error: bool,
}

/// Where a message goes in one subscription.
#[derive(Debug, Clone, PartialEq)]
pub enum Copy {
    /// Into the subscription, with these edits of its application properties (none: the
    /// message as sent).
    Deliver(Vec<Edit>),
    /// Into the subscription's dead-letter queue: a filter failed with this description.
    DeadLetter(String),
}

impl Route {
    /// What this subscription does with a message, if it takes it.
    pub fn pick(&self, view: &MessageView) -> Option<Copy> {
        let mut matched = false;
        let mut edits = Vec::new();
        let mut named = false;
        for rule in &self.rules {
            match rule.filter.matches(view) {
                Ok(true) => matched = true,
                Ok(false) => continue,
                Err(error) if self.dead_letter_on_filter_error => {
                    return Some(Copy::DeadLetter(format!(
                        "rule '{}' could not be evaluated: {error}",
                        rule.name
                    )));
                }
                Err(error) => {
                    tracing::debug!(rule = %rule.name, %error, "filter evaluation failed: no match");
                    continue;
                }
            }
            let Some(action) = &rule.action else {
                continue;
            };
            match action.apply(view) {
                Ok(more) => {
                    if !named {
                        named = true;
                        edits.push(Edit::SetProperty(
                            RULE_NAME_PROPERTY.to_string(),
                            crate::filter::Value::String(rule.name.clone()),
                        ));
                    }
                    edits.extend(more);
                }
                Err(error) if self.dead_letter_on_filter_error => {
                    return Some(Copy::DeadLetter(format!(
                        "the action of rule '{}' could not be evaluated: {error}",
                        rule.name
                    )));
                }
                Err(error) => {
                    tracing::debug!(rule = %rule.name, %error, "action evaluation failed: not applied");
                }
            }
        }
        matched.then_some(Copy::Deliver(edits))
    }
}

/// A copy's bytes with its rules' edits applied: application properties set and removed,
/// system properties set or cleared.
///
/// # Errors
/// When the message does not scan (inspect on arrival rules that out).
pub fn apply_edits(bytes: &Bytes, edits: &[Edit]) -> Result<Bytes, MessageError> {
    let mut set: Vec<(String, SimpleValue)> = Vec::new();
    let mut remove: Vec<String> = Vec::new();
    let mut out = bytes.clone();
    for edit in edits {
        match edit {
            Edit::SetProperty(name, value) => {
                remove.retain(|gone| !gone.eq_ignore_ascii_case(name));
                set.retain(|(kept, _)| !kept.eq_ignore_ascii_case(name));
                set.push((name.clone(), value.to_simple()));
            }
            Edit::RemoveProperty(name) => {
                set.retain(|(kept, _)| !kept.eq_ignore_ascii_case(name));
                remove.push(name.clone());
            }
            Edit::SetSystem(property, value) => {
                out = message::set_system_property(&out, *property, value.as_deref())?;
            }
        }
    }
    message::edit_application_properties(&out, &set, &remove)
}
