//! A rule as Service Bus describes it over AMQP (amqp-dialect.md §9): the `rule-description`
//! map of `com.microsoft:add-rule`, read into a filter and an action, and the described lists
//! `com.microsoft:enumerate-rules` answers with. A rule added at run time is stored as the map
//! it arrived in, so one reader serves the wire and the disk.

use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Timestamp, Value as Amqp};
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;

use super::{CorrelationFilter, Filter, SqlAction, Value};

/// Descriptor codes of the described lists (amqp-dialect.md §9.2).
mod code {
    pub const RULE_DESCRIPTION: u64 = 0x0000_0137_0000_0004;
    pub const EMPTY_RULE_ACTION: u64 = 0x0000_0137_0000_0005;
    pub const SQL_RULE_ACTION: u64 = 0x0000_0137_0000_0006;
    pub const SQL_FILTER: u64 = 0x0000_0013_7000_0006;
    pub const TRUE_FILTER: u64 = 0x0000_0013_7000_0007;
    pub const FALSE_FILTER: u64 = 0x0000_0013_7000_0008;
    pub const CORRELATION_FILTER: u64 = 0x0000_0013_7000_0009;
}

/// The SQL compatibility level Service Bus reports.
const COMPATIBILITY_LEVEL: i32 = 20;

/// The correlation filter's keys in a `rule-description` map, in the order of its described
/// list (`label` is Service Bus's name for the subject).
const CORRELATION_KEYS: [&str; 8] = [
    "correlation-id",
    "message-id",
    "to",
    "reply-to",
    "label",
    "session-id",
    "reply-to-session-id",
    "content-type",
];

/// A rule's filter and action, read from a `rule-description` map.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleDescription {
    /// Which messages the rule selects.
    pub filter: Filter,
    /// What it changes on them.
    pub action: Option<SqlAction>,
}

/// Reads a `rule-description` map: exactly one of `sql-filter` (`{expression}`) and
/// `correlation-filter`, and optionally `sql-rule-action` (`{expression}`; null, `{}` or
/// absent for none). `1=1` and `1=0` are the true and false filters.
///
/// # Errors
/// What is wrong, naming the key: a missing or doubled filter, a field of the wrong type, a
/// SQL syntax error with its position, a correlation filter naming nothing.
pub fn read(map: &OrderedMap<Amqp, Amqp>) -> Result<RuleDescription, String> {
    let filter = match (field(map, "sql-filter"), field(map, "correlation-filter")) {
        (Some(sql), None) => {
            let expression = expression(sql, "sql-filter")?;
            Filter::sql(&expression, parameters(sql, "sql-filter")?)
                .map_err(|e| format!("sql-filter: {e}"))?
        }
        (None, Some(correlation)) => Filter::Correlation(correlation_filter(correlation)?),
        (Some(_), Some(_)) => {
            return Err("rule-description has both sql-filter and correlation-filter".into())
        }
        (None, None) => {
            return Err("rule-description needs a sql-filter or a correlation-filter".into())
        }
    };
    let action = match field(map, "sql-rule-action") {
        None | Some(Amqp::Null) => None,
        Some(Amqp::Map(action)) if field(action, "expression").is_none() => None,
        Some(action) => {
            let expression = expression(action, "sql-rule-action")?;
            let parameters = parameters(action, "sql-rule-action")?;
            Some(
                SqlAction::parse_with(&expression, parameters)
                    .map_err(|e| format!("sql-rule-action: {e}"))?,
            )
        }
    };
    Ok(RuleDescription { filter, action })
}

/// A map field keyed by a string (as the SDKs send it) or a symbol.
fn field<'a>(map: &'a OrderedMap<Amqp, Amqp>, key: &str) -> Option<&'a Amqp> {
    map.get(&Amqp::String(key.to_string()))
        .or_else(|| map.get(&Amqp::Symbol(key.into())))
}

