//! janitor: deletes objects once the time their annotations give has passed, as
//! kube-janitor does with the same annotations:
//!
//! - `janitor/ttl: 30s` (or `5m`, `24h`, `7d`, `2w`; units may be combined, `1h30m`): the
//!   object may live that long after its `metadata.creationTimestamp`;
//! - `janitor/expires: 2026-12-01T00:00:00Z` (or `2026-12-01T00:00`, `2026-12-01`, midnight
//!   UTC; an offset such as `+02:00` is honoured): the object may live until then.
//!
//! With both, the earlier time wins. When the time has come, the plugin deletes the object
//! (`kube::delete` through the resource named by the object's kind: the handler needs
//! `delete` on it) and records a Normal Event about it (`TimeToLiveExpired` or
//! `ExpiryTimeReached`; needs `event`, and a refused Event is only logged). Before then it
//! answers `requeue-after` with the time left (at most a day, then it looks again), so the
//! daemon calls it again when the object is due; nothing polls.
//!
//! An annotation that does not parse (`janitor/ttl: soon`) deletes nothing: the plugin logs a
//! warning and records a Warning Event (`InvalidTTL` or `InvalidExpiry`) on the object,
//! where `kubectl describe` shows it, and is done with the change. Retrying could not help,
//! so it is not an error; fixing the annotation is a change like any other and is handled
//! then. (kube-janitor only logs such a value and skips the object.)
//!
//! It decides on the object as the daemon's cache holds it now, not on the state the event
//! carries: an event put back by `requeue-after` (or kept in `state_dir` across a restart)
//! may be older than the object, whose annotation may have been removed or changed since. An
//! object not in the cache yet (right after a restart, before the watches have listed) is
//! looked at again a second later.
//!
//! Config (all optional): `{"events": false}` records no Events; `{"dry_run": true}` logs
//! what it would delete and deletes nothing.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use switchyard_sdk::{
    Event, EventKind, Handler, Level, Outcome, cache, export_handler, kube, log, metrics,
};

/// The annotation giving the object's time to live, counted from its creation.
pub const TTL: &str = "janitor/ttl";
/// The annotation giving the time the object expires at.
pub const EXPIRES: &str = "janitor/expires";

/// The longest wait the plugin asks for: an object due later is looked at again after a
/// day (and then waited for again), which keeps far-off times and clock changes harmless.
const MAX_WAIT_MS: u64 = 24 * 60 * 60 * 1000;
/// How soon an object that is not in the cache yet is looked at again.
const NOT_CACHED_MS: u64 = 1000;

/// What the handler's config asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Settings {
    events: bool,
    dry_run: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            events: true,
            dry_run: false,
        }
    }
}

thread_local! {
    // Per thread: a component runs on one, and `cargo test` runs each test on its own.
    static SETTINGS: RefCell<Settings> = RefCell::new(Settings::default());
}

fn settings() -> Settings {
    SETTINGS.with(|s| *s.borrow())
}

struct Janitor;

