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
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Timestamp, Value as Amqp};

use crate::entity::terms::LaneId;
use crate::filter::description::{self, RuleDescription};
use crate::filter::{Edit, Filter, MessageView, SqlAction};
use crate::message::{self, MessageError};

/// The application property naming the rule whose action shaped a copy.
pub const RULE_NAME_PROPERTY: &str = "RuleName";
/// The dead-letter reason of a copy whose filter could not be evaluated.
pub const FILTER_EVALUATION_EXCEPTION: &str = "FilterEvaluationException";
/// The dead-letter reason of a copy without a session id in a subscription that requires
/// sessions, and its description: Service Bus's words (Azure/azure-service-bus#196). The send
/// to the topic is taken; only that subscription's copy is dead-lettered.
pub const SESSION_ID_IS_NULL: &str = "Session id is null.";
/// See [`SESSION_ID_IS_NULL`].
pub const SESSION_ID_IS_NULL_DESCRIPTION: &str =
    "Session enabled entity doesn't allow a message whose session identifier is null.";

/// One rule of a subscription: a filter, and optionally an action on matching messages.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Its name, unique in the subscription (compared ignoring case).
    pub name: String,
    /// Which messages it selects.
    pub filter: Filter,
    /// What it changes on the copies it selects.
    pub action: Option<SqlAction>,
    /// When it was created, in ms since the Unix epoch.
    pub created_ms: i64,
    /// Which of its time values were given without a zone.
    pub local_times: LocalTimes,
}

/// The names of a rule's time values given without a zone (through the administration API):
/// Service Bus keeps such a `dateTime` as given (a .NET `DateTime` of unspecified kind) and
/// writes it back without one, where a time given with a zone, or as an AMQP timestamp,
/// comes back in UTC with `Z`. Tidebus reads a time without a zone as UTC either way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalTimes {
    /// Among the filter's values: its SQL parameters, or its correlation properties.
    pub filter: Vec<String>,
    /// Among the action's SQL parameters.
    pub action: Vec<String>,
}

impl LocalTimes {
    /// As stored with a rule: a map of `filter` and `action` to lists of names.
    fn stored(&self) -> Amqp {
        let names =
            |names: &[String]| Amqp::List(names.iter().cloned().map(Amqp::String).collect());
        let mut map = OrderedMap::new();
        map.insert(Amqp::String("filter".into()), names(&self.filter));
        map.insert(Amqp::String("action".into()), names(&self.action));
        Amqp::Map(map)
    }

    /// Read back from [`LocalTimes::stored`]; none when absent (a rule stored before they
    /// were kept, or added over AMQP: its times are UTC).
    ///
    /// # Errors
    /// A value of another shape.
    fn restore(stored: Option<&Amqp>) -> Result<LocalTimes, String> {
        let Some(stored) = stored else {
            return Ok(LocalTimes::default());
        };
        let bad = || "a stored rule's local times are not lists of names".to_owned();
        let Amqp::Map(map) = stored else {
            return Err(bad());
        };
        let names = |key: &str| match map.get(&Amqp::String(key.into())) {
            None => Ok(Vec::new()),
            Some(Amqp::List(names)) => names
                .iter()
                .map(|name| match name {
                    Amqp::String(name) => Ok(name.clone()),
                    _ => Err(bad()),
                })
                .collect(),
            Some(_) => Err(bad()),
        };
        Ok(LocalTimes {
            filter: names("filter")?,
            action: names("action")?,
        })
    }

    fn is_empty(&self) -> bool {
        self.filter.is_empty() && self.action.is_empty()
    }
}

impl Rule {
    /// The rule's filter and action, as Service Bus describes them.
    pub fn description(&self) -> RuleDescription {
        RuleDescription {
            filter: self.filter.clone(),
            action: self.action.clone(),
        }
    }

