//! A subscription rule as the ATOM API writes it (`RuleDescription`) and reads it: SQL, true,
//! false and correlation filters with their typed property values, SQL and empty actions,
//! and the `Parameters` of SQL filters and actions.
//!
//! Values carry `i:type="d6p1:<type>"` with the four-character prefix the JS client insists
//! on: `int`, `double`, `string`, `boolean` and `dateTime` (which it reads); a long outside
//! `int`'s range is written `long`, and a .NET `TimeSpan` (`duration`), both of which Python
//! reads. Guids are read as `guid` and written as strings. A `dateTime` is written back with
//! the zone it was given with, as Service Bus keeps a .NET `DateTime`'s kind: UTC with `Z`
//! (given with a zone, or over AMQP), or none (given without; [`LocalTimes`]).

use std::fmt::Write;
use std::time::Duration;

use fe2o3_amqp::types::primitives::{SimpleValue, Value as Amqp};
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;

use super::atom::{self, Element};
use crate::config::{CorrelationConfig, PropertyValue, RuleConfig, RuleFilter};
use crate::entity::topic::{LocalTimes, Rule};
use crate::filter::{CorrelationFilter, Filter, SqlAction, Value};

/// XML Schema's namespace, for property value types.
const XSD: &str = "http://www.w3.org/2001/XMLSchema";

/// A rule's `RuleDescription`.
pub fn describe(rule: &Rule) -> String {
    let mut out = atom::opening("RuleDescription");
    let local = &rule.local_times;
    match &rule.filter {
        Filter::True => sql(&mut out, "Filter", "TrueFilter", "1=1", (&[], &[])),
        Filter::False => sql(&mut out, "Filter", "FalseFilter", "1=0", (&[], &[])),
        Filter::Sql(filter) => sql(
            &mut out,
            "Filter",
            "SqlFilter",
            filter.expression(),
            (filter.parameters(), &local.filter),
        ),
        // Service Bus shows a JMS subscription's selector as a SQL filter of its text.
        Filter::Selector(selector) => sql(
            &mut out,
            "Filter",
            "SqlFilter",
            selector.expression(),
            (&[], &[]),
        ),
        Filter::Correlation(correlation) => {
            correlation_filter(&mut out, correlation, &local.filter)
        }
    }
    match &rule.action {
        Some(action) => sql(
            &mut out,
            "Action",
            "SqlRuleAction",
            action.expression(),
            (action.parameters(), &local.action),
        ),
        None => out.push_str("<Action i:type=\"EmptyRuleAction\"/>"),
    }
    let _ = write!(
        out,
        "<CreatedAt>{}</CreatedAt><Name>{}</Name></RuleDescription>",
        atom::time(rule.created_ms),
        escape(&rule.name)
    );
    out
}

fn escape(text: &str) -> String {
    quick_xml::escape::escape(text).into_owned()
}

/// A SQL filter or action (`element` `Filter` or `Action`) with its parameters (and the
/// names of the times among them given without a zone).
fn sql(
    out: &mut String,
    element: &str,
    kind: &str,
    expression: &str,
    (parameters, local_times): (&[(String, Value)], &[String]),
) {
    let _ = write!(
        out,
        "<{element} i:type=\"{kind}\"><SqlExpression>{}</SqlExpression>",
        escape(expression)
    );
    if !parameters.is_empty() {
        out.push_str("<Parameters>");
        key_values(out, parameters, local_times);
        out.push_str("</Parameters>");
    }
    let _ = write!(
        out,
        "<CompatibilityLevel>20</CompatibilityLevel></{element}>"
    );
}

/// Named values as `KeyValueOfstringanyType` elements, each value with its XML Schema type;
/// the times named in `local_times` without a zone.
fn key_values(out: &mut String, values: &[(String, Value)], local_times: &[String]) {
    for (key, value) in values {
        let Some((kind, text)) = typed_text(value, local_times.contains(key)) else {
            continue;
        };
        let _ = write!(
            out,
            "<KeyValueOfstringanyType><Key>{}</Key><Value xmlns:d6p1=\"{XSD}\" \
             i:type=\"d6p1:{kind}\">{}</Value></KeyValueOfstringanyType>",
            escape(key),
            escape(&text)
        );
    }
}

