//! The plugins folder's file names and contents: a name is read only inside the folder,
//! whatever it holds (`..`, `/`, unicode, hidden, very long, differing in case); and files
//! dropped into a watched folder (random bytes, a truncated component, a core module that
//! is no component, bit flips of a real component) never panic nor stop the registry and
//! its watcher, a broken file's error quotes nothing of it, and the running version stays.
//! Most generated files fail before compilation; only the bit flips compile, a few a run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use switchyard::plugin::{Plugin, PluginHost, PluginRegistry, PluginUser, PluginWatcher, loader};

use crate::support;

/// What the file's error must not show of it.
const MARKER: &str = "QUOTED-FILE-CONTENT";

/// A valid WebAssembly core module: empty, and no component.
const CORE_MODULE: &[u8] = b"\0asm\x01\0\0\0";

/// How long the watcher waits for a file to be quiet.
const QUIET: Duration = Duration::from_millis(30);

const WAIT: Duration = Duration::from_secs(30);

fn log_events() -> Vec<u8> {
    std::fs::read(support::built_plugin("log-events")).unwrap()
}

/// A plugin name as outside input may have it.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "p",
            "P",
            ".p",
            "p.wasm",
            "..",
            ".",
            "../secret",
            "../../secret",
            "a/../../secret",
            "/tmp/secret",
            "sub/p",
            "sub/../p",
            "p\0",
            "",
            " ",
            "p ",
            "p\u{0}x",
            "\u{202e}p",
        ])
        .prop_map(String::from),
        "[.]{1,4}",
        "[a-zA-Z0-9._/-]{1,30}",
        any::<String>(),
        (200usize..300).prop_map(|n| "x".repeat(n)),
    ]
}

proptest! {
    #![proptest_config(super::cases(128))]

    #[test]
    fn fuzz_plugin_names_are_read_only_inside_the_folder(name in name(), write in any::<bool>()) {
        let outside = tempfile::tempdir().unwrap();
        let dir = outside.path().join("plugins");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(outside.path().join("secret.wasm"), MARKER).unwrap();
        let path = loader::plugin_path(&dir, &name);
        let wrote = write && !name.contains('\0') && std::fs::write(&path, b"inside").is_ok();
        let read = super::runtime().block_on(loader::read_plugin_file(&dir, &name));
        match read {
            Ok(file) => {
                let real = std::fs::canonicalize(&path).unwrap();
                assert!(real.starts_with(std::fs::canonicalize(&dir).unwrap()), "{name:?} read {real:?}");
                assert_ne!(file.bytes, MARKER.as_bytes(), "{name:?} read the file outside");
                if wrote {
                    assert_eq!(file.bytes, b"inside");
                }
            }
            Err(e) => {
                assert!(!e.to_string().contains(MARKER), "{e}");
                assert!(!wrote || !inside(&dir, &path), "{name:?}: a file inside was refused: {e}");
            }
        }
    }
}

/// Whether `path` exists and resolves inside `dir`.
fn inside(dir: &Path, path: &Path) -> bool {
    match (std::fs::canonicalize(path), std::fs::canonicalize(dir)) {
        (Ok(real), Ok(dir)) => real.starts_with(dir) && real.is_file(),
        _ => false,
    }
}

/// The handler the registry serves, recording what it is given.
#[derive(Default)]
struct User {
    installs: AtomicUsize,
    problems: Mutex<Vec<String>>,
}

impl PluginUser for User {
    fn user_name(&self) -> &str {
        "h"
    }
    fn plugin_name(&self) -> &str {
        "p"
    }
    fn install_plugin(&self, _plugin: Arc<Plugin>) {
        self.installs.fetch_add(1, Ordering::SeqCst);
    }
    fn report_plugin_problem(&self, problem: String) {
        self.problems.lock().unwrap().push(problem);
    }
}

impl User {
    fn problems(&self) -> usize {
        self.problems.lock().unwrap().len()
    }
}

/// A file name in the plugins folder: mostly the plugin's own, or one that looks like it.
fn file_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("p.wasm".to_string()),
        2 => prop::sample::select(vec![
            "P.wasm", "p.WASM", ".p.wasm", "p.wasm.tmp", "p.wasm~", "p", "other.wasm", " p.wasm",
            "p.wasm ", "p..wasm", ".wasm", "..wasm", "\u{202e}p.wasm",
        ])
        .prop_map(String::from),
        1 => any::<String>().prop_filter("one file name", |n| {
            !n.is_empty() && n != "." && n != ".." && !n.contains(['/', '\0'])
        }),
        1 => (200usize..300).prop_map(|n| format!("{}.wasm", "p".repeat(n))),
    ]
}

/// Broken contents, each with [`MARKER`] somewhere in it.
fn broken() -> impl Strategy<Value = Vec<u8>> {
    let component = log_events();
    let len = component.len();
    prop_oneof![
        (
            prop::collection::vec(any::<u8>(), 0..256),
            any::<prop::sample::Index>()
        )
            .prop_map(|(mut bytes, at)| {
                let at = at.index(bytes.len() + 1);
                bytes.splice(at..at, MARKER.bytes());
                bytes
            }),
        (0..len).prop_map(move |cut| {
            let mut bytes = component[..cut].to_vec();
            bytes.extend(MARKER.bytes());
            bytes
        }),
        Just([CORE_MODULE, MARKER.as_bytes()].concat()),
        Just(CORE_MODULE.to_vec()),
        Just(Vec::new()),
    ]
}

/// A running registry and folder watcher for the plugin `p` (log-events) used by `h`.
struct Folder {
    runtime: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
    user: Arc<User>,
    registry: Arc<PluginRegistry>,
    watcher: Option<PluginWatcher>,
}

