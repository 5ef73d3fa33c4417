//! Helm's own engine for the chart tests: `helm-python-sdk` from PyPI (Helm v4's Go SDK
//! through `libhelm_c`; no `helm` binary), installed with pip into a virtual environment
//! under the build's temporary folder on first use ([`support::venv`]), driven through
//! `helm.py` beside this file: one JSON request in, one JSON answer out.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::{self, spawned};

/// The helm-python-sdk release the tests are written against.
pub const SDK_VERSION: &str = "0.2.2";

/// The chart's folder.
pub fn chart() -> PathBuf {
    support::root().join("deploy/chart/switchyard")
}

/// The virtual environment's Python, the SDK installed in it (once per test run).
fn python() -> PathBuf {
    support::venv::python(
        &format!("helm-sdk-{SDK_VERSION}"),
        &[&format!("helm-python-sdk=={SDK_VERSION}")],
    )
}

/// What Helm answered: the action's result, or the kind of `HelmError` and its message.
pub type Answer = Result<Value, (String, String)>;

/// Runs `request` (`{"action": ..., ...}`, see helm.py) through Helm's engine.
pub fn helm(request: Value) -> Answer {
    let script = support::root().join("tests/it/chart/helm.py");
    let mut command = Command::new(python());
    command
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawned::Spawned::start(&mut command, "helm.py");
    {
        use std::io::Write;
        let mut stdin = child.child().stdin.take().expect("piped stdin");
        stdin
            .write_all(request.to_string().as_bytes())
            .expect("write the request");
    }
    let output = child.wait_with_output();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "helm.py {request}: {}{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("helm.py printed no JSON ({e}): {stdout}"));
    match answer.get("error") {
        Some(kind) => Err((
            kind.as_str().unwrap_or_default().to_string(),
            answer["message"].as_str().unwrap_or_default().to_string(),
        )),
        None => Ok(answer["ok"].clone()),
    }
}

/// The chart rendered with `values` as release `switchyard` in namespace `switchyard`:
/// every manifest's documents, in template order.
pub fn render(values: Value) -> Result<Vec<Value>, String> {
    let rendered = helm(json!({"action": "render", "chart": chart(), "values": values}))
        .map_err(|(_, message)| message)?;
    let mut documents = Vec::new();
    for (name, text) in rendered.as_object().expect("template → manifest") {
        if name.ends_with("NOTES.txt") {
            continue;
        }
        let parsed: Vec<Value> = serde_saphyr::from_multiple(text.as_str().unwrap())
            .unwrap_or_else(|e| panic!("{name} is not YAML ({e}):\n{text}"));
        documents.extend(parsed.into_iter().filter(|d| !d.is_null()));
    }
    Ok(documents)
}

/// [`render`], which must succeed.
pub fn rendered(values: Value) -> Vec<Value> {
    render(values).unwrap_or_else(|message| panic!("the chart did not render: {message}"))
}

/// The rendered documents as one YAML stream (for `kubectl apply -f -`).
pub fn stream(documents: &[Value]) -> String {
    documents
        .iter()
        .map(|d| format!("---\n{}\n", serde_json::to_string(d).unwrap()))
        .collect()
}

/// The document of `kind` named `name`.
pub fn find<'a>(documents: &'a [Value], kind: &str, name: &str) -> &'a Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// Every document of `kind`.
pub fn all<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

/// The config the chart's ConfigMap holds.
pub fn config_of(documents: &[Value]) -> Value {
    let text = find(documents, "ConfigMap", "switchyard-config")["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml");
    serde_saphyr::from_str(text).expect("the config is YAML")
}
