//! Human-friendly units in the config: durations (`250ms`, `5s`, `10m`, `1h`) and sizes
//! (`64Mi`, `1Gi`, `500k`).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

/// Why a duration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// No number before the unit.
    #[error("invalid duration {text:?}: expected a number and a unit, such as 5s")]
    NotANumber {
        /// The duration as written.
        text: String,
    },
    /// A number without a unit.
    #[error("invalid duration {text:?}: missing unit (ms, s, m or h)")]
    MissingUnit {
        /// The duration as written.
        text: String,
    },
    /// A unit other than `ms`, `s`, `m` or `h`.
    #[error("invalid duration {text:?}: unknown unit {unit:?} (use ms, s, m or h)")]
    UnknownUnit {
        /// The duration as written.
        text: String,
        /// The unit.
        unit: String,
    },
    /// Too long to represent.
    #[error("invalid duration {text:?}: out of range")]
    OutOfRange {
        /// The duration as written.
        text: String,
    },
}

/// A duration written as a number with a unit: `ms`, `s`, `m` or `h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// Parses `250ms`, `5s`, `1.5m`, `2h`.
    pub fn parse(text: &str) -> Result<Self, DurationError> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let owned = || text.to_string();
        let digits = number.chars().filter(char::is_ascii_digit).count();
        if digits == 0 || number.matches('.').count() > 1 {
            return Err(DurationError::NotANumber { text: owned() });
        }
        let unit_nanos: u128 = match unit.trim() {
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(DurationError::MissingUnit { text: owned() }),
            other => {
                return Err(DurationError::UnknownUnit {
                    text: owned(),
                    unit: other.to_string(),
                });
            }
        };
        exact_nanos(number, unit_nanos)
            .and_then(|nanos| {
                let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
                Some(Duration::new(secs, (nanos % 1_000_000_000) as u32))
            })
            .map(HumanDuration)
            .ok_or_else(|| DurationError::OutOfRange { text: owned() })
    }
}

/// `number` (decimal digits with at most one '.') times `unit_nanos`, in nanoseconds,
/// computed from the digits so that `1000ms` is exactly `1s` (no floating point rounding);
/// anything below a nanosecond is dropped. `None` when it does not fit.
fn exact_nanos(number: &str, unit_nanos: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    // 18 digits of a fraction are far below a nanosecond of the largest unit (an hour).
    let fraction = &fraction[..fraction.len().min(18)];
    let scale = 10u128.pow(fraction.len() as u32);
    let fraction: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    whole
        .checked_mul(unit_nanos)?
        .checked_add(fraction * unit_nanos / scale)
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if !ms.is_multiple_of(1000) {
            write!(f, "{ms}ms")
        } else {
            write!(f, "{}s", ms / 1000)
        }
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(de::Error::custom)
    }
}

/// Why a size is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// No number before the unit.
    #[error("invalid size {text:?}: expected a number and a unit, such as 64Mi")]
    NotANumber {
        /// The size as written.
        text: String,
    },
    /// A unit other than `k`, `Ki`, `M`, `Mi`, `G` or `Gi`.
    #[error("invalid size {text:?}: unknown unit {unit:?} (use Ki, Mi, Gi, k, M or G)")]
    UnknownUnit {
        /// The size as written.
        text: String,
        /// The unit.
        unit: String,
    },
    /// More bytes than a `u64` holds.
    #[error("invalid size {text:?}: out of range")]
    OutOfRange {
        /// The size as written.
        text: String,
    },
}

/// A size in bytes, written with an optional unit: `k`/`Ki`, `M`/`Mi`, `G`/`Gi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parses `1048576`, `512Ki`, `64Mi`, `1G`.
    pub fn parse(text: &str) -> Result<Self, SizeError> {
        let text = text.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let owned = || text.to_string();
        let value: u64 = number
            .parse()
            .map_err(|_| SizeError::NotANumber { text: owned() })?;
        let factor: u64 = match unit {
            "" => 1,
            "k" => 1000,
            "Ki" => 1 << 10,
            "M" => 1000 * 1000,
            "Mi" => 1 << 20,
            "G" => 1000 * 1000 * 1000,
            "Gi" => 1 << 30,
            other => {
                return Err(SizeError::UnknownUnit {
                    text: owned(),
                    unit: other.to_string(),
                });
            }
        };
        value
            .checked_mul(factor)
            .map(ByteSize)
            .ok_or_else(|| SizeError::OutOfRange { text: owned() })
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as 64Mi or a number of bytes")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl schemars::JsonSchema for HumanDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HumanDuration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "a duration: a number and a unit, ms, s, m or h (250ms, 5s, 1.5m, 2h)",
            "type": "string",
            "pattern": DURATION_PATTERN,
        })
    }
}

/// What [`HumanDuration::parse`] reads, as a regular expression for the JSON Schema.
const DURATION_PATTERN: &str = r"^\s*([0-9]+\.?[0-9]*|\.[0-9]+)\s*(ms|s|m|h)\s*$";

impl schemars::JsonSchema for ByteSize {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ByteSize".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "a size: a number of bytes, or a number and a unit, k, Ki, M, Mi, G or Gi (64Mi)",
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": SIZE_PATTERN},
            ],
        })
    }
}

/// What [`ByteSize::parse`] reads, as a regular expression for the JSON Schema.
const SIZE_PATTERN: &str = r"^\s*[0-9]+(k|Ki|M|Mi|G|Gi)?\s*$";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(
            HumanDuration::parse("250ms").unwrap().0,
            Duration::from_millis(250)
        );
        assert_eq!(
            HumanDuration::parse("5s").unwrap().0,
            Duration::from_secs(5)
        );
        assert_eq!(
            HumanDuration::parse("1.5m").unwrap().0,
            Duration::from_secs(90)
        );
        assert_eq!(
            HumanDuration::parse("2h").unwrap().0,
            Duration::from_secs(7200)
        );
        assert!(
            HumanDuration::parse("5")
                .unwrap_err()
                .to_string()
                .contains("missing unit")
        );
        assert!(
            HumanDuration::parse("5d")
                .unwrap_err()
                .to_string()
                .contains("unknown unit")
        );
    }

    #[test]
    fn a_printed_duration_parses_back_exactly() {
        // Found by the config fuzz target: through floating point this came back as
        // 114074607.964000002s.
        let duration = Duration::from_millis(114_074_607_964);
        let printed = HumanDuration(duration).to_string();
        assert_eq!(HumanDuration::parse(&printed).unwrap().0, duration);
        assert_eq!(
            HumanDuration::parse("0.1s").unwrap().0,
            Duration::from_millis(100)
        );
        assert_eq!(
            HumanDuration::parse(".5s").unwrap().0,
            Duration::from_millis(500)
        );
        assert!(matches!(
            HumanDuration::parse("1.2.3s"),
            Err(DurationError::NotANumber { .. })
        ));
        assert!(matches!(
            HumanDuration::parse(&format!("{}h", u64::MAX)),
            Err(DurationError::OutOfRange { .. })
        ));
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(ByteSize::parse("64Mi").unwrap().0, 64 << 20);
        assert_eq!(ByteSize::parse("1G").unwrap().0, 1_000_000_000);
        assert_eq!(ByteSize::parse("512").unwrap().0, 512);
        assert!(ByteSize::parse("5MB").is_err());
    }
}
