use std::collections::HashSet;
use std::sync::Arc;

use super::*;

fn spec(dir: &Path, on_corrupt: OnCorrupt) -> StateSpec {
    StateSpec {
        dir: dir.to_path_buf(),
        on_corrupt,
        max_pending_writes: 10_000,
    }
}

fn event(kind: &str, rv: &str) -> StoredEvent {
    StoredEvent {
        kind: kind.into(),
        object: format!(r#"{{"metadata":{{"name":"a","resourceVersion":"{rv}"}}}}"#).into(),
        old: None,
        final_state_unknown: false,
        first_failure_ms: None,
    }
}

#[tokio::test]
async fn changes_sent_are_read_back_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(&spec(dir.path(), OnCorrupt::Refuse), None).unwrap();
    let (route, handler): (Arc<str>, Arc<str>) = ("r".into(), "h".into());
    let object: Arc<str> =
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","uid":"u","resourceVersion":"3"}}"#.into();
    state.delivered(&route, "d/a", object.clone());
    state.delivered(&route, "d/b", object);
    state.forgot(&route, "d/b");
    // The event in flight first, then what the key owes.
    let owed = StoredOwed {
        every: None,
        events: vec![event("added", "3"), event("updated", "4")],
    };
    state.queued(&handler, "r", "d/a", Some(owed.clone()));
    state.paused(&handler, true);
    state.flush().await;
    state.close();
    drop(state);

    let state = State::open(&spec(dir.path(), OnCorrupt::Refuse), None).unwrap();
    let records = state.route_records("r").unwrap();
    assert_eq!(records.len(), 1);
    // The owed update is newer than the record.
    assert_eq!(records["d/a"].resource_version, "4");
    let snapshot = state.handler("h").unwrap();
    assert_eq!(snapshot.paused, Some(true));
    assert_eq!(snapshot.keys.len(), 1);
    assert_eq!(snapshot.keys[0].object, "d/a");
    assert_eq!(snapshot.keys[0].owed, owed);

    state
        .retain(&HashSet::from(["other"]), &HashSet::new(), &HashSet::new())
        .unwrap();
    state.flush().await;
    assert!(state.route_records("r").unwrap().is_empty());
    assert!(state.handler("h").unwrap().keys.is_empty());
    assert_eq!(state.handler("h").unwrap().paused, None);
}

#[tokio::test]
async fn within_one_commit_the_last_change_of_each_key_is_what_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(&spec(dir.path(), OnCorrupt::Refuse), None).unwrap();
    let (route, handler): (Arc<str>, Arc<str>) = ("r".into(), "h".into());
    let object = |rv: &str| -> Arc<str> {
        format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"a","uid":"u","resourceVersion":"{rv}"}}}}"#).into()
    };
    let owed = |rv: &str| StoredOwed {
        every: None,
        events: vec![event("updated", rv)],
    };
    // Many changes per key, sent at once: the writer takes them in few commits.
    for i in 0..200 {
        let rv = i.to_string();
        state.queued(&handler, "r", "d/a", Some(owed(&rv)));
        state.queued(&handler, "r", "d/b", Some(owed(&rv)));
        state.queued(&handler, "r", "d/b", None);
        state.delivered(&route, "d/a", object(&rv));
        state.forgot(&route, "d/a");
        state.delivered(&route, "d/a", object(&rv));
        state.delivered(&route, "d/b", object(&rv));
        // Not an object: never recorded, and it leaves the record before it alone.
        state.delivered(&route, "d/b", "[1]".into());
    }
    state.drop_route("gone");
    state.queued(&handler, "r", "d/c", Some(owed("c")));
    state.flush().await;
    let keys = state.handler("h").unwrap().keys;
    let found: Vec<(&str, &StoredOwed)> =
        keys.iter().map(|k| (k.object.as_str(), &k.owed)).collect();
    assert_eq!(found, [("d/a", &owed("199")), ("d/c", &owed("c"))]);
    let records = state.route_records("r").unwrap();
    assert_eq!(records["d/b"].resource_version, "199");
    // d/a's queued event is newer than nothing: its record is the event's.
    assert_eq!(records["d/a"].resource_version, "199");
}

