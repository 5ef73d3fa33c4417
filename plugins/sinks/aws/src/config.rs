//! The handler's `config`: which service, where, with which credentials, and the
//! service's own settings. Every key is checked when the plugin starts, so a misspelt one
//! is an `init` error naming it.

use serde::Deserialize;

/// The services the sink sends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// SNS `Publish` to a topic.
    Sns,
    /// SQS `SendMessage` to a queue (FIFO queues too).
    Sqs,
    /// EventBridge `PutEvents` to an event bus.
    Eventbridge,
    /// Kinesis Data Firehose `PutRecord` to a delivery stream.
    Firehose,
    /// CloudWatch Logs `PutLogEvents` to a log stream.
    Logs,
}

impl Service {
    /// The endpoint's host prefix and the signing name: `sns`, `sqs`, `events`, ...
    pub fn signing_name(self) -> &'static str {
        match self {
            Service::Sns => "sns",
            Service::Sqs => "sqs",
            Service::Eventbridge => "events",
            Service::Firehose => "firehose",
            Service::Logs => "logs",
        }
    }

    /// The largest message the service takes, in bytes (see each service's quotas).
    pub fn max_message(self) -> usize {
        match self {
            // SNS and SQS: 256 KiB for the message body.
            Service::Sns | Service::Sqs => 262_144,
            // EventBridge: 256 KiB for the whole entry; `Source`, `DetailType` and
            // `Resources` count too, so the sink measures the entry (services.rs).
            Service::Eventbridge => 262_144,
            // Firehose: 1,000 KiB for a record's data, before base64.
            Service::Firehose => 1_024_000,
            // CloudWatch Logs: 256 KiB for an event, 26 bytes of which are overhead.
            Service::Logs => 262_144 - 26,
        }
    }
}

/// The handler's `config`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `sns`, `sqs`, `eventbridge`, `firehose` or `logs`.
    pub service: Service,
    /// The region, `eu-west-1`.
    pub region: String,
    /// Where to send instead of `https://SERVICE.REGION.amazonaws.com` (a VPC endpoint,
    /// LocalStack, moto).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// How to sign.
    pub credentials: Credentials,
    /// SNS: the topic's ARN.
    #[serde(default)]
    pub topic_arn: Option<String>,
    /// SNS: the message's subject (at most 100 characters).
    #[serde(default)]
    pub subject: Option<String>,
    /// SQS: the queue's URL.
    #[serde(default)]
    pub queue_url: Option<String>,
    /// SNS and SQS FIFO: the message group; default: the object's `namespace/name`, so
    /// the changes of one object are delivered in order and different objects in parallel.
    #[serde(default)]
    pub message_group_id: Option<String>,
    /// EventBridge: the bus's name or ARN; default `default`.
    #[serde(default)]
    pub event_bus: Option<String>,
    /// EventBridge: the event's `Source`; default `switchyard`.
    #[serde(default)]
    pub source: Option<String>,
    /// EventBridge: the event's `DetailType`; default `Kubernetes KIND CHANGE`.
    #[serde(default)]
    pub detail_type: Option<String>,
    /// Firehose: the delivery stream's name.
    #[serde(default)]
    pub delivery_stream: Option<String>,
    /// CloudWatch Logs: the log group (it must exist).
    #[serde(default)]
    pub log_group: Option<String>,
    /// CloudWatch Logs: the log stream (created when missing).
    #[serde(default)]
    pub log_stream: Option<String>,
}

/// Credentials: a key pair (from a Secret or the environment), or a web identity token
/// exchanged with STS.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    /// The access key id.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// The secret access key.
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// The session token of temporary credentials.
    #[serde(default)]
    pub session_token: Option<String>,
    /// A web identity (IRSA): a role to assume with a service account token.
    #[serde(default)]
    pub web_identity: Option<WebIdentity>,
}

/// `AssumeRoleWithWebIdentity`'s inputs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebIdentity {
    /// The role's ARN (`AWS_ROLE_ARN` on EKS).
    pub role_arn: String,
    /// The token: the projected service account token's text.
    pub token: String,
    /// The session's name; default `switchyard`.
    #[serde(default)]
    pub session_name: Option<String>,
    /// Where STS is; default `https://sts.REGION.amazonaws.com`.
    #[serde(default)]
    pub sts_endpoint: Option<String>,
}