/// The `expression` of a `{expression}` map.
fn expression(value: &Amqp, what: &str) -> Result<String, String> {
    match value {
        Amqp::Map(map) => match field(map, "expression") {
            Some(Amqp::String(text)) => Ok(text.clone()),
            _ => Err(format!("{what}.expression must be a string")),
        },
        _ => Err(format!("{what} must be a map")),
    }
}

/// The `parameters` of a `{expression, parameters}` map: each `@name` with its value (none
/// when absent).
fn parameters(value: &Amqp, what: &str) -> Result<Vec<(String, Value)>, String> {
    let Amqp::Map(map) = value else {
        return Ok(Vec::new());
    };
    match field(map, "parameters") {
        None | Some(Amqp::Null) => Ok(Vec::new()),
        Some(Amqp::Map(parameters)) => named_values(parameters)
            .ok_or_else(|| format!("{what}.parameters must map strings to simple values")),
        Some(_) => Err(format!("{what}.parameters must be a map")),
    }
}

/// A map of names to simple values, as filter values; `None` when it holds anything else.
fn named_values(map: &OrderedMap<Amqp, Amqp>) -> Option<Vec<(String, Value)>> {
    map.iter()
        .map(
            |(key, value)| match (key, SimpleValue::try_from(value.clone())) {
                (Amqp::String(name), Ok(value)) => Some((name.clone(), Value::from_simple(&value))),
                _ => None,
            },
        )
        .collect()
}

/// Names and their values as an AMQP map.
fn values_map(values: &[(String, Value)]) -> Amqp {
    let mut map = OrderedMap::new();
    for (name, value) in values {
        map.insert(Amqp::String(name.clone()), Amqp::from(value.to_simple()));
    }
    Amqp::Map(map)
}

