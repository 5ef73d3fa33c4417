//! The epoch ticker: the thread that advances the engine's epoch while calls run, which is
//! what makes call deadlines (epoch interruption) fire, and parks when the daemon is idle.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use wasmtime::Engine;

use super::{Error, Result};

/// How often the engine's epoch advances while calls run: the resolution of call
/// deadlines, and how often a long-running call yields to other tasks.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// How long the epoch ticker keeps ticking after the last call ended before it parks (an
/// idle daemon then has no thread waking a hundred times a second).
pub(super) const TICKER_IDLE: Duration = Duration::from_secs(1);

/// The epoch ticker thread, stopped once the host and every plugin and instance made from
/// it are gone: a call still running after the host is dropped (a worker stopped late at
/// shutdown) must still reach its deadline, or it would spin forever without yielding.
/// It parks once no call has run for [`TICKER_IDLE`], and a call starting wakes it.
pub(super) struct Ticker {
    pub(super) thread: std::thread::JoinHandle<()>,
    pub(super) state: Arc<TickerState>,
}

/// What the ticker thread and the calls share.
#[derive(Default)]
pub(super) struct TickerState {
    pub(super) stop: AtomicBool,
    /// Calls running wasm now (instantiation and `init`, or `handle`).
    pub(super) running: AtomicUsize,
    /// The ticker is parked, or about to park, until a call starts.
    pub(super) parked: AtomicBool,
}

impl Ticker {
    pub(super) fn start(engine: Engine) -> Result<Arc<Self>> {
        let state = Arc::new(TickerState::default());
        let thread = std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn({
                let state = state.clone();
                move || tick(&engine, &state)
            })
            .map_err(|e| Error::Engine(format!("cannot start the epoch ticker: {e}")))?;
        Ok(Arc::new(Self { thread, state }))
    }

    /// Counts a call as running until the returned guard is dropped, waking the ticker if
    /// it parked.
    pub(super) fn running(&self) -> Running<'_> {
        self.state.running.fetch_add(1, Ordering::SeqCst);
        if self.state.parked.load(Ordering::SeqCst) {
            self.thread.thread().unpark();
        }
        Running(&self.state)
    }
}

/// A call counted as running (see [`Ticker::running`]).
pub(super) struct Running<'a>(&'a TickerState);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The ticker thread: advances the epoch every [`EPOCH_TICK`] while calls run or ran within
/// [`TICKER_IDLE`], parks otherwise, and ends when `state.stop` is set.
fn tick(engine: &Engine, state: &TickerState) {
    let idle_ticks = (TICKER_IDLE.as_millis() / EPOCH_TICK.as_millis()).max(1);
    let mut idle = 0;
    while !state.stop.load(Ordering::Relaxed) {
        std::thread::sleep(EPOCH_TICK);
        engine.increment_epoch();
        if state.running.load(Ordering::SeqCst) > 0 {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle >= idle_ticks {
            // A call that starts after `parked` is set sees it and unparks us; one that
            // started before is seen here, and we do not park.
            state.parked.store(true, Ordering::SeqCst);
            if state.running.load(Ordering::SeqCst) == 0 && !state.stop.load(Ordering::SeqCst) {
                std::thread::park();
            }
            state.parked.store(false, Ordering::SeqCst);
            idle = 0;
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.thread.thread().unpark();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn the_epoch_ticker_parks_when_idle_and_a_call_wakes_it() {
        let ticker = Ticker::start(Engine::default()).unwrap();
        let parked = || ticker.state.parked.load(Ordering::SeqCst);
        let wait_for = |want: bool, within: Duration| {
            let deadline = Instant::now() + within;
            while parked() != want {
                assert!(Instant::now() < deadline, "parked never became {want}");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        wait_for(true, TICKER_IDLE * 3);
        let running = ticker.running();
        wait_for(false, Duration::from_secs(1));
        // While a call runs it keeps ticking, past the idle time.
        std::thread::sleep(TICKER_IDLE + EPOCH_TICK * 10);
        assert!(!parked(), "the ticker parked while a call ran");
        drop(running);
        wait_for(true, TICKER_IDLE * 3);
    }
}