impl Folder {
    fn start() -> Self {
        let runtime = super::runtime();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.wasm"), log_events()).unwrap();
        let user = Arc::new(User::default());
        let (registry, watcher) = runtime.block_on(async {
            let host = PluginHost::new().unwrap();
            let users: Vec<Arc<dyn PluginUser>> = vec![user.clone()];
            let registry = Arc::new(PluginRegistry::new(host, dir.path().to_path_buf(), &users));
            registry.load_all().await;
            let watcher = PluginWatcher::with_quiet_period(registry.clone(), QUIET).unwrap();
            (registry, watcher)
        });
        assert_eq!(
            user.installs.load(Ordering::SeqCst),
            1,
            "{:?}",
            user.problems
        );
        Self {
            runtime,
            dir,
            user,
            registry,
            watcher: Some(watcher),
        }
    }

    fn sha(&self) -> Option<String> {
        self.registry.view("p").unwrap().sha256
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Waits until no problem has been reported for a while: loads under way are done.
    fn settle(&self) {
        let mut seen = (
            self.user.problems(),
            self.user.installs.load(Ordering::SeqCst),
        );
        loop {
            std::thread::sleep(QUIET * 5);
            let now = (
                self.user.problems(),
                self.user.installs.load(Ordering::SeqCst),
            );
            if now == seen {
                return;
            }
            seen = now;
        }
    }

    /// Drops `files` in; returns whether `p.wasm` was among them.
    fn drop_in(&self, files: &[(String, Vec<u8>)]) -> bool {
        let mut ours = false;
        for (name, bytes) in files {
            if std::fs::write(self.path(name), bytes).is_ok() {
                ours |= name == "p.wasm";
            }
        }
        ours
    }

    /// Waits until the registry reported a problem beyond the first `before`; returns the
    /// newest problem and the plugin's last error.
    fn wait_for_problem(&self, before: usize) -> (String, String) {
        self.runtime.block_on(support::eventually(
            "the broken file reported",
            WAIT,
            async || {
                let problems = self.user.problems.lock().unwrap();
                let newest = problems.get(before..)?.last()?.clone();
                let last_error = self.registry.view("p")?.last_error?;
                Some((newest, last_error))
            },
        ))
    }
}

/// Files dropped into the watched folder: what is broken is refused without quoting it,
/// and the running version stays.
#[test]
fn fuzz_plugin_folder_broken_files_leave_the_running_version() {
    let folder = Folder::start();
    let running = folder.sha();
    let files = prop::collection::vec((file_name(), broken()), 1..4);
    let mut runner = TestRunner::new(super::cases(32));
    let result = runner.run(&files, |files| {
        let before = folder.user.problems();
        if folder.drop_in(&files) {
            let (problem, last_error) = folder.wait_for_problem(before);
            for text in [&problem, &last_error] {
                assert!(!text.contains(MARKER), "the error quotes the file: {text}");
            }
            assert!(
                problem.contains("still running the version loaded at"),
                "{problem}"
            );
        }
        folder.settle();
        if !files.iter().any(|(n, _)| n == "p.wasm") {
            assert_eq!(
                folder.user.problems(),
                before,
                "a file not named p.wasm was loaded"
            );
        }
        assert_eq!(folder.sha(), running, "the running version changed");
        assert_eq!(folder.user.installs.load(Ordering::SeqCst), 1);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    still_reloads(folder);
}

/// A few bit flips of a real component: each is refused with the running version left in
/// place, or is a component that compiles and is swapped in.
#[test]
fn fuzz_plugin_folder_bit_flips_of_a_component() {
    let folder = Folder::start();
    let len = log_events().len() * 8;
    let flips = prop::collection::vec(0..len, 1..4);
    let mut runner = TestRunner::new(super::cases(4));
    let result = runner.run(&flips, |flips| {
        let mut bytes = log_events();
        for bit in &flips {
            bytes[bit / 8] ^= 1 << (bit % 8);
        }
        let running = folder.sha();
        let problems = folder.user.problems();
        let installs = folder.user.installs.load(Ordering::SeqCst);
        std::fs::write(folder.path("p.wasm"), &bytes).unwrap();
        folder.runtime.block_on(support::eventually(
            "the flipped file loaded or refused",
            WAIT,
            async || {
                (folder.user.problems() > problems
                    || folder.user.installs.load(Ordering::SeqCst) > installs)
                    .then_some(())
            },
        ));
        folder.settle();
        let view = folder.registry.view("p").unwrap();
        if folder.user.installs.load(Ordering::SeqCst) > installs {
            assert_ne!(view.sha256, running, "a swap without a new version");
            assert_eq!(view.last_error, None);
        } else {
            assert_eq!(view.sha256, running, "the running version changed");
            assert!(view.last_error.is_some());
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    still_reloads(folder);
}

/// After everything, the watcher still refuses a broken file and loads a good one.
fn still_reloads(mut folder: Folder) {
    assert!(folder.registry.is_watched());
    let problems = folder.user.problems();
    std::fs::write(folder.path("p.wasm"), MARKER).unwrap();
    folder.wait_for_problem(problems);
    let installs = folder.user.installs.load(Ordering::SeqCst);
    std::fs::write(folder.path("p.wasm"), log_events()).unwrap();
    folder.runtime.block_on(support::eventually(
        "the good file loaded",
        WAIT,
        async || {
            let view = folder.registry.view("p")?;
            (view.last_error.is_none() && folder.user.installs.load(Ordering::SeqCst) > installs)
                .then_some(())
        },
    ));
    let watcher = folder.watcher.take().unwrap();
    folder.runtime.block_on(watcher.stop());
}