fn correlation_filter(value: &Amqp) -> Result<CorrelationFilter, String> {
    let Amqp::Map(map) = value else {
        return Err("correlation-filter must be a map".into());
    };
    let text = |key: &str| match field(map, key) {
        None | Some(Amqp::Null) => Ok(None),
        Some(Amqp::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(format!("correlation-filter.{key} must be a string")),
    };
    let properties = match field(map, "properties") {
        None | Some(Amqp::Null) => Vec::new(),
        Some(Amqp::Map(properties)) => named_values(properties)
            .ok_or("correlation-filter.properties must map strings to simple values")?,
        Some(_) => return Err("correlation-filter.properties must be a map".into()),
    };
    let filter = CorrelationFilter {
        correlation_id: text("correlation-id")?,
        message_id: text("message-id")?,
        to: text("to")?,
        reply_to: text("reply-to")?,
        subject: text("label")?,
        session_id: text("session-id")?,
        reply_to_session_id: text("reply-to-session-id")?,
        content_type: text("content-type")?,
        properties,
    };
    filter
        .check()
        .map_err(|e| format!("correlation-filter: {e}"))?;
    Ok(filter)
}

/// The described list `enumerate-rules` answers for one rule (amqp-dialect.md §9.2; the true
/// and false filters go as empty lists, which every SDK we run reads; a JMS selector as the
/// SQL filter of its text, as Service Bus shows a JMS subscription's).
pub fn described(name: &str, rule: &RuleDescription, created_ms: i64) -> Amqp {
    let level = Amqp::Int(COMPATIBILITY_LEVEL);
    let filter = match &rule.filter {
        // Empty, as the Rust SDK decodes them (it refuses fields there); the JavaScript SDK
        // reads only the descriptor.
        Filter::True => list(code::TRUE_FILTER, Vec::new()),
        Filter::False => list(code::FALSE_FILTER, Vec::new()),
        Filter::Sql(sql) => list(
            code::SQL_FILTER,
            vec![text(sql.expression()), level.clone()],
        ),
        Filter::Selector(selector) => list(
            code::SQL_FILTER,
            vec![text(selector.expression()), level.clone()],
        ),
        Filter::Correlation(correlation) => {
            let mut values: Vec<Amqp> = correlation_fields(correlation)
                .iter()
                .map(|value| value.as_deref().map_or(Amqp::Null, text))
                .collect();
            values.push(properties(correlation));
            list(code::CORRELATION_FILTER, values)
        }
    };
    let action = match &rule.action {
        Some(action) => list(
            code::SQL_RULE_ACTION,
            vec![text(action.expression()), level],
        ),
        None => list(code::EMPTY_RULE_ACTION, Vec::new()),
    };
    list(
        code::RULE_DESCRIPTION,
        vec![
            filter,
            action,
            text(name),
            Amqp::Timestamp(Timestamp::from_milliseconds(created_ms)),
        ],
    )
}

/// The `rule-description` map of a rule, as `add-rule` sends it: how a rule added at run
/// time is stored. A JMS selector, never added at run time (only a subscription made for a
/// JMS consumer declares one), is written as the SQL filter Service Bus shows it as, and
/// would read back as one.
pub fn map(rule: &RuleDescription) -> OrderedMap<Amqp, Amqp> {
    let expression_with = |text: &str, parameters: &[(String, Value)]| {
        let mut map = OrderedMap::new();
        map.insert(Amqp::String("expression".into()), Amqp::String(text.into()));
        if !parameters.is_empty() {
            map.insert(Amqp::String("parameters".into()), values_map(parameters));
        }
        Amqp::Map(map)
    };
    let expression = |text: &str| expression_with(text, &[]);
    let mut out = OrderedMap::new();
    match &rule.filter {
        Filter::True => out.insert(Amqp::String("sql-filter".into()), expression("1=1")),
        Filter::False => out.insert(Amqp::String("sql-filter".into()), expression("1=0")),
        Filter::Sql(sql) => out.insert(
            Amqp::String("sql-filter".into()),
            expression_with(sql.expression(), sql.parameters()),
        ),
        Filter::Selector(selector) => out.insert(
            Amqp::String("sql-filter".into()),
            expression(selector.expression()),
        ),
        Filter::Correlation(correlation) => {
            let mut map = OrderedMap::new();
            for (key, value) in CORRELATION_KEYS.iter().zip(correlation_fields(correlation)) {
                if let Some(value) = value {
                    map.insert(Amqp::String((*key).into()), Amqp::String(value.clone()));
                }
            }
            map.insert(Amqp::String("properties".into()), properties(correlation));
            out.insert(Amqp::String("correlation-filter".into()), Amqp::Map(map))
        }
    };
    if let Some(action) = &rule.action {
        out.insert(
            Amqp::String("sql-rule-action".into()),
            expression_with(action.expression(), action.parameters()),
        );
    }
    out
}

/// A correlation filter's system-property fields, in the order of [`CORRELATION_KEYS`].
fn correlation_fields(correlation: &CorrelationFilter) -> [&Option<String>; 8] {
    [
        &correlation.correlation_id,
        &correlation.message_id,
        &correlation.to,
        &correlation.reply_to,
        &correlation.subject,
        &correlation.session_id,
        &correlation.reply_to_session_id,
        &correlation.content_type,
    ]
}

/// A correlation filter's application properties as an AMQP map.
fn properties(correlation: &CorrelationFilter) -> Amqp {
    values_map(&correlation.properties)
}

fn text(value: &str) -> Amqp {
    Amqp::String(value.to_string())
}

fn list(descriptor: u64, values: Vec<Amqp>) -> Amqp {
    Amqp::Described(Box::new(Described {
        descriptor: Descriptor::Code(descriptor),
        value: Amqp::List(values),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn description(entries: Vec<(&str, Amqp)>) -> OrderedMap<Amqp, Amqp> {
        let mut map = OrderedMap::new();
        for (key, value) in entries {
            map.insert(Amqp::String(key.into()), value);
        }
        map
    }

    fn expression_map(text: &str) -> Amqp {
        Amqp::Map(description(vec![("expression", Amqp::String(text.into()))]))
    }

    #[test]
    fn sdk_descriptions_read_and_round_trip_through_the_stored_map() {
        let sql = description(vec![
            ("sql-filter", expression_map("color = 'red'")),
            ("sql-rule-action", expression_map("SET seen = TRUE")),
        ]);
        let rule = read(&sql).expect("valid");
        assert!(matches!(rule.filter, Filter::Sql(_)));
        assert_eq!(read(&map(&rule)), Ok(rule));

        let correlation = description(vec![
            (
                "correlation-filter",
                Amqp::Map(description(vec![
                    ("label", Amqp::String("vip".into())),
                    (
                        "properties",
                        Amqp::Map(description(vec![("tier", Amqp::String("gold".into()))])),
                    ),
                ])),
            ),
            ("sql-rule-action", Amqp::Null),
        ]);
        let rule = read(&correlation).expect("valid");
        let Filter::Correlation(filter) = &rule.filter else {
            panic!("a correlation filter: {rule:?}");
        };
        assert_eq!(filter.subject.as_deref(), Some("vip"));
        assert_eq!(rule.action, None);
        assert_eq!(read(&map(&rule)), Ok(rule));

        let always = description(vec![("sql-filter", expression_map("1=1"))]);
        assert_eq!(read(&always).expect("valid").filter, Filter::True);
    }

    #[test]
    fn bad_descriptions_say_what_is_wrong() {
        let syntax = description(vec![("sql-filter", expression_map("color = "))]);
        assert!(read(&syntax).unwrap_err().starts_with("sql-filter: "));
        assert!(read(&description(vec![]))
            .unwrap_err()
            .contains("needs a sql-filter"));
        let empty = description(vec![("correlation-filter", Amqp::Map(OrderedMap::new()))]);
        assert!(read(&empty)
            .unwrap_err()
            .starts_with("correlation-filter: "));
    }

    /// Service Bus shows a JMS subscription's selector as a SQL filter of its text.
    #[test]
    fn a_jms_selector_is_described_as_a_sql_filter_of_its_text() {
        let rule = RuleDescription {
            filter: Filter::selector("JMSPriority > 4").expect("a selector"),
            action: None,
        };
        let Amqp::Described(outer) = described("$Default", &rule, 5) else {
            panic!("described");
        };
        let Amqp::List(fields) = &outer.value else {
            panic!("list");
        };
        let Amqp::Described(filter) = &fields[0] else {
            panic!("described filter");
        };
        assert_eq!(filter.descriptor, Descriptor::Code(code::SQL_FILTER));
        assert_eq!(
            filter.value,
            Amqp::List(vec![
                Amqp::String("JMSPriority > 4".into()),
                Amqp::Int(COMPATIBILITY_LEVEL)
            ])
        );
        assert_eq!(
            map(&rule).get(&Amqp::String("sql-filter".into())),
            Some(&expression_map("JMSPriority > 4"))
        );
    }

    #[test]
    fn enumerate_encodes_described_lists_with_numeric_codes() {
        let rule = RuleDescription {
            filter: Filter::True,
            action: None,
        };
        let Amqp::Described(outer) = described("$Default", &rule, 5) else {
            panic!("described");
        };
        assert_eq!(outer.descriptor, Descriptor::Code(0x0000_0137_0000_0004));
        let Amqp::List(fields) = &outer.value else {
            panic!("list");
        };
        assert_eq!(fields[2], Amqp::String("$Default".into()));
        let Amqp::Described(filter) = &fields[0] else {
            panic!("described filter");
        };
        assert_eq!(filter.descriptor, Descriptor::Code(0x0000_0013_7000_0007));
        assert_eq!(
            filter.value,
            Amqp::List(Vec::new()),
            "the Rust SDK takes no fields"
        );
    }
}
