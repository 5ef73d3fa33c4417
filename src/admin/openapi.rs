//! The OpenAPI 3 description of the admin API, served at `/openapi.json`, built from one
//! table of endpoints.

use serde_json::{Map, Value, json};

/// One admin endpoint as the description lists it.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint {
    /// `get` or `post`.
    pub method: &'static str,
    /// The path, with `{name}` parameters.
    pub path: &'static str,
    /// What it does.
    pub summary: &'static str,
    /// The media type of a successful answer.
    pub returns: &'static str,
}

const JSON: &str = "application/json";
const TEXT: &str = "text/plain";

/// Every endpoint of the admin API.
pub const ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        method: "get",
        path: "/",
        summary: "The status page (HTML; its stylesheet, script and icon under /page/), open to every caller: it reads the endpoints below",
        returns: "text/html",
    },
    Endpoint {
        method: "get",
        path: "/page/style.css",
        summary: "The status page's stylesheet",
        returns: "text/css",
    },
    Endpoint {
        method: "get",
        path: "/page/app.js",
        summary: "The status page's script",
        returns: "text/javascript",
    },
    Endpoint {
        method: "get",
        path: "/page/icon.svg",
        summary: "The status page's icon",
        returns: "image/svg+xml",
    },
    Endpoint {
        method: "get",
        path: "/livez",
        summary: "200 while the process runs",
        returns: TEXT,
    },
    Endpoint {
        method: "get",
        path: "/readyz",
        summary: "200 once every informer has listed its resource, else 503; ?verbose lists each informer",
        returns: TEXT,
    },
    Endpoint {
        method: "get",
        path: "/status",
        summary: "Informers, routes and handlers with their counters",
        returns: JSON,
    },
    Endpoint {
        method: "get",
        path: "/metrics",
        summary: "Prometheus text format",
        returns: "application/openmetrics-text",
    },
    Endpoint {
        method: "get",
        path: "/openapi.json",
        summary: "This description",
        returns: JSON,
    },
    Endpoint {
        method: "post",
        path: "/reload",
        summary: "Read the config file again and apply the difference; 422 lists every mistake and keeps the running config",
        returns: JSON,
    },
    Endpoint {
        method: "get",
        path: "/plugins",
        summary: "The plugins in use and their state",
        returns: JSON,
    },
    Endpoint {
        method: "post",
        path: "/plugins/{name}/reload",
        summary: "Load (or pull) a plugin now and swap it in; 422 keeps the running version, 503 while shutting down",
        returns: JSON,
    },
    Endpoint {
        method: "get",
        path: "/routes",
        summary: "Each route's counters and buffer",
        returns: JSON,
    },
    Endpoint {
        method: "get",
        path: "/handlers/{name}",
        summary: "A handler's settings, counters, latency and last errors",
        returns: JSON,
    },
    Endpoint {
        method: "post",
        path: "/handlers/{name}/pause",
        summary: "Stop handing events to the plugin; events queue up",
        returns: JSON,
    },
    Endpoint {
        method: "post",
        path: "/handlers/{name}/resume",
        summary: "Hand events to the plugin again",
        returns: JSON,
    },
    Endpoint {
        method: "get",
        path: "/handlers/{name}/dead-letters",
        summary: "Events given up on after max_retries",
        returns: JSON,
    },
    Endpoint {
        method: "post",
        path: "/handlers/{name}/dead-letters/retry",
        summary: "Deliver dead letters again: body {\"ids\": [...]} or empty for all",
        returns: JSON,
    },
    Endpoint {
        method: "post",
        path: "/handlers/{name}/dead-letters/purge",
        summary: "Drop dead letters: body {\"ids\": [...]} or empty for all",
        returns: JSON,
    },
    Endpoint {
        method: "get",
        path: "/handlers/{name}/shadow",
        summary: "The handler's shadow plugin: version, comparison counts, recent differences",
        returns: JSON,
    },
];

/// The OpenAPI 3.0 document.
pub fn document() -> Value {
    let error = json!({
        "description": "What was wrong",
        "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
    });
    let mut paths = Map::new();
    for e in ENDPOINTS {
        let mut operation = json!({
            "summary": e.summary,
            "responses": {
                "200": {"description": "OK", "content": {e.returns: {}}},
                "400": error,
                "401": error,
                "404": error,
                "421": error,
            },
        });
        if e.path.contains("{name}") {
            operation["parameters"] = json!([{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}]);
        }
        if e.method != "get" {
            // Mutating endpoints always need the token.
            operation["security"] = json!([{"bearer": []}]);
        }
        let item = paths
            .entry(e.path.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        item[e.method] = operation;
    }
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "switchyard admin API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Mutating endpoints need `Authorization: Bearer TOKEN`; every endpoint does when the API listens beyond loopback. A request whose Host is not the API's address, a loopback name or one of admin.allowed_hosts is answered 421.",
        },
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error", "status"],
                    "properties": {"error": {"type": "string"}, "status": {"type": "integer"}},
                },
            },
        },
    })
}
