//! The ranked list of backends an open driver offers requests to, and the dispatch rule.

use std::sync::Arc;

use crate::backend::{Backend, BackendContext, BackendDescriptor, IoRequest, Resources};
use crate::error::{Error, ErrorKind, Result};

/// Collects backend descriptors; builds a [`Registry`].
#[derive(Debug, Default, Clone)]
pub struct RegistryBuilder {
    descriptors: Vec<BackendDescriptor>,
}

impl RegistryBuilder {
    /// An empty builder (tests add backends explicitly).
    pub fn new() -> Self {
        RegistryBuilder::default()
    }

    /// Every descriptor submitted through `inventory` in the linked crates.
    pub fn from_inventory() -> Result<Self> {
        let mut b = RegistryBuilder::new();
        for d in inventory::iter::<BackendDescriptor> {
            b.add(*d)?;
        }
        Ok(b)
    }

    /// Add the `inventory` descriptors whose names are not in the builder yet: backends of third
    /// parties, next to the built-in ones a facade registered explicitly.
    pub fn add_inventory(&mut self) -> &mut Self {
        for d in inventory::iter::<BackendDescriptor> {
            if !self.descriptors.iter().any(|x| x.name == d.name) {
                self.descriptors.push(*d);
            }
        }
        self
    }

    /// Add a descriptor; a second descriptor with the same name is refused.
    pub fn add(&mut self, d: BackendDescriptor) -> Result<&mut Self> {
        if self.descriptors.iter().any(|x| x.name == d.name) {
            return Err(Error::new(
                ErrorKind::InternalError,
                format!("a backend named {:?} is already registered", d.name),
            ));
        }
        self.descriptors.push(d);
        Ok(self)
    }

    /// Descriptors in rank order: priority descending, then name.
    pub fn ranked(&self) -> Vec<BackendDescriptor> {
        let mut v = self.descriptors.clone();
        v.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(b.name)));
        v
    }

    /// Keep only the backends named in `list` (comma separated, as `HIPFILE_BACKENDS`), in the
    /// order given there. An unknown name is an error, so a typo cannot silently drop a backend.
    pub fn select(&self, list: &str) -> Result<Vec<BackendDescriptor>> {
        let mut out = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let d = self
                .descriptors
                .iter()
                .find(|d| d.name == name)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::DriverSetupError,
                        format!("HIPFILE_BACKENDS names {name:?}, which is not registered"),
                    )
                })?;
            if !out.iter().any(|x: &BackendDescriptor| x.name == name) {
                out.push(*d);
            }
        }
        Ok(out)
    }

    /// Build the backends in rank order, or in the order `HIPFILE_BACKENDS` gives when
    /// `selection` names any (an empty or all-comma list names none and counts as unset, so it
    /// cannot open a driver with no backend). A backend whose init fails fails the whole build
    /// with `DriverSetupError` naming it: a driver that opened without one of its backends would
    /// refuse, much later and with no reason given, every request only that backend serves.
    pub fn build(&self, ctx: &BackendContext, selection: Option<&str>) -> Result<Registry> {
        let order = match selection.filter(|list| list.split(',').any(|n| !n.trim().is_empty())) {
            Some(list) => self.select(list)?,
            None => self.ranked(),
        };
        let mut backends = Vec::new();
        for d in order {
            let backend = (d.init)(ctx).map_err(|e| {
                Error::new(
                    ErrorKind::DriverSetupError,
                    format!("backend {:?} failed to start: {e}", d.name),
                )
            })?;
            backends.push(backend);
        }
        Ok(Registry { backends })
    }
}

/// The backends of an open driver, in the order requests are offered to them.
#[derive(Debug)]
pub struct Registry {
    backends: Vec<Arc<dyn Backend>>,
}

