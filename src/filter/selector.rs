//! JMS message selectors (JMS 2.0 §3.8.1.1), as Qpid JMS sends them in a link's source filter
//! `apache.org:selector-filter:string`: parsed once, evaluated per message, by the SQL filter
//! engine in its JMS dialect.
//!
//! * Identifiers are Java identifiers (letters, digits, `_`, `$`), case-sensitive: the JMS
//!   header fields and `JMSX` properties map to the AMQP message as Qpid JMS maps them (see
//!   the `jms` module), any other name is the application property of exactly that name.
//!   Keywords (`NOT AND OR BETWEEN LIKE ESCAPE IN IS NULL TRUE FALSE`) are any case.
//! * Literals: `'strings'` (`''` for `'`), exact numbers (64-bit), approximate numbers
//!   (`7E3`, `-57.9E2`, `7.`, `.5`), `TRUE`, `FALSE`.
//! * Operators: `NOT AND OR`, `= <> < > <= >=`, `+ - * /` and unary `+ -`, `[NOT] BETWEEN a
//!   AND b`, `identifier [NOT] IN ('string', ...)`, `[NOT] LIKE 'pattern' [ESCAPE 'c']`, `IS
//!   [NOT] NULL`, parentheses. A boolean identifier or constant is a condition by itself
//!   (`express AND amount > 1`), as Qpid JMS's own parser takes it.
//! * Three-valued logic: a missing property is NULL, and NULL makes a comparison, an
//!   arithmetic, `BETWEEN`, `IN` and `LIKE` unknown; only true selects a message.
//! * Types: comparing values of unlike types is false, as JMS says (a string property is no
//!   number: `count > 1` is false when `count` is `'2'`); integers and numbers compare with
//!   each other; strings and booleans compare with `=` and `<>` only, and comparing one with
//!   `<` is refused when parsed if it is a constant, false otherwise. `LIKE` on a value that
//!   is not a string is false, `IN` on one unknown, as Qpid JMS evaluates them.
//! * Arithmetic is the SQL filters' (64-bit integers, `/` truncating between integers, doubles
//!   otherwise). Where it fails (division of an integer by zero, overflow, a string in it) the
//!   selector does not select the message: a JMS provider has no filter exception to report.
//! * An empty or blank selector is no selector: [`Filter::selector`](super::Filter::selector)
//!   makes it the filter of every message. Selectors are at most 1024 characters, as SQL
//!   filters, and syntax errors carry the byte offset of the problem.
//!
//! Not supported, all extensions of Qpid JMS's and ActiveMQ's parsers beyond JMS: `%`, `--`
//! and `/* */` comments, hexadecimal (`0x1F`) and octal (`017`, read here as decimal) numbers,
//! an `L` suffix and `"quoted"` identifiers.

use super::error::SqlError;
use super::eval;
use super::parser;
use super::syntax::{Condition, Dialect, Truth};
use super::view::MessageView;

/// A parsed JMS 2.0 message selector.
#[derive(Debug, Clone, PartialEq)]
pub struct JmsSelector {
    expression: String,
    condition: Condition,
}

impl JmsSelector {
    /// Parses `expression`.
    ///
    /// # Errors
    /// A [`SqlError`] with the byte offset and the reason when the selector is not valid,
    /// also when it is empty (which for a JMS consumer means no selector:
    /// [`Filter::selector`](super::Filter::selector)).
    pub fn parse(expression: &str) -> Result<JmsSelector, SqlError> {
        Ok(JmsSelector {
            expression: expression.to_owned(),
            condition: parser::parse_selector(expression)?,
        })
    }

