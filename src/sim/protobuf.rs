//! Decoding of the Kubernetes protobuf encoding for the objects `kubectl create` sends that
//! way (ConfigMap, Secret, Namespace), the access reviews `kubectl auth can-i` sends, and
//! the `DeleteOptions` Helm sends deleting its
//! release Secrets: client-go's typed clients write protobuf to any server and do not fall
//! back to JSON.
//!
//! The envelope is the magic `k8s\0` followed by a `runtime.Unknown` message whose `raw`
//! field holds the object's own message. Only the fields a client sets on create are read.

use std::num::TryFromIntError;
use std::string::FromUtf8Error;

use base64::Engine as _;
use serde_json::{Map, Value, json};

/// The magic prefix of a protobuf-encoded Kubernetes object.
const MAGIC: &[u8] = b"k8s\0";

/// Why a protobuf body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    /// The body does not start with [`MAGIC`].
    #[error("protobuf body without the k8s magic prefix")]
    NoMagic,
    /// The object is of a kind this decoder does not know.
    #[error("protobuf is not supported for kind {0:?}; send JSON")]
    UnsupportedKind(String),
    /// A string field holds bytes that are not UTF-8.
    #[error("protobuf string is not UTF-8")]
    NotUtf8(#[source] FromUtf8Error),
    /// The body ends inside a varint.
    #[error("truncated protobuf varint")]
    TruncatedVarint,
    /// A varint runs over ten bytes.
    #[error("protobuf varint too long")]
    VarintTooLong,
    /// The body ends inside a field.
    #[error("truncated protobuf field")]
    TruncatedField,
    /// A length does not fit this machine's `usize`.
    #[error("protobuf length overflow")]
    LengthOverflow(#[source] TryFromIntError),
    /// A field has a wire type this decoder does not read (groups, or garbage).
    #[error("unsupported protobuf wire type {0}")]
    UnsupportedWireType(u64),
}

/// The result of decoding protobuf.
pub type Result<T, E = ProtobufError> = std::result::Result<T, E>;

/// Decodes a protobuf-encoded object into its JSON form.
pub fn decode_object(bytes: &[u8]) -> Result<Value> {
    let body = bytes.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for field in Fields::new(body) {
        match field? {
            (1, Wire::Bytes(type_meta)) => {
                for f in Fields::new(type_meta) {
                    match f? {
                        (1, Wire::Bytes(v)) => api_version = utf8(v)?,
                        (2, Wire::Bytes(k)) => kind = utf8(k)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(r)) => raw = r,
            _ => {}
        }
    }
    let mut object = match kind.as_str() {
        "ConfigMap" => config_map(raw)?,
        "Secret" => secret(raw)?,
        "Namespace" => namespace(raw)?,
        "DeleteOptions" => delete_options(raw)?,
        "SubjectAccessReview" | "SelfSubjectAccessReview" => access_review(raw)?,
        other => return Err(ProtobufError::UnsupportedKind(other.to_string())),
    };
    object["apiVersion"] = api_version.into();
    object["kind"] = kind.into();
    Ok(object)
}

fn config_map(raw: &[u8]) -> Result<Value> {
    let mut object = json!({});
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Bytes(m)) => object["metadata"] = object_meta(m)?,
            (2, Wire::Bytes(entry)) => insert_entry(&mut object, "data", entry, false)?,
            (3, Wire::Bytes(entry)) => insert_entry(&mut object, "binaryData", entry, true)?,
            (4, Wire::Varint(v)) => object["immutable"] = (v != 0).into(),
            _ => {}
        }
    }
    Ok(object)
}

fn secret(raw: &[u8]) -> Result<Value> {
    let mut object = json!({});
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Bytes(m)) => object["metadata"] = object_meta(m)?,
            (2, Wire::Bytes(entry)) => insert_entry(&mut object, "data", entry, true)?,
            (3, Wire::Bytes(t)) if !t.is_empty() => object["type"] = utf8(t)?.into(),
            (4, Wire::Bytes(entry)) => insert_entry(&mut object, "stringData", entry, false)?,
            (5, Wire::Varint(v)) => object["immutable"] = (v != 0).into(),
            _ => {}
        }
    }
    Ok(object)
}

