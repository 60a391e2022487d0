//! What the test binaries that stand in for an application's `log` logger share: a logger that
//! keeps every record it is given. Each such binary installs it itself (the logger is
//! process-wide, so each is a binary of its own).

use std::sync::{Mutex, PoisonError};

/// The application's logger: it keeps every record it is given, as (level, target, text).
pub struct Captured {
    records: Mutex<Vec<(log::Level, String, String)>>,
}

impl log::Log for Captured {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((
                record.level(),
                record.target().to_string(),
                record.args().to_string(),
            ));
    }
    fn flush(&self) {}
}

/// The one capturing logger of the binary, for `log::set_logger(&APP)`.
pub static APP: Captured = Captured {
    records: Mutex::new(Vec::new()),
};

/// The records captured so far, in order.
pub fn records() -> Vec<(log::Level, String, String)> {
    APP.records
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}
