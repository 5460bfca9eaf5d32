//! Durations and sizes as config values: humantime or ISO 8601 durations, byte sizes with
//! units.

use std::fmt;
use std::num::TryFromIntError;
use std::time::Duration;

use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::Deserialize;

/// A duration written as humantime (`"30s"`, `"1h 30m"`) or ISO 8601 (`"PT30S"`).
pub(super) struct HumanDuration(Duration);

impl From<HumanDuration> for Duration {
    fn from(value: HumanDuration) -> Duration {
        value.0
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_duration(&text)
            .map(HumanDuration)
            .map_err(de::Error::custom)
    }
}

/// Parses humantime or, when it starts with `P`, an ISO 8601 duration.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let parsed = match text.strip_prefix('P') {
        Some(body) => parse_iso8601(body),
        None => humantime::parse_duration(text).map_err(|e| e.to_string()),
    };
    parsed.map_err(|reason| {
        format!(
            "invalid duration {text:?} ({reason}); expected humantime such as \"30s\", \"5m\", \
             \"1h 30m\", \"14d\" or ISO 8601 such as \"PT30S\", \"P1DT2H\""
        )
    })
}

/// Parses the part of an ISO 8601 duration after `P`: `[nD][T[nH][nM][nS]]`, any number may have
/// a decimal fraction. Years and months have no fixed length, so they are refused.
fn parse_iso8601(body: &str) -> Result<Duration, String> {
    if body.is_empty() || body.ends_with('T') {
        return Err("expected days, hours, minutes or seconds after P or T".to_owned());
    }
    let (days, time) = body.split_once('T').unwrap_or((body, ""));
    if days.contains(['Y', 'M', 'W']) {
        return Err("years, months and weeks are not supported; use days, e.g. P30D".to_owned());
    }
    let days = sum_components(days, &[('D', 86_400)])?;
    let time = sum_components(time, &[('H', 3_600), ('M', 60), ('S', 1)])?;
    days.checked_add(time).ok_or_else(|| "too long".to_owned())
}

const ISO8601_ORDER: &str = "expected each unit at most once, in the order D, T, H, M, S";

/// Sums components such as `1H30M`; `units` lists the allowed unit letters in their required
/// order with their length in seconds.
fn sum_components(mut part: &str, units: &[(char, u32)]) -> Result<Duration, String> {
    let mut remaining = units;
    let mut total = Duration::ZERO;
    while !part.is_empty() {
        let (end, unit) = part
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("number {part:?} has no unit"))?;
        let number = &part[..end];
        part = &part[end + unit.len_utf8()..];
        let position = remaining
            .iter()
            .position(|&(letter, _)| letter == unit)
            .ok_or_else(|| format!("unexpected {unit:?}; {ISO8601_ORDER}"))?;
        let seconds = remaining[position].1;
        remaining = &remaining[position + 1..];
        let amount = parse_decimal_seconds(number)
            .and_then(|value| value.checked_mul(seconds))
            .ok_or_else(|| format!("{number:?} is not a number of {unit}"))?;
        total = total
            .checked_add(amount)
            .ok_or_else(|| "too long".to_owned())?;
    }
    Ok(total)
}

/// `"12"` or `"0.5"` as that many seconds; at most nanosecond precision.
fn parse_decimal_seconds(number: &str) -> Option<Duration> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos = format!("{fraction:0<9}").parse().ok()?;
    Some(Duration::new(whole.parse().ok()?, nanos))
}

/// A size in bytes: a TOML integer or a string such as `"64KiB"` or `"1MB"`.
pub(super) struct ByteSize(u64);

impl From<ByteSize> for u64 {
    fn from(value: ByteSize) -> u64 {
        value.0
    }
}

impl TryFrom<ByteSize> for u32 {
    type Error = TryFromIntError;

    fn try_from(value: ByteSize) -> Result<u32, TryFromIntError> {
        u32::try_from(value.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ByteSizeVisitor)
    }
}

struct ByteSizeVisitor;

impl Visitor<'_> for ByteSizeVisitor {
    type Value = ByteSize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SIZE_FORMS)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<ByteSize, E> {
        u64::try_from(value)
            .map(ByteSize)
            .map_err(|_| E::invalid_value(Unexpected::Signed(value), &self))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<ByteSize, E> {
        Ok(ByteSize(value))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<ByteSize, E> {
        parse_size(text)
            .map(ByteSize)
            .ok_or_else(|| E::custom(format!("invalid size {text:?}; expected {SIZE_FORMS}")))
    }
}

pub(super) const SIZE_FORMS: &str =
    "a size: integer bytes, or a string with a unit: B, KB, MB, GB \
                          (powers of 1000) or KiB, MiB, GiB (powers of 1024), e.g. \"64KiB\"";

/// Parses `"512"`, `"64KiB"`, `"1 MB"`; units are case-insensitive.
pub(super) fn parse_size(text: &str) -> Option<u64> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let multiplier: u64 = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(multiplier)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn humantime_durations() {
        assert_eq!(parse_duration("30s"), Ok(secs(30)));
        assert_eq!(parse_duration("5m"), Ok(secs(300)));
        assert_eq!(parse_duration("1h 30m"), Ok(secs(5400)));
        assert_eq!(parse_duration("14d"), Ok(secs(14 * 86_400)));
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
    }

    #[test]
    fn iso8601_durations() {
        assert_eq!(parse_duration("PT30S"), Ok(secs(30)));
        assert_eq!(parse_duration("PT1M"), Ok(secs(60)));
        assert_eq!(parse_duration("P1D"), Ok(secs(86_400)));
        assert_eq!(parse_duration("P1DT1H"), Ok(secs(90_000)));
        assert_eq!(parse_duration("P1DT2H"), Ok(secs(93_600)));
        assert_eq!(parse_duration("PT0.5S"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("PT1H30M5S"), Ok(secs(5405)));
        assert_eq!(parse_duration("P0.5D"), Ok(secs(43_200)));
        assert_eq!(
            parse_duration("PT0.000000001S"),
            Ok(Duration::from_nanos(1))
        );
    }

    #[test]
    fn iso8601_errors_say_why() {
        let reason = |text: &str| parse_duration(text).expect_err("should be refused");
        assert!(reason("P1Y").contains("years, months and weeks are not supported"));
        assert!(reason("P1M").contains("use days, e.g. P30D"));
        assert!(reason("P").contains("after P or T"));
        assert!(reason("P1DT").contains("after P or T"));
        assert!(reason("PT1S1M").contains("unexpected 'M'"));
        assert!(reason("PT1H1H").contains("unexpected 'H'"));
        assert!(reason("PT5").contains("number \"5\" has no unit"));
        assert!(reason("PT1.5.5S").contains("\"1.5.5\" is not a number of S"));
        assert!(reason("PT.5S").contains("\".5\" is not a number of S"));
        assert!(reason("PT-1S").contains("unexpected '-'"));
        assert!(reason("PT0.0000000001S").contains("is not a number of S"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("64KiB"), Some(65_536));
        assert_eq!(parse_size("1MiB"), Some(1_048_576));
        assert_eq!(parse_size("1MB"), Some(1_000_000));
        assert_eq!(parse_size("256KB"), Some(256_000));
        assert_eq!(parse_size("2 GiB"), Some(2 << 30));
        assert_eq!(parse_size("3b"), Some(3));
        for garbage in [
            "",
            "MiB",
            "1.5MiB",
            "12 bananas",
            "-1",
            "1MiB2",
            "99999999999GB",
        ] {
            assert_eq!(parse_size(garbage), None, "{garbage:?}");
        }
    }
}
