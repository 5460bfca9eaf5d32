//! The values the filter language computes with, and how AMQP application-property values
//! map to them and back.

use fe2o3_amqp::types::primitives::{SimpleValue, Timestamp};

/// A value of the filter language: an application property's value, a literal, or the result
/// of an expression.
///
/// Service Bus evaluates with .NET types (`System.Int64` for integer constants,
/// `System.Double` for decimal and approximate constants, `System.Boolean`, `System.String`,
/// `System.Guid` from `newid()`); this enum is that set, plus AMQP timestamps and a carrier for
/// the AMQP types the language cannot compute with.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL `NULL`, the AMQP `null`.
    Null,
    /// `TRUE` or `FALSE`, the AMQP `boolean`.
    Bool(bool),
    /// An integer: every AMQP integer type (`byte` to `long`, `ubyte` to `uint`, and `ulong`
    /// up to `i64::MAX`).
    Int(i64),
    /// A binary floating-point number: AMQP `float` and `double`, and a `ulong` above
    /// `i64::MAX`.
    Float(f64),
    /// Text: AMQP `string`, and `symbol` and `char` (which come back as `string`).
    String(String),
    /// An AMQP `timestamp`, in milliseconds since the Unix epoch. Timestamps compare with
    /// timestamps; the language has no timestamp literal and no arithmetic on them.
    Timestamp(i64),
    /// An AMQP `uuid` (a .NET `Guid`); `newid()` makes one. Uuids compare for equality only.
    Uuid(uuid::Uuid),
    /// Any other AMQP simple value (`binary`, `decimal32/64/128`, described values), kept as
    /// received: `IS NULL`, `EXISTS` and `SET` see it, but it cannot be compared or computed
    /// with (an evaluation error).
    Other(SimpleValue),
}

impl Value {
    /// The filter value of an AMQP application-property value.
    #[must_use]
    pub fn from_simple(value: &SimpleValue) -> Value {
        match value {
            SimpleValue::Null => Value::Null,
            SimpleValue::Bool(flag) => Value::Bool(*flag),
            SimpleValue::Ubyte(n) => Value::Int(i64::from(*n)),
            SimpleValue::Ushort(n) => Value::Int(i64::from(*n)),
            SimpleValue::Uint(n) => Value::Int(i64::from(*n)),
            SimpleValue::Ulong(n) => i64::try_from(*n).map_or_else(
                // Above i64::MAX the nearest double is the best number we can compare with.
                #[allow(clippy::cast_precision_loss)]
                |_| Value::Float(*n as f64),
                Value::Int,
            ),
            SimpleValue::Byte(n) => Value::Int(i64::from(*n)),
            SimpleValue::Short(n) => Value::Int(i64::from(*n)),
            SimpleValue::Int(n) => Value::Int(i64::from(*n)),
            SimpleValue::Long(n) => Value::Int(*n),
            SimpleValue::Float(n) => Value::Float(f64::from(n.0)),
            SimpleValue::Double(n) => Value::Float(n.0),
            SimpleValue::Char(c) => Value::String(c.to_string()),
            SimpleValue::Timestamp(t) => Value::Timestamp(t.milliseconds()),
            SimpleValue::Uuid(id) => Value::Uuid(uuid::Uuid::from_bytes(*id.as_inner())),
            SimpleValue::String(text) => Value::String(text.clone()),
            SimpleValue::Symbol(symbol) => Value::String(symbol.as_str().to_owned()),
            SimpleValue::Decimal32(_)
            | SimpleValue::Decimal64(_)
            | SimpleValue::Decimal128(_)
            | SimpleValue::Binary(_)
            | SimpleValue::Described(_) => Value::Other(value.clone()),
        }
    }

    /// The AMQP application-property value of a filter value: integers become `long`,
    /// numbers `double`, text `string`; [`Value::Other`] is returned as it was received.
    #[must_use]
    pub fn to_simple(&self) -> SimpleValue {
        match self {
            Value::Null => SimpleValue::Null,
            Value::Bool(flag) => SimpleValue::Bool(*flag),
            Value::Int(n) => SimpleValue::Long(*n),
            Value::Float(n) => SimpleValue::from(*n),
            Value::String(text) => SimpleValue::String(text.clone()),
            Value::Timestamp(ms) => SimpleValue::Timestamp(Timestamp::from_milliseconds(*ms)),
            Value::Uuid(id) => SimpleValue::Uuid(id.into_bytes().into()),
            Value::Other(value) => value.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp::types::primitives::{Binary, Symbol};

    use super::*;

    #[test]
    fn integers_of_every_width_become_int() {
        assert_eq!(Value::from_simple(&SimpleValue::Ubyte(7)), Value::Int(7));
        assert_eq!(Value::from_simple(&SimpleValue::Short(-3)), Value::Int(-3));
        assert_eq!(
            Value::from_simple(&SimpleValue::Uint(u32::MAX)),
            Value::Int(4_294_967_295)
        );
        assert_eq!(
            Value::from_simple(&SimpleValue::Long(i64::MIN)),
            Value::Int(i64::MIN)
        );
        assert_eq!(
            Value::from_simple(&SimpleValue::Ulong(u64::MAX)),
            Value::Float(1.844_674_407_370_955_2e19)
        );
    }

    #[test]
    fn text_types_become_string() {
        assert_eq!(
            Value::from_simple(&SimpleValue::Symbol(Symbol::from("eu"))),
            Value::String("eu".into())
        );
        assert_eq!(
            Value::from_simple(&SimpleValue::Char('x')),
            Value::String("x".into())
        );
    }

    #[test]
    fn round_trips_keep_the_value() {
        let id = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        for value in [
            Value::Null,
            Value::Bool(true),
            Value::Int(-42),
            Value::Float(2.5),
            Value::String("it's".into()),
            Value::Timestamp(1_700_000_000_123),
            Value::Uuid(id),
            Value::Other(SimpleValue::Binary(Binary::from(vec![1, 2, 3]))),
        ] {
            assert_eq!(Value::from_simple(&value.to_simple()), value);
        }
    }

    #[test]
    fn natural_amqp_types_on_the_way_back() {
        assert_eq!(Value::Int(5).to_simple(), SimpleValue::Long(5));
        assert_eq!(Value::Float(0.5).to_simple(), SimpleValue::from(0.5_f64));
    }
}
