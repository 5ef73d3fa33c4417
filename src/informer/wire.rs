//! Objects as they come off the wire. A list page or watch line is not decoded into object
//! trees: each object keeps its JSON text, with `apiVersion` and `kind` put first (list items
//! have none) and `metadata.managedFields` cut out of the text, and only the metadata the
//! informer reads is decoded. The text is what the cache holds and plugins get, so it is
//! never serialized again. A transform that drops configured fields, or text whose layout
//! the cuts do not recognise, takes the slow way: a full decode, the transform, and the
//! object serialized again.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use kube::api::{ApiResource, DynamicObject, TypeMeta};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::transform::Transform;

/// The metadata the informer reads from every object.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.labels`.
    pub labels: Option<BTreeMap<String, String>>,
}

/// One received object: its JSON text, ready to cache, and its metadata.
#[derive(Debug)]
pub struct Received {
    json: String,
    meta: Meta,
    parsed: OnceLock<Option<Value>>,
}

impl Received {
    /// The JSON text the cache keeps.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The object's metadata.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The object as a JSON tree, parsed on first use (for field indexes).
    pub fn value(&self) -> Option<&Value> {
        self.parsed
            .get_or_init(|| serde_json::from_str(&self.json).ok())
            .as_ref()
    }

    /// The object's text and metadata.
    pub fn into_parts(self) -> (String, Meta) {
        (self.json, self.meta)
    }

    /// A received form of an object already decoded (tests, and the slow way).
    pub fn of_object(object: &DynamicObject) -> Self {
        let json = serde_json::to_string(object).expect("an object serializes to JSON");
        let meta = Meta {
            name: object.metadata.name.clone(),
            namespace: object.metadata.namespace.clone(),
            resource_version: object.metadata.resource_version.clone(),
            uid: object.metadata.uid.clone(),
            labels: object.metadata.labels.clone(),
        };
        Self {
            json,
            meta,
            parsed: OnceLock::new(),
        }
    }
}

/// Turns the objects of one resource into their received form.
#[derive(Debug, Clone)]
pub struct Decoder {
    types: TypeMeta,
    transform: Transform,
}

/// The top level of an object: the members the decoder cuts or reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head<'a> {
    #[serde(borrow, default)]
    api_version: Member<'a>,
    #[serde(borrow, default)]
    kind: Member<'a>,
    #[serde(borrow, default)]
    metadata: Member<'a>,
}

/// A member's value as text when the member is there, `null` included (an `Option` would
/// take `null` for absent, and leave the member in the text).
#[derive(Default, Clone, Copy)]
struct Member<'a>(Option<&'a RawValue>);

impl<'de: 'a, 'a> Deserialize<'de> for Member<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'a RawValue>::deserialize(d).map(|raw| Member(Some(raw)))
    }
}

impl<'a> Member<'a> {
    /// The value's text, unless absent or `null`.
    fn text(self) -> Option<&'a str> {
        self.0.map(RawValue::get).filter(|t| *t != "null")
    }
}

/// `metadata` with the span of `managedFields`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta<'a> {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    uid: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(borrow, default)]
    managed_fields: Member<'a>,
}

impl Decoder {
    /// A decoder for objects of `resource`, applying `transform`.
    pub fn new(resource: &ApiResource, transform: Transform) -> Self {
        Self {
            types: TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            },
            transform,
        }
    }

    /// Decodes one object's JSON text.
    pub fn decode(&self, text: &str) -> serde_json::Result<Received> {
        let head: Head = serde_json::from_str(text)?;
        let meta: WireMeta = serde_json::from_str(head.metadata.text().unwrap_or("{}"))?;
        if !self.transform.drop.is_empty() {
            return self.slow(text);
        }
        let mut cuts = vec![("apiVersion", head.api_version), ("kind", head.kind)];
        if self.transform.strip_managed_fields {
            cuts.push(("managedFields", meta.managed_fields));
        }
        let mut cuts: Vec<(&str, usize, usize)> = cuts
            .into_iter()
            .filter_map(|(key, raw)| {
                let (start, end) = span_in(text, raw.0?.get());
                Some((key, start, end))
            })
            .collect();
        cuts.sort_by_key(|&(_, start, _)| std::cmp::Reverse(start));
        // Room for the kind put in front, so that does not move the text to a new allocation.
        let room = self.types.api_version.len() + self.types.kind.len() + 32;
        let mut json = String::with_capacity(text.len() + room);
        json.push_str(text);
        for (key, start, end) in cuts {
            if !cut_member(&mut json, key, start, end) {
                return self.slow(text);
            }
        }
        if !put_types(
            &mut json,
            &self.types,
            head.api_version.text(),
            head.kind.text(),
        ) {
            return self.slow(text);
        }
        Ok(Received {
            json,
            meta: Meta {
                name: meta.name,
                namespace: meta.namespace,
                resource_version: meta.resource_version,
                uid: meta.uid,
                labels: meta.labels,
            },
            parsed: OnceLock::new(),
        })
    }

    /// The full decode: the object parsed, its kind filled in, the transform applied, and
    /// serialized again.
    fn slow(&self, text: &str) -> serde_json::Result<Received> {
        let mut object: DynamicObject = serde_json::from_str(text)?;
        object.types.get_or_insert_with(|| self.types.clone());
        self.transform.apply(&mut object);
        Ok(Received::of_object(&object))
    }
}

