//! discord: posts a message with one embed (a title, the Event's message, fields, a colour
//! by severity) to a Discord channel's webhook (`POST https://discord.com/api/webhooks/...`).
//!
//! ```yaml
//! handlers:
//!   to-discord:
//!     plugin: builtin:discord
//!     config:
//!       url: {valueFrom: {secretKeyRef: {name: discord, key: webhook-url}}}
//!       username: switchyard     # optional, the name to post as
//!       cluster: prod            # optional, the embed's footer
//!     capabilities:
//!       http: [https://discord.com]
//! ```
//!
//! Every text is cut (never split) to Discord's embed limits: title 256 characters,
//! description 4,096 (3,900 here), field names 256 and values 1,024 (200 here), footer
//! 2,048 (256 here), all of an embed at most 6,000. A 4xx is permanent; a 5xx, a timeout or
//! a refused connection is retried; a 429 (Discord's rate limit) is sent again after its
//! `Retry-After`. The URL is never logged: it holds the webhook's token.

use serde::Deserialize;
use serde_json::{Value, json};
use switchyard_sdk::http::Request;
use switchyard_sdk::sink::{check_url, cut, deliver, event_json, now_rfc3339, summary};
use switchyard_sdk::{Configured, Event, Outcome, export_handler};

/// Orange, for a Warning.
const WARNING: u32 = 0xF0_A3_0A;
/// Blue, for anything else.
const INFO: u32 = 0x34_98_DB;

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The channel webhook's URL.
    url: String,
    /// The name to post as.
    #[serde(default)]
    username: Option<String>,
    /// A name for the cluster, the embed's footer.
    #[serde(default)]
    cluster: Option<String>,
}

/// The handler, built from its `config` once per instance.
struct Discord {
    config: Config,
}

impl Configured for Discord {
    fn new(text: &str) -> Result<Self, String> {
        if text.trim() == "null" {
            return Err("config: needs `url` (see the discord sink's docs)".into());
        }
        let mut config: Config = switchyard_sdk::parse_config(text)?;
        config.url = check_url(&config.url, "config.url")?;
        Ok(Self { config })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let summary = summary(&event_json(&event)?);
        let fields: Vec<Value> = summary
            .facts
            .iter()
            .map(|(k, v)| json!({"name": k, "value": cut(v, 200), "inline": true}))
            .collect();
        let mut embed = json!({
            "title": cut(&summary.title, 256),
            "color": if summary.severity == "warning" { WARNING } else { INFO },
            "fields": fields,
            "timestamp": now_rfc3339(),
        });
        if !summary.text.is_empty() {
            embed["description"] = json!(cut(&summary.text, 3900));
        }
        if let Some(cluster) = &self.config.cluster {
            embed["footer"] = json!({"text": cut(cluster, 256)});
        }
        let mut message = json!({"embeds": [embed]});
        if let Some(username) = &self.config.username {
            message["username"] = json!(cut(username, 80));
        }
        deliver(Request::post(&self.config.url).json(&message))
    }
}

export_handler!(Discord);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use switchyard_sdk::EventKind;
    use switchyard_sdk::http::Response;
    use switchyard_sdk::testing::{TestHost, event};

    use super::*;

    #[test]
    fn a_warning_is_an_orange_embed_within_discord_s_limits() {
        let warning = json!({"kind": "Event", "type": "Warning", "reason": "R".repeat(9000),
            "message": "m".repeat(9000), "metadata": {"name": "e"},
            "source": {"component": "k".repeat(9000)},
            "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-1"}});
        let report = TestHost::new()
            .config(json!({"url": "https://discord.com/api/webhooks/1/t",
                           "cluster": "c".repeat(9000), "username": "sy"}))
            .http("https://discord.com/", Response::new(204, ""))
            .handle::<Discord>(event(EventKind::Added, warning));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let body: Value = serde_json::from_slice(&report.requests[0].body).unwrap();
        let embed = &body["embeds"][0];
        assert_eq!(embed["color"], WARNING);
        let count = |v: &Value| v.as_str().map_or(0, |s| s.chars().count());
        let mut total = count(&embed["title"]) + count(&embed["description"]);
        total += count(&embed["footer"]["text"]);
        for field in embed["fields"].as_array().unwrap() {
            assert!(count(&field["value"]) <= 1024);
            total += count(&field["name"]) + count(&field["value"]);
        }
        assert!(count(&embed["title"]) <= 256);
        assert!(total <= 6000, "{total}");
    }
}
