//! The metric names PromQL reads, taken out of the alert rules (deploy/alerts) and the
//! Grafana dashboard (deploy/grafana) by tokenizing each expression: identifiers outside
//! label matchers (`{}`), ranges (`[]`), strings, numbers, durations and Grafana variables,
//! that are neither function calls, aggregations, keywords nor grouping labels.

use std::path::Path;

use serde_json::Value;

/// PromQL words that are not metric names.
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "inf", "nan", "atan2",
];

/// Words followed by a list of label names.
const GROUPINGS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names `expr` reads, in order of appearance.
pub fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i = match c {
            '{' => skip_to(&chars, i, '}'),
            '[' => skip_to(&chars, i, ']'),
            '"' | '\'' | '`' => skip_to(&chars, i, c),
            '$' => skip_word(&chars, i + 1),
            c if c.is_ascii_digit() || (c == '.' && next_is_digit(&chars, i)) => {
                skip_number(&chars, i)
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let end = skip_word(&chars, i);
                let word: String = chars[i..end].iter().collect();
                let after = next_non_space(&chars, end);
                let call = after.is_some_and(|j| chars[j] == '(');
                if GROUPINGS.contains(&word.as_str()) {
                    // `by (a, b)`: label names, not metrics.
                    match after {
                        Some(j) if call => skip_to(&chars, j, ')'),
                        _ => end,
                    }
                } else {
                    let aggregation = after.is_some_and(|j| {
                        let rest: String = chars[j..].iter().collect();
                        ["by", "without"].iter().any(|k| {
                            rest.strip_prefix(k)
                                .is_some_and(|r| r.starts_with([' ', '(']))
                        })
                    });
                    if !call && !aggregation && !KEYWORDS.contains(&word.as_str()) {
                        names.push(word);
                    }
                    end
                }
            }
            _ => i + 1,
        };
    }
    names
}

/// The index after the `close` that ends what opens at `open`.
fn skip_to(chars: &[char], open: usize, close: char) -> usize {
    let mut i = open + 1;
    while i < chars.len() && chars[i] != close {
        // A backslash escapes the next character in a string.
        i += if chars[i] == '\\' { 2 } else { 1 };
    }
    i + 1
}

/// The index after the identifier (or `{name}` of `${name}`) starting at `start`.
fn skip_word(chars: &[char], start: usize) -> usize {
    if chars.get(start) == Some(&'{') {
        return skip_to(chars, start, '}');
    }
    let mut i = start;
    while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
        i += 1;
    }
    i
}

/// The index after a number or duration (`0.99`, `1e-3`, `5m`, `1h30m`, `0x1f`).
fn skip_number(chars: &[char], start: usize) -> usize {
    let mut i = start;
    while i < chars.len() {
        let c = chars[i];
        let exponent_sign = "+-".contains(c) && i > start && "eE".contains(chars[i - 1]);
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' || exponent_sign {
            i += 1;
        } else {
            break;
        }
    }
    i
}

fn next_is_digit(chars: &[char], i: usize) -> bool {
    chars.get(i + 1).is_some_and(char::is_ascii_digit)
}

fn next_non_space(chars: &[char], from: usize) -> Option<usize> {
    (from..chars.len()).find(|&j| !chars[j].is_whitespace())
}

/// Every expression of a Prometheus rule file: (the alert or record name, its `expr`).
pub fn rule_expressions(file: &Path) -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let rules: Value = serde_saphyr::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}", file.display()));
    let mut found = Vec::new();
    for group in rules["groups"].as_array().expect("a rule file has groups") {
        for rule in group["rules"].as_array().expect("a group has rules") {
            let name = rule["alert"].as_str().or(rule["record"].as_str());
            let name = name.expect("a rule is an alert or a record");
            let expr = rule["expr"].as_str().expect("a rule has an expr");
            found.push((name.to_string(), expr.to_string()));
        }
    }
    found
}

/// Every PromQL expression of a Grafana dashboard: (the panel's title, its target's `expr`),
/// through rows, plus the metrics its template variables read (`label_values(METRIC, label)`).
pub fn dashboard_expressions(file: &Path) -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let dashboard: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", file.display()));
    let mut found = Vec::new();
    panel_expressions(&dashboard["panels"], &mut found);
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let query = variable["query"].as_str().unwrap_or_default();
        if let Some(args) = query.strip_prefix("label_values(")
            && let Some((metric, _label)) = args.rsplit_once(',')
        {
            let name = variable["name"].as_str().unwrap_or("?");
            found.push((format!("variable ${name}"), metric.to_string()));
        }
    }
    found
}

fn panel_expressions(panels: &Value, found: &mut Vec<(String, String)>) {
    for panel in panels.as_array().into_iter().flatten() {
        let title = panel["title"].as_str().unwrap_or("?");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_else(|| {
                panic!("panel {title:?}: a target without a PromQL expr: {target}")
            });
            found.push((title.to_string(), expr.to_string()));
        }
        // A collapsed row holds its panels.
        panel_expressions(&panel["panels"], found);
    }
}

#[test]
fn metric_names_are_read_out_of_promql() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (name, le) (rate(workqueue_work_duration_seconds_bucket{job=~"a|b"}[5m]))) / on(name) group_left x_total"#,
    );
    assert_eq!(names, ["workqueue_work_duration_seconds_bucket", "x_total"]);
    let names = metric_names(
        r#"sum without (code) (rate(a_total{code=~"5..|x"}[$__rate_interval] offset 5m)) / ignoring(code) b > 1e-3 and c:rule unless max(d) by (e) or f{job="$job"} * 0.5 == bool ${var}"#,
    );
    assert_eq!(names, ["a_total", "b", "c:rule", "d", "f"]);
    assert_eq!(metric_names("up == 0"), ["up"]);
}