/// A store as a daemon of layout 1 left it: the event in flight in a table of its own.
fn layout_1_store(path: &Path) {
    let db = Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    let put = |table: &str, key: &str, value: serde_json::Value| {
        let bytes = serde_json::to_vec(&value).unwrap();
        txn.open_table(writer::def(table))
            .unwrap()
            .insert(key, bytes.as_slice())
            .unwrap();
    };
    put(tables::META, "format", serde_json::json!(1));
    let ev = |kind: &str, rv: &str| serde_json::to_value(event(kind, rv)).unwrap();
    put("inflight/h", "r\0d/a", ev("added", "3"));
    put(
        "owed/h",
        "r\0d/a",
        serde_json::json!({"every": 4, "events": [ev("updated", "4")]}),
    );
    put("inflight/h", "r\0d/b", ev("deleted", "7"));
    put(
        "owed/h",
        "r\0d/c",
        serde_json::json!({"every": null, "events": [ev("added", "1")]}),
    );
    txn.commit().unwrap();
}

#[tokio::test]
async fn a_store_of_layout_1_is_read_with_each_event_in_flight_first() {
    let dir = tempfile::tempdir().unwrap();
    layout_1_store(&dir.path().join(FILE_NAME));
    let state = State::open(&spec(dir.path(), OnCorrupt::Refuse), None).unwrap();
    let keys = state.handler("h").unwrap().keys;
    let found: Vec<(&str, Option<usize>, Vec<&str>)> = keys
        .iter()
        .map(|k| {
            let kinds = k.owed.events.iter().map(|e| e.kind.as_str()).collect();
            (k.object.as_str(), k.owed.every, kinds)
        })
        .collect();
    assert_eq!(
        found,
        [
            ("d/a", Some(4), vec!["added", "updated"]),
            ("d/b", None, vec!["deleted"]),
            ("d/c", None, vec!["added"]),
        ]
    );
    assert_eq!(keys[0].owed.events[1], event("updated", "4"));
    // Upgraded in place: the old table is gone and the layout says 2.
    let txn = state.db().unwrap().begin_read().unwrap();
    let names: Vec<String> = txn
        .list_tables()
        .unwrap()
        .map(|t| t.name().to_string())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("inflight/")),
        "{names:?}"
    );
    drop(txn);
    let meta: Vec<(String, u64)> = state.read_table(tables::META).unwrap();
    assert_eq!(meta, [("format".to_string(), FORMAT)]);
}

#[tokio::test]
async fn a_finalizer_no_route_holds_keeps_its_route_s_records_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(&spec(dir.path(), OnCorrupt::Refuse), None).unwrap();
    let object: Arc<str> =
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","uid":"u","resourceVersion":"3"}}"#.into();
    let finalizer = |name: &str| StoredFinalizer {
        name: name.into(),
        resources: vec![StoredResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        }],
    };
    for route in ["gone", "moved", "renamed"] {
        state.delivered(&route.into(), "d/a", object.clone());
    }
    state.record_finalizer("gone", finalizer("example.com/gone"));
    state.record_finalizer("moved", finalizer("example.com/kept"));
    // A finalizer renamed: the old one stays recorded beside the new one.
    state.record_finalizer("renamed", finalizer("example.com/old"));
    state.record_finalizer("renamed", finalizer("example.com/new"));
    state.flush().await;

    // `gone` and `moved` are no longer configured; another route holds example.com/kept,
    // and `renamed` holds example.com/new.
    let (routes, held) = (
        HashSet::from(["renamed"]),
        HashSet::from(["example.com/kept", "example.com/new"]),
    );
    state.retain(&routes, &HashSet::new(), &held).unwrap();
    state.flush().await;
    let mut stale = state.stale_finalizers(&held).unwrap();
    stale.sort_by(|a, b| a.route.cmp(&b.route));
    let found: Vec<(&str, &str)> = stale
        .iter()
        .map(|s| (s.route.as_str(), s.finalizer.name.as_str()))
        .collect();
    assert_eq!(
        found,
        [("gone", "example.com/gone"), ("renamed", "example.com/old")]
    );
    assert_eq!(stale[0].finalizer, finalizer("example.com/gone"));
    assert_eq!(stale[0].records["d/a"].uid, "u");
    assert!(state.route_records("moved").unwrap().is_empty());

    // Released: forgotten, each alone.
    state.forget_finalizer("renamed", "example.com/old");
    state.flush().await;
    let stale = state.stale_finalizers(&held).unwrap();
    assert_eq!(stale.len(), 1, "{stale:#?}");
    assert_eq!(stale[0].route, "gone");
    let all = state.stale_finalizers(&HashSet::new()).unwrap();
    assert!(
        all.iter()
            .any(|s| s.route == "renamed" && s.finalizer.name == "example.com/new"),
        "{all:#?}"
    );
}

