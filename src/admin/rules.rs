//! A subscription rule as the ATOM API writes it (`RuleDescription`) and reads it: SQL, true,
//! false and correlation filters with their typed property values, SQL and empty actions.
//!
//! Property values carry `i:type="d6p1:<type>"` with the four-character prefix the JS client
//! insists on, and only the types it reads (`int`, `double`, `string`, `boolean`,
//! `dateTime`); a long outside `int`'s range is written `long`, which Python reads.

use std::fmt::Write;

use super::atom::{self, Element};
use crate::config::{CorrelationConfig, PropertyValue, RuleConfig, RuleFilter};
use crate::entity::topic::Rule;
use crate::filter::{CorrelationFilter, Filter, SqlAction, SqlFilter, Value};

/// XML Schema's namespace, for property value types.
const XSD: &str = "http://www.w3.org/2001/XMLSchema";

/// A rule's `RuleDescription`.
pub fn describe(rule: &Rule) -> String {
    let mut out = atom::opening("RuleDescription");
    match &rule.filter {
        Filter::True => sql_filter(&mut out, "TrueFilter", "1=1"),
        Filter::False => sql_filter(&mut out, "FalseFilter", "1=0"),
        Filter::Sql(sql) => sql_filter(&mut out, "SqlFilter", sql.expression()),
        Filter::Correlation(correlation) => correlation_filter(&mut out, correlation),
    }
    match &rule.action {
        Some(action) => {
            let _ = write!(
                out,
                "<Action i:type=\"SqlRuleAction\"><SqlExpression>{}</SqlExpression>\
                 <CompatibilityLevel>20</CompatibilityLevel></Action>",
                escape(action.expression())
            );
        }
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

fn sql_filter(out: &mut String, kind: &str, expression: &str) {
    let _ = write!(
        out,
        "<Filter i:type=\"{kind}\"><SqlExpression>{}</SqlExpression>\
         <CompatibilityLevel>20</CompatibilityLevel></Filter>",
        escape(expression)
    );
}

fn correlation_filter(out: &mut String, filter: &CorrelationFilter) {
    out.push_str("<Filter i:type=\"CorrelationFilter\">");
    for (name, value) in correlation_fields(filter) {
        if let Some(value) = value {
            let _ = write!(out, "<{name}>{}</{name}>", escape(value));
        }
    }
    if !filter.properties.is_empty() {
        out.push_str("<Properties>");
        for (key, value) in &filter.properties {
            let (kind, text) = match value {
                Value::Int(number) if i32::try_from(*number).is_ok() => ("int", number.to_string()),
                Value::Int(number) => ("long", number.to_string()),
                Value::Float(number) => ("double", number.to_string()),
                Value::Bool(flag) => ("boolean", flag.to_string()),
                Value::Timestamp(ms) => ("dateTime", atom::time(*ms)),
                Value::String(text) => ("string", text.clone()),
                // Guids have no type the JS client reads; their text compares the same.
                Value::Uuid(uuid) => ("string", uuid.to_string()),
                // A correlation filter never holds these (add-rule refuses them).
                Value::Null | Value::Other(_) => continue,
            };
            let _ = write!(
                out,
                "<KeyValueOfstringanyType><Key>{}</Key><Value xmlns:d6p1=\"{XSD}\" \
                 i:type=\"d6p1:{kind}\">{}</Value></KeyValueOfstringanyType>",
                escape(key),
                escape(&text)
            );
        }
        out.push_str("</Properties>");
    }
    out.push_str("</Filter>");
}

/// A rule as the config file declares one, for a subscription created with it.
///
/// # Errors
/// A correlation property of a type the config file cannot declare (a time or a guid).
pub fn declared(rule: &Rule) -> Result<RuleConfig, String> {
    let filter = match &rule.filter {
        Filter::True => RuleFilter::True,
        Filter::False => RuleFilter::Sql("1=0".to_owned()),
        Filter::Sql(sql) => RuleFilter::Sql(sql.expression().to_owned()),
        Filter::Correlation(correlation) => {
            let mut properties = Vec::new();
            for (key, value) in &correlation.properties {
                let value = match value {
                    Value::Int(number) => PropertyValue::Int(*number),
                    Value::Float(number) => PropertyValue::Float(*number),
                    Value::Bool(flag) => PropertyValue::Bool(*flag),
                    Value::String(text) => PropertyValue::String(text.clone()),
                    _ => {
                        return Err(format!(
                            "property {key:?}: only strings, numbers and booleans"
                        ))
                    }
                };
                properties.push((key.clone(), value));
            }
            properties.sort_by(|a, b| a.0.cmp(&b.0));
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
    Ok(RuleConfig {
        name: rule.name.clone(),
        filter,
        action: rule.action.as_ref().map(|a| a.expression().to_owned()),
    })
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
    let filter = match description.child("Filter") {
        None => Filter::True,
        Some(filter) => read_filter(filter)?,
    };
    let action = match description.child("Action") {
        None => None,
        Some(action) => match kind(action) {
            "EmptyRuleAction" | "" => None,
            "SqlRuleAction" => {
                let expression = action
                    .child("SqlExpression")
                    .map_or("", |e| e.text.as_str());
                Some(SqlAction::parse(expression).map_err(|e| format!("Action: {e}"))?)
            }
            other => return Err(format!("Action type {other:?} is not supported")),
        },
    };
    Ok(Rule {
        name: name.to_owned(),
        filter,
        action,
        created_ms: now_ms,
    })
}

fn read_filter(filter: &Element) -> Result<Filter, String> {
    match kind(filter) {
        "TrueFilter" => Ok(Filter::True),
        "FalseFilter" => Ok(Filter::False),
        "SqlFilter" => {
            if filter
                .child("Parameters")
                .is_some_and(|parameters| !parameters.children.is_empty())
            {
                return Err(
                    "SqlFilter Parameters are not supported; write the values in the \
                            expression"
                        .into(),
                );
            }
            let expression = filter
                .child("SqlExpression")
                .map_or("", |e| e.text.as_str());
            match expression.replace(' ', "").as_str() {
                "1=1" => Ok(Filter::True),
                "1=0" => Ok(Filter::False),
                _ => SqlFilter::parse(expression)
                    .map(Filter::Sql)
                    .map_err(|e| format!("SqlFilter: {e}")),
            }
        }
        "CorrelationFilter" => read_correlation(filter).map(Filter::Correlation),
        other => Err(format!("Filter type {other:?} is not supported")),
    }
}

fn read_correlation(filter: &Element) -> Result<CorrelationFilter, String> {
    let field = |name: &str| {
        filter
            .child(name)
            .map(|element| element.text.clone())
            .filter(|text| !text.is_empty())
    };
    let mut properties = Vec::new();
    for pair in filter
        .child("Properties")
        .map_or(&[][..], |p| p.children.as_slice())
    {
        let key = pair
            .child("Key")
            .map(|k| k.text.clone())
            .unwrap_or_default();
        let value = pair.child("Value").ok_or("a property without a Value")?;
        let text = value.text.as_str();
        let bad = |what: &str| format!("property {key:?}: {text:?} is not {what}");
        let value = match kind(value) {
            "int" | "long" | "short" | "byte" => {
                Value::Int(text.parse().map_err(|_| bad("an integer"))?)
            }
            "double" | "float" | "decimal" => {
                Value::Float(text.parse().map_err(|_| bad("a number"))?)
            }
            "boolean" => Value::Bool(
                text.to_ascii_lowercase()
                    .parse()
                    .map_err(|_| bad("a boolean"))?,
            ),
            "string" | "" => Value::String(text.to_owned()),
            other => {
                return Err(format!(
                    "property {key:?}: values of type {other:?} are not supported"
                ))
            }
        };
        properties.push((key, value));
    }
    let correlation = CorrelationFilter {
        correlation_id: field("CorrelationId"),
        message_id: field("MessageId"),
        to: field("To"),
        reply_to: field("ReplyTo"),
        subject: field("Label"),
        session_id: field("SessionId"),
        reply_to_session_id: field("ReplyToSessionId"),
        content_type: field("ContentType"),
        properties,
    };
    if correlation_fields(&correlation)
        .iter()
        .all(|(_, v)| v.is_none())
        && correlation.properties.is_empty()
    {
        return Err("the CorrelationFilter names nothing".into());
    }
    Ok(correlation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(filter: Filter, action: Option<&str>) -> Rule {
        Rule {
            name: "r".into(),
            filter,
            action: action.map(|a| SqlAction::parse(a).expect("action")),
            created_ms: 1_700_000_000_000,
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
    fn what_tidebus_does_not_do_is_refused_naming_it() {
        let refused = |body: &str| read(body.as_bytes(), "r", 0).expect_err("refused");
        let wrap = |filter: &str| {
            format!("<entry><content><RuleDescription>{filter}</RuleDescription></content></entry>")
        };
        assert!(refused(&wrap(
            "<Filter i:type=\"SqlFilter\"><SqlExpression>a = @p</SqlExpression><Parameters>\
             <KeyValueOfstringanyType><Key>@p</Key><Value>1</Value></KeyValueOfstringanyType>\
             </Parameters></Filter>"
        ))
        .contains("Parameters"));
        assert!(refused(&wrap("<Filter i:type=\"RegexFilter\"/>")).contains("RegexFilter"));
        assert!(refused(&wrap("<Filter i:type=\"CorrelationFilter\"/>")).contains("names nothing"));
        assert!(refused(&wrap(
            "<Filter i:type=\"SqlFilter\"><SqlExpression>a = = 1</SqlExpression></Filter>"
        ))
        .starts_with("SqlFilter:"));
        assert!(refused("<entry/>").contains("no RuleDescription"));
    }
}
