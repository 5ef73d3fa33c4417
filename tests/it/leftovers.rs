//! No process a test starts outlives it (after a green run, a headless Chromium
//! and its ten helpers were left running, orphaned, holding about 800 MB, because only
//! chromedriver was killed). Every helper runs in a process group of its own with a marker
//! in its environment ([`crate::support::spawned`]); ending it kills the group, and the
//! test fails naming whatever is left.

use std::process::Command;
use std::time::Duration;

use crate::support::browser::Browser;
use crate::support::spawned::{self, Spawned};

#[test]
fn a_browser_test_that_panics_mid_session_leaves_no_chromium_behind() {
    let (tx, rx) = std::sync::mpsc::channel();
    // A test of its own, on its thread and runtime, as the harness runs one.
    let session = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let browser = Browser::start().await;
            browser.open("about:blank").await;
            tx.send((browser.trace(), browser.processes())).unwrap();
            panic!("a browser test fails mid-session");
        })
    });
    session.join().expect_err("the session panicked");
    let ((group, marker), running) = rx.recv().expect("the session's processes");
    assert!(
        running.iter().any(|p| p.command.contains("chromium")),
        "no Chromium ran in the session: {running:#?}"
    );
    let left = spawned::started(group, &marker);
    assert!(
        left.is_empty(),
        "left running by the session that panicked: {left:#?}"
    );
}

#[test]
fn a_helper_ends_with_the_processes_it_started() {
    let helper = Spawned::start(
        Command::new("sh").args(["-c", "sleep 300 & sleep 300"]),
        "sh",
    );
    let (group, marker) = helper.trace();
    let started = wait_for_processes(&helper, 3);
    drop(helper);
    let left = spawned::started(group, &marker);
    assert!(left.is_empty(), "started {started:#?}, left {left:#?}");
}

#[test]
fn a_process_that_left_its_group_and_stays_fails_the_test_that_started_it() {
    let helper = Spawned::start(
        Command::new("sh").args(["-c", "setsid sleep 300 & sleep 300"]),
        "sh",
    )
    .grace(Duration::from_millis(500));
    let (group, marker) = helper.trace();
    // Counting three is not enough: `setsid` runs in the group until it calls setsid(2),
    // and a group killed before then takes it along, leaving nothing to find.
    wait_for(&helper, "sleep 300 outside the group", |processes| {
        processes
            .iter()
            .any(|p| p.group != group && p.command.contains("sleep 300"))
    });
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(helper)))
        .expect_err("the test fails");
    let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("sh left processes running after it ended (now killed)")
            && message.contains("sleep 300"),
        "{message}"
    );
    let left = spawned::started(group, &marker);
    assert!(left.is_empty(), "still there: {left:#?}");
}

/// Waits until `helper` and what it started number `count`; returns them.
fn wait_for_processes(helper: &Spawned, count: usize) -> Vec<spawned::Started> {
    wait_for(helper, &format!("{count} processes"), |p| p.len() >= count)
}

/// Waits until what `helper` started (itself included) passes `done`; returns it.
fn wait_for(
    helper: &Spawned,
    what: &str,
    done: impl Fn(&[spawned::Started]) -> bool,
) -> Vec<spawned::Started> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let processes = helper.processes();
        if done(&processes) {
            return processes;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {what} after 10 s: {processes:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