impl Registry {
    /// Backend names in offer order.
    pub fn names(&self) -> Vec<&'static str> {
        self.backends.iter().map(|b| b.name()).collect()
    }

    /// What each backend holds, in offer order.
    pub fn resources(&self) -> Vec<(&'static str, Resources)> {
        self.backends
            .iter()
            .map(|b| (b.name(), b.resources()))
            .collect()
    }

    /// Run `req` on the first backend that accepts it. A failure that is eligible for failover
    /// (see [`Error::is_failover_eligible`]) and moved no bytes hands the whole request to the
    /// next accepting backend; any other failure is returned as is. When every backend declines,
    /// the answer is `InternalError` naming each decline.
    pub fn dispatch(&self, req: &IoRequest<'_>) -> Result<Dispatched> {
        let mut reasons = Vec::new();
        for b in &self.backends {
            if let Err(decline) = b.accepts(req) {
                reasons.push(format!("{}: {decline}", b.name()));
                continue;
            }
            match b.execute(req) {
                Ok(bytes) => {
                    return Ok(Dispatched {
                        bytes,
                        backend: b.name(),
                    })
                }
                Err(f) if f.bytes_moved == 0 && f.error.is_failover_eligible() => {
                    reasons.push(format!("{}: failed over after {}", b.name(), f.error));
                }
                Err(f) => return Err(f.error),
            }
        }
        Err(Error::new(
            ErrorKind::InternalError,
            if reasons.is_empty() {
                "no backend is registered".to_string()
            } else {
                format!("no backend ran the request ({})", reasons.join("; "))
            },
        ))
    }
}

/// The outcome of a dispatched request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatched {
    /// Bytes moved.
    pub bytes: usize,
    /// The backend that moved them.
    pub backend: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Decline, IoFailure, LiveSettings};
    use crate::config::{EnvConfig, Settings};
    use crate::io::PosixIo;

    #[derive(Debug)]
    struct Idle(&'static str);

    impl Backend for Idle {
        fn name(&self) -> &'static str {
            self.0
        }
        fn accepts(&self, _req: &IoRequest<'_>) -> std::result::Result<(), Decline> {
            Err(Decline::Other("idle".into()))
        }
        fn execute(&self, _req: &IoRequest<'_>) -> std::result::Result<usize, IoFailure> {
            Err(IoFailure::new(
                Error::new(ErrorKind::InternalError, "idle"),
                0,
            ))
        }
    }

    fn ctx() -> BackendContext {
        BackendContext {
            runtime: Arc::new(hipfile_hip::sim::SimRuntime::default()),
            io: Arc::new(PosixIo),
            settings: Arc::new(LiveSettings::new(Settings::default())),
            env: EnvConfig::default(),
        }
    }

    fn builder() -> RegistryBuilder {
        let mut b = RegistryBuilder::new();
        b.add(BackendDescriptor {
            name: "a",
            priority: 2,
            init: |_| Ok(Arc::new(Idle("a"))),
        })
        .unwrap();
        b.add(BackendDescriptor {
            name: "b",
            priority: 1,
            init: |_| Ok(Arc::new(Idle("b"))),
        })
        .unwrap();
        b
    }

    #[test]
    fn an_empty_selection_counts_as_none() {
        let b = builder();
        for empty in ["", ",", " , ,"] {
            let r = b.build(&ctx(), Some(empty)).unwrap();
            assert_eq!(r.names(), ["a", "b"], "selection {empty:?}");
        }
        assert_eq!(b.build(&ctx(), Some(" b ,")).unwrap().names(), ["b"]);
        assert_eq!(
            b.build(&ctx(), Some("garbage")).unwrap_err().kind(),
            ErrorKind::DriverSetupError
        );
    }

    #[test]
    fn a_backend_that_fails_to_start_fails_the_build_by_name() {
        let mut b = builder();
        b.add(BackendDescriptor {
            name: "broken",
            priority: 0,
            init: |_| {
                Err(Error::new(
                    ErrorKind::GpuMemoryPinningFailed,
                    "no pinned memory",
                ))
            },
        })
        .unwrap();
        let e = b.build(&ctx(), None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DriverSetupError);
        assert!(e.context().contains("\"broken\""), "{e}");
        assert!(e.context().contains("no pinned memory"), "{e}");
        // Left out of the selection, it is never started.
        assert_eq!(b.build(&ctx(), Some("a,b")).unwrap().names(), ["a", "b"]);
    }
}