impl Handler for Janitor {
    fn init(config: String) -> Result<(), String> {
        let config: Value =
            serde_json::from_str(&config).map_err(|e| format!("config is not JSON: {e}"))?;
        let mut settings = Settings::default();
        match &config {
            Value::Null => {}
            Value::Object(map) => {
                for (key, value) in map {
                    let flag = value
                        .as_bool()
                        .ok_or_else(|| format!("config {key:?} must be true or false"))?;
                    match key.as_str() {
                        "events" => settings.events = flag,
                        "dry_run" => settings.dry_run = flag,
                        other => {
                            return Err(format!(
                                "config has no {other:?}: it takes events and dry_run"
                            ));
                        }
                    }
                }
            }
            _ => return Err(r#"config must be a map such as {"events": true}"#.into()),
        }
        SETTINGS.with(|s| *s.borrow_mut() = settings);
        Ok(())
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        if event.kind == EventKind::Deleted {
            return Ok(Outcome::Done);
        }
        let delivered: Value =
            serde_json::from_str(&event.object).map_err(|e| format!("object is not JSON: {e}"))?;
        let kind = delivered["kind"].as_str().ok_or("object has no kind")?;
        let meta = &delivered["metadata"];
        let name = meta["name"].as_str().ok_or("object has no name")?;
        let namespace = meta["namespace"].as_str();
        let key = match namespace {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        };
        // The object as it is now: the event may be one put back by an earlier
        // requeue-after, older than the annotations.
        let object = match cache::get(kind, namespace, name)? {
            Some(current) => current,
            None if !annotated(&delivered) => return Ok(Outcome::Done),
            None => {
                // Not listed yet (a restart), or deleted: its deletion then follows and
                // replaces this event.
                log(
                    Level::Debug,
                    &format!("{key} is not in the cache yet; looking again in 1s"),
                );
                return Ok(Outcome::RequeueAfter(NOT_CACHED_MS));
            }
        };
        if object["metadata"]["deletionTimestamp"].is_string() {
            return Ok(Outcome::Done);
        }
        let settings = settings();
        let (due, invalid) = expiry(&object);
        for problem in &invalid {
            log(
                Level::Warn,
                &format!(
                    "{key}: {} {:?} is not valid, so it deletes nothing: {}",
                    problem.annotation, problem.value, problem.error
                ),
            );
            if settings.events {
                let message = format!(
                    "annotation {} {:?} is not valid: {}",
                    problem.annotation, problem.value, problem.error
                );
                record_event(
                    &key,
                    &object,
                    kube::EventType::Warning,
                    problem.reason,
                    &message,
                );
            }
        }
        let Some(due) = due else {
            return Ok(Outcome::Done);
        };
        let now = now_ms();
        if due.at_ms > now {
            let wait = u64::try_from(due.at_ms - now).unwrap_or(0).min(MAX_WAIT_MS);
            log(
                Level::Info,
                &format!(
                    "{key} expires at {} ({}); looking again in {}",
                    format_time(due.at_ms),
                    due.what,
                    format_wait(wait)
                ),
            );
            return Ok(Outcome::RequeueAfter(wait.max(1)));
        }
        let message = format!("{} expired at {}", due.what, format_time(due.at_ms));
        if settings.dry_run {
            log(
                Level::Info,
                &format!("dry run: would delete {key}: {message}"),
            );
            return Ok(Outcome::Done);
        }
        kube::delete(kind, namespace, name)?;
        log(Level::Info, &format!("deleted {key}: {message}"));
        let _ = metrics::counter("janitor_deleted", 1.0, &[("kind", kind)]);
        if settings.events {
            let message = format!("deleted by the janitor: {message}");
            record_event(&key, &object, kube::EventType::Normal, due.reason, &message);
        }
        Ok(Outcome::Done)
    }
}

export_handler!(Janitor);

/// Records an Event about `object`; a refusal (no `event` capability, say) is logged only,
/// so it never holds up a deletion or makes the daemon retry one already done.
fn record_event(
    key: &str,
    object: &Value,
    event_type: kube::EventType,
    reason: &str,
    message: &str,
) {
    if let Err(e) = kube::event(object, event_type, reason, message) {
        log(
            Level::Warn,
            &format!("{key}: could not record the Event {reason}: {e}"),
        );
    }
}

/// Whether the object carries either annotation.
fn annotated(object: &Value) -> bool {
    let annotations = &object["metadata"]["annotations"];
    annotations.get(TTL).is_some() || annotations.get(EXPIRES).is_some()
}

/// When the object is due, and by which annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Due {
    /// Milliseconds since the Unix epoch.
    at_ms: i64,
    /// The Event reason for a deletion it causes.
    reason: &'static str,
    /// The annotation and its value, for messages.
    what: String,
}

/// An annotation that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Invalid {
    annotation: &'static str,
    value: String,
    error: String,
    /// The Warning Event's reason.
    reason: &'static str,
}