/// A value's XML Schema type and text; `None` for what no rule holds. A time is written in
/// UTC with `Z`, or without a zone when it was given without one (`local`), as .NET writes a
/// `DateTime` back by its kind (the Python client sends a naive time so and reads back what
/// it sent; the Go client sends UTC with `Z` and parses only a time with a zone).
fn typed_text(value: &Value, local: bool) -> Option<(&'static str, String)> {
    Some(match value {
        Value::Int(number) if i32::try_from(*number).is_ok() => ("int", number.to_string()),
        Value::Int(number) => ("long", number.to_string()),
        Value::Float(number) => ("double", number.to_string()),
        Value::Bool(flag) => ("boolean", flag.to_string()),
        Value::Timestamp(ms) if local => {
            ("dateTime", atom::time(*ms).trim_end_matches('Z').to_owned())
        }
        Value::Timestamp(ms) => ("dateTime", atom::time(*ms)),
        Value::String(text) => ("string", text.clone()),
        // Guids have no type the JS client reads; their text compares the same.
        Value::Uuid(uuid) => ("string", uuid.to_string()),
        other => {
            let ticks = timespan_ticks(other)?;
            let ms = u64::try_from(ticks / 10_000).ok()?;
            ("duration", atom::duration(Some(Duration::from_millis(ms))))
        }
    })
}

fn correlation_filter(out: &mut String, filter: &CorrelationFilter, local_times: &[String]) {
    out.push_str("<Filter i:type=\"CorrelationFilter\">");
    for (name, value) in correlation_fields(filter) {
        if let Some(value) = value {
            let _ = write!(out, "<{name}>{}</{name}>", escape(value));
        }
    }
    if !filter.properties.is_empty() {
        out.push_str("<Properties>");
        key_values(out, &filter.properties, local_times);
        out.push_str("</Properties>");
    }
    out.push_str("</Filter>");
}

/// A rule as the config file declares one, for a subscription created with it: its
/// declaration is how it is stored, so it comes back after a restart.
///
/// # Errors
/// A correlation property or a parameter of a type the config file cannot declare (a time, a
/// duration or a guid), named.
pub fn declared(rule: &Rule) -> Result<RuleConfig, String> {
    let mut parameters = Vec::new();
    let filter = match &rule.filter {
        Filter::True => RuleFilter::True,
        Filter::False => RuleFilter::Sql("1=0".to_owned()),
        Filter::Sql(sql) => {
            parameters = declared_values("parameter", sql.parameters())?;
            RuleFilter::Sql(sql.expression().to_owned())
        }
        Filter::Selector(selector) => RuleFilter::Selector(selector.expression().to_owned()),
        Filter::Correlation(correlation) => {
            let properties = declared_values("property", &correlation.properties)?;
            RuleFilter::Correlation(CorrelationConfig {
                correlation_id: correlation.correlation_id.clone(),
                message_id: correlation.message_id.clone(),
                to: correlation.to.clone(),
                reply_to: correlation.reply_to.clone(),
                subject: correlation.subject.clone(),
                session_id: correlation.session_id.clone(),
                reply_to_session_id: correlation.reply_to_session_id.clone(),
                content_type: correlation.content_type.clone(),
                properties,
            })
        }
    };
    let action_parameters = match &rule.action {
        Some(action) => declared_values("parameter", action.parameters())?,
        None => Vec::new(),
    };
    Ok(RuleConfig {
        name: rule.name.clone(),
        filter,
        action: rule.action.as_ref().map(|a| a.expression().to_owned()),
        parameters,
        action_parameters,
    })
}

/// Named values (`what`: correlation properties or SQL parameters) as the config file
/// declares them, sorted by name.
///
/// # Errors
/// A value of a type the config file cannot declare, named.
fn declared_values(
    what: &str,
    values: &[(String, Value)],
) -> Result<Vec<(String, PropertyValue)>, String> {
    let mut declared = Vec::with_capacity(values.len());
    for (key, value) in values {
        let value = match value {
            Value::Int(number) => PropertyValue::Int(*number),
            Value::Float(number) => PropertyValue::Float(*number),
            Value::Bool(flag) => PropertyValue::Bool(*flag),
            Value::String(text) => PropertyValue::String(text.clone()),
            _ => {
                return Err(format!(
                    "{what} {key:?}: a subscription's default rule holds only strings, numbers \
                     and booleans; create the subscription, then add this rule through \
                     .../Rules/{{rule}}"
                ))
            }
        };
        declared.push((key.clone(), value));
    }
    declared.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(declared)
}