#[test]
fn an_unreadable_store_is_refused_with_its_path_or_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(FILE_NAME);
    std::fs::write(
        &file,
        b"this is not a database, just some bytes".repeat(200),
    )
    .unwrap();
    let Err(error) = State::open(&spec(dir.path(), OnCorrupt::Refuse), None) else {
        panic!("a garbage file opened");
    };
    let text = error.to_string();
    assert!(text.contains(&file.display().to_string()), "{text}");
    assert!(text.contains("state_on_corrupt: fresh"), "{text}");

    let state = State::open(&spec(dir.path(), OnCorrupt::Fresh), None).unwrap();
    assert!(state.route_records("r").unwrap().is_empty());
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "the unreadable file is kept aside");
}

#[test]
fn a_row_that_does_not_decode_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(FILE_NAME);
    {
        let db = Database::create(&file).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(writer::def("route/r"))
            .unwrap()
            .insert("d/a", b"{not json".as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
    let Err(Error::Corrupt { reason, .. }) =
        State::open(&spec(dir.path(), OnCorrupt::Refuse), None)
    else {
        panic!("a bad row was read");
    };
    assert!(
        reason.contains("route/r") && reason.contains("d/a"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_route_s_records_are_brought_up_to_date_with_the_events_still_queued_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(&spec(dir.path(), OnCorrupt::Refuse), None).unwrap();
    let (route, handler): (Arc<str>, Arc<str>) = ("r".into(), "h".into());
    let object: Arc<str> = r#"{"metadata":{"name":"a","uid":"u","resourceVersion":"1"}}"#.into();
    for key in ["d/kept", "d/gone"] {
        state.delivered(&route, key, object.clone());
    }
    // Queued, the crash came before the route recorded them.
    let owed = |kind: &str, rv: &str| StoredOwed {
        every: Some(10),
        events: vec![event(kind, rv)],
    };
    state.queued(&handler, "r", "d/new", Some(owed("added", "5")));
    state.queued(&handler, "r", "d/gone", Some(owed("deleted", "6")));
    state.queued(&handler, "other", "d/kept", Some(owed("deleted", "7")));
    state.flush().await;

    let records = state.route_records("r").unwrap();
    let mut keys: Vec<&str> = records.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["d/kept", "d/new"]);
    assert_eq!(records["d/new"].resource_version, "5");
    assert_eq!(records["d/kept"].resource_version, "1");
    state.close();
}

/// Regression: an event restored from the store was written back with its JSON serialized
/// anew, and after the next restart its record no longer matched the listed object byte for
/// byte: the unchanged object was delivered a second time.
#[test]
fn a_record_of_the_same_version_in_other_text_is_the_same() {
    let listed = r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"v":"1"},"metadata":{"name":"a","uid":"u","resourceVersion":"7"}}"#;
    let rewritten = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"7","uid":"u"},"data":{"v":"1"}}"#;
    let newer = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"8","uid":"u"},"data":{"v":"2"}}"#;
    let other_uid = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"7","uid":"w"},"data":{"v":"1"}}"#;
    let record = |json: &str| RouteRecord::of_json(json).unwrap();
    assert!(record(listed).is_same(&record(rewritten)));
    assert!(!record(listed).is_same(&record(newer)));
    assert!(!record(listed).is_same(&record(other_uid)));
}

