//! The protobuf wire format, as much of it as OTLP's logs need: varints, 64-bit fixed
//! numbers and length-delimited fields (strings, bytes, nested messages), and the JSON →
//! `AnyValue` mapping (opentelemetry/proto/common/v1/common.proto).

use serde_json::Value;

/// A message being written: fields appended in the order given.
#[derive(Debug, Default, Clone)]
pub struct Message(pub Vec<u8>);

impl Message {
    /// An empty message.
    pub fn new() -> Self {
        Self::default()
    }

    fn varint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.0.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.0.push(n as u8);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire_type));
    }

    /// A varint field (int32, int64, uint32, bool, enum): wire type 0.
    pub fn uint(mut self, field: u32, n: u64) -> Self {
        self.key(field, 0);
        self.varint(n);
        self
    }

    /// A fixed64 or double field: wire type 1, little-endian.
    pub fn fixed64(mut self, field: u32, n: u64) -> Self {
        self.key(field, 1);
        self.0.extend_from_slice(&n.to_le_bytes());
        self
    }

    /// A length-delimited field (string, bytes, message): wire type 2.
    pub fn bytes(mut self, field: u32, bytes: &[u8]) -> Self {
        self.key(field, 2);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
        self
    }

    /// A string field.
    pub fn string(self, field: u32, text: &str) -> Self {
        self.bytes(field, text.as_bytes())
    }

    /// A nested message field.
    pub fn message(self, field: u32, message: &Message) -> Self {
        self.bytes(field, &message.0)
    }
}

/// A `KeyValue` (key 1, value 2).
pub fn key_value(key: &str, value: &Value) -> Message {
    Message::new().string(1, key).message(2, &any_value(value))
}

/// JSON as an `AnyValue`: string 1, bool 2, int 3, double 4, array 5 (`ArrayValue`, values
/// 1), map 6 (`KeyValueList`, values 1); null is the empty `AnyValue`.
pub fn any_value(value: &Value) -> Message {
    let any = Message::new();
    match value {
        Value::Null => any,
        Value::String(text) => any.string(1, text),
        Value::Bool(b) => any.uint(2, u64::from(*b)),
        Value::Number(n) => match n.as_i64() {
            // int64 is a varint of the two's-complement value.
            Some(i) => any.uint(3, i as u64),
            None => any.fixed64(4, n.as_f64().unwrap_or_default().to_bits()),
        },
        Value::Array(items) => {
            let list = items.iter().fold(Message::new(), |list, item| {
                list.message(1, &any_value(item))
            });
            any.message(5, &list)
        }
        Value::Object(fields) => {
            let list = fields.iter().fold(Message::new(), |list, (k, v)| {
                list.message(1, &key_value(k, v))
            });
            any.message(6, &list)
        }
    }
}

/// The fields of a message read from `bytes`: field number and value, a varint as its
/// number and a length-delimited field as its bytes; fixed-width fields are skipped.
/// `None` when the bytes are not a message.
pub fn fields(mut bytes: &[u8]) -> Option<Vec<(u32, Field<'_>)>> {
    fn varint(bytes: &mut &[u8]) -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = bytes.split_first()?;
            *bytes = rest;
            n |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Some(n);
            }
        }
        None
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let field = u32::try_from(key >> 3).ok()?;
        let value = match key & 7 {
            0 => Field::Varint(varint(&mut bytes)?),
            1 | 5 => {
                let width = if key & 7 == 1 { 8 } else { 4 };
                bytes = bytes.get(width..)?;
                continue;
            }
            2 => {
                let len = usize::try_from(varint(&mut bytes)?).ok()?;
                let (value, rest) = (bytes.get(..len)?, &bytes[len..]);
                bytes = rest;
                Field::Bytes(value)
            }
            _ => return None,
        };
        out.push((field, value));
    }
    Some(out)
}

/// A field's value as [`fields`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field<'a> {
    /// A varint.
    Varint(u64),
    /// A length-delimited value.
    Bytes(&'a [u8]),
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fields_are_written_as_the_wire_format_says() {
        // protobuf's documentation: field 1 = 150 is 08 96 01; field 2 = "testing".
        assert_eq!(Message::new().uint(1, 150).0, [0x08, 0x96, 0x01]);
        assert_eq!(
            Message::new().string(2, "testing").0,
            [0x12, 0x07, b't', b'e', b's', b't', b'i', b'n', b'g']
        );
        assert_eq!(
            Message::new().fixed64(1, 1).0,
            [0x09, 1, 0, 0, 0, 0, 0, 0, 0]
        );
        // A negative int64 is ten bytes.
        assert_eq!(any_value(&json!(-1)).0.len(), 1 + 10);
        assert_eq!(any_value(&json!(true)).0, [0x10, 1]);
        assert!(any_value(&json!(null)).0.is_empty());
    }

    #[test]
    fn fields_are_read_back() {
        let message = Message::new()
            .uint(1, 150)
            .fixed64(3, 7)
            .string(2, "testing");
        assert_eq!(
            fields(&message.0),
            Some(vec![(1, Field::Varint(150)), (2, Field::Bytes(b"testing"))])
        );
        assert_eq!(fields(&[0x12, 0x07, b't']), None);
    }
}