/// The system fields of a correlation filter with their element names.
fn correlation_fields(filter: &CorrelationFilter) -> [(&'static str, Option<&String>); 8] {
    [
        ("CorrelationId", filter.correlation_id.as_ref()),
        ("MessageId", filter.message_id.as_ref()),
        ("To", filter.to.as_ref()),
        ("ReplyTo", filter.reply_to.as_ref()),
        ("Label", filter.subject.as_ref()),
        ("SessionId", filter.session_id.as_ref()),
        ("ReplyToSessionId", filter.reply_to_session_id.as_ref()),
        ("ContentType", filter.content_type.as_ref()),
    ]
}

/// The named values of a `Properties` or `Parameters` element, as read.
#[derive(Default)]
struct Named {
    /// Each value by its name.
    values: Vec<(String, Value)>,
    /// The names of the times among them given without a zone.
    local_times: Vec<String>,
}

/// The named values of a `Properties` or `Parameters` element (none when absent).
///
/// # Errors
/// A pair without a value, or a value that does not read as its type says.
fn key_values_of(element: Option<&Element>) -> Result<Named, String> {
    let pairs = element.map_or(&[][..], |e| e.children.as_slice());
    let mut named = Named::default();
    for pair in pairs {
        let key = pair
            .child("Key")
            .map(|k| k.text.clone())
            .unwrap_or_default();
        let value = pair.child("Value").ok_or("a property without a Value")?;
        let (value, local) = typed_value(&key, value)?;
        if local {
            named.local_times.push(key.clone());
        }
        named.values.push((key, value));
    }
    Ok(named)
}

/// The value of a `Value` element, read as its XML Schema type says, and whether it is a time
/// given without a zone.
///
/// # Errors
/// A value that does not read as its type, or a type rules do not hold.
fn typed_value(key: &str, value: &Element) -> Result<(Value, bool), String> {
    let text = value.text.trim();
    let bad = |what: &str| format!("property {key:?}: {text:?} is not {what}");
    let value = match kind(value) {
        "int" | "long" | "short" | "byte" | "unsignedInt" | "unsignedShort" | "unsignedByte" => {
            Value::Int(text.parse().map_err(|_| bad("an integer"))?)
        }
        "double" | "float" | "decimal" => Value::Float(text.parse().map_err(|_| bad("a number"))?),
        "boolean" => Value::Bool(
            text.to_ascii_lowercase()
                .parse()
                .map_err(|_| bad("a boolean"))?,
        ),
        "dateTime" => {
            let (ms, zoned) = read_time(text).ok_or_else(|| bad("a dateTime"))?;
            return Ok((Value::Timestamp(ms), !zoned));
        }
        "duration" => {
            let duration = atom::read_duration(text).map_err(|_| bad("a duration"))?;
            let ms = duration.map_or(i64::MAX / 10_000, |d| {
                i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 10_000)
            });
            timespan(ms * 10_000)
        }
        "guid" => Value::Uuid(text.parse().map_err(|_| bad("a guid"))?),
        "string" | "" => Value::String(value.text.clone()),
        other => {
            return Err(format!(
                "property {key:?}: values of type {other:?} are not supported"
            ))
        }
    };
    Ok((value, false))
}

/// An XML Schema `dateTime` in ms since the Unix epoch, and whether it has a zone: `Z` or an
/// offset (`+02:00`); one without is read as UTC, as Service Bus stores a time given without
/// one.
fn read_time(text: &str) -> Option<(i64, bool)> {
    // Any text may arrive: the zone is split off only where it is six ASCII characters.
    let split = text
        .len()
        .checked_sub(6)
        .and_then(|at| Some((text.get(..at)?, text.get(at..)?)));
    let without_offset = || match text.strip_suffix('Z') {
        Some(utc) => Some((read_utc(utc)?, true)),
        None => Some((read_utc(text)?, false)),
    };
    let (local, offset_minutes) = match split {
        Some((local, zone)) if zone.is_ascii() && zone.as_bytes()[3] == b':' => {
            let sign = match zone.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return without_offset(),
            };
            let hours: i64 = zone[1..3].parse().ok()?;
            let minutes: i64 = zone[4..].parse().ok()?;
            (local, sign * (hours * 60 + minutes))
        }
        _ => return without_offset(),
    };
    Some((read_utc(local)? - offset_minutes * 60_000, true))
}