    /// How a rule added at run time is stored: its `rule-description` map, as `add-rule`
    /// sends it, with its name, creation time and, when it has some, its local times (a
    /// broker that does not know them reads the rule without).
    pub fn stored(&self) -> Bytes {
        let mut map = description::map(&self.description());
        map.insert(
            Amqp::String(NAME_KEY.into()),
            Amqp::String(self.name.clone()),
        );
        map.insert(
            Amqp::String(CREATED_KEY.into()),
            Amqp::Timestamp(Timestamp::from_milliseconds(self.created_ms)),
        );
        if !self.local_times.is_empty() {
            map.insert(
                Amqp::String(LOCAL_TIMES_KEY.into()),
                self.local_times.stored(),
            );
        }
        // Encoding a value the broker built itself cannot fail.
        Bytes::from(serde_amqp::to_vec(&Amqp::Map(map)).unwrap_or_default())
    }

    /// A rule read back from [`Rule::stored`].
    ///
    /// # Errors
    /// What is wrong with the stored bytes.
    pub fn restore(stored: &[u8]) -> Result<Rule, String> {
        crate::encoding::check_value(stored, 0).map_err(|e| e.to_string())?;
        let value: Amqp = serde_amqp::from_slice(stored).map_err(|e| e.to_string())?;
        let Amqp::Map(map) = value else {
            return Err("a stored rule is not a map".into());
        };
        let name = match map.get(&Amqp::String(NAME_KEY.into())) {
            Some(Amqp::String(name)) => name.clone(),
            _ => return Err("a stored rule has no name".into()),
        };
        let created_ms = match map.get(&Amqp::String(CREATED_KEY.into())) {
            Some(Amqp::Timestamp(at)) => at.milliseconds(),
            _ => 0,
        };
        let local_times = LocalTimes::restore(map.get(&Amqp::String(LOCAL_TIMES_KEY.into())))?;
        let rule = description::read(&map)?;
        Ok(Rule {
            name,
            filter: rule.filter,
            action: rule.action,
            created_ms,
            local_times,
        })
    }
}

/// The key of a stored rule's name (the one .NET sends inside the description too).
const NAME_KEY: &str = "rule-name";
/// The key of a stored rule's creation time.
const CREATED_KEY: &str = "created-at";
/// The key of a stored rule's [`LocalTimes`].
const LOCAL_TIMES_KEY: &str = "local-times";

/// A subscription as the fan-out sees it: its lane and its rules.
#[derive(Debug)]
pub struct Route {
    /// The subscription's lane.
    pub lane: LaneId,
    /// Its rules, in the order they were created.
    pub rules: Vec<Rule>,
    /// Whether a copy whose filter fails to evaluate is dead-lettered (else dropped).
    pub dead_letter_on_filter_error: bool,
    /// `auto_delete_on_idle` of the subscription, in ms, if it has one.
    pub auto_delete_ms: Option<i64>,
    /// When a client last used the subscription: a receive, a settlement, a rule change or a
    /// management operation (a message arriving from the topic is not its activity).
    pub last_active_ms: i64,
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
    /// Whether its rules read the messages they are given: a filter that looks at them, or
    /// an action.
    pub fn reads_messages(&self) -> bool {
        (self.rules.iter()).any(|rule| rule.filter.reads_message() || rule.action.is_some())
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{CorrelationFilter, SqlFilter, Value};

    #[test]
    fn a_stored_rule_reads_back_as_it_was() {
        let rules = [
            Rule {
                name: "Red".into(),
                filter: Filter::Sql(SqlFilter::parse("color = 'red'").expect("sql")),
                action: Some(SqlAction::parse("SET seen = TRUE").expect("action")),
                created_ms: 1_700_000_000_123,
                local_times: Default::default(),
            },
            Rule {
                name: "vip".into(),
                filter: Filter::Correlation(CorrelationFilter {
                    subject: Some("vip".into()),
                    properties: vec![("tier".into(), Value::String("gold".into()))],
                    ..CorrelationFilter::default()
                }),
                action: None,
                created_ms: 5,
                local_times: Default::default(),
            },
        ];
        for rule in rules {
            assert_eq!(Rule::restore(&rule.stored()), Ok(rule.clone()));
        }
        assert!(Rule::restore(b"\x40").is_err(), "null is not a rule");
    }
}