fn namespace(raw: &[u8]) -> Result<Value> {
    let mut object = json!({});
    for field in Fields::new(raw) {
        if let (1, Wire::Bytes(m)) = field? {
            object["metadata"] = object_meta(m)?;
        }
    }
    Ok(object)
}

/// `DeleteOptions`: the grace period, the preconditions, the propagation policy and dry run.
fn delete_options(raw: &[u8]) -> Result<Value> {
    let mut options = json!({});
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Varint(v)) => options["gracePeriodSeconds"] = (v as i64).into(),
            (2, Wire::Bytes(p)) => {
                let mut preconditions = json!({});
                for f in Fields::new(p) {
                    match f? {
                        (1, Wire::Bytes(v)) => preconditions["uid"] = utf8(v)?.into(),
                        (2, Wire::Bytes(v)) => preconditions["resourceVersion"] = utf8(v)?.into(),
                        _ => {}
                    }
                }
                options["preconditions"] = preconditions;
            }
            (3, Wire::Varint(v)) => options["orphanDependents"] = (v != 0).into(),
            (4, Wire::Bytes(v)) => options["propagationPolicy"] = utf8(v)?.into(),
            (5, Wire::Bytes(v)) => {
                let mut list = options["dryRun"].as_array().cloned().unwrap_or_default();
                list.push(utf8(v)?.into());
                options["dryRun"] = list.into();
            }
            _ => {}
        }
    }
    Ok(options)
}

/// A (Self)SubjectAccessReview: its metadata and spec (`resourceAttributes`,
/// `nonResourceAttributes`, and for a SubjectAccessReview `user`, `groups` and `uid`).
fn access_review(raw: &[u8]) -> Result<Value> {
    let mut object = json!({"spec": {}});
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Bytes(m)) => object["metadata"] = object_meta(m)?,
            (2, Wire::Bytes(spec)) => object["spec"] = access_review_spec(spec)?,
            _ => {}
        }
    }
    Ok(object)
}

/// A SubjectAccessReviewSpec (of which a SelfSubjectAccessReviewSpec is the first two fields).
fn access_review_spec(raw: &[u8]) -> Result<Value> {
    const RESOURCE: [&str; 7] = [
        "namespace",
        "verb",
        "group",
        "version",
        "resource",
        "subresource",
        "name",
    ];
    let mut spec = json!({});
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Bytes(a)) => spec["resourceAttributes"] = strings(a, &RESOURCE)?,
            (2, Wire::Bytes(a)) => spec["nonResourceAttributes"] = strings(a, &["path", "verb"])?,
            (3, Wire::Bytes(v)) => spec["user"] = utf8(v)?.into(),
            (4, Wire::Bytes(v)) => {
                let mut list = spec["groups"].as_array().cloned().unwrap_or_default();
                list.push(utf8(v)?.into());
                spec["groups"] = list.into();
            }
            (6, Wire::Bytes(v)) => spec["uid"] = utf8(v)?.into(),
            _ => {}
        }
    }
    Ok(spec)
}

/// A message of string fields, field N named `names[N - 1]`; other fields are skipped.
fn strings(raw: &[u8], names: &[&str]) -> Result<Value> {
    let mut object = json!({});
    for field in Fields::new(raw) {
        if let (n, Wire::Bytes(v)) = field?
            && let Some(name) = usize::try_from(n)
                .ok()
                .and_then(|n| names.get(n.wrapping_sub(1)))
        {
            object[*name] = utf8(v)?.into();
        }
    }
    Ok(object)
}

fn object_meta(raw: &[u8]) -> Result<Value> {
    let mut meta = json!({});
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Bytes(v)) => meta["name"] = utf8(v)?.into(),
            (2, Wire::Bytes(v)) => meta["generateName"] = utf8(v)?.into(),
            (3, Wire::Bytes(v)) => meta["namespace"] = utf8(v)?.into(),
            (6, Wire::Bytes(v)) => meta["resourceVersion"] = utf8(v)?.into(),
            (11, Wire::Bytes(entry)) => insert_entry(&mut meta, "labels", entry, false)?,
            (12, Wire::Bytes(entry)) => insert_entry(&mut meta, "annotations", entry, false)?,
            (14, Wire::Bytes(v)) => {
                let mut list = meta["finalizers"].as_array().cloned().unwrap_or_default();
                list.push(utf8(v)?.into());
                meta["finalizers"] = list.into();
            }
            _ => {}
        }
    }
    // Empty strings are protobuf's "unset".
    if let Some(map) = meta.as_object_mut() {
        map.retain(|_, v| v.as_str() != Some(""));
    }
    Ok(meta)
}

