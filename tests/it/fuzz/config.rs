//! The config file: arbitrary bytes and text, valid configs mutated line by line and value
//! by value, and YAML bombs never panic, are answered within a moment, and every problem
//! is placed inside the document (or names its path); a config that loads loads again the
//! same, also when printed back out. Then the small parsers a config uses: durations,
//! sizes, selectors, JSON pointers, field paths and resource names.

use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use switchyard::config::units::{ByteSize, HumanDuration};
use switchyard::config::{self, ConfigErrors, FieldPath, ResourceName, Selector};

/// Where the configs under test claim to live: nothing is there, so an admin `token_file`
/// is missing rather than read from somewhere real.
const FILE: &str = "/nonexistent-switchyard-fuzz/config.yaml";

/// How long validating one config may take, even a bomb, in a debug build on a busy machine.
const PROMPT: Duration = Duration::from_secs(2);

/// The configs the mutations start from: the examples, and the config reference
/// (docs/configuration.md).
fn seeds() -> Vec<String> {
    let page = include_str!("../../../docs/configuration.md");
    let reference = page
        .split("# Configuration reference")
        .nth(1)
        .and_then(|s| s.split("```yaml\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("the config reference's YAML");
    vec![
        include_str!("../../../config/demo.yaml").to_string(),
        include_str!("../../../config/host-imports.yaml").to_string(),
        reference.to_string(),
        "handlers:\n  h: {timeout: 1s, memory: 64Ki, concurrency: 1, qps: 0.5}\nroutes:\n  - {name: r, resource: apps/v1/deployments, handler: h, labels: 'a in (x, y),!b', fields: metadata.name!=x}\n".to_string(),
    ]
}

/// The lines of `text` as YAML counts them (`\r\n`, `\r` or `\n` ends a line).
fn lines(text: &str) -> Vec<&str> {
    text.split("\r\n")
        .flat_map(|l| l.split(['\r', '\n']))
        .collect()
}

/// Validates `text` and checks what every answer must be: prompt, and every problem
/// placed inside the document or named by its path. Returns the answer.
fn check(text: &str) -> Result<config::Config, ConfigErrors> {
    let started = Instant::now();
    let answer = config::validate(Path::new(FILE), text);
    let took = started.elapsed();
    assert!(took < PROMPT, "validating took {took:?}");
    if let Err(errors) = &answer {
        assert!(!errors.0.is_empty(), "an error with no problem in it");
        let lines = lines(text);
        for e in &errors.0 {
            assert!(
                e.line > 0 || !e.path.is_empty() || text.len() > config::limits::MAX_CONFIG_BYTES,
                "a problem with neither a place nor a path: {e}"
            );
            if e.line == 0 {
                continue;
            }
            let line = usize::try_from(e.line).unwrap();
            assert!(
                line <= lines.len() + 1,
                "{e}: line beyond the {} lines",
                lines.len()
            );
            let width = lines.get(line - 1).map_or(0, |l| l.chars().count());
            assert!(
                e.column >= 1 && usize::try_from(e.column).unwrap() <= width + 1,
                "{e}: column beyond the {width} characters of line {line}"
            );
        }
    }
    answer
}

/// Checks `text`, and that a config it loads loads again the same, also printed back out.
fn check_all(text: &str) {
    if let Ok(loaded) = check(text) {
        assert_eq!(
            check(text).as_ref(),
            Ok(&loaded),
            "validating again differs"
        );
        let value: Value = serde_saphyr::from_str(text).expect("a config that loads parses");
        let printed = serde_saphyr::to_string(&value).expect("a parsed value prints");
        let reread = check(&printed)
            .unwrap_or_else(|e| panic!("printed back out, the config fails:\n{printed}\n{e}"));
        assert_eq!(
            reread, loaded,
            "printed back out, the config differs:\n{printed}"
        );
    }
}

/// One edit of a config's text. Positions are taken modulo what is there.
#[derive(Debug, Clone)]
enum Edit {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    InsertLine(usize, String),
    Insert(usize, String),
    Truncate(usize),
}

/// Text that means something to YAML, or is an odd value.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "&a ",
            "*a",
            "<<: *a",
            "!!binary ",
            "!!str ",
            "!custom ",
            "~",
            "null",
            "1e999",
            "-0x1F",
            "0o17",
            "99999999999999999999999",
            "-9223372036854775809",
            ".nan",
            ".inf",
            "é",
            "\u{202e}",
            "\u{feff}",
            "\t",
            "{",
            "}",
            "[",
            "]",
            "'",
            "\"",
            ": ",
            "- ",
            "? ",
            "#",
            "---",
            "...",
            "%YAML 1.2\n",
            "|",
            ">-",
            "\\",
            ",",
            "\0",
            "y",
            "on",
            "0s",
            "4Gi",
            "5Ti",
            "1025",
            "label:",
            "route:x",
            "namespace",
        ])
        .prop_map(String::from),
        "[a-z_:{}\\[\\],&*!|>'\" -]{0,12}",
        any::<String>(),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<usize>().prop_map(Edit::DeleteLine),
        any::<usize>().prop_map(Edit::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        (any::<usize>(), "[ ]{0,8}", token(), token())
            .prop_map(|(at, indent, k, v)| Edit::InsertLine(at, format!("{indent}{k}: {v}"))),
        (any::<usize>(), token()).prop_map(|(at, t)| Edit::Insert(at, t)),
        any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    for edit in edits {
        let n = lines.len().max(1);
        match edit {
            Edit::DeleteLine(i) if !lines.is_empty() => {
                lines.remove(i % n);
            }
            Edit::DuplicateLine(i) if !lines.is_empty() => {
                let line = lines[i % n].clone();
                lines.insert(i % n, line);
            }
            Edit::SwapLines(a, b) if !lines.is_empty() => lines.swap(a % n, b % n),
            Edit::InsertLine(i, line) => lines.insert(i % (lines.len() + 1), line.clone()),
            Edit::Insert(at, t) => {
                let mut joined = lines.join("\n");
                let at = floor_char_boundary(&joined, at % (joined.len() + 1));
                joined.insert_str(at, t);
                lines = joined.split('\n').map(String::from).collect();
            }
            Edit::Truncate(at) => {
                let mut joined = lines.join("\n");
                joined.truncate(floor_char_boundary(&joined, at % (joined.len() + 1)));
                lines = joined.split('\n').map(String::from).collect();
            }
            _ => {}
        }
    }
    lines.join("\n")
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// A value of any JSON type, some odd: huge numbers, unicode, deep nesting, and strings a
/// config would hold.
fn odd_value() -> BoxedStrategy<Value> {
    let strings = prop_oneof![
        token(),
        prop::sample::select(vec![
            "5s", "0ms", "64Mi", "every", "latest", "v1/pods", "a=b"
        ])
        .prop_map(String::from),
    ];
    super::odd_json(strings.boxed(), token().boxed(), 40)
}

/// One change to a config's value at the `n`th mapping or sequence (in document order).
#[derive(Debug, Clone)]
enum ValueEdit {
    Set(usize, String, Value),
    Remove(usize, usize),
    Replace(usize, Value),
}

fn value_edit() -> impl Strategy<Value = ValueEdit> {
    let key = prop_oneof![
        prop::sample::select(vec![
            "name",
            "handler",
            "informer",
            "resource",
            "kinds",
            "namespace",
            "namespaces",
            "labels",
            "fields",
            "events",
            "when",
            "path",
            "equals",
            "changed",
            "exists",
            "indexes",
            "delivery",
            "backlog",
            "plugin",
            "concurrency",
            "timeout",
            "memory",
            "qps",
            "burst",
            "resync",
            "capabilities",
            "config",
            "admin",
            "listen",
            "token_env",
            "group",
            "version",
            "kind",
            "transform",
            "drop_fields",
            "plugins_dir",
        ])
        .prop_map(String::from),
        token(),
    ];
    prop_oneof![
        (any::<usize>(), key, odd_value()).prop_map(|(n, k, v)| ValueEdit::Set(n, k, v)),
        (any::<usize>(), any::<usize>()).prop_map(|(n, i)| ValueEdit::Remove(n, i)),
        (any::<usize>(), odd_value()).prop_map(|(n, v)| ValueEdit::Replace(n, v)),
    ]
}

fn apply_value(mut value: Value, edits: &[ValueEdit]) -> Value {
    for edit in edits {
        let count = count_containers(&value);
        if count == 0 {
            // A scalar at the top: only a replacement changes it.
            if let ValueEdit::Replace(_, v) = edit {
                value = v.clone();
            }
            continue;
        }
        let n = match edit {
            ValueEdit::Set(n, ..) | ValueEdit::Remove(n, _) | ValueEdit::Replace(n, _) => n % count,
        };
        let target = nth_container(&mut value, n).expect("a container by its number");
        match (edit, target) {
            (ValueEdit::Set(_, k, v), Value::Object(m)) => {
                m.insert(k.clone(), v.clone());
            }
            (ValueEdit::Set(_, _, v), Value::Array(a)) => a.push(v.clone()),
            (ValueEdit::Remove(_, i), Value::Object(m)) if !m.is_empty() => {
                let key = m.keys().nth(i % m.len()).unwrap().clone();
                m.remove(&key);
            }
            (ValueEdit::Remove(_, i), Value::Array(a)) if !a.is_empty() => {
                a.remove(i % a.len());
            }
            (ValueEdit::Replace(_, v), target) => *target = v.clone(),
            _ => {}
        }
    }
    value
}

fn count_containers(value: &Value) -> usize {
    match value {
        Value::Object(m) => 1 + m.values().map(count_containers).sum::<usize>(),
        Value::Array(a) => 1 + a.iter().map(count_containers).sum::<usize>(),
        _ => 0,
    }
}

fn nth_container(value: &mut Value, n: usize) -> Option<&mut Value> {
    fn walk<'a>(value: &'a mut Value, n: &mut usize) -> Option<&'a mut Value> {
        if !matches!(value, Value::Object(_) | Value::Array(_)) {
            return None;
        }
        if *n == 0 {
            return Some(value);
        }
        *n -= 1;
        let children: Vec<&'a mut Value> = match value {
            Value::Object(m) => m.values_mut().collect(),
            Value::Array(a) => a.iter_mut().collect(),
            _ => unreachable!(),
        };
        for child in children {
            if let Some(found) = walk(child, n) {
                return Some(found);
            }
        }
        None
    }
    let mut n = n;
    walk(value, &mut n)
}