/// Where `part` (a slice of `text`) lies in `text`.
fn span_in(text: &str, part: &str) -> (usize, usize) {
    let start = part.as_ptr() as usize - text.as_ptr() as usize;
    (start, start + part.len())
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Removes the member `"key": value` whose value is at `start..end`, with one comma next to
/// it. False, and `json` unchanged, when the text around the value is not laid out that way.
fn cut_member(json: &mut String, key: &str, start: usize, end: usize) -> bool {
    let bytes = json.as_bytes();
    let mut i = start;
    while i > 0 && is_space(bytes[i - 1]) {
        i -= 1;
    }
    if i == 0 || bytes[i - 1] != b':' {
        return false;
    }
    i -= 1;
    while i > 0 && is_space(bytes[i - 1]) {
        i -= 1;
    }
    let quoted = key.len() + 2;
    if i < quoted + 1
        || bytes[i - quoted] != b'"'
        || bytes[i - 1] != b'"'
        || &bytes[i - quoted + 1..i - 1] != key.as_bytes()
        || !matches!(
            bytes[i - quoted - 1],
            b'{' | b',' | b' ' | b'\t' | b'\n' | b'\r'
        )
    {
        return false;
    }
    let key_start = i - quoted;
    let mut before = key_start;
    while before > 0 && is_space(bytes[before - 1]) {
        before -= 1;
    }
    match bytes.get(before.wrapping_sub(1)) {
        Some(b',') => json.replace_range(before - 1..end, ""),
        Some(b'{') => {
            let mut after = end;
            while after < bytes.len() && is_space(bytes[after]) {
                after += 1;
            }
            match bytes.get(after) {
                Some(b',') => json.replace_range(key_start..after + 1, ""),
                _ => json.replace_range(key_start..end, ""),
            }
        }
        _ => return false,
    }
    true
}

/// Puts `"apiVersion"` and `"kind"` first in the object (the object's own, else the
/// resource's). False when the text does not start with `{`.
fn put_types(
    json: &mut String,
    types: &TypeMeta,
    api_version: Option<&str>,
    kind: Option<&str>,
) -> bool {
    let open = json.bytes().take_while(|b| is_space(*b)).count();
    if json.as_bytes().get(open) != Some(&b'{') {
        return false;
    }
    let mut prefix = String::with_capacity(64);
    prefix.push_str("\"apiVersion\":");
    match api_version {
        Some(raw) => prefix.push_str(raw),
        None => push_string(&mut prefix, &types.api_version),
    }
    prefix.push_str(",\"kind\":");
    match kind {
        Some(raw) => prefix.push_str(raw),
        None => push_string(&mut prefix, &types.kind),
    }
    let rest = json[open + 1..].trim_start();
    if !rest.starts_with('}') {
        prefix.push(',');
    }
    json.insert_str(open + 1, &prefix);
    true
}

fn push_string(out: &mut String, text: &str) {
    out.push_str(&serde_json::to_string(text).expect("a string serializes"));
}

/// A list page: its metadata and each item's text.
#[derive(Deserialize)]
pub(super) struct Page<'a> {
    /// The list's metadata.
    #[serde(default)]
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta,
    /// The items, as text.
    #[serde(borrow, default)]
    pub items: Option<Vec<&'a RawValue>>,
}

/// One line of a watch.
#[derive(Deserialize)]
pub(super) struct Line<'a> {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The object (a `Status` for `ERROR`).
    #[serde(borrow)]
    pub object: &'a RawValue,
}

/// What a bookmark says: its resourceVersion, and whether it ends a streaming list's initial
/// objects (annotated `k8s.io/initial-events-end: "true"`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Bookmark {
    /// The version the watch has reached.
    pub version: Option<String>,
    /// Every object of the streaming list came before it.
    pub initial_events_end: bool,
}

