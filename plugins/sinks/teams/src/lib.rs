//! teams: posts an Adaptive Card (a title, the Event's message, a fact set) to a Microsoft
//! Teams channel through a Workflows webhook ("Post to a channel when a webhook request is
//! received"), in the message form that workflow takes:
//! `{"type": "message", "attachments": [{"contentType":
//! "application/vnd.microsoft.card.adaptive", "content": CARD}]}`.
//!
//! ```yaml
//! handlers:
//!   to-teams:
//!     plugin: builtin:teams
//!     config:
//!       url: {valueFrom: {secretKeyRef: {name: teams, key: workflow-url}}}
//!       cluster: prod            # optional, shown as a fact
//!     capabilities:
//!       http: [https://prod-00.westus.logic.azure.com]
//! ```
//!
//! Teams takes messages up to about 28 KB: the card's text is cut (never split) until the
//! whole request is at most 27,000 bytes. A 4xx is permanent; a 5xx, a timeout or a refused
//! connection is retried; a 429 is sent again after its `Retry-After`. The URL is never
//! logged: it holds the workflow's signature.

use serde::Deserialize;
use serde_json::{Value, json};
use switchyard_sdk::http::Request;
use switchyard_sdk::sink::{Summary, check_url, cut, deliver, event_json, summary};
use switchyard_sdk::{Configured, Event, Outcome, export_handler};

/// The largest request sent, in bytes (Teams refuses messages over about 28 KB).
const MAX_BYTES: usize = 27_000;

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The workflow's webhook URL.
    url: String,
    /// A name for the cluster, shown as a fact.
    #[serde(default)]
    cluster: Option<String>,
}

/// The message for `summary`, its texts cut to `max` characters each.
fn message(summary: &Summary, cluster: Option<&str>, max: usize) -> Value {
    let mut facts: Vec<Value> = summary
        .facts
        .iter()
        .map(|(k, v)| json!({"title": k, "value": cut(v, max)}))
        .collect();
    if let Some(cluster) = cluster {
        facts.push(json!({"title": "Cluster", "value": cut(cluster, max)}));
    }
    let color = if summary.severity == "warning" {
        "Warning"
    } else {
        "Default"
    };
    let mut body = vec![
        json!({"type": "TextBlock", "text": cut(&summary.title, max),
                               "weight": "Bolder", "size": "Medium", "wrap": true,
                               "color": color}),
    ];
    if !summary.text.is_empty() {
        body.push(json!({"type": "TextBlock", "text": cut(&summary.text, max), "wrap": true}));
    }
    body.push(json!({"type": "FactSet", "facts": facts}));
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": body,
            },
        }],
    })
}

/// The message for `summary` at most [`MAX_BYTES`] long: its texts cut shorter and
/// shorter until it fits.
fn fitted(summary: &Summary, cluster: Option<&str>) -> Value {
    let mut max = MAX_BYTES;
    loop {
        let message = message(summary, cluster, max);
        if max <= 16 || message.to_string().len() <= MAX_BYTES {
            return message;
        }
        max /= 2;
    }
}

/// The handler, built from its `config` once per instance.
struct Teams {
    config: Config,
}

impl Configured for Teams {
    fn new(text: &str) -> Result<Self, String> {
        if text.trim() == "null" {
            return Err("config: needs `url` (see the teams sink's docs)".into());
        }
        let mut config: Config = switchyard_sdk::parse_config(text)?;
        config.url = check_url(&config.url, "config.url")?;
        Ok(Self { config })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let summary = summary(&event_json(&event)?);
        let message = fitted(&summary, self.config.cluster.as_deref());
        deliver(Request::post(&self.config.url).json(&message))
    }
}

export_handler!(Teams);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use switchyard_sdk::EventKind;
    use switchyard_sdk::http::Response;
    use switchyard_sdk::testing::{TestHost, event};

    use super::*;

    fn send(object: Value) -> Value {
        let report = TestHost::new()
            .config(json!({"url": "https://flow.example/hook", "cluster": "prod"}))
            .http("https://flow.example/", Response::new(202, ""))
            .handle::<Teams>(event(EventKind::Added, object));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        serde_json::from_slice(&report.requests[0].body).unwrap()
    }

    #[test]
    fn a_change_is_an_adaptive_card_with_its_facts() {
        let message = send(json!({"kind": "Pod", "metadata": {"name": "web-1"}}));
        let card = &message["attachments"][0]["content"];
        assert_eq!(card["type"], "AdaptiveCard");
        assert_eq!(card["body"][0]["text"], "Pod web-1 was added");
        let facts = &card["body"][1]["facts"];
        assert_eq!(facts[facts.as_array().unwrap().len() - 1]["value"], "prod");
    }

    #[test]
    fn a_huge_message_is_cut_to_fit_teams() {
        let event = json!({"kind": "Event", "type": "Warning", "reason": "\"".repeat(9000),
            "message": "é".repeat(50_000), "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "web-1"}});
        let message = send(event);
        assert!(message.to_string().len() <= MAX_BYTES);
        let text = message["attachments"][0]["content"]["body"][1]["text"]
            .as_str()
            .unwrap();
        assert!(text.ends_with('…') && text.chars().count() > 1000);
    }
}
