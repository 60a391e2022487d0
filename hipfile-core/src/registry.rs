//! The ranked list of backends an open driver offers requests to, and the dispatch rule.

use std::sync::Arc;

use crate::backend::{
    Backend, BackendContext, BackendDescriptor, Completion, IoPath, IoRequest, Resources, Submit,
};
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
            backends.push(Entry {
                backend,
                path: d.path,
            });
        }
        Ok(Registry { backends })
    }
}

/// The backends of an open driver, in the order requests are offered to them.
#[derive(Debug)]
pub struct Registry {
    backends: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    backend: Arc<dyn Backend>,
    path: IoPath,
}

impl Registry {
    /// Backend names in offer order.
    pub fn names(&self) -> Vec<&'static str> {
        self.backends.iter().map(|e| e.backend.name()).collect()
    }

    /// Name and path of each backend, in offer order (the positions
    /// [`Dispatched::backend_index`] counts).
    pub fn paths(&self) -> Vec<(&'static str, IoPath)> {
        self.backends
            .iter()
            .map(|e| (e.backend.name(), e.path))
            .collect()
    }

    /// What each backend holds, in offer order.
    pub fn resources(&self) -> Vec<(&'static str, Resources)> {
        self.backends
            .iter()
            .map(|e| (e.backend.name(), e.backend.resources()))
            .collect()
    }

    /// Run `req` on the first backend that accepts it and wait for it: [`Registry::submit`]
    /// then [`Submitted::finish`]. The synchronous path: the backend may do the work on the
    /// calling thread.
    pub fn dispatch(&self, req: &IoRequest<'_>) -> Result<Dispatched> {
        self.submit(req, Submit::Wait)?.finish(self, req)
    }

    /// Submit `req` to the first backend that accepts it. When every backend declines, the
    /// answer is `InternalError` naming each decline.
    pub fn submit(&self, req: &IoRequest<'_>, how: Submit) -> Result<Submitted> {
        self.submit_from(0, req, how, Vec::new())
    }

    fn submit_from(
        &self,
        first: usize,
        req: &IoRequest<'_>,
        how: Submit,
        mut reasons: Vec<String>,
    ) -> Result<Submitted> {
        for (index, e) in self.backends.iter().enumerate().skip(first) {
            match e.backend.accepts(req) {
                Ok(()) => {
                    return Ok(Submitted {
                        index,
                        how,
                        completion: e.backend.submit(req, how),
                        reasons,
                    })
                }
                Err(decline) => reasons.push(format!("{}: {decline}", e.backend.name())),
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

/// A request submitted to one backend of a [`Registry`].
#[derive(Debug)]
pub struct Submitted {
    index: usize,
    how: Submit,
    completion: Completion,
    reasons: Vec<String>,
}

impl Submitted {
    /// The backend running the request, as its position in the registry.
    pub fn backend_index(&self) -> usize {
        self.index
    }

    /// Whether the request has finished (finishing it then does not wait, unless it fails
    /// over). Never blocks.
    pub fn is_finished(&mut self) -> bool {
        let completion = std::mem::replace(&mut self.completion, Completion::ready(Ok(0)));
        match completion.poll() {
            Ok(outcome) => {
                self.completion = Completion::ready(outcome);
                true
            }
            Err(pending) => {
                self.completion = pending;
                false
            }
        }
    }

    /// Wait for the request. A failure that is eligible for failover (see
    /// [`Error::is_failover_eligible`]) and moved no bytes hands the whole request to the next
    /// accepting backend of `registry` (the one it was submitted through, with the same `req`);
    /// any other failure is returned as is.
    pub fn finish(self, registry: &Registry, req: &IoRequest<'_>) -> Result<Dispatched> {
        let mut current = self;
        loop {
            let Submitted {
                index,
                how,
                completion,
                mut reasons,
            } = current;
            let name = registry.backends[index].backend.name();
            match completion.wait() {
                Ok(bytes) => {
                    return Ok(Dispatched {
                        bytes,
                        backend: name,
                        backend_index: index,
                        path: registry.backends[index].path,
                    })
                }
                Err(f) if f.bytes_moved == 0 && f.error.is_failover_eligible() => {
                    reasons.push(format!("{name}: failed over after {}", f.error));
                    current = registry.submit_from(index + 1, req, how, reasons)?;
                }
                Err(f) => return Err(f.error),
            }
        }
    }
}

/// The outcome of a dispatched request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatched {
    /// Bytes moved.
    pub bytes: usize,
    /// The backend that moved them.
    pub backend: &'static str,
    /// Its position in the registry ([`Registry::paths`]).
    pub backend_index: usize,
    /// How it moved them.
    pub path: IoPath,
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
        fn submit(&self, _req: &IoRequest<'_>, _how: Submit) -> Completion {
            Completion::ready(Err(IoFailure::new(
                Error::new(ErrorKind::InternalError, "idle"),
                0,
            )))
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
            path: IoPath::Staged,
            init: |_| Ok(Arc::new(Idle("a"))),
        })
        .unwrap();
        b.add(BackendDescriptor {
            name: "b",
            priority: 1,
            path: IoPath::Staged,
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
            path: IoPath::Staged,
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
