//! One HTTP request to a resource URL and what every verb reads from it alike: query
//! parameters, the label and field selectors ([`Filter`]), whether a Table is asked for, and
//! the body (JSON, or protobuf for the kinds kubectl sends that way), and whether a write
//! is a dry run.
//!
//! A parameter set to the empty string counts as absent ([`Request::param`]), as in
//! kube-apiserver, where `?labelSelector=` selects everything.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, header};
use serde_json::Value;

use crate::config::Selector;
use crate::sharding::ShardSelector;
use crate::sim::cluster::WriteMode;
use crate::sim::error::ApiError;
use crate::sim::fields;
use crate::sim::protobuf;
use crate::sim::resources::ResourceDef;
use crate::sim::table::{self, IncludeObject};

/// One HTTP request to a resource URL, with everything the verbs need.
pub(in crate::sim) struct Request {
    /// The HTTP method.
    pub(in crate::sim) method: Method,
    /// The URL path, as errors quote it.
    pub(in crate::sim) path: String,
    /// The query parameters.
    pub(in crate::sim) params: HashMap<String, String>,
    /// The request headers.
    pub(in crate::sim) headers: HeaderMap,
    /// The request body.
    pub(in crate::sim) body: Bytes,
}

impl Request {
    /// A query parameter, `None` when absent or empty.
    pub(in crate::sim) fn param(&self, name: &str) -> Option<&str> {
        self.params
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Whether a query parameter is set to true (`1`, `true` or `True`).
    pub(in crate::sim) fn flag(&self, name: &str) -> bool {
        matches!(
            self.params.get(name).map(String::as_str),
            Some("1" | "true" | "True")
        )
    }

    /// Whether a write is stored or only checked: `?dryRun=All` is a dry run, any other
    /// value a 400, as kube-apiserver answers.
    pub(in crate::sim) fn write_mode(&self) -> Result<WriteMode, ApiError> {
        match self.param("dryRun") {
            None => Ok(WriteMode::Store),
            Some("All") => Ok(WriteMode::DryRun),
            Some(other) => Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: {other:?}: supported values: \"All\""
            ))),
        }
    }

    /// Whether the request asks for a Table (by its `Accept` header), and what its rows carry
    /// (`includeObject`).
    pub(in crate::sim) fn table(&self) -> Result<Option<IncludeObject>, ApiError> {
        table::requested(&self.headers, self.param("includeObject"))
    }

    /// The `User-Agent` header, if it is there and readable.
    pub(in crate::sim) fn user_agent(&self) -> Option<&str> {
        self.headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
    }

    /// The manager kube-apiserver records in `managedFields` for this write (see
    /// [`crate::sim::writes_log::manager_of`]).
    pub(in crate::sim) fn manager(&self) -> String {
        crate::sim::writes_log::manager_of(self.param("fieldManager"), self.user_agent())
    }

    /// The `Content-Type` header, if it is there and readable.
    pub(in crate::sim) fn content_type(&self) -> Option<&str> {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
    }

    /// Whether the body is empty or only white space.
    pub(in crate::sim) fn body_is_blank(&self) -> bool {
        self.body.iter().all(u8::is_ascii_whitespace)
    }

    /// The body as a JSON value: decoded from protobuf when the content type says so
    /// (415 when it cannot be), parsed as JSON otherwise (400 when it is not JSON).
    pub(in crate::sim) fn json_body(&self) -> Result<Value, ApiError> {
        let content_type = self.content_type().unwrap_or("application/json");
        if content_type.contains("protobuf") {
            return protobuf::decode_object(&self.body)
                .map_err(|e| ApiError::unsupported_media_type(&format!("{content_type}: {e}")));
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
    }
}

/// The label and field selectors of a request, parsed and checked against the kind.
pub(in crate::sim) struct Filter {
    def: Arc<ResourceDef>,
    labels: Selector,
    fields: Selector,
    /// The `shardSelector`, when the feature gate is on and the request has one.
    shard: Option<ShardSelector>,
}

impl Filter {
    /// Parses `labelSelector` and `fieldSelector`, and `shardSelector` when `sharding` (the
    /// feature gate) is on; a field the kind cannot select on, or a shard selector that
    /// does not parse, is a 400, as kube-apiserver answers.
    pub(in crate::sim) fn from_request(
        def: Arc<ResourceDef>,
        req: &Request,
        sharding: bool,
    ) -> Result<Self, ApiError> {
        let shard = match req.param("shardSelector") {
            Some(text) if sharding => Some(ShardSelector::parse(text).map_err(|e| {
                ApiError::bad_request(format!("invalid shardSelector {text:?}: {e}"))
            })?),
            _ => None,
        };
        let labels = Selector::parse(req.param("labelSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = Selector::parse_fields(req.param("fieldSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
        if let Some(field) = fields.keys().find(|f| !fields::supported(&def, f)) {
            return Err(ApiError::bad_request(format!(
                "field label not supported: {field}"
            )));
        }
        Ok(Self {
            def,
            labels,
            fields,
            shard,
        })
    }

    /// The shard selector applied, if any.
    pub(in crate::sim) fn shard(&self) -> Option<&ShardSelector> {
        self.shard.as_ref()
    }

    /// Whether there are no selectors at all.
    pub(in crate::sim) fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty() && self.shard.is_none()
    }

    /// Whether an object satisfies both selectors.
    pub(in crate::sim) fn matches(&self, object: &Value) -> bool {
        self.shard.as_ref().is_none_or(|s| s.matches(object))
            && self.labels.matches_labels(object)
            && self
                .fields
                .matches_values(|field| fields::value(&self.def, object, field))
    }
}