/// When `object` is due by its annotations (the earlier of the two), and the annotations
/// that do not parse.
fn expiry(object: &Value) -> (Option<Due>, Vec<Invalid>) {
    let meta = &object["metadata"];
    let annotations = &meta["annotations"];
    let mut due: Vec<Due> = Vec::new();
    let mut invalid = Vec::new();
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(value) = annotations.get(TTL).map(text) {
        let created = meta["creationTimestamp"]
            .as_str()
            .ok_or_else(|| "the object has no creationTimestamp".to_string())
            .and_then(parse_time);
        match parse_ttl(&value).and_then(|ttl| created.map(|created| (ttl, created))) {
            Ok((ttl, created)) => due.push(Due {
                at_ms: created.saturating_add(ttl),
                reason: "TimeToLiveExpired",
                what: format!("{TTL} {value}"),
            }),
            Err(error) => invalid.push(Invalid {
                annotation: TTL,
                value,
                error,
                reason: "InvalidTTL",
            }),
        }
    }
    if let Some(value) = annotations.get(EXPIRES).map(text) {
        match parse_time(&value) {
            Ok(at_ms) => due.push(Due {
                at_ms,
                reason: "ExpiryTimeReached",
                what: format!("{EXPIRES} {value}"),
            }),
            Err(error) => invalid.push(Invalid {
                annotation: EXPIRES,
                value,
                error,
                reason: "InvalidExpiry",
            }),
        }
    }
    (due.into_iter().min_by_key(|d| d.at_ms), invalid)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A time to live in milliseconds: one or more numbers each with a unit, `s`, `m`, `h`, `d`
/// or `w` (`30s`, `24h`, `1h30m`).
fn parse_ttl(text: &str) -> Result<i64, String> {
    let bad = || {
        format!(
            "a time to live is a number and a unit (s, m, h, d or w), such as 30s, 5m, 24h or 7d, not {text:?}"
        )
    };
    let mut total: i64 = 0;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let unit = rest[digits..].chars().next().ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let number: i64 = rest[..digits].parse().map_err(|_| bad())?;
        let seconds = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 7 * 86_400,
            _ => return Err(bad()),
        };
        total = number
            .checked_mul(seconds * 1000)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(bad)?;
        rest = &rest[digits + 1..];
    }
    Ok(total)
}