fn record(uid: &str, rv: &str) -> RouteRecord {
    RouteRecord {
        uid: uid.into(),
        resource_version: rv.into(),
        hash: 1,
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
    }
}

#[test]
fn retained_records_outside_the_share_stay_until_a_share_holding_them_is_listed() {
    let mut retained = Retained::new(HashMap::from([
        ("d/mine".to_string(), record("u-mine", "1")),
        ("d/theirs".to_string(), record("u-theirs", "2")),
        ("d/seen".to_string(), record("u-seen", "3")),
    ]));
    // An object the list handed over is compared, and waits no longer.
    assert_eq!(retained.take("d/seen"), Some(record("u-seen", "3")));
    assert_eq!(retained.take("d/seen"), None);
    // The share listed holds only "u-mine": that one is gone, the other is kept.
    let gone = retained.take_owned(|_, r| r.uid == "u-mine");
    assert_eq!(gone, vec![("d/mine".to_string(), record("u-mine", "1"))]);
    assert_eq!(retained.keys(), vec!["d/theirs"]);
    // Listing the same share again finds nothing more.
    assert!(retained.take_owned(|_, r| r.uid == "u-mine").is_empty());
    // Its range comes back: then it is taken, sorted with a record kept at a hand-over.
    retained.keep("d/handed", record("u-handed", "4"));
    let gone = retained.take_owned(|_, _| true);
    let keys: Vec<&str> = gone.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, vec!["d/handed", "d/theirs"]);
    assert!(retained.is_empty());
}

#[test]
fn a_record_kept_at_a_hand_over_replaces_the_older_one() {
    let mut retained = Retained::default();
    retained.keep("d/a", record("u", "1"));
    retained.keep("d/a", record("u", "2"));
    assert_eq!(retained.len(), 1);
    assert_eq!(retained.take("d/a"), Some(record("u", "2")));
}

/// Copies the store's folder as a crash would leave it: the files as they are now, while
/// the daemon runs.
fn crash_copy(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.path().join(entry.file_name())).unwrap();
    }
    to
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("switchyard.log."))
        .collect();
    names.sort();
    names
}

/// Waits (up to 10 s) until the log segments in `dir` are `expected`.
async fn wait_for_segments(dir: &Path, expected: &[&str]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while segment_files(dir) != expected {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            segment_files(dir)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_committed_change_is_read_and_survives_a_crash_before_any_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(&spec(dir.path(), OnCorrupt::Refuse), None).unwrap();
    let handler: Arc<str> = "h".into();
    let owed = StoredOwed {
        every: None,
        events: vec![event("added", "3")],
    };
    state.queued(&handler, "r", "d/a", Some(owed.clone()));
    state.queued(&handler, "r", "d/b", Some(owed.clone()));
    state.queued(&handler, "r", "d/b", None);
    state.drop_route("old");
    state.flush().await;
    // Read back from the log's changes: the store's B-tree does not hold them yet.
    let keys = state.handler("h").unwrap().keys;
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].owed, owed);
    let copy = crash_copy(dir.path());
    assert_eq!(segment_files(copy.path()), ["switchyard.log.1"]);
    // A commit cut short at the end of the log: nothing waited on it.
    let mut torn = log::frame(b"\x00\x01\x00\x00\x00t");
    torn.truncate(7);
    let segment = log::segment_path(copy.path(), 1);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes.extend_from_slice(&torn);
    std::fs::write(&segment, bytes).unwrap();

    let reopened = State::open(&spec(copy.path(), OnCorrupt::Refuse), None).unwrap();
    let keys = reopened.handler("h").unwrap().keys;
    assert_eq!(keys.len(), 1, "the committed change was lost in the crash");
    assert_eq!((keys[0].object.as_str(), &keys[0].owed), ("d/a", &owed));
    // The log read at open is checkpointed in the background; the next commit starts a
    // segment after it.
    reopened.queued(&handler, "r", "d/c", Some(owed.clone()));
    reopened.flush().await;
    wait_for_segments(copy.path(), &["switchyard.log.2"]).await;
    reopened.close();
    drop(reopened);
    assert!(
        segment_files(copy.path()).is_empty(),
        "a close writes the log into the store"
    );
    let again = State::open(&spec(copy.path(), OnCorrupt::Refuse), None).unwrap();
    assert_eq!(again.handler("h").unwrap().keys.len(), 2);
}

