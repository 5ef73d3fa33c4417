//! A batch handler built against `switchyard:plugin@0.1.0`, the contract before 0.1.1: the
//! daemon must load it unchanged (a newer patch of the 0.1 line only adds). It logs the
//! route of each event it is given, `handle` or `handle-batch`, and dead-letters the
//! second event of a batch.

// The generated export glue takes the event's fields one by one.
#![allow(clippy::too_many_arguments)]

wit_bindgen::generate!({ path: "wit", world: "handler-batch" });

use switchyard::plugin::host::{Level, log};

struct OldContract;

impl Guest for OldContract {
    fn init(_config: String) -> Result<(), String> {
        Ok(())
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        log(Level::Info, &format!("handle {}", event.route));
        Ok(Outcome::Done)
    }

    fn handle_batch(events: Vec<Event>) -> Result<Vec<ItemOutcome>, String> {
        log(Level::Info, &format!("handle-batch of {}", events.len()));
        Ok((0..events.len())
            .map(|i| match i {
                1 => ItemOutcome::DeadLetter("the second".into()),
                _ => ItemOutcome::Done,
            })
            .collect())
    }
}

export!(OldContract);