/// Inserts one map entry (`key = 1, value = 2`) into `object[field]`; `binary` values are
/// base64-encoded, as JSON carries bytes.
fn insert_entry(object: &mut Value, field: &str, entry: &[u8], binary: bool) -> Result<()> {
    let (mut key, mut value) = (String::new(), Value::String(String::new()));
    for f in Fields::new(entry) {
        match f? {
            (1, Wire::Bytes(k)) => key = utf8(k)?,
            (2, Wire::Bytes(v)) if binary => {
                value = base64::engine::general_purpose::STANDARD.encode(v).into();
            }
            (2, Wire::Bytes(v)) => value = utf8(v)?.into(),
            _ => {}
        }
    }
    if !object[field].is_object() {
        object[field] = Value::Object(Map::new());
    }
    object[field][key] = value;
    Ok(())
}

fn utf8(bytes: &[u8]) -> Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(ProtobufError::NotUtf8)
}

/// A field's value by wire type.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Iterates over the (field number, value) pairs of one message.
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn new(message: &'a [u8]) -> Self {
        Self { rest: message }
    }

    fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self
                .rest
                .split_first()
                .ok_or(ProtobufError::TruncatedVarint)?;
            self.rest = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtobufError::VarintTooLong)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(ProtobufError::TruncatedField);
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Wire<'a>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = (|| {
            let tag = self.varint()?;
            let value = match tag & 7 {
                0 => Wire::Varint(self.varint()?),
                1 => self.take(8).map(|_| Wire::Fixed)?,
                2 => {
                    let len =
                        usize::try_from(self.varint()?).map_err(ProtobufError::LengthOverflow)?;
                    Wire::Bytes(self.take(len)?)
                }
                5 => self.take(4).map(|_| Wire::Fixed)?,
                other => return Err(ProtobufError::UnsupportedWireType(other)),
            };
            Ok((tag >> 3, value))
        })();
        if field.is_err() {
            self.rest = &[];
        }
        Some(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_field(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![((number << 3) | 2) as u8, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn decodes_a_configmap_as_kubectl_sends_it() {
        let type_meta = [bytes_field(1, b"v1"), bytes_field(2, b"ConfigMap")].concat();
        let meta = [
            bytes_field(1, b"foo"),
            bytes_field(
                11,
                &[bytes_field(1, b"app"), bytes_field(2, b"web")].concat(),
            ),
        ]
        .concat();
        let entry = [bytes_field(1, b"a"), bytes_field(2, b"b")].concat();
        let raw = [bytes_field(1, &meta), bytes_field(2, &entry)].concat();
        let body = [
            MAGIC.to_vec(),
            bytes_field(1, &type_meta),
            bytes_field(2, &raw),
        ]
        .concat();
        let object = decode_object(&body).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foo", "labels": {"app": "web"}}, "data": {"a": "b"}})
        );
    }

    #[test]
    fn decodes_delete_options_with_preconditions_as_client_go_sends_them() {
        let type_meta = [bytes_field(1, b"v1"), bytes_field(2, b"DeleteOptions")].concat();
        let preconditions = [bytes_field(1, b"u-1"), bytes_field(2, b"42")].concat();
        let raw = [
            bytes_field(2, &preconditions),
            bytes_field(4, b"Background"),
            bytes_field(5, b"All"),
        ]
        .concat();
        let body = [
            MAGIC.to_vec(),
            bytes_field(1, &type_meta),
            bytes_field(2, &raw),
        ]
        .concat();
        assert_eq!(
            decode_object(&body).unwrap(),
            json!({"apiVersion": "v1", "kind": "DeleteOptions",
                   "preconditions": {"uid": "u-1", "resourceVersion": "42"},
                   "propagationPolicy": "Background", "dryRun": ["All"]})
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode_object(b"nope").is_err());
        assert!(decode_object(b"k8s\0\x0a\xff").is_err());
    }
}