impl Config {
    /// Reads and checks the config the daemon passes to `init`.
    pub fn parse(text: &str) -> Result<Config, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("config: {e}"))?;
        if value.is_null() {
            return Err(
                "config: needs at least `service`, `region` and `credentials` (see the aws sink's docs)"
                    .into(),
            );
        }
        let mut config: Config =
            serde_json::from_value(value).map_err(|e| format!("config: {e}"))?;
        config.trim();
        config.check()?;
        Ok(config)
    }

    /// A value from a Secret made with `--from-file` ends in a newline, which is never
    /// part of a key, a URL or a name.
    fn trim(&mut self) {
        let trim = |v: &mut Option<String>| {
            if let Some(s) = v {
                *s = s.trim().to_string();
            }
        };
        self.region = self.region.trim().to_string();
        for field in [
            &mut self.endpoint,
            &mut self.credentials.access_key_id,
            &mut self.credentials.secret_access_key,
            &mut self.credentials.session_token,
            &mut self.topic_arn,
            &mut self.queue_url,
        ] {
            trim(field);
        }
        if let Some(web) = &mut self.credentials.web_identity {
            web.role_arn = web.role_arn.trim().to_string();
            web.token = web.token.trim().to_string();
            trim(&mut web.sts_endpoint);
        }
        if let Some(endpoint) = &mut self.endpoint {
            *endpoint = endpoint.trim_end_matches('/').to_string();
        }
    }

    /// Each service's required keys, no key of another service, URLs that are URLs.
    fn check(&self) -> Result<(), String> {
        if self.region.is_empty()
            || !self
                .region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(format!(
                "config.region: {:?} is not a region (eu-west-1)",
                self.region
            ));
        }
        let required: &[(&str, bool)] = match self.service {
            Service::Sns => &[("topic_arn", self.topic_arn.is_some())],
            Service::Sqs => &[("queue_url", self.queue_url.is_some())],
            Service::Eventbridge => &[],
            Service::Firehose => &[("delivery_stream", self.delivery_stream.is_some())],
            Service::Logs => &[
                ("log_group", self.log_group.is_some()),
                ("log_stream", self.log_stream.is_some()),
            ],
        };
        let service = self.service.signing_name();
        if let Some((key, _)) = required.iter().find(|(_, set)| !set) {
            return Err(format!("config.{key}: service {service} needs it"));
        }
        self.check_foreign_keys()?;
        for (key, url) in [
            ("endpoint", self.endpoint.as_deref()),
            ("queue_url", self.queue_url.as_deref()),
            (
                "credentials.web_identity.sts_endpoint",
                self.credentials
                    .web_identity
                    .as_ref()
                    .and_then(|w| w.sts_endpoint.as_deref()),
            ),
        ] {
            if let Some(url) = url
                && !(url.starts_with("https://") || url.starts_with("http://"))
            {
                return Err(format!(
                    "config.{key}: {url:?} is not an http:// or https:// URL"
                ));
            }
        }
        if let Some(subject) = &self.subject
            && subject.chars().count() > 100
        {
            return Err("config.subject: SNS takes at most 100 characters".into());
        }
        self.check_credentials()
    }

    /// A key of another service is a mistake (`queue_url` with `service: sns`).
    fn check_foreign_keys(&self) -> Result<(), String> {
        let service = self.service;
        let keys = [
            ("topic_arn", self.topic_arn.is_some(), &[Service::Sns][..]),
            ("subject", self.subject.is_some(), &[Service::Sns]),
            ("queue_url", self.queue_url.is_some(), &[Service::Sqs]),
            (
                "message_group_id",
                self.message_group_id.is_some(),
                &[Service::Sns, Service::Sqs],
            ),
            (
                "event_bus",
                self.event_bus.is_some(),
                &[Service::Eventbridge],
            ),
            ("source", self.source.is_some(), &[Service::Eventbridge]),
            (
                "detail_type",
                self.detail_type.is_some(),
                &[Service::Eventbridge],
            ),
            (
                "delivery_stream",
                self.delivery_stream.is_some(),
                &[Service::Firehose],
            ),
            ("log_group", self.log_group.is_some(), &[Service::Logs]),
            ("log_stream", self.log_stream.is_some(), &[Service::Logs]),
        ];
        for (key, set, services) in keys {
            if set && !services.contains(&service) {
                return Err(format!(
                    "config.{key}: not a setting of service {}",
                    service.signing_name()
                ));
            }
        }
        Ok(())
    }

    /// Either a key pair or a web identity, not both, not half a pair.
    fn check_credentials(&self) -> Result<(), String> {
        let c = &self.credentials;
        match (&c.access_key_id, &c.secret_access_key, &c.web_identity) {
            (Some(_), Some(_), None) => Ok(()),
            (None, None, Some(web)) if c.session_token.is_none() => {
                if web.role_arn.is_empty() || web.token.is_empty() {
                    return Err(
                        "config.credentials.web_identity: role_arn and token must not be empty"
                            .into(),
                    );
                }
                Ok(())
            }
            (_, _, Some(_)) => Err(
                "config.credentials: either access_key_id and secret_access_key, or web_identity, not both"
                    .into(),
            ),
            _ => Err(
                "config.credentials: needs access_key_id and secret_access_key (session_token optional), or web_identity"
                    .into(),
            ),
        }
    }

    /// The service's endpoint: `endpoint`, else `https://PREFIX.REGION.amazonaws.com`.
    pub fn endpoint(&self) -> String {
        match &self.endpoint {
            Some(endpoint) => endpoint.clone(),
            None => format!(
                "https://{}.{}.amazonaws.com",
                self.service.signing_name(),
                self.region
            ),
        }
    }
}
