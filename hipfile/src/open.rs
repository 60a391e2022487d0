//! The reference on the core driver's use count that a [`Driver`](crate::Driver) and everything
//! made from it share: the one thing files, buffers, batches and streams need of the driver, so
//! they hold it without reaching back into the driver's module.

use std::sync::Arc;

/// One reference on a core driver's use count, released when the last value sharing it drops.
#[derive(Debug)]
pub(crate) struct OpenReference {
    pub(crate) core: Arc<hipfile_core::Driver>,
}

impl Drop for OpenReference {
    fn drop(&mut self) {
        // Fails only when the driver is already closed (a C caller closed it to zero): nothing to
        // give back.
        let _ = self.core.close();
    }
}
