//! The `shardSelector` of list and watch requests (KEP-5866): one or more
//! `shardRange(FIELD, 'START', 'END')` joined by `||`, where FIELD is
//! `object.metadata.uid` or `object.metadata.namespace` and the bounds are `0x` and 16
//! hexadecimal digits (the end may also be `0x10000000000000000`, 2^64). An object matches
//! when the FNV-1a hash of the field falls in any range, start included, end excluded.
//!
//! The canonical text ([`ShardSelector`]'s `Display`) writes every bound with 16 lower-case
//! digits and `, ` between arguments: the server echoes it in `ListMeta.shardInfo.selector`
//! and the client compares it with what it sent.

use std::fmt;

use serde_json::Value;

/// The field an object is placed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ShardField {
    /// `object.metadata.uid`: objects spread evenly.
    #[default]
    Uid,
    /// `object.metadata.namespace`: a namespace's objects stay together.
    Namespace,
}

impl ShardField {
    /// The path the selector names.
    pub fn path(self) -> &'static str {
        match self {
            ShardField::Uid => "object.metadata.uid",
            ShardField::Namespace => "object.metadata.namespace",
        }
    }

    /// The config's name for it (`uid`, `namespace`).
    pub fn as_str(self) -> &'static str {
        match self {
            ShardField::Uid => "uid",
            ShardField::Namespace => "namespace",
        }
    }

    /// The field's value in `object` (empty when absent, as for a cluster-scoped object's
    /// namespace).
    pub fn value(self, object: &Value) -> &str {
        let key = match self {
            ShardField::Uid => "uid",
            ShardField::Namespace => "namespace",
        };
        object["metadata"][key].as_str().unwrap_or_default()
    }
}

/// A half-open range `[start, end)` of the 64-bit hash space; `end` may be 2^64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashRange {
    /// First hash in the range.
    pub start: u64,
    /// First hash after the range, up to 2^64.
    pub end: u128,
}

impl HashRange {
    /// Whether `hash` is in the range.
    pub fn contains(&self, hash: u64) -> bool {
        hash >= self.start && u128::from(hash) < self.end
    }

    /// The share of the hash space the range covers, from 0 to 1.
    pub fn fraction(&self) -> f64 {
        (self.end.saturating_sub(u128::from(self.start))) as f64 / (1u128 << 64) as f64
    }
}

impl fmt::Display for HashRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[0x{:016x}, 0x{:016x})", self.start, self.end)
    }
}

/// A parsed `shardSelector`: ranges of one field's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSelector {
    /// The field hashed.
    pub field: ShardField,
    /// The ranges; an object in any of them matches.
    pub ranges: Vec<HashRange>,
}

impl ShardSelector {
    /// Reads the wire form; the error says what is wrong and where.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut field = None;
        let mut ranges = Vec::new();
        for (i, term) in text.split("||").enumerate() {
            let (f, range) = parse_range(term.trim())
                .map_err(|e| format!("term {} ({:?}): {e}", i + 1, term.trim()))?;
            if field.is_some_and(|seen| seen != f) {
                return Err(format!(
                    "term {} ({:?}): every shardRange must hash the same field",
                    i + 1,
                    term.trim()
                ));
            }
            field = Some(f);
            ranges.push(range);
        }
        Ok(Self {
            field: field.expect("split yields at least one term"),
            ranges,
        })
    }

    /// Whether `object` falls in one of the ranges.
    pub fn matches(&self, object: &Value) -> bool {
        self.matches_value(self.field.value(object))
    }

    /// Whether a field value hashes into one of the ranges.
    pub fn matches_value(&self, value: &str) -> bool {
        let hash = super::fnv1a64(value.as_bytes());
        self.ranges.iter().any(|r| r.contains(hash))
    }
}

impl fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(" || ")?;
            }
            write!(
                f,
                "shardRange({}, '0x{:016x}', '0x{:016x}')",
                self.field.path(),
                r.start,
                r.end
            )?;
        }
        Ok(())
    }
}

