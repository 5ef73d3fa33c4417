//! Looks for a marker in its memory, then writes it: in a static word and in one word of
//! every page of a 512 KiB static array. A fresh instance starts with neither, so each
//! event succeeds; an instance that sees what an earlier one wrote fails the event with
//! `found the marker of an earlier event`. The instance isolation tests' plugin.

use std::sync::atomic::{AtomicU64, Ordering};

use switchyard_sdk::{Event, Handler, Outcome, export_handler};

/// What an event leaves behind.
const MARKER: u64 = 0x5157_4954_4348_5944;
/// Words per 4 KiB page.
const STRIDE: usize = 512;

static WORD: AtomicU64 = AtomicU64::new(0);
static PAGES: [AtomicU64; 64 * 1024] = [const { AtomicU64::new(0) }; 64 * 1024];

struct Marker;

impl Handler for Marker {
    fn handle(_event: Event) -> Result<Outcome, String> {
        let found = WORD.load(Ordering::Relaxed) == MARKER
            || PAGES
                .iter()
                .step_by(STRIDE)
                .any(|w| w.load(Ordering::Relaxed) == MARKER);
        WORD.store(MARKER, Ordering::Relaxed);
        for word in PAGES.iter().step_by(STRIDE) {
            word.store(MARKER, Ordering::Relaxed);
        }
        if found {
            Err("found the marker of an earlier event".into())
        } else {
            Ok(Outcome::Done)
        }
    }
}

export_handler!(Marker);