/// A YAML bomb: anchors that expand to `fanout^levels` values, or nesting `depth` deep.
fn bomb() -> impl Strategy<Value = String> {
    prop_oneof![
        (2usize..12, 2usize..12).prop_map(|(fanout, levels)| {
            let mut text = format!("a0: &a0 [{}]\n", vec!["x"; fanout].join(", "));
            for level in 1..levels {
                let items = vec![format!("*a{}", level - 1); fanout].join(", ");
                text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
            }
            text
        }),
        (1usize..400, any::<bool>()).prop_map(|(depth, flow)| if flow {
            format!("a: {}{}\n", "[".repeat(depth), "]".repeat(depth))
        } else {
            (0..depth)
                .map(|i| format!("{}k:\n", " ".repeat(i)))
                .collect()
        }),
        (1usize..3000).prop_map(|n| {
            let mut text = String::from("base: &b {timeout: 1s}\nhandlers:\n");
            for i in 0..n {
                text.push_str(&format!("  h{i}: *b\n"));
            }
            text
        }),
    ]
}

proptest! {
    #![proptest_config(super::cases(64))]

    #[test]
    fn fuzz_config_arbitrary_text(text in any::<String>()) {
        check_all(&text);
    }

    #[test]
    fn fuzz_config_arbitrary_bytes_from_a_file(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, &bytes).unwrap();
        match (config::load(&path), std::str::from_utf8(&bytes)) {
            (Err(errors), Err(_)) => {
                assert_eq!(errors.0.len(), 1);
                assert!(errors.0[0].message.starts_with("cannot read the config file"), "{errors}");
            }
            (answer, Ok(text)) => {
                let direct = config::validate(&path, text);
                assert_eq!(answer, direct, "loading the file and validating its text differ");
            }
            (Ok(_), Err(_)) => panic!("a file that is not UTF-8 loaded"),
        }
    }

    #[test]
    fn fuzz_config_mutated_lines(seed in prop::sample::select(seeds()), edits in prop::collection::vec(edit(), 1..6)) {
        check_all(&apply(&seed, &edits));
    }

    #[test]
    fn fuzz_config_mutated_values(seed in prop::sample::select(seeds()), edits in prop::collection::vec(value_edit(), 1..6)) {
        let value: Value = serde_saphyr::from_str(&seed).unwrap();
        let mutated = apply_value(value, &edits);
        let text = serde_saphyr::to_string(&mutated).unwrap();
        check_all(&text);
    }

    #[test]
    fn fuzz_config_yaml_bombs_are_refused_promptly(text in bomb()) {
        check_all(&text);
    }

    #[test]
    fn fuzz_durations(text in any::<String>(), ms in any::<u64>(), secs in 0u64..=(u64::MAX / 1000)) {
        let _ = HumanDuration::parse(&text);
        for duration in [Duration::from_millis(ms), Duration::from_secs(secs)] {
            let printed = HumanDuration(duration).to_string();
            assert_eq!(HumanDuration::parse(&printed).map(|d| d.0), Ok(duration), "{printed}");
        }
    }

    #[test]
    fn fuzz_sizes(text in any::<String>(), n in any::<u64>(), unit in prop::sample::select(vec![
        ("", 1u64), ("k", 1000), ("Ki", 1 << 10), ("M", 1_000_000), ("Mi", 1 << 20),
        ("G", 1_000_000_000), ("Gi", 1 << 30),
    ])) {
        let _ = ByteSize::parse(&text);
        let printed = format!("{n}{}", unit.0);
        match n.checked_mul(unit.1) {
            Some(bytes) => assert_eq!(ByteSize::parse(&printed).map(|s| s.0), Ok(bytes)),
            None => assert!(ByteSize::parse(&printed).unwrap_err().to_string().contains("out of range")),
        }
    }

    #[test]
    fn fuzz_selectors(text in any::<String>(), terms in prop::collection::vec(selector_term(), 0..5)) {
        let parsed = Selector::parse(&text);
        if Selector::parse_fields(&text).is_ok() {
            assert!(parsed.is_ok(), "a field selector that is not a selector: {text:?}");
        }
        // Written terms parse to their keys, and match labels made to satisfy them.
        let written: Vec<String> = terms.iter().map(|t| t.text.clone()).collect();
        let text = written.join(",");
        let selector = Selector::parse(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let keys: Vec<&str> = selector.keys().collect();
        let want: Vec<&str> = terms.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, want, "{text:?}");
        let mut labels = Map::new();
        for term in &terms {
            if let Some(v) = &term.satisfied_by {
                labels.insert(term.key.clone(), Value::from(v.clone()));
            }
        }
        // Later terms on the same key may contradict earlier ones: check only distinct keys.
        let distinct = want.iter().collect::<std::collections::HashSet<_>>().len() == want.len();
        if distinct {
            let object = json!({"metadata": {"labels": labels}});
            assert!(selector.matches_labels(&object), "{text:?} against {object}");
        }
        let equality = terms.iter().all(|t| t.equality);
        assert_eq!(Selector::parse_fields(&text).is_ok(), equality, "{text:?}");
    }

    #[test]
    fn fuzz_pointers_and_field_paths(text in any::<String>(), keys in prop::collection::vec("[a-z~/.]{1,6}", 1..5)) {
        let _ = config::validate_pointer(&text);
        if let Ok(path) = FieldPath::parse(&text) {
            assert_eq!(path.to_string(), text);
        }
        let pointer: String = keys.iter().map(|k| format!("/{}", k.replace('~', "~0").replace('/', "~1"))).collect();
        assert_eq!(config::validate_pointer(&pointer), Ok(()), "{pointer}");
        let mut object = json!("leaf");
        for key in keys.iter().rev() {
            object = json!({ key.as_str(): object });
        }
        let path = FieldPath::parse(&pointer).unwrap();
        assert_eq!(path.lookup(&object), Some(&json!("leaf")), "{pointer} in {object}");
    }

    #[test]
    fn fuzz_resource_names(text in any::<String>(), parts in prop::collection::vec("[a-z0-9.-]{1,8}", 1..4)) {
        if let Ok(name) = ResourceName::parse(&text) {
            assert_eq!(ResourceName::parse(&name.to_string()), Ok(name));
        }
        let written = parts.join("/");
        let name = ResourceName::parse(&written).unwrap();
        assert_eq!(ResourceName::parse(&name.to_string()), Ok(name));
    }
}

/// A selector term as written, its key, labels that satisfy it, and whether it is an
/// equality a field selector allows.
#[derive(Debug, Clone)]
struct Term {
    text: String,
    key: String,
    satisfied_by: Option<String>,
    equality: bool,
}

fn selector_term() -> impl Strategy<Value = Term> {
    let key = "[a-z][a-z0-9./-]{0,8}";
    let value = "[A-Za-z0-9._-]{0,8}";
    (key, value, value, 0..7u8).prop_map(|(key, v, other, op)| {
        let (text, satisfied_by, equality) = match op {
            0 => (format!("{key}={v}"), Some(v), true),
            1 => (format!("{key} == {v}"), Some(v), true),
            2 => (format!("{key}!={v}"), Some(format!("{v}x")), true),
            3 => (format!("{key} in ({v}, {other})"), Some(other), false),
            4 => (format!("{key} notin ({v})"), None, false),
            5 => (format!("!{key}"), None, false),
            _ => (format!(" {key} "), Some(v), false),
        };
        Term {
            text,
            key,
            satisfied_by,
            equality,
        }
    })
}