/// Reads one `shardRange(FIELD, 'START', 'END')`.
fn parse_range(term: &str) -> Result<(ShardField, HashRange), String> {
    let inner = term
        .strip_prefix("shardRange")
        .map(str::trim_start)
        .and_then(|t| t.strip_prefix('('))
        .and_then(|t| t.strip_suffix(')'))
        .ok_or("expected shardRange(field, 'start', 'end')")?;
    let args: Vec<&str> = inner.split(',').map(str::trim).collect();
    let [field, start, end] = args[..] else {
        return Err(format!(
            "shardRange takes 3 arguments (field, start, end), not {}",
            args.len()
        ));
    };
    let field = match field {
        "object.metadata.uid" => ShardField::Uid,
        "object.metadata.namespace" => ShardField::Namespace,
        other => {
            return Err(format!(
                "unsupported field {other:?}: supported fields are object.metadata.uid and object.metadata.namespace"
            ));
        }
    };
    let start = bound(start)?;
    let end = bound(end)?;
    let start = u64::try_from(start).map_err(|_| "the start must be below 0x10000000000000000")?;
    if u128::from(start) >= end {
        return Err(format!(
            "the start (0x{start:016x}) must be below the end (0x{end:016x})"
        ));
    }
    Ok((field, HashRange { start, end }))
}

/// Reads a quoted bound: `'0x` and 16 hex digits, or `'0x10000000000000000'`.
fn bound(text: &str) -> Result<u128, String> {
    let unquoted = text
        .strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .or_else(|| text.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
        .ok_or_else(|| format!("bound {text} must be quoted, as '0x0000000000000000'"))?;
    let digits = unquoted
        .strip_prefix("0x")
        .ok_or_else(|| format!("bound {text} must start with 0x"))?;
    if digits.len() != 16 && digits != "10000000000000000" {
        return Err(format!(
            "bound {text} must have 16 hexadecimal digits (or be 0x10000000000000000)"
        ));
    }
    u128::from_str_radix(digits, 16).map_err(|_| format!("bound {text} is not hexadecimal"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_selector_round_trips_through_its_canonical_text() {
        let text = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.uid,'0xc000000000000000','0x10000000000000000')";
        let selector = ShardSelector::parse(text).unwrap();
        assert_eq!(selector.field, ShardField::Uid);
        assert_eq!(selector.ranges.len(), 2);
        assert_eq!(selector.ranges[1].end, 1 << 64);
        let canonical = selector.to_string();
        assert_eq!(ShardSelector::parse(&canonical).unwrap(), selector);
        assert!(canonical.contains("'0x10000000000000000')"), "{canonical}");
    }

    #[test]
    fn an_object_matches_by_the_hash_of_its_field() {
        let object = json!({"metadata": {"uid": "a", "namespace": "web"}});
        // fnv1a64("a") = 0xaf63dc4c8601ec8c: in the upper half.
        let upper = ShardSelector::parse(
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
        )
        .unwrap();
        let lower = ShardSelector::parse(
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
        )
        .unwrap();
        assert!(upper.matches(&object));
        assert!(!lower.matches(&object));
        let exact = ShardSelector::parse(
            "shardRange(object.metadata.uid, '0xaf63dc4c8601ec8c', '0xaf63dc4c8601ec8d')",
        )
        .unwrap();
        assert!(exact.matches(&object), "the start is included");
        let before = ShardSelector::parse(
            "shardRange(object.metadata.uid, '0x0000000000000000', '0xaf63dc4c8601ec8c')",
        )
        .unwrap();
        assert!(!before.matches(&object), "the end is excluded");
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        for (text, says) in [
            (
                "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
                "unsupported field",
            ),
            (
                "shardRange(object.metadata.uid, '0x00', '0x8000000000000000')",
                "16 hexadecimal digits",
            ),
            (
                "shardRange(object.metadata.uid, 0x0000000000000000, '0x8000000000000000')",
                "quoted",
            ),
            (
                "shardRange(object.metadata.uid, '0x8000000000000000', '0x0000000000000000')",
                "below the end",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000')",
                "3 arguments",
            ),
            (
                "range(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
                "expected shardRange",
            ),
            (
                "shardRange(object.metadata.uid, '0xzz00000000000000', '0x8000000000000000')",
                "not hexadecimal",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0x0000000000000000', '0x8000000000000000')",
                "same field",
            ),
        ] {
            let err = ShardSelector::parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