#[tokio::test]
async fn a_checkpoint_moves_the_log_into_the_store_and_deletes_its_segments() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(&spec(dir.path(), OnCorrupt::Refuse), None).unwrap();
    let (route, handler): (Arc<str>, Arc<str>) = ("r".into(), "h".into());
    let object: Arc<str> =
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","uid":"u","resourceVersion":"3"}}"#.into();
    state.delivered(&route, "d/a", object.clone());
    state.delivered(&route, "d/b", object);
    let owed = StoredOwed {
        every: None,
        events: vec![event("added", "3")],
    };
    state.queued(&handler, "r", "d/a", Some(owed.clone()));
    state.flush().await;
    // A commit a second later hands the log to a checkpoint.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    state.paused(&handler, false);
    state.flush().await;
    // Every segment is checkpointed and deleted; the next commit starts segment 2.
    wait_for_segments(dir.path(), &[]).await;
    // The store's file alone, without the log, holds what was checkpointed.
    let copy = tempfile::tempdir().unwrap();
    std::fs::copy(dir.path().join(FILE_NAME), copy.path().join(FILE_NAME)).unwrap();
    let alone = State::open(&spec(copy.path(), OnCorrupt::Refuse), None).unwrap();
    assert_eq!(alone.route_records("r").unwrap()["d/b"].uid, "u");
    assert_eq!(alone.handler("h").unwrap().keys[0].owed, owed);
    assert_eq!(alone.handler("h").unwrap().paused, Some(false));
    assert_eq!(state.handler("h").unwrap().paused, Some(false));
    state.paused(&handler, true);
    state.flush().await;
    assert_eq!(segment_files(dir.path()), ["switchyard.log.2"]);
}

#[test]
fn a_log_segment_that_is_not_one_is_refused_or_set_aside_with_the_store() {
    let dir = tempfile::tempdir().unwrap();
    drop(State::open(&spec(dir.path(), OnCorrupt::Refuse), None).unwrap());
    std::fs::write(log::segment_path(dir.path(), 5), "not a log").unwrap();
    let error = State::open(&spec(dir.path(), OnCorrupt::Refuse), None)
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("switchyard.log.5"), "{error}");
    let state = State::open(&spec(dir.path(), OnCorrupt::Fresh), None).unwrap();
    assert!(state.handler("h").unwrap().keys.is_empty());
    let names = segment_files(dir.path());
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("switchyard.log.5.corrupt-")),
        "{names:?}"
    );
}

#[tokio::test]
async fn changes_no_stage_waits_on_share_a_commit_and_a_wanted_change_is_not_held_back() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(&spec(dir.path(), OnCorrupt::Refuse), None).unwrap();
    let handler: Arc<str> = "h".into();
    let owed = || StoredOwed {
        every: None,
        events: vec![event("added", "1")],
    };
    // Ten changes a millisecond or more apart, none waited on: held back into one commit
    // (two if the sending outlasts the deferral), where a commit per 5 ms interval made
    // three or more.
    let mut last = 0;
    for i in 0..10 {
        last = state.queued(&handler, "r", &format!("d/{i}"), Some(owed()));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Committed though nobody asked, within the deferral's bound.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while state.committed_seq() < last {
        assert!(std::time::Instant::now() < deadline, "never committed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let commits = state.status().commits;
    assert!(
        commits <= 2,
        "{commits} commits for changes nobody waited on"
    );

    // A change a stage waits for is committed without waiting out the deferral.
    let mut fastest = Duration::MAX;
    for i in 0..5 {
        let seq = state.queued(&handler, "r", &format!("w/{i}"), Some(owed()));
        let started = std::time::Instant::now();
        assert!(state.committed(seq).await);
        fastest = fastest.min(started.elapsed());
    }
    assert!(
        fastest < super::flow::Flow::MAX_DEFER / 2,
        "a wanted change took {fastest:?} to commit"
    );
    state.close();
}
