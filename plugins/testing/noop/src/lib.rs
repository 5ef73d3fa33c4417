//! A plugin that returns `done` for every event without looking at it: what a plugin call
//! costs by itself (instantiation, `init`, passing the event in), for benchmarks.
//!
//! With the config `{"pre_read_memory": true}`, `init` first reads one byte of every 4 KiB
//! page of its linear memory, so that pages the instance never writes are mapped to the
//! kernel's zero page instead of being left unmapped. The plugin benchmark uses it to show
//! what a pool slot's in-place reset costs when only the written pages are reset
//! (BENCHMARKS.md, "Plugin call cost").

use switchyard_sdk::{Event, Handler, Outcome, export_handler};

struct Noop;

impl Handler for Noop {
    fn init(config: String) -> Result<(), String> {
        if config.replace(' ', "").contains("\"pre_read_memory\":true") {
            pre_read_memory();
        }
        Ok(())
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        // Touch the event as a native handler would, without parsing it.
        std::hint::black_box(event.object.len());
        Ok(Outcome::Done)
    }
}

/// Reads one byte of every page of linear memory past the first (address 0 is never read).
#[cfg(target_arch = "wasm32")]
fn pre_read_memory() {
    // The host's page size, the unit the kernel maps memory in.
    const PAGE: usize = 4096;
    let end = core::arch::wasm32::memory_size(0) * 65536;
    let mut sum = 0u8;
    for address in (PAGE..end).step_by(PAGE) {
        // SAFETY: every address below the memory's size is in bounds of linear memory, and
        // a byte may hold any value.
        sum ^= unsafe { core::ptr::read_volatile(address as *const u8) };
    }
    std::hint::black_box(sum);
}

/// Built natively (the plugin's own tests), there is no linear memory to read.
#[cfg(not(target_arch = "wasm32"))]
fn pre_read_memory() {}

export_handler!(Noop);