/// A `dateTime` without a zone, read as UTC, in ms since the Unix epoch.
fn read_utc(local: &str) -> Option<i64> {
    let at = humantime::parse_rfc3339_weak(local).ok()?;
    i64::try_from(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis()).ok()
}

/// The descriptor .NET gives a `TimeSpan` in AMQP (its value: a long count of 100 ns ticks).
const TIMESPAN: &str = "com.microsoft:timespan";

/// A .NET `TimeSpan` of `ticks`, as a message property carries one.
fn timespan(ticks: i64) -> Value {
    let described = Described {
        descriptor: Descriptor::Name(TIMESPAN.into()),
        value: Amqp::Long(ticks),
    };
    Value::Other(SimpleValue::Described(Box::new(described)))
}

/// The ticks of a .NET `TimeSpan` value.
fn timespan_ticks(value: &Value) -> Option<i64> {
    let Value::Other(SimpleValue::Described(described)) = value else {
        return None;
    };
    match (&described.descriptor, &described.value) {
        (Descriptor::Name(name), Amqp::Long(ticks)) if name.as_str() == TIMESPAN => Some(*ticks),
        _ => None,
    }
}

/// The local part of an `i:type` value (`d6p1:int` is `int`).
fn kind(element: &Element) -> &str {
    let kind = element.attributes.get("type").map_or("", String::as_str);
    kind.rsplit(':').next().unwrap_or(kind)
}

/// The rule named `name` a client's `RuleDescription` asks for, its expressions parsed as
/// `add-rule`'s are.
///
/// # Errors
/// What is wrong, naming the element: no filter, an unknown filter or action type, SQL
/// parameters, a syntax error, a correlation filter naming nothing, a value of a type Tidebus
/// does not compare.
pub fn read(body: &[u8], name: &str, now_ms: i64) -> Result<Rule, String> {
    let root = atom::parse(body)?;
    let description = root
        .find("RuleDescription")
        .ok_or("the body holds no RuleDescription")?;
    from_element(description, name, now_ms)
}

/// The rule a `RuleDescription` element (or a subscription's `DefaultRuleDescription`)
/// describes, named `name`.
///
/// # Errors
/// As [`read`].
pub fn from_element(description: &Element, name: &str, now_ms: i64) -> Result<Rule, String> {
    let (filter, filter_times) = match description.child("Filter") {
        None => (Filter::True, Vec::new()),
        Some(filter) => read_filter(filter)?,
    };
    let (action, action_times) = match description.child("Action") {
        None => (None, Vec::new()),
        Some(action) => match kind(action) {
            "EmptyRuleAction" | "" => (None, Vec::new()),
            "SqlRuleAction" => {
                let expression = action
                    .child("SqlExpression")
                    .map_or("", |e| e.text.as_str());
                let parameters = key_values_of(action.child("Parameters"))?;
                let action = SqlAction::parse_with(expression, parameters.values)
                    .map_err(|e| format!("Action: {e}"))?;
                (Some(action), parameters.local_times)
            }
            other => return Err(format!("Action type {other:?} is not supported")),
        },
    };
    Ok(Rule {
        name: name.to_owned(),
        filter,
        action,
        created_ms: now_ms,
        local_times: LocalTimes {
            filter: filter_times,
            action: action_times,
        },
    })
}

/// The filter a `Filter` element describes, with the names of its times given without a
/// zone.
fn read_filter(filter: &Element) -> Result<(Filter, Vec<String>), String> {
    match kind(filter) {
        "TrueFilter" => Ok((Filter::True, Vec::new())),
        "FalseFilter" => Ok((Filter::False, Vec::new())),
        "SqlFilter" => {
            let expression = filter
                .child("SqlExpression")
                .map_or("", |e| e.text.as_str());
            let parameters = key_values_of(filter.child("Parameters"))?;
            let sql = Filter::sql(expression, parameters.values)
                .map_err(|e| format!("SqlFilter: {e}"))?;
            Ok((sql, parameters.local_times))
        }
        "CorrelationFilter" => {
            read_correlation(filter).map(|(c, times)| (Filter::Correlation(c), times))
        }
        other => Err(format!("Filter type {other:?} is not supported")),
    }
}

