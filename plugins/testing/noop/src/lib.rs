//! A plugin that returns `done` for every event without looking at it: what a plugin call
//! costs by itself (instantiation, `init`, passing the event in), for benchmarks.

use switchyard_sdk::{Event, Handler, Outcome, export_handler};

struct Noop;

impl Handler for Noop {
    fn handle(event: Event) -> Result<Outcome, String> {
        // Touch the event as a native handler would, without parsing it.
        std::hint::black_box(event.object.len());
        Ok(Outcome::Done)
    }
}

export_handler!(Noop);