/// The annotation that ends a streaming list's initial objects.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Reads a bookmark's object.
pub(super) fn bookmark(object: &str) -> serde_json::Result<Bookmark> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        resource_version: Option<String>,
        annotations: Option<BTreeMap<String, String>>,
    }
    let head: Head = serde_json::from_str(object)?;
    let Some(meta) = head.metadata.text() else {
        return Ok(Bookmark::default());
    };
    let meta: Meta = serde_json::from_str(meta)?;
    let end = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(INITIAL_EVENTS_END));
    Ok(Bookmark {
        version: meta.resource_version,
        initial_events_end: end.is_some_and(|v| v == "true"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decoder(transform: Transform) -> Decoder {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        Decoder::new(&ar, transform)
    }

    fn parsed(r: &Received) -> Value {
        serde_json::from_str(r.json()).unwrap()
    }

    #[test]
    fn a_list_item_gets_its_kind_first_and_keeps_the_rest_of_its_text() {
        let text = r#"{"metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"7","labels":{"app":"x"}},"data":{"k":"v \"q\""}}"#;
        let r = decoder(Transform::default()).decode(text).unwrap();
        assert_eq!(
            r.json(),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"7","labels":{"app":"x"}},"data":{"k":"v \"q\""}}"#
        );
        assert_eq!(r.meta().name.as_deref(), Some("a"));
        assert_eq!(r.meta().namespace.as_deref(), Some("ns"));
        assert_eq!(r.meta().uid.as_deref(), Some("u1"));
        assert_eq!(r.meta().resource_version.as_deref(), Some("7"));
        assert_eq!(r.meta().labels.as_ref().unwrap()["app"], "x");
    }

    #[test]
    fn a_watched_object_and_the_same_listed_object_get_the_same_text() {
        let listed = r#"{"metadata":{"name":"a","resourceVersion":"7"},"data":{}}"#;
        let watched = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"7"},"data":{}}"#;
        let spaced = "{ \"apiVersion\" : \"v1\" ,\n \"kind\":\"ConfigMap\", \"metadata\":{\"name\":\"a\",\"resourceVersion\":\"7\"},\"data\":{}}";
        let d = decoder(Transform::default());
        let a = d.decode(listed).unwrap();
        assert_eq!(a.json(), d.decode(watched).unwrap().json());
        assert_eq!(parsed(&a), parsed(&d.decode(spaced).unwrap()));
    }

    #[test]
    fn managed_fields_are_cut_wherever_they_stand_in_the_metadata() {
        let d = decoder(Transform::default());
        let mf = r#"[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:data":{".":{}}}}]"#;
        for meta in [
            format!(r#"{{"managedFields":{mf},"name":"a"}}"#),
            format!(r#"{{"name":"a","managedFields":{mf}}}"#),
            format!(r#"{{"name":"a","managedFields":{mf},"uid":"u"}}"#),
            format!(r#"{{ "managedFields" : {mf} }}"#),
            r#"{"name":"a", "managedFields":null}"#.to_string(),
        ] {
            let text = format!(r#"{{"metadata":{meta},"data":{{"x":"managedFields"}}}}"#);
            let r = d.decode(&text).unwrap();
            let v = parsed(&r);
            assert!(v["metadata"].get("managedFields").is_none(), "{}", r.json());
            assert_eq!(v["data"]["x"], "managedFields");
            assert_eq!(v["kind"], "ConfigMap");
        }
        let kept = decoder(Transform {
            strip_managed_fields: false,
            drop: Vec::new(),
        })
        .decode(&format!(
            r#"{{"metadata":{{"name":"a","managedFields":{mf}}}}}"#
        ))
        .unwrap();
        assert_eq!(
            parsed(&kept)["metadata"]["managedFields"][0]["manager"],
            "kubectl"
        );
    }

    #[test]
    fn a_drop_list_takes_the_full_decode_and_gives_the_same_object() {
        let text =
            r#"{"metadata":{"name":"a","annotations":{"big":"x","keep":"y"}},"data":{"k":"v"}}"#;
        let r = decoder(Transform {
            strip_managed_fields: true,
            drop: vec!["/metadata/annotations/big".into()],
        })
        .decode(text)
        .unwrap();
        let v = parsed(&r);
        assert_eq!(v["metadata"]["annotations"], json!({"keep": "y"}));
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(r.meta().name.as_deref(), Some("a"));
    }

    #[test]
    fn text_that_is_not_an_object_is_an_error() {
        let d = decoder(Transform::default());
        assert!(d.decode("[1]").is_err());
        assert!(d.decode(r#"{"metadata":"#).is_err());
        assert!(d.decode(r#"{"metadata":{"name":5}}"#).is_err());
    }

    #[test]
    fn an_escaped_key_is_left_to_the_full_decode() {
        let text = r#"{"metadata":{"name":"a","\u006danagedFields":[{"manager":"m"}]}}"#;
        let r = decoder(Transform::default()).decode(text).unwrap();
        assert!(
            parsed(&r)["metadata"].get("managedFields").is_none(),
            "{}",
            r.json()
        );
    }
}