    /// The selector as it was written.
    #[must_use]
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Whether the selector selects `view`: true, not false or unknown, and not when its
    /// evaluation fails.
    #[must_use]
    pub fn matches(&self, view: &MessageView) -> bool {
        eval::condition(&self.condition, view, Dialect::Jms) == Ok(Truth::True)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::value::Value;
    use crate::filter::view::IdType;
    use crate::filter::Filter;

    /// A message a Qpid JMS producer sent, with properties of every kind.
    fn order() -> MessageView {
        let property = |name: &str, value: Value| (name.to_owned(), value);
        MessageView {
            message_id: Some("ID:b7e1c2a4-0001:1:1:1-1".into()),
            correlation_id: Some("order-17".into()),
            subject: Some("OrderPlaced".into()),
            session_id: Some("customer-5".into()),
            durable: true,
            priority: Some(7),
            user_id: Some(b"alice".to_vec()),
            creation_time: Some(1_700_000_000_000),
            absolute_expiry_time: Some(1_700_000_060_000),
            group_sequence: Some(3),
            application_properties: vec![
                property("Region", Value::String("eu".into())),
                property("amount", Value::Int(250)),
                property("price", Value::Float(2.5)),
                property("express", Value::Bool(true)),
                property("gift", Value::Bool(false)),
                property("note", Value::Null),
                property("quote", Value::String("it's".into())),
                property("count", Value::String("2".into())),
                property("code", Value::String("ABC%".into())),
                property("other", Value::String("eu".into())),
            ],
            ..MessageView::default()
        }
    }

    fn parse(selector: &str) -> JmsSelector {
        JmsSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"))
    }

    /// The three-valued result of `selector` for `view`.
    fn truth_for(selector: &str, view: &MessageView) -> Truth {
        eval::condition(&parse(selector).condition, view, Dialect::Jms)
            .unwrap_or_else(|e| panic!("{selector}: {e}"))
    }

    fn truth(selector: &str) -> Truth {
        truth_for(selector, &order())
    }

    fn holds(selector: &str) {
        assert_eq!(truth(selector), Truth::True, "{selector}");
    }

    fn fails(selector: &str) {
        assert_eq!(truth(selector), Truth::False, "{selector}");
    }

    fn unknown(selector: &str) {
        assert_eq!(truth(selector), Truth::Unknown, "{selector}");
    }

    /// The error `selector` fails to parse with, as (offset, message).
    fn error(selector: &str) -> (usize, String) {
        let error = JmsSelector::parse(selector).expect_err(selector);
        (error.offset, error.message)
    }

    fn refused(selector: &str, offset: usize, message: &str) {
        assert_eq!(error(selector), (offset, message.to_owned()), "{selector}");
    }

    #[test]
    fn jms_delivery_mode_is_persistent_when_the_header_is_durable() {
        holds("JMSDeliveryMode = 'PERSISTENT'");
        fails("JMSDeliveryMode = 'NON_PERSISTENT'");
        let sent = MessageView::default();
        assert_eq!(
            truth_for("JMSDeliveryMode = 'NON_PERSISTENT'", &sent),
            Truth::True
        );
    }

    #[test]
    fn jms_priority_is_the_header_priority_4_by_default_and_at_most_9() {
        holds("JMSPriority = 7");
        holds("JMSPriority > 4");
        let default = MessageView::default();
        assert_eq!(truth_for("JMSPriority = 4", &default), Truth::True);
        let high = MessageView {
            priority: Some(200),
            ..MessageView::default()
        };
        assert_eq!(truth_for("JMSPriority = 9", &high), Truth::True);
    }

    /// A message whose message-id and correlation-id are `id` of type `kind`.
    fn ids(id: &str, kind: IdType) -> MessageView {
        MessageView {
            message_id: Some(id.into()),
            message_id_type: kind,
            correlation_id: Some(id.into()),
            correlation_id_type: kind,
            ..MessageView::default()
        }
    }

    #[test]
    fn jms_message_id_is_the_message_id_as_qpid_jms_renders_it() {
        holds("JMSMessageID = 'ID:b7e1c2a4-0001:1:1:1-1'");
        for (id, kind, rendered) in [
            ("order-1", IdType::String, "ID:AMQP_NO_PREFIX:order-1"),
            ("ID:order-1", IdType::String, "ID:order-1"),
            (
                "ID:AMQP_ULONG:7",
                IdType::String,
                "ID:AMQP_STRING:ID:AMQP_ULONG:7",
            ),
            ("ID:AMQP_other", IdType::String, "ID:AMQP_other"),
            ("42", IdType::Ulong, "ID:AMQP_ULONG:42"),
            (
                "0123abcd-0000-0000-0000-000000000001",
                IdType::Uuid,
                "ID:AMQP_UUID:0123abcd-0000-0000-0000-000000000001",
            ),
            ("ab01", IdType::Binary, "ID:AMQP_BINARY:AB01"),
        ] {
            let selector = format!("JMSMessageID = '{rendered}'");
            assert_eq!(truth_for(&selector, &ids(id, kind)), Truth::True, "{id}");
        }
        let none = MessageView::default();
        assert_eq!(truth_for("JMSMessageID IS NULL", &none), Truth::True);
    }

    #[test]
    fn jms_correlation_id_is_the_correlation_id_as_qpid_jms_renders_it() {
        holds("JMSCorrelationID = 'order-17'");
        for (id, kind, rendered) in [
            ("order-1", IdType::String, "order-1"),
            ("ID:order-1", IdType::String, "ID:order-1"),
            (
                "ID:AMQP_NO_PREFIX:x",
                IdType::String,
                "ID:AMQP_STRING:ID:AMQP_NO_PREFIX:x",
            ),
            ("42", IdType::Ulong, "ID:AMQP_ULONG:42"),
            ("ab01", IdType::Binary, "ID:AMQP_BINARY:AB01"),
        ] {
            let selector = format!("JMSCorrelationID = '{rendered}'");
            assert_eq!(truth_for(&selector, &ids(id, kind)), Truth::True, "{id}");
        }
        let none = MessageView::default();
        assert_eq!(truth_for("JMSCorrelationID IS NULL", &none), Truth::True);
    }

    #[test]
    fn jms_type_is_the_subject() {
        holds("JMSType = 'OrderPlaced'");
        fails("JMSType = 'orderplaced'");
        let none = MessageView::default();
        assert_eq!(truth_for("JMSType IS NULL", &none), Truth::True);
    }

    #[test]
    fn jms_timestamp_and_expiration_are_the_creation_and_expiry_times_else_0() {
        holds("JMSTimestamp = 1700000000000");
        holds("JMSExpiration - JMSTimestamp = 60000");
        let none = MessageView::default();
        assert_eq!(
            truth_for("JMSTimestamp = 0 AND JMSExpiration = 0", &none),
            Truth::True
        );
    }

    #[test]
    fn jmsx_group_id_and_group_seq_are_the_group_id_and_group_sequence() {
        holds("JMSXGroupID = 'customer-5'");
        holds("JMSXGroupSeq = 3");
        let none = MessageView::default();
        assert_eq!(
            truth_for("JMSXGroupID IS NULL AND JMSXGroupSeq = 0", &none),
            Truth::True
        );
        // An int in Java: a sequence number past 2^31 - 1 wraps, as Qpid JMS reads it.
        let wrapped = MessageView {
            group_sequence: Some(u32::MAX),
            ..MessageView::default()
        };
        assert_eq!(truth_for("JMSXGroupSeq = -1", &wrapped), Truth::True);
    }

    #[test]
    fn jmsx_user_id_is_the_user_id_else_the_application_property() {
        holds("JMSXUserID = 'alice'");
        let property = MessageView {
            application_properties: vec![("JMSXUserID".into(), Value::String("bob".into()))],
            ..MessageView::default()
        };
        assert_eq!(truth_for("JMSXUserID = 'bob'", &property), Truth::True);
        let empty = MessageView {
            user_id: Some(Vec::new()),
            ..MessageView::default()
        };
        assert_eq!(truth_for("JMSXUserID IS NULL", &empty), Truth::True);
    }

    #[test]
    fn jmsx_delivery_count_counts_this_delivery() {
        holds("JMSXDeliveryCount = 1");
        let again = MessageView {
            delivery_count: 2,
            ..MessageView::default()
        };
        assert_eq!(truth_for("JMSXDeliveryCount = 3", &again), Truth::True);
    }

    #[test]
    fn header_fields_jms_does_not_allow_in_selectors_are_refused() {
        for name in [
            "JMSDestination",
            "JMSReplyTo",
            "JMSRedelivered",
            "JMSDeliveryTime",
        ] {
            let (offset, message) = error(&format!("a = 1 OR {name} IS NULL"));
            assert_eq!(offset, 9, "{name}");
            assert!(
                message.starts_with(&format!("{name} cannot be used in a JMS selector")),
                "{message}"
            );
        }
    }

    #[test]
    fn other_names_are_application_properties_named_case_sensitively() {
        holds("Region = 'eu'");
        unknown("region = 'eu'");
        unknown("REGION = 'eu'");
        // Header names are case-sensitive too: these are application properties.
        unknown("jmspriority = 7");
        unknown("JMSXAppID = 'x'");
        let property = MessageView {
            application_properties: vec![("jmsPriority".into(), Value::Int(1))],
            ..MessageView::default()
        };
        assert_eq!(truth_for("jmsPriority = 1", &property), Truth::True);
        assert_eq!(truth_for("JMSPriority = 4", &property), Truth::True);
    }

    #[test]
    fn keywords_are_case_insensitive() {
        holds("Region = 'eu' and NOT (amount < 100) oR FALSE");
        holds("Region iN ('eu') AnD JMSType LiKe 'Order%' and note is null");
        holds("amount between 200 And 300 AND price NOT between 3 and 4");
        holds("express = True AND gift = false");
    }

    #[test]
    fn literals_strings_exact_and_approximate_numbers_and_booleans() {
        holds("quote = 'it''s'");
        holds("amount = 250");
        holds("-amount = -250 AND +amount = 250");
        holds("price = 2.5 AND price = 25E-1 AND price = .25e1 AND 7. = 7");
        holds("amount > -957 AND amount < +62E2");
        holds("express = TRUE AND gift = FALSE");
        holds("amount > -9223372036854775808");
        refused(
            "amount = 9223372036854775808",
            9,
            "integer constant out of range (64-bit signed integers)",
        );
    }

    #[test]
    fn comparison_and_arithmetic_operators() {
        for selector in [
            "amount = 250",
            "amount <> 251",
            "amount < 251",
            "amount <= 250",
            "amount > 249",
            "amount >= 250",
            "price < 3",
            "amount > 249.5",
            "amount + 1 = 251",
            "amount - 1 = 249",
            "amount * price = 625",
            "amount / 100 = 2",
            "amount / 100.0 = 2.5",
            "1 + 2 * 3 = 7",
            "(1 + 2) * 3 = 9",
            "- -amount = 250",
            "Region <> 'us'",
            "express <> gift",
        ] {
            holds(selector);
        }
        for selector in [
            "amount = 251",
            "amount <> 250",
            "amount < 250",
            "amount > 250",
        ] {
            fails(selector);
        }
    }

    #[test]
    fn between_and_not_between() {
        holds("amount BETWEEN 250 AND 300");
        holds("amount BETWEEN 100 AND 250");
        fails("amount BETWEEN 251 AND 300");
        holds("amount NOT BETWEEN 1 AND 100");
        fails("amount NOT BETWEEN 200 AND 300");
        holds("price BETWEEN 2 AND 3 AND amount = 250");
        holds("amount + 50 BETWEEN price * 100 AND 300");
        unknown("missing BETWEEN 1 AND 2");
        unknown("missing NOT BETWEEN 1 AND 2");
        // `low <= value AND value <= high`, and NOT BETWEEN `value < low OR value > high`:
        // known when either side settles it.
        fails("amount BETWEEN missing AND 100");
        unknown("amount BETWEEN missing AND 300");
        holds("amount NOT BETWEEN missing AND 100");
        unknown("amount NOT BETWEEN missing AND 300");
        refused(
            "amount BETWEEN 1 OR 2",
            17,
            "expected AND between the bounds of BETWEEN, found OR",
        );
        refused(
            "Region BETWEEN 'a' AND 'z'",
            15,
            "'>=' compares numbers: a string can be compared with = and <> only",
        );
    }

    #[test]
    fn in_and_not_in_take_string_literals() {
        holds("Region IN ('us', 'eu', 'apac')");
        fails("Region IN ('us', 'apac')");
        holds("Region NOT IN ('us', 'apac')");
        fails("Region NOT IN ('eu')");
        unknown("missing IN ('eu')");
        unknown("missing NOT IN ('eu')");
        // As Qpid JMS evaluates it, IN on a value that is not a string is unknown.
        unknown("amount IN ('250')");
        unknown("amount NOT IN ('250')");
        refused(
            "Region IN ('eu', 1)",
            17,
            "the list of IN holds string literals only, found number 1",
        );
        refused(
            "'eu' IN ('eu')",
            0,
            "the left side of IN must be an identifier",
        );
        refused(
            "Region IN ()",
            11,
            "expected a value in the IN list, found ')'",
        );
    }

    #[test]
    fn like_and_not_like_with_escape() {
        holds("JMSType LIKE 'Order%'");
        holds("JMSType LIKE '_rderPlace_'");
        fails("JMSType LIKE 'Order'");
        holds("JMSType NOT LIKE 'Invoice%'");
        holds("quote LIKE 'it''%'");
        holds("code LIKE 'ABC\\%' ESCAPE '\\'");
        fails("Region LIKE 'ABC\\%' ESCAPE '\\'");
        holds("code NOT LIKE 'AB!_%' ESCAPE '!'");
        unknown("missing LIKE 'a%'");
        unknown("missing NOT LIKE 'a%'");
        // As Qpid JMS evaluates it, LIKE on a value that is not a string is false.
        fails("amount LIKE '2%'");
        holds("amount NOT LIKE '2%'");
        refused(
            "Region LIKE other",
            12,
            "the LIKE pattern of a JMS selector is a string literal, found name 'other'",
        );
        refused(
            "Region LIKE 'e%' ESCAPE other",
            24,
            "the ESCAPE character must be a string of one character, found name 'other'",
        );
        refused(
            "Region LIKE 'e%' ESCAPE '!!'",
            24,
            "the ESCAPE character must be a string of one character",
        );
    }

    #[test]
    fn is_null_and_is_not_null() {
        holds("missing IS NULL");
        holds("note IS NULL");
        fails("Region IS NULL");
        holds("Region IS NOT NULL");
        fails("note IS NOT NULL");
        holds("missing + 1 IS NULL");
        refused(
            "Region = NULL",
            9,
            "NULL is not a value in a JMS selector: test for it with IS NULL or IS NOT NULL",
        );
    }

    #[test]
    fn unknown_follows_the_three_valued_tables_and_never_selects() {
        let t = "amount = 250";
        let f = "amount = 0";
        let u = "missing = 1";
        let cases = [
            (t, t, Truth::True, Truth::True),
            (t, f, Truth::False, Truth::True),
            (t, u, Truth::Unknown, Truth::True),
            (f, f, Truth::False, Truth::False),
            (f, u, Truth::False, Truth::Unknown),
            (u, u, Truth::Unknown, Truth::Unknown),
        ];
        for (left, right, and, or) in cases {
            assert_eq!(truth(&format!("{left} AND {right}")), and);
            assert_eq!(truth(&format!("{right} AND {left}")), and);
            assert_eq!(truth(&format!("{left} OR {right}")), or);
            assert_eq!(truth(&format!("{right} OR {left}")), or);
        }
        unknown(&format!("NOT {u}"));
        unknown("missing + 1 > 0");
        unknown("-missing < 0");
        assert!(!parse(u).matches(&order()));
        assert!(!parse(&format!("NOT {u}")).matches(&order()));
        assert!(parse(t).matches(&order()));
    }

    #[test]
    fn comparing_unlike_types_is_false() {
        // JMS 2.0 §3.8.1.1: comparing values of unlike types is false, and a string
        // property is not a number ("NumberOfOrders > 1" with a string is false).
        fails("count > 1");
        fails("count = 2");
        holds("NOT count = 2");
        fails("Region = 1");
        fails("express = 1");
        fails("Region < other");
        fails("express > gift");
        // ... while a comparison the selector itself makes impossible is refused.
        refused(
            "Region < 'fr'",
            9,
            "'<' compares numbers: a string can be compared with = and <> only",
        );
        refused(
            "TRUE >= express",
            0,
            "'>=' compares numbers: a boolean can be compared with = and <> only",
        );
    }

    #[test]
    fn boolean_identifiers_and_literals_are_conditions() {
        holds("express");
        fails("gift");
        holds("NOT gift");
        holds("express AND amount = 250");
        holds("gift OR express");
        holds("TRUE");
        fails("FALSE");
        holds("(express)");
        unknown("missing");
        // A property that is not a boolean is false as a condition.
        fails("Region");
        refused(
            "amount + 1",
            0,
            "expected a condition (a comparison, BETWEEN, IN, LIKE, IS NULL or a boolean \
             identifier), found a value",
        );
        refused(
            "250",
            0,
            "expected a condition (a comparison, BETWEEN, IN, LIKE, IS NULL or a boolean \
             identifier), found a value",
        );
    }

    #[test]
    fn evaluation_errors_do_not_select_the_message() {
        // A JMS provider selects or not; it has no filter exception to dead-letter for.
        assert!(!parse("amount / 0 = 1").matches(&order()));
        assert!(!parse("NOT amount / 0 = 1").matches(&order()));
        assert!(!parse("Region + 1 = 1").matches(&order()));
        assert!(parse("amount = 250 OR amount / 0 = 1").matches(&order()));
    }

    #[test]
    fn sql_only_syntax_is_refused_with_its_position() {
        refused("sys.Label = 'x'", 3, "unexpected character '.'");
        refused("[Region] = 'eu'", 0, "unexpected character '['");
        refused("amount != 1", 7, "unexpected character '!'");
        refused("amount % 2 = 0", 7, "unexpected character '%'");
        refused("Region = @p", 9, "unexpected character '@'");
        refused(
            "EXISTS(Region)",
            6,
            "expected AND, OR or the end of the selector, found '('",
        );
        refused(
            "Region = ",
            9,
            "expected a value, found the end of the expression",
        );
        refused("Region = 'eu", 9, "unterminated string literal");
    }

    #[test]
    fn selectors_longer_than_1024_characters_are_refused() {
        let longest = format!("a = '{}'", "x".repeat(1024 - 6));
        assert!(JmsSelector::parse(&longest).is_ok());
        refused(
            &format!("{longest} "),
            1024,
            "the expression is longer than 1024 characters",
        );
    }
    #[test]
    fn an_empty_selector_selects_everything_as_no_selector_does() {
        assert_eq!(Filter::selector(""), Ok(Filter::True));
        assert_eq!(Filter::selector(" \t\n"), Ok(Filter::True));
        refused(" ", 0, "the expression is empty");
        let Ok(Filter::Selector(selector)) = Filter::selector("Region = 'eu'") else {
            panic!("not a selector");
        };
        assert_eq!(selector.expression(), "Region = 'eu'");
        assert_eq!(Filter::Selector(selector).matches(&order()), Ok(true));
        // Even a selector that is always true keeps its text.
        assert!(matches!(Filter::selector("TRUE"), Ok(Filter::Selector(_))));
    }
}
