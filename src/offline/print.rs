//! How `switchyard replay` shows what each event did.

use super::replay::{EventReport, ReplayOutcome};

/// One event's report as text: a heading line with the outcome, then a line per log line,
/// per captured write and per recorded metric, indented.
///
/// ```text
/// line 1: added default/a (route all, handler log) -> done
///   log info: added ConfigMap default/a
///   write merge-patch ConfigMap default/a {"metadata":{"labels":{"team":"none"}}}
///   metric gauge pods_on_node{node="n1"} 3
/// ```
pub fn text(report: &EventReport) -> String {
    let outcome = match &report.outcome {
        ReplayOutcome::Done => "done".to_string(),
        ReplayOutcome::RequeueAfter { ms } => format!("requeue after {ms} ms"),
        ReplayOutcome::Retry { ms: None } => "retry".to_string(),
        ReplayOutcome::Retry { ms: Some(ms) } => format!("retry after {ms} ms"),
        ReplayOutcome::DeadLetter { reason } => format!("dead letter: {reason}"),
        ReplayOutcome::Error { error } => format!("error: {error}"),
    };
    let kind = serde_json::to_value(report.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut out = format!(
        "line {}: {kind} {} (route {}, handler {}) -> {outcome}\n",
        report.line, report.object, report.route, report.handler
    );
    for note in &report.placeholders {
        out.push_str(&format!("  note: {note}\n"));
    }
    for log in &report.logs {
        out.push_str(&format!("  log {}: {}\n", log.level, log.message));
    }
    for write in &report.writes {
        let object = match &write.namespace {
            Some(ns) => format!("{ns}/{}", write.name),
            None => write.name.clone(),
        };
        out.push_str(&format!(
            "  write {} {} {object}",
            write.action, write.resource
        ));
        if !write.body.is_null() {
            out.push_str(&format!(" {}", write.body));
        }
        out.push('\n');
    }
    for request in &report.requests {
        out.push_str(&format!("  request {} {}", request.method, request.url));
        if !request.body.is_empty() {
            out.push_str(&format!(" {}", request.body));
        }
        out.push('\n');
    }
    for metric in &report.metrics {
        let labels: Vec<String> = metric
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        let labels = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", labels.join(","))
        };
        out.push_str(&format!(
            "  metric {} {}{labels} {}\n",
            metric.kind, metric.name, metric.value
        ));
    }
    out
}