fn read_correlation(filter: &Element) -> Result<(CorrelationFilter, Vec<String>), String> {
    let field = |name: &str| {
        filter
            .child(name)
            .map(|element| element.text.clone())
            .filter(|text| !text.is_empty())
    };
    let properties = key_values_of(filter.child("Properties"))?;
    let correlation = CorrelationFilter {
        correlation_id: field("CorrelationId"),
        message_id: field("MessageId"),
        to: field("To"),
        reply_to: field("ReplyTo"),
        subject: field("Label"),
        session_id: field("SessionId"),
        reply_to_session_id: field("ReplyToSessionId"),
        content_type: field("ContentType"),
        properties: properties.values,
    };
    if correlation_fields(&correlation)
        .iter()
        .all(|(_, v)| v.is_none())
        && correlation.properties.is_empty()
    {
        return Err("the CorrelationFilter names nothing".into());
    }
    Ok((correlation, properties.local_times))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::SqlFilter;

    fn rule(filter: Filter, action: Option<&str>) -> Rule {
        Rule {
            name: "r".into(),
            filter,
            action: action.map(|a| SqlAction::parse(a).expect("action")),
            created_ms: 1_700_000_000_000,
            local_times: LocalTimes::default(),
        }
    }

    #[test]
    fn every_filter_reads_back_as_written() {
        let correlation = CorrelationFilter {
            correlation_id: Some("c & d".into()),
            message_id: None,
            to: None,
            reply_to: None,
            subject: Some("vip".into()),
            session_id: None,
            reply_to_session_id: None,
            content_type: None,
            properties: vec![
                ("n".into(), Value::Int(3)),
                ("big".into(), Value::Int(1 << 40)),
                ("f".into(), Value::Float(1.5)),
                ("b".into(), Value::Bool(true)),
                ("s".into(), Value::String("<x>".into())),
            ],
        };
        for written in [
            rule(Filter::True, None),
            rule(Filter::False, None),
            rule(
                Filter::Sql(SqlFilter::parse("a = 'b'").expect("sql")),
                Some("SET x = 1"),
            ),
            rule(Filter::Correlation(correlation), None),
        ] {
            let xml = describe(&written);
            let back = read(xml.as_bytes(), "r", written.created_ms).expect("reads");
            assert_eq!(
                format!("{:?}", back.filter),
                format!("{:?}", written.filter),
                "{xml}"
            );
            assert_eq!(
                back.action.as_ref().map(SqlAction::expression),
                written.action.as_ref().map(SqlAction::expression)
            );
        }
        assert!(!describe(&rule(Filter::True, None)).contains("i:type=\"d6p1:"));
    }

    #[test]
    fn parameters_times_and_durations_read_back_as_the_python_client_sends_them() {
        let body = format!(
            "<entry><content><RuleDescription>\
             <Filter i:type=\"CorrelationFilter\"><Properties>{}{}</Properties></Filter>\
             <Action i:type=\"SqlRuleAction\"><SqlExpression>SET p = @when</SqlExpression>\
             <Parameters>{}</Parameters></Action></RuleDescription></content></entry>",
            pair("at", "dateTime", "2020-07-05T11:12:13"),
            pair("span", "duration", "P1DT2H3M"),
            pair("@when", "dateTime", "2020-07-05T13:12:13+02:00"),
        );
        let rule = read(body.as_bytes(), "r", 0).expect("reads");
        let Filter::Correlation(correlation) = &rule.filter else {
            panic!("{:?}", rule.filter);
        };
        assert_eq!(
            correlation.properties[0].1,
            Value::Timestamp(1_593_947_533_000)
        );
        assert_eq!(
            timespan_ticks(&correlation.properties[1].1),
            Some(937_800_000_000)
        );
        let action = rule.action.as_ref().expect("an action");
        assert_eq!(
            action.parameters()[0].1,
            Value::Timestamp(1_593_947_533_000)
        );
        let written = describe(&rule);
        for text in [
            ">2020-07-05T11:12:13.000</Value>",
            ">2020-07-05T11:12:13.000Z</Value>",
            "i:type=\"d6p1:duration\">P1DT2H3M</Value>",
            "<Parameters><KeyValueOfstringanyType><Key>@when</Key>",
        ] {
            assert!(written.contains(text), "{text} in {written}");
        }
        let sql = "<entry><content><RuleDescription><Filter i:type=\"SqlFilter\">\
                   <SqlExpression>a = @p</SqlExpression><Parameters>\
                   <KeyValueOfstringanyType><Key>@p</Key><Value i:type=\"d6p1:int\">1</Value>\
                   </KeyValueOfstringanyType></Parameters></Filter></RuleDescription></content>\
                   </entry>";
        let rule = read(sql.as_bytes(), "r", 0).expect("reads");
        let back = read(describe(&rule).as_bytes(), "r", 0).expect("reads back");
        assert_eq!(format!("{:?}", back.filter), format!("{:?}", rule.filter));
    }

    /// A time comes back with the zone it was given with, as Service Bus keeps a `DateTime`'s
    /// kind: in UTC with `Z` when it had one (the Go client sends `Z` and parses nothing
    /// else), without one when it had none (the Python client's naive times); across a
    /// restart too. A rule stored before local times were kept reads back in UTC.
    #[test]
    fn times_come_back_with_the_zone_they_were_given_with() {
        let filter = pair("@utc", "dateTime", "2001-01-01T01:02:03Z")
            + &pair("@naive", "dateTime", "2001-01-01T01:02:03");
        let action = pair("@utc", "dateTime", "2001-01-01T01:02:03");
        let body = sql_rule(
            ("a = @utc OR a = @naive", &filter),
            ("SET x = @utc", &action),
        );
        let rule = read(body.as_bytes(), "r", 0).expect("reads");
        let expected = LocalTimes {
            filter: vec!["@naive".to_owned()],
            action: vec!["@utc".to_owned()],
        };
        assert_eq!(rule.local_times, expected);
        let restored = Rule::restore(&rule.stored()).expect("restores");
        assert_eq!(restored, rule, "kept across a restart");
        let written = describe(&restored);
        let filter = written.split("<Action").next().expect("a filter");
        assert!(
            filter.contains(">2001-01-01T01:02:03.000Z</Value>"),
            "{filter}"
        );
        assert!(
            filter.contains(">2001-01-01T01:02:03.000</Value>"),
            "{filter}"
        );
        let action = written.split("<Action").nth(1).expect("an action");
        assert!(
            action.contains(">2001-01-01T01:02:03.000</Value>"),
            "{action}"
        );
        let before = Rule {
            local_times: LocalTimes::default(),
            ..rule
        };
        let stored = Rule::restore(&before.stored()).expect("restores");
        assert_eq!(stored.local_times, LocalTimes::default());
        assert!(!describe(&stored).contains(".000</Value>"), "all UTC");
    }

    /// A subscription's default rule is stored as its declaration: with its parameters, it
    /// declares the rule it was read as.
    #[test]
    fn a_default_rule_is_declared_with_its_parameters() {
        let parameters = pair("@n", "int", "1") + &pair("@s", "string", "b");
        let body = sql_rule(
            ("s = @s AND n = @n", &parameters),
            ("SET x = @x", &pair("@x", "double", "2.5")),
        );
        let rule = read(body.as_bytes(), "r", 0).expect("reads");
        let declaration = declared(&rule).expect("declared");
        assert_eq!(
            declaration.filter,
            RuleFilter::Sql("s = @s AND n = @n".to_owned())
        );
        let sorted = [
            ("@n".to_owned(), PropertyValue::Int(1)),
            ("@s".to_owned(), PropertyValue::String("b".to_owned())),
        ];
        assert_eq!(declaration.parameters, sorted);
        assert_eq!(
            declaration.action_parameters,
            [("@x".to_owned(), PropertyValue::Float(2.5))]
        );
        let back = crate::entity::setup::rule(&declaration).expect("parses");
        assert_eq!(format!("{:?}", back.filter), format!("{:?}", rule.filter));
        assert_eq!(back.action, rule.action);

        let timed = body.replace(
            &pair("@x", "double", "2.5"),
            &pair("@x", "dateTime", "2020-07-05T11:12:13"),
        );
        let timed = read(timed.as_bytes(), "r", 0).expect("reads");
        assert!(declared(&timed)
            .expect_err("refused")
            .starts_with("parameter \"@x\": a subscription's default rule holds only strings"));
    }

    /// A subscription's default rule with a true or false filter is declared (as SQL `1=1`
    /// or `1=0`, what the config file has) and comes back a true or false filter, as Service
    /// Bus describes it (the Go client reads a `FalseFilter` back).
    #[test]
    fn a_true_or_false_default_rule_comes_back_so() {
        for filter in [Filter::True, Filter::False] {
            let declaration = declared(&rule(filter.clone(), None)).expect("declared");
            let back = crate::entity::setup::rule(&declaration).expect("parses");
            assert_eq!(back.filter, filter);
            let kind = if filter == Filter::True {
                "TrueFilter"
            } else {
                "FalseFilter"
            };
            assert!(describe(&back).contains(&format!("<Filter i:type=\"{kind}\">")));
        }
    }

    /// A JMS subscription's rule shows as a SQL filter of its selector (as Service Bus shows
    /// one) and is declared, so stored, as the selector it is.
    #[test]
    fn a_jms_selector_rule_shows_as_a_sql_filter_and_is_declared_a_selector() {
        let selector = "JMSPriority > 4 AND color <> 'red'";
        let written = rule(Filter::selector(selector).expect("a selector"), None);
        assert!(describe(&written).contains(
            "<Filter i:type=\"SqlFilter\"><SqlExpression>JMSPriority &gt; 4 AND color &lt;&gt; \
             &apos;red&apos;</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Filter>"
        ));
        let declaration = declared(&written).expect("declared");
        assert_eq!(
            declaration.filter,
            RuleFilter::Selector(selector.to_owned())
        );
        let back = crate::entity::setup::rule(&declaration).expect("parses");
        assert_eq!(back.filter, written.filter);
    }

    #[test]
    fn times_read_with_any_zone_and_any_text_is_safe() {
        let at = 1_593_947_533_000;
        assert_eq!(read_time("2020-07-05T11:12:13"), Some((at, false)));
        assert_eq!(read_time("2020-07-05T11:12:13Z"), Some((at, true)));
        assert_eq!(read_time("2020-07-05T06:12:13-05:00"), Some((at, true)));
        for hostile in ["", "é", "ééaaaaa", "2020-07-05T11:12:1éé", "x+0é:00"] {
            assert_eq!(read_time(hostile), None, "{hostile:?}");
        }
    }

    /// A `RuleDescription` with a SQL filter and a SQL action, each an expression with its
    /// parameters (`KeyValueOfstringanyType` elements).
    fn sql_rule(
        (filter, filter_parameters): (&str, &str),
        (action, parameters): (&str, &str),
    ) -> String {
        format!(
            "<entry><content><RuleDescription><Filter i:type=\"SqlFilter\">\
             <SqlExpression>{filter}</SqlExpression><Parameters>{filter_parameters}</Parameters>\
             </Filter><Action i:type=\"SqlRuleAction\"><SqlExpression>{action}</SqlExpression>\
             <Parameters>{parameters}</Parameters></Action></RuleDescription></content></entry>"
        )
    }

    /// A `KeyValueOfstringanyType` of `kind`.
    fn pair(key: &str, kind: &str, text: &str) -> String {
        format!(
            "<KeyValueOfstringanyType><Key>{key}</Key><Value xmlns:d6p1=\"{XSD}\" \
             i:type=\"d6p1:{kind}\">{text}</Value></KeyValueOfstringanyType>"
        )
    }

    #[test]
    fn what_tidebus_does_not_do_is_refused_naming_it() {
        let refused = |body: &str| read(body.as_bytes(), "r", 0).expect_err("refused");
        let wrap = |filter: &str| {
            format!("<entry><content><RuleDescription>{filter}</RuleDescription></content></entry>")
        };
        assert!(refused(&wrap(
            "<Filter i:type=\"SqlFilter\"><SqlExpression>a = @q</SqlExpression><Parameters>\
             <KeyValueOfstringanyType><Key>@p</Key><Value>1</Value></KeyValueOfstringanyType>\
             </Parameters></Filter>"
        ))
        .contains("parameter @q has no value"));
        assert!(refused(&wrap(
            "<Filter i:type=\"CorrelationFilter\"><Properties><KeyValueOfstringanyType>\
             <Key>k</Key><Value i:type=\"d6p1:base64Binary\">AA==</Value>\
             </KeyValueOfstringanyType></Properties></Filter>"
        ))
        .contains("\"base64Binary\" are not supported"));
        assert!(refused(&wrap("<Filter i:type=\"RegexFilter\"/>")).contains("RegexFilter"));
        assert!(refused(&wrap("<Filter i:type=\"CorrelationFilter\"/>")).contains("names nothing"));
        assert!(refused(&wrap(
            "<Filter i:type=\"SqlFilter\"><SqlExpression>a = = 1</SqlExpression></Filter>"
        ))
        .starts_with("SqlFilter:"));
        assert!(refused("<entry/>").contains("no RuleDescription"));
    }
}