/// A time in milliseconds since the Unix epoch: `YYYY-MM-DD` (midnight UTC),
/// `YYYY-MM-DDTHH:MM`, `YYYY-MM-DDTHH:MM:SS` with optional fractions of a second, each
/// followed by `Z`, an offset (`+02:00`) or nothing (UTC).
fn parse_time(text: &str) -> Result<i64, String> {
    let s = text.trim();
    let b = s.as_bytes();
    let bad = || {
        format!(
            "a time is a date or date and time such as 2026-12-01, 2026-12-01T18:30 or 2026-12-01T18:30:00Z, not {text:?}"
        )
    };
    let num = |from: usize, len: usize| -> Result<i64, String> {
        match s.get(from..from + len) {
            Some(part) if part.bytes().all(|c| c.is_ascii_digit()) => {
                part.parse().map_err(|_| bad())
            }
            _ => Err(bad()),
        }
    };
    let sep = |at: usize, wanted: &[u8]| match b.get(at) {
        Some(c) if wanted.contains(c) => Ok(()),
        _ => Err(bad()),
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    sep(4, b"-")?;
    sep(7, b"-")?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(bad());
    }
    let mut seconds = days_from_civil(year, month, day) * 86_400;
    let mut millis = 0;
    let mut at = 10;
    if at < b.len() {
        sep(at, b"Tt ")?;
        let (hour, minute) = (num(at + 1, 2)?, num(at + 4, 2)?);
        sep(at + 3, b":")?;
        if hour > 23 || minute > 59 {
            return Err(bad());
        }
        seconds += hour * 3600 + minute * 60;
        at += 6;
        if b.get(at) == Some(&b':') {
            let second = num(at + 1, 2)?;
            if second > 60 {
                return Err(bad());
            }
            seconds += second.min(59);
            at += 3;
            if b.get(at) == Some(&b'.') {
                let digits = b[at + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count();
                if digits == 0 {
                    return Err(bad());
                }
                let fraction = &s[at + 1..at + 1 + digits.min(3)];
                millis = format!("{fraction:0<3}").parse().map_err(|_| bad())?;
                at += 1 + digits;
            }
        }
        match b.get(at) {
            None => {}
            Some(b'Z' | b'z') => at += 1,
            Some(sign @ (b'+' | b'-')) => {
                let (hours, minutes) = (num(at + 1, 2)?, num(at + 4, 2)?);
                sep(at + 3, b":")?;
                let offset = hours * 3600 + minutes * 60;
                seconds -= if *sign == b'+' { offset } else { -offset };
                at += 6;
            }
            Some(_) => return Err(bad()),
        }
        if at != b.len() {
            return Err(bad());
        }
    }
    Ok(seconds * 1000 + millis)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date in the proleptic Gregorian calendar.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `2026-12-01T18:30:00Z`.
fn format_time(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let of_day = seconds.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// `2.5s`, `90m`, `24h`.
fn format_wait(ms: u64) -> String {
    if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if ms < 2 * 3_600_000 {
        format!("{}m", ms.div_ceil(60_000))
    } else {
        format!("{}h", ms.div_ceil(3_600_000))
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::{Value, json};
    use switchyard_sdk::testing::{TestHost, Write, event};
    use switchyard_sdk::{EventKind, Outcome};

    use super::*;

    fn configmap(created_ms: i64, annotations: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "temp",
                "namespace": "default",
                "uid": "4f6c1c0e-0000-4000-8000-000000000001",
                "creationTimestamp": format_time(created_ms),
                "annotations": annotations,
            },
        })
    }

    /// A host whose cache holds `object`, handling an `added` event for it.
    fn handle(object: Value) -> switchyard_sdk::testing::Report {
        TestHost::new()
            .object("ConfigMap", object.clone())
            .handle::<Janitor>(event(EventKind::Added, object))
    }

    #[test]
    fn times_to_live_and_times_parse_as_kube_janitor_documents_them() {
        assert_eq!(parse_ttl("120s"), Ok(120_000));
        assert_eq!(parse_ttl("5m"), Ok(300_000));
        assert_eq!(parse_ttl("8h"), Ok(8 * 3_600_000));
        assert_eq!(parse_ttl("7d"), Ok(7 * 86_400_000));
        assert_eq!(parse_ttl("2w"), Ok(14 * 86_400_000));
        assert_eq!(parse_ttl("1h30m"), Ok(5_400_000));
        for bad in [
            "",
            "5",
            "m",
            "5x",
            "-5m",
            "5 m",
            "soon",
            "99999999999999999999s",
        ] {
            assert!(parse_ttl(bad).is_err(), "{bad:?}");
        }
        let midnight = parse_time("2019-02-28").unwrap();
        assert_eq!(midnight, 1_551_312_000_000);
        assert_eq!(parse_time("2019-02-28T20:40"), Ok(midnight + 74_400_000));
        assert_eq!(
            parse_time("2019-02-28T20:40:00Z"),
            Ok(midnight + 74_400_000)
        );
        assert_eq!(
            parse_time("2019-02-28T22:40:00.250+02:00"),
            Ok(midnight + 74_400_250)
        );
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_time("2024-02-29"), Ok(1_709_164_800_000));
        for bad in [
            "2019-02-29",
            "2019-13-01",
            "2019-2-28",
            "2019-02-28T25:00",
            "2019-02-28T20:40:00Q",
            "2019-02-28T20:40:00Z junk",
            "tomorrow",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?}");
        }
        for ms in [0, 1_551_312_000_000, 1_709_164_800_000, 4_102_444_800_000] {
            assert_eq!(parse_time(&format_time(ms)), Ok(ms));
        }
    }

    #[test]
    fn an_object_past_its_ttl_is_deleted_with_a_normal_event() {
        let cm = configmap(now_ms() - 60_000, json!({"janitor/ttl": "30s"}));
        let report = handle(cm.clone());
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let [
            Write::Delete {
                resource,
                namespace,
                name,
            },
            Write::Event {
                event_type, reason, ..
            },
        ] = report.writes.as_slice()
        else {
            panic!("a delete and an Event: {:?}", report.writes)
        };
        assert_eq!(
            (resource.as_str(), namespace.as_deref(), name.as_str()),
            ("ConfigMap", Some("default"), "temp")
        );
        assert_eq!(
            (event_type.as_str(), reason.as_str()),
            ("Normal", "TimeToLiveExpired")
        );
        assert!(
            report.lines()[0]
                .starts_with("deleted ConfigMap default/temp: janitor/ttl 30s expired at "),
            "{:?}",
            report.lines()
        );
    }

    #[test]
    fn an_object_not_due_yet_is_requeued_for_the_time_left() {
        let cm = configmap(now_ms(), json!({"janitor/ttl": "1h"}));
        let report = handle(cm);
        let Ok(Outcome::RequeueAfter(ms)) = report.outcome else {
            panic!("{:?}", report.outcome)
        };
        assert!((3_590_000..=3_600_000).contains(&ms), "{ms}");
        assert!(report.writes.is_empty());
        // Far off: looked at again after a day.
        let cm = configmap(now_ms(), json!({"janitor/expires": "2999-01-01"}));
        assert_eq!(handle(cm).outcome, Ok(Outcome::RequeueAfter(MAX_WAIT_MS)));
    }

    #[test]
    fn the_earlier_of_the_two_annotations_wins() {
        let past = format_time(now_ms() - 1000);
        let cm = configmap(
            now_ms(),
            json!({"janitor/ttl": "7d", "janitor/expires": past}),
        );
        let report = handle(cm);
        assert!(
            matches!(&report.writes[1], Write::Event { reason, .. } if reason == "ExpiryTimeReached"),
            "{:?}",
            report.writes
        );
    }

    #[test]
    fn an_invalid_annotation_deletes_nothing_and_says_so_on_the_object() {
        let cm = configmap(now_ms() - 60_000, json!({"janitor/ttl": "soon"}));
        let report = handle(cm);
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let [
            Write::Event {
                event_type,
                reason,
                message,
                ..
            },
        ] = report.writes.as_slice()
        else {
            panic!("one Event: {:?}", report.writes)
        };
        assert_eq!(
            (event_type.as_str(), reason.as_str()),
            ("Warning", "InvalidTTL")
        );
        assert!(
            message.starts_with("annotation janitor/ttl \"soon\" is not valid"),
            "{message}"
        );
        // A valid one beside it still counts.
        let cm = configmap(
            now_ms(),
            json!({"janitor/ttl": "soon", "janitor/expires": "2999-01-01"}),
        );
        let report = handle(cm);
        assert_eq!(report.outcome, Ok(Outcome::RequeueAfter(MAX_WAIT_MS)));
    }

    #[test]
    fn the_cache_decides_over_an_older_event() {
        // Put back with its ttl by an earlier requeue; the annotation was removed since.
        let old = configmap(now_ms() - 60_000, json!({"janitor/ttl": "30s"}));
        let now = configmap(now_ms() - 60_000, json!({}));
        let report = TestHost::new()
            .object("ConfigMap", now)
            .handle::<Janitor>(event(EventKind::Added, old.clone()));
        assert_eq!((report.outcome, report.writes), (Ok(Outcome::Done), vec![]));
        // Not cached yet (a restart): looked at again soon, nothing deleted.
        let report = TestHost::new().handle::<Janitor>(event(EventKind::Added, old));
        assert_eq!(
            (report.outcome, report.writes),
            (Ok(Outcome::RequeueAfter(NOT_CACHED_MS)), vec![])
        );
    }

    #[test]
    fn deletions_unannotated_objects_and_a_dry_run_write_nothing() {
        let cm = configmap(now_ms() - 60_000, json!({"janitor/ttl": "30s"}));
        let report = TestHost::new().handle::<Janitor>(event(EventKind::Deleted, cm.clone()));
        assert_eq!((report.outcome, report.writes), (Ok(Outcome::Done), vec![]));
        let plain = configmap(now_ms() - 60_000, json!({"other": "x"}));
        let report = handle(plain);
        assert_eq!((report.outcome, report.writes), (Ok(Outcome::Done), vec![]));
        let report = TestHost::new()
            .config(json!({"dry_run": true}))
            .object("ConfigMap", cm.clone())
            .handle::<Janitor>(event(EventKind::Added, cm));
        assert_eq!(
            (&report.outcome, report.writes.len()),
            (&Ok(Outcome::Done), 0)
        );
        assert!(report.lines()[0].starts_with("dry run: would delete ConfigMap default/temp"));
    }

    #[test]
    fn a_refused_delete_is_retried_and_a_bad_config_refused() {
        let cm = configmap(now_ms() - 60_000, json!({"janitor/ttl": "30s"}));
        let report = TestHost::new()
            .object("ConfigMap", cm.clone())
            .fail_writes("capability denied")
            .handle::<Janitor>(event(EventKind::Added, cm.clone()));
        assert_eq!(report.outcome, Err("capability denied".into()));
        let report = TestHost::new()
            .config(json!({"event": true}))
            .handle::<Janitor>(event(EventKind::Added, cm));
        assert!(
            matches!(&report.outcome, Err(e) if e.contains("config has no \"event\"")),
            "{:?}",
            report.outcome
        );
    }
}
