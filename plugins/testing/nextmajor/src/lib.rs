//! A handler built against `switchyard:plugin@1.0.0`, a major version this daemon does not
//! speak: the daemon must refuse it by its version, not by a missing import.

// The generated export glue takes the event's fields one by one.
#![allow(clippy::too_many_arguments)]

wit_bindgen::generate!({ path: "wit", world: "handler" });

use switchyard::plugin::host::{Level, log};

struct NextMajor;

impl Guest for NextMajor {
    fn init(_config: String) -> Result<(), String> {
        Ok(())
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        log(Level::Info, &event.route);
        Ok(Outcome::Done)
    }
}

export!(NextMajor);
