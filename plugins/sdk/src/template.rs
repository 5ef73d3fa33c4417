//! The body template: a JSON value whose strings may hold `{{PATH}}` placeholders, filled
//! from the event. A string that is one placeholder alone becomes the value at the path,
//! whatever its type (an object, a number, null when absent); placeholders inside a longer
//! string are replaced by the value's text. A path is dotted (`object.metadata.name`,
//! `object.spec.containers.0.image`) or a JSON pointer (`/object/metadata/labels/app~1name`)
//! for keys that hold dots.

use serde_json::Value;

/// Checks every placeholder of `template` once, at init, so a typo is a config error and
/// not a surprise at the first event. `at` names where the template sits in the config.
pub fn check(template: &Value, at: &str) -> Result<(), String> {
    match template {
        Value::String(text) => placeholders(text)
            .map(|_| ())
            .map_err(|e| format!("{at}: {e}")),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| check(item, &format!("{at}[{i}]"))),
        Value::Object(fields) => fields
            .iter()
            .try_for_each(|(key, value)| check(value, &format!("{at}.{key}"))),
        _ => Ok(()),
    }
}

/// The template with every placeholder replaced from `event`. Call [`check`] first: a
/// placeholder it would refuse is left as it is.
pub fn fill(template: &Value, event: &Value) -> Value {
    match template {
        Value::String(text) => fill_text(text, event),
        Value::Array(items) => Value::Array(items.iter().map(|i| fill(i, event)).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, value)| (key.clone(), fill(value, event)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// One piece of a template string.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Text(&'a str),
    /// A placeholder, as a JSON pointer.
    Path(String),
}

/// Whether a placeholder of `template` reads the event's top-level `field` (or below it):
/// a sink that fills a template which never reads `oldObject` need not parse it.
pub fn reads(template: &Value, field: &str) -> bool {
    match template {
        Value::String(text) => placeholders(text).is_ok_and(|pieces| {
            pieces.iter().any(|piece| match piece {
                Piece::Path(path) => {
                    let first = path[1..].split('/').next().unwrap_or_default();
                    first.replace("~1", "/").replace("~0", "~") == field
                }
                Piece::Text(_) => false,
            })
        }),
        Value::Array(items) => items.iter().any(|item| reads(item, field)),
        Value::Object(fields) => fields.values().any(|value| reads(value, field)),
        _ => false,
    }
}

/// The pieces of `text`; an error for an unclosed or empty placeholder.
fn placeholders(text: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            pieces.push(Piece::Text(&rest[..start]));
        }
        let inner = &rest[start + 2..];
        let end = inner
            .find("}}")
            .ok_or_else(|| format!("{text:?} opens a placeholder with {{{{ and never closes it"))?;
        pieces.push(Piece::Path(
            pointer(inner[..end].trim()).map_err(|e| format!("{text:?}: {e}"))?,
        ));
        rest = &inner[end + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

/// A placeholder's path as a JSON pointer.
fn pointer(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err("an empty placeholder {{}} names no path".into());
    }
    if path.starts_with('/') {
        return Ok(path.to_string());
    }
    let mut pointer = String::new();
    for segment in path.trim_start_matches('.').split('.') {
        if segment.is_empty() {
            return Err(format!("the path {path:?} has an empty segment"));
        }
        pointer.push('/');
        pointer.push_str(&segment.replace('~', "~0").replace('/', "~1"));
    }
    Ok(pointer)
}

fn fill_text(text: &str, event: &Value) -> Value {
    let Ok(pieces) = placeholders(text) else {
        return Value::String(text.to_string());
    };
    if let [Piece::Path(path)] = pieces.as_slice() {
        return event.pointer(path).cloned().unwrap_or(Value::Null);
    }
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Path(path) => match event.pointer(&path) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => out.push_str(s),
                Some(other) => out.push_str(&other.to_string()),
            },
        }
    }
    Value::String(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event() -> Value {
        json!({
            "kind": "updated",
            "object": {
                "metadata": {"name": "web", "labels": {"app.kubernetes.io/name": "shop"}},
                "spec": {"replicas": 3, "containers": [{"image": "nginx:1"}]}
            }
        })
    }

    #[test]
    fn a_lone_placeholder_keeps_the_value_s_type() {
        let template = json!({
            "name": "{{object.metadata.name}}",
            "replicas": "{{ object.spec.replicas }}",
            "image": "{{object.spec.containers.0.image}}",
            "app": "{{/object/metadata/labels/app.kubernetes.io~1name}}",
            "labels": "{{object.metadata.labels}}",
            "missing": "{{object.status.phase}}",
            "fixed": [1, true, "text"],
        });
        assert_eq!(
            fill(&template, &event()),
            json!({
                "name": "web",
                "replicas": 3,
                "image": "nginx:1",
                "app": "shop",
                "labels": {"app.kubernetes.io/name": "shop"},
                "missing": null,
                "fixed": [1, true, "text"],
            })
        );
    }

    #[test]
    fn placeholders_inside_text_are_replaced_by_the_value_s_text() {
        let filled = fill(
            &json!(
                "{{object.metadata.name}} was {{kind}} ({{object.spec.replicas}} replicas{{object.none}})"
            ),
            &event(),
        );
        assert_eq!(filled, json!("web was updated (3 replicas)"));
    }

    #[test]
    fn a_broken_placeholder_is_an_error_that_says_where() {
        assert_eq!(check(&json!({"a": ["x", "{{kind}}"]}), "body"), Ok(()));
        assert_eq!(
            check(&json!({"a": ["x", "{{kind"]}), "body"),
            Err(r#"body.a[1]: "{{kind" opens a placeholder with {{ and never closes it"#.into())
        );
        assert_eq!(
            check(&json!({"n": "{{ }}"}), "body"),
            Err(r#"body.n: "{{ }}": an empty placeholder {{}} names no path"#.into())
        );
        assert!(check(&json!("{{object..name}}"), "body").is_err());
    }

    #[test]
    fn reads_says_which_top_level_fields_a_template_reads() {
        let template = json!({"a": ["x", "{{object.metadata.name}}"], "k": "{{ kind }}!"});
        assert!(reads(&template, "object"));
        assert!(reads(&template, "kind"));
        assert!(!reads(&template, "oldObject"));
        assert!(reads(
            &json!({"old": "was {{oldObject.data}}"}),
            "oldObject"
        ));
        assert!(reads(&json!(["{{/oldObject/metadata/name}}"]), "oldObject"));
        assert!(reads(&json!("{{oldObject}}"), "oldObject"));
        assert!(!reads(
            &json!("{{oldObjects.x}} {{object.oldObject}}"),
            "oldObject"
        ));
        assert!(!reads(&json!({"oldObject": "fixed", "n": 1}), "oldObject"));
    }
}
