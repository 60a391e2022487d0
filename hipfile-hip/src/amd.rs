//! The AMD platform: HIP runtime loaded at run time (being written).
use std::sync::Arc;

use crate::error::{HipError, HipResult};
use crate::runtime::GpuRuntime;

/// Load the HIP runtime.
pub fn open() -> HipResult<Arc<dyn GpuRuntime>> {
    Err(HipError::NoPlatform("AMD loader pending".into()))
}
