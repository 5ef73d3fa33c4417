//! Label and field selectors as the API server parses them (`a=b,c!=d,e in (x,y),!f`):
//! used to validate route selectors, by routes to filter objects, and by the simulator to
//! filter lists and watches.

use serde_json::Value;

/// Why a selector is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A term with no key, or a key with white space in it.
    #[error("invalid selector term {term:?}")]
    InvalidTerm {
        /// The term as written.
        term: String,
    },
    /// `in` or `notin` without a parenthesised list.
    #[error("invalid selector term {term:?}: expected a (list)")]
    ExpectedList {
        /// The term as written.
        term: String,
    },
    /// A field selector term other than `=`, `==` or `!=`.
    #[error("invalid field selector term {term:?}: field selectors support only =, == and !=")]
    FieldOperator {
        /// The term as written.
        term: String,
    },
}

/// A parsed selector: every requirement must hold.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl Selector {
    /// Parses a selector string; an empty string selects everything.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(parse_term(term)?);
        }
        Ok(Self { requirements })
    }

    /// Parses a field selector: like [`Selector::parse`], but, as the API server requires
    /// of field selectors, only `=`, `==` and `!=` are allowed.
    pub fn parse_fields(text: &str) -> Result<Self, SelectorError> {
        let selector = Self::parse(text)?;
        for (term, req) in split_terms(text)
            .into_iter()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .zip(&selector.requirements)
        {
            if !matches!(req, Requirement::Equals(..) | Requirement::NotEquals(..)) {
                return Err(SelectorError::FieldOperator {
                    term: term.to_string(),
                });
            }
        }
        Ok(selector)
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The keys (label keys or field paths) the requirements name, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().map(|req| match req {
            Requirement::Equals(k, _)
            | Requirement::NotEquals(k, _)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::Exists(k)
            | Requirement::NotExists(k) => k.as_str(),
        })
    }

    /// Like [`Selector::matches`], for a lookup that computes owned values.
    pub fn matches_values(&self, lookup: impl Fn(&str) -> Option<String>) -> bool {
        let values: Vec<Option<String>> = self.keys().map(&lookup).collect();
        let keys: Vec<&str> = self.keys().collect();
        self.matches(|k| {
            keys.iter()
                .position(|key| *key == k)
                .and_then(|i| values[i].as_deref())
        })
    }

    /// Whether a lookup function (label key or field path → value) satisfies every requirement.
    pub fn matches<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|req| match req {
            Requirement::Equals(k, v) => lookup(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => lookup(k) != Some(v.as_str()),
            Requirement::In(k, vs) => lookup(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => !lookup(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => lookup(k).is_some(),
            Requirement::NotExists(k) => lookup(k).is_none(),
        })
    }

    /// Whether an object's labels satisfy the selector.
    pub fn matches_labels(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.matches(|k| labels.get(k).and_then(Value::as_str))
    }

    /// Whether an object's fields satisfy the selector (dotted paths such as `metadata.name`).
    pub fn matches_fields(&self, object: &Value) -> bool {
        self.matches(|path| {
            path.split('.')
                .try_fold(object, |v, part| v.get(part))
                .and_then(Value::as_str)
        })
    }
}

/// Splits on commas that are not inside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

fn parse_term(term: &str) -> Result<Requirement, SelectorError> {
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::NotExists(checked_key(key, term)?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(
            checked_key(k, term)?,
            v.trim().into(),
        ));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::Equals(checked_key(k, term)?, v.trim().into()));
    }
    for (op, negated) in [(" notin ", true), (" in ", false)] {
        if let Some((k, rest)) = term.split_once(op) {
            let rest = rest.trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| SelectorError::ExpectedList {
                    term: term.to_string(),
                })?;
            let values = inner.split(',').map(|v| v.trim().to_string()).collect();
            let key = checked_key(k, term)?;
            return Ok(if negated {
                Requirement::NotIn(key, values)
            } else {
                Requirement::In(key, values)
            });
        }
    }
    Ok(Requirement::Exists(checked_key(term, term)?))
}

fn checked_key(key: &str, term: &str) -> Result<String, SelectorError> {
    let key = key.trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Err(SelectorError::InvalidTerm {
            term: term.to_string(),
        });
    }
    Ok(key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_supports_every_operator() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web,api)", true),
            ("app notin (web,api)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier=back", false),
            ("app in (api, web),tier", true),
        ] {
            let parsed = Selector::parse(sel).unwrap();
            assert_eq!(parsed.matches_labels(&obj), want, "selector {sel:?}");
        }
    }

    #[test]
    fn field_selector_reads_dotted_paths() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}});
        let sel = Selector::parse("metadata.namespace=ns,spec.nodeName=n1").unwrap();
        assert!(sel.matches_fields(&obj));
        let sel = Selector::parse("metadata.name!=a").unwrap();
        assert!(!sel.matches_fields(&obj));
    }

    #[test]
    fn field_selectors_allow_only_equality() {
        let sel = Selector::parse_fields("spec.nodeName=n1,status.phase!=Failed").unwrap();
        assert_eq!(
            sel.keys().collect::<Vec<_>>(),
            ["spec.nodeName", "status.phase"]
        );
        assert!(sel.matches_values(|k| {
            Some(
                if k == "spec.nodeName" {
                    "n1"
                } else {
                    "Running"
                }
                .to_string(),
            )
        }));
        assert!(Selector::parse_fields("a in (x)").is_err());
        assert!(Selector::parse_fields("!a").is_err());
        assert!(Selector::parse_fields("").unwrap().is_empty());
    }

    #[test]
    fn malformed_terms_are_rejected() {
        assert!(Selector::parse("app in web").is_err());
        assert!(Selector::parse("=x").is_err());
    }
}
