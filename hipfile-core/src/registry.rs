//! The ranked list of backends an open driver offers requests to, and the dispatch rule.

use std::sync::Arc;

use crate::backend::{Backend, BackendContext, BackendDescriptor, IoPath, ReportWhen, Resources};
use crate::completion::{Completion, Submit};
use crate::error::{Error, ErrorKind, Result};
use crate::policy::IoPolicy;
use crate::request::IoRequest;
use crate::routes::RouteCounters;

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
                log::warn!("backend {:?} failed to start: {e}", d.name);
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
        Ok(Registry {
            routes: Arc::new(RouteCounters::new(backends.len())),
            backends,
        })
    }
}

/// What one backend reports of its own for statistics ([`Backend::report`]): its mechanism and
/// its named counters.
pub type BackendOwnCounts = (Option<&'static str>, Vec<(&'static str, u64)>);

/// The backends of an open driver, in the order requests are offered to them.
#[derive(Debug)]
pub struct Registry {
    backends: Vec<Entry>,
    /// Declines, failures and failovers per backend.
    routes: Arc<RouteCounters>,
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

    /// The declines, failures and failovers counters (a [`crate::Stats`] turns them on).
    pub fn routes(&self) -> &Arc<RouteCounters> {
        &self.routes
    }

    /// What each backend moves bytes through and its own counters ([`Backend::report`]), in
    /// offer order.
    pub fn mechanisms(&self) -> Vec<BackendOwnCounts> {
        self.backends
            .iter()
            .map(|e| {
                let report = e.backend.report(ReportWhen::Statistics);
                (report.mechanism, report.counters)
            })
            .collect()
    }

    /// The path of the backend at `index` ([`Dispatched::backend_index`]).
    pub fn path_of(&self, index: usize) -> Option<IoPath> {
        self.backends.get(index).map(|e| e.path)
    }

    /// What each backend holds, in offer order.
    pub fn resources(&self) -> Vec<(&'static str, Resources)> {
        self.backends
            .iter()
            .map(|e| {
                (
                    e.backend.name(),
                    e.backend.report(ReportWhen::Now).resources,
                )
            })
            .collect()
    }

    /// Wait until every backend's background work for earlier requests is done
    /// ([`ReportWhen::Settled`]).
    pub fn settle(&self) {
        for e in &self.backends {
            e.backend.report(ReportWhen::Settled);
        }
    }

    /// Run `req` on the first backend that accepts it and wait for it: [`Registry::submit`]
    /// then [`Submitted::finish`]. The synchronous path: the backend may do the work on the
    /// calling thread.
    pub fn dispatch(&self, req: &IoRequest<'_>) -> Result<Dispatched> {
        self.submit(req, Submit::Wait)?.finish(self, req)
    }

    /// Submit `req` to the first backend that accepts it. When every backend declines, the
    /// answer is `InternalError` naming each decline.
    ///
    /// The file's [`IoPolicy`], read once here, holds for the request's whole life (its
    /// failovers included): under [`IoPolicy::DirectOnly`] only direct backends are offered it,
    /// and when none runs it the answer is `IoNotSupported`, naming why each backend did not.
    pub fn submit(&self, req: &IoRequest<'_>, how: Submit) -> Result<Submitted> {
        self.submit_from(0, req, how, Vec::new(), req.file.io_policy())
    }

    /// Offer `req` to the backends from `first` on. `failovers` holds, by backend position, why
    /// each backend that already took the request gave it up. Declines are counted and logged,
    /// not kept: a request that some backend accepts (nearly every one) formats nothing, and
    /// the error of one that none accepts asks each backend again for its decline.
    fn submit_from(
        &self,
        first: usize,
        req: &IoRequest<'_>,
        how: Submit,
        failovers: Vec<(usize, String)>,
        policy: IoPolicy,
    ) -> Result<Submitted> {
        for (index, e) in self.backends.iter().enumerate().skip(first) {
            if !policy_admits(policy, e.path) {
                continue;
            }
            match e.backend.accepts(req) {
                Ok(()) => {
                    log::debug!(
                        "{} of {} bytes at file offset {}: {} runs it ({})",
                        req.op.name(),
                        req.size(),
                        req.file_offset,
                        e.backend.name(),
                        e.path.name()
                    );
                    return Ok(Submitted {
                        index,
                        how,
                        completion: e.backend.submit(req, how),
                        failovers,
                        policy,
                    });
                }
                Err(decline) => {
                    log::debug!(
                        "{} of {} bytes at file offset {}: {} declines: {decline}",
                        req.op.name(),
                        req.size(),
                        req.file_offset,
                        e.backend.name()
                    );
                    self.routes.declined(index, &decline);
                }
            }
        }
        if policy == IoPolicy::DirectOnly {
            self.routes.refused_by_policy();
            return Err(Error::new(
                ErrorKind::IoNotSupported,
                format!(
                    "the file handle's policy is direct only and no direct backend ran the \
                     request ({})",
                    self.why_none_ran(req, &failovers, policy)
                ),
            ));
        }
        Err(Error::new(
            ErrorKind::InternalError,
            if self.backends.is_empty() {
                "no backend is registered".to_string()
            } else {
                format!(
                    "no backend ran the request ({})",
                    self.why_none_ran(req, &failovers, policy)
                )
            },
        ))
    }

    /// Why no backend ran `req`, backend by backend in registry order: why the ones that took it
    /// gave it up (`failovers`), and the decline of each other one.
    fn why_none_ran(
        &self,
        req: &IoRequest<'_>,
        failovers: &[(usize, String)],
        policy: IoPolicy,
    ) -> String {
        let mut reasons = Vec::new();
        for (index, e) in self.backends.iter().enumerate() {
            match failovers.iter().find(|(i, _)| *i == index) {
                Some((_, why)) => reasons.push(why.clone()),
                None if !policy_admits(policy, e.path) => reasons.push(format!(
                    "{}: {} path, not allowed by the {policy} policy",
                    e.backend.name(),
                    e.path.name()
                )),
                None => {
                    if let Err(decline) = e.backend.accepts(req) {
                        reasons.push(format!("{}: {decline}", e.backend.name()));
                    }
                }
            }
        }
        reasons.join("; ")
    }
}

/// A request submitted to one backend of a [`Registry`]. It holds neither its registry nor its
/// request: [`Submitted::finish`] and [`Submitted::poll`] are handed both. A batch keeps each
/// submission beside the validated request that owns what the request points to, so a
/// submission that borrowed them would borrow from its own neighbour, and one that shared them
/// would add a reference count to every request.
#[derive(Debug)]
pub struct Submitted {
    index: usize,
    how: Submit,
    completion: Completion,
    /// Why each backend that took the request before gave it up, by position.
    failovers: Vec<(usize, String)>,
    /// The file's policy when the request was submitted.
    policy: IoPolicy,
}

impl Submitted {
    /// The backend running the request, as its position in the registry.
    pub fn backend_index(&self) -> usize {
        self.index
    }

    /// Whether the request has finished (finishing it then does not wait, unless it fails
    /// over). Never blocks.
    pub fn is_finished(&self) -> bool {
        self.completion.is_finished()
    }

    /// Wait for the request. A failure that is eligible for failover (see
    /// [`Error::is_failover_eligible`]) and moved no bytes hands the whole request to the next
    /// accepting backend of `registry` (the one it was submitted through, with the same `req`);
    /// any other failure is returned as is.
    pub fn finish(self, registry: &Registry, req: &IoRequest<'_>) -> Result<Dispatched> {
        let mut current = self;
        loop {
            match current.settle(registry, req) {
                Step::Done(result) => return result,
                Step::Again(next) => current = next,
            }
        }
    }

    /// [`Submitted::finish`] without waiting: the result if the request has finished (after
    /// any failover that finished inside `submit`), else the request back, still in flight
    /// (possibly on the next backend, when it failed over to one that queued it).
    pub fn poll(
        self,
        registry: &Registry,
        req: &IoRequest<'_>,
    ) -> std::result::Result<Result<Dispatched>, Submitted> {
        let mut current = self;
        loop {
            if !current.completion.is_finished() {
                return Err(current);
            }
            match current.settle(registry, req) {
                Step::Done(result) => return Ok(result),
                Step::Again(next) => current = next,
            }
        }
    }

    /// Withdraw the request if it has not started ([`Completion::cancel`]): it then finishes
    /// at once with no bytes moved.
    pub fn cancel(&self) -> bool {
        self.completion.cancel()
    }

    /// Wait for the completion; its outcome is the result, or the request failed over.
    fn settle(self, registry: &Registry, req: &IoRequest<'_>) -> Step {
        let Submitted {
            index,
            how,
            completion,
            mut failovers,
            policy,
        } = self;
        let name = registry.backends[index].backend.name();
        match completion.wait() {
            Ok(bytes) => Step::Done(Ok(Dispatched {
                bytes,
                backend: name,
                backend_index: index,
                path: registry.backends[index].path,
            })),
            Err(f) if f.bytes_moved == 0 && f.error.is_failover_eligible() => {
                log::warn!(
                    "{} of {} bytes at file offset {}: {name} failed ({}), the next backend \
                     takes it over",
                    req.op.name(),
                    req.size(),
                    req.file_offset,
                    f.error
                );
                registry.routes.failed(index);
                failovers.push((index, format!("{name}: failed over after {}", f.error)));
                match registry.submit_from(index + 1, req, how, failovers, policy) {
                    Ok(next) => {
                        registry.routes.failed_over(index, next.index);
                        Step::Again(next)
                    }
                    Err(e) => Step::Done(Err(e)),
                }
            }
            Err(f) => {
                registry.routes.failed(index);
                Step::Done(Err(f.error))
            }
        }
    }
}

/// Whether `policy` lets a backend of `path` run a request.
fn policy_admits(policy: IoPolicy, path: IoPath) -> bool {
    match policy {
        IoPolicy::Fallback => true,
        IoPolicy::DirectOnly => path == IoPath::Direct,
    }
}

/// Where a finished completion leaves its request.
enum Step {
    Done(Result<Dispatched>),
    Again(Submitted),
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

/// Register a backend crate's backend, the one way every backend registers: declares the crate's
/// `NAME`, its `DESCRIPTOR` (the name, priority, path and constructor given) and a
/// `register(&mut RegistryBuilder)` that adds it to an explicitly built registry, and submits the
/// descriptor to `inventory` (through this crate's re-export, so the versions match). Both ways
/// are needed: the linker leaves out a crate nothing names, and its `inventory` entry with it.
///
/// ```
/// use std::sync::Arc;
/// use hipfile_core::*;
///
/// #[derive(Debug)]
/// struct Refuses;
/// impl Backend for Refuses {
///     fn name(&self) -> &'static str { NAME }
///     fn accepts(&self, _: &IoRequest<'_>) -> Result<(), Decline> {
///         Err(Decline::Other("never".into()))
///     }
///     fn submit(&self, _: &IoRequest<'_>, _: Submit) -> Completion { unreachable!() }
/// }
///
/// hipfile_core::register_backend! {
///     name: "refuses",
///     priority: priority::FALLBACK - 1,
///     path: IoPath::Staged,
///     init: |_ctx| Ok(Arc::new(Refuses)),
/// }
///
/// let mut builder = RegistryBuilder::new();
/// register(&mut builder)?;
/// assert_eq!(DESCRIPTOR.name, "refuses");
/// assert_eq!(builder.ranked()[0].name, NAME);
/// # Ok::<(), Error>(())
/// ```
#[macro_export]
macro_rules! register_backend {
    (
        name: $name:expr,
        priority: $priority:expr,
        path: $path:expr,
        init: $init:expr $(,)?
    ) => {
        /// The backend's name, as `HIPFILE_BACKENDS` and the statistics name it.
        pub const NAME: &str = $name;

        /// The descriptor submitted to `inventory` and added by [`register`].
        pub const DESCRIPTOR: $crate::BackendDescriptor = $crate::BackendDescriptor {
            name: NAME,
            priority: $priority,
            path: $path,
            init: $init,
        };

        $crate::inventory::submit! { DESCRIPTOR }

        /// Add the backend to an explicitly built registry (a second registration of the name
        /// is refused, as every duplicate is).
        pub fn register(builder: &mut $crate::RegistryBuilder) -> $crate::Result<()> {
            builder.add(DESCRIPTOR).map(|_| ())
        }
    };
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    use hipfile_hip::{DeviceBuffer, DeviceRange, GpuRuntime};
    use rustix::io::Errno;

    use super::*;
    use crate::completion::{IoFailure, IoOutcome, PendingIo};
    use crate::config::LiveSettings;
    use crate::config::{EnvConfig, Settings};
    use crate::decline::Decline;
    use crate::file::RegisteredFile;
    use crate::io::IoOp;
    use crate::io::PosixIo;
    use crate::request::OwnedRequest;

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

    /// Work a test finishes by hand: `done` says whether it has finished, `waited` records
    /// whether anyone waited for it.
    #[derive(Debug)]
    struct Later {
        outcome: IoOutcome,
        done: Arc<AtomicBool>,
        waited: Arc<AtomicBool>,
    }

    impl PendingIo for Later {
        fn wait(self: Box<Self>) -> IoOutcome {
            self.waited.store(true, Ordering::SeqCst);
            self.done.store(true, Ordering::SeqCst);
            self.outcome
        }
        fn is_finished(&self) -> bool {
            self.done.load(Ordering::SeqCst)
        }
    }

    /// The flags of one [`Later`].
    #[derive(Clone, Default)]
    struct Flags {
        done: Arc<AtomicBool>,
        waited: Arc<AtomicBool>,
    }

    impl Flags {
        fn pending(&self, outcome: IoOutcome) -> Completion {
            Completion::pending(Box::new(Later {
                outcome,
                done: Arc::clone(&self.done),
                waited: Arc::clone(&self.waited),
            }))
        }
        fn finish(&self) {
            self.done.store(true, Ordering::SeqCst);
        }
        fn waited(&self) -> bool {
            self.waited.load(Ordering::SeqCst)
        }
    }

    /// Accepts every request and answers each submission with the next scripted completion;
    /// records how each was submitted.
    #[derive(Debug)]
    struct Scripted {
        name: &'static str,
        script: Mutex<VecDeque<Completion>>,
        submissions: Mutex<Vec<Submit>>,
    }

    impl Scripted {
        fn new(name: &'static str, script: Vec<Completion>) -> Arc<Self> {
            Arc::new(Scripted {
                name,
                script: Mutex::new(script.into()),
                submissions: Mutex::new(Vec::new()),
            })
        }
        fn submissions(&self) -> Vec<Submit> {
            self.submissions.lock().unwrap().clone()
        }
    }

    impl Backend for Scripted {
        fn name(&self) -> &'static str {
            self.name
        }
        fn accepts(&self, _req: &IoRequest<'_>) -> std::result::Result<(), Decline> {
            Ok(())
        }
        fn submit(&self, _req: &IoRequest<'_>, how: Submit) -> Completion {
            self.submissions.lock().unwrap().push(how);
            self.script
                .lock()
                .unwrap()
                .pop_front()
                .expect("a scripted completion for every submission")
        }
    }

    /// A direct backend `a` offered requests before a staged backend `b`.
    fn registry(a: &Arc<Scripted>, b: &Arc<Scripted>) -> Registry {
        let entry = |backend: &Arc<Scripted>, path| Entry {
            backend: Arc::clone(backend) as Arc<dyn Backend>,
            path,
        };
        Registry {
            backends: vec![entry(a, IoPath::Direct), entry(b, IoPath::Staged)],
            routes: Arc::new(RouteCounters::new(2)),
        }
    }

    /// What an [`IoRequest`] borrows: a registered file and 4096 bytes of simulated device memory.
    struct World {
        _dir: tempfile::TempDir,
        _file: std::fs::File,
        _memory: DeviceBuffer,
        request: OwnedRequest,
    }

    impl World {
        fn new() -> World {
            let dir = tempfile::tempdir().unwrap();
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(dir.path().join("data"))
                .unwrap();
            let registered = Arc::new(RegisteredFile::open(file.as_raw_fd()).unwrap());
            let runtime: Arc<dyn GpuRuntime> = Arc::new(hipfile_hip::sim::SimRuntime::default());
            let memory = DeviceBuffer::new(Arc::clone(&runtime), 4096).unwrap();
            let range = DeviceRange::query(&runtime, memory.ptr(), 4096).unwrap();
            let settings = Arc::new(Settings::default());
            let env = EnvConfig::default();
            World {
                _dir: dir,
                _file: file,
                _memory: memory,
                request: OwnedRequest {
                    op: IoOp::Read,
                    file: registered,
                    memory: range.into(),
                    file_offset: 0,
                    append: false,
                    registered_buffer: false,
                    compat: settings.compat_mode(&env),
                    settings,
                    env,
                    doorbell: None,
                    stream_ordered: false,
                    file_stamp: None,
                },
            }
        }

        fn request(&self) -> IoRequest<'_> {
            self.request.request()
        }
    }

    fn failure(errno: Errno, bytes_moved: usize) -> IoOutcome {
        Err(IoFailure::new(
            Error::os(errno.raw_os_error(), "scripted"),
            bytes_moved,
        ))
    }

    #[test]
    fn a_pending_failure_that_moved_nothing_fails_over_to_the_next_backend() {
        let world = World::new();
        let req = world.request();
        let first = Flags::default();
        let a = Scripted::new("a", vec![first.pending(failure(Errno::NODEV, 0))]);
        let b = Scripted::new("b", vec![Completion::ready(Ok(4096))]);
        let registry = registry(&a, &b);
        let submitted = registry.submit(&req, Submit::Queue).unwrap();
        assert_eq!(submitted.backend_index(), 0);
        assert!(!submitted.is_finished());
        assert!(
            b.submissions().is_empty(),
            "nothing fails over before it fails"
        );
        let stats = crate::Stats::new(1, &registry.paths(), Arc::clone(registry.routes()), 1);
        let done = submitted.finish(&registry, &req).unwrap();
        let counts = stats.snapshot();
        assert_eq!(counts.backend("a").unwrap().failed_over_to("b"), 1);
        assert_eq!(counts.backend("a").unwrap().errors, 1);
        assert_eq!(counts.backend("b").unwrap().errors, 0);
        assert!(first.waited());
        assert_eq!(
            done,
            Dispatched {
                bytes: 4096,
                backend: "b",
                backend_index: 1,
                path: IoPath::Staged,
            }
        );
        assert_eq!(a.submissions(), [Submit::Queue]);
        assert_eq!(
            b.submissions(),
            [Submit::Queue],
            "the rerun is submitted the same way"
        );
    }

    #[test]
    fn a_pending_failure_after_bytes_moved_or_not_eligible_is_the_callers() {
        let world = World::new();
        let req = world.request();
        for (errno, moved) in [(Errno::NODEV, 512), (Errno::REMOTEIO, 1), (Errno::IO, 0)] {
            let flags = Flags::default();
            let a = Scripted::new("a", vec![flags.pending(failure(errno, moved))]);
            let b = Scripted::new("b", vec![Completion::ready(Ok(4096))]);
            let registry = registry(&a, &b);
            let stats = crate::Stats::new(1, &registry.paths(), Arc::clone(registry.routes()), 1);
            let submitted = registry.submit(&req, Submit::Queue).unwrap();
            let e = submitted.finish(&registry, &req).unwrap_err();
            let counts = stats.snapshot();
            assert_eq!(counts.backend("a").unwrap().errors, 1);
            assert!(counts.backend("a").unwrap().failovers.is_empty());
            assert_eq!(
                e.errno(),
                Some(errno.raw_os_error()),
                "{errno:?} after {moved}"
            );
            assert!(flags.waited());
            assert!(
                b.submissions().is_empty(),
                "{errno:?} after {moved} failed over"
            );
        }
    }

    #[test]
    fn a_request_no_backend_runs_names_each_decline_and_each_failover_in_order() {
        let world = World::new();
        let req = world.request();
        let entry = |backend: Arc<dyn Backend>| Entry {
            backend,
            path: IoPath::Staged,
        };
        let idle = |name| -> Arc<dyn Backend> { Arc::new(Idle(name)) };
        let none = Registry {
            backends: vec![entry(idle("a")), entry(idle("b"))],
            routes: Arc::new(RouteCounters::new(2)),
        };
        let e = none.submit(&req, Submit::Wait).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InternalError);
        assert_eq!(e.context(), "no backend ran the request (a: idle; b: idle)");
        // The first declines, the second takes the request and gives it up, the third declines.
        let failing = Scripted::new("failing", vec![Completion::ready(failure(Errno::NODEV, 0))]);
        let chain = Registry {
            backends: vec![
                entry(idle("a")),
                entry(Arc::clone(&failing) as Arc<dyn Backend>),
                entry(idle("c")),
            ],
            routes: Arc::new(RouteCounters::new(3)),
        };
        let submitted = chain.submit(&req, Submit::Wait).unwrap();
        let e = submitted.finish(&chain, &req).unwrap_err();
        let why = e.context();
        assert!(
            why.starts_with("no backend ran the request (a: idle; failing: failed over after "),
            "{why}"
        );
        assert!(why.ends_with("; c: idle)"), "{why}");
        assert_eq!(failing.submissions(), [Submit::Wait]);
    }

    #[test]
    fn poll_hands_a_pending_completion_back_until_it_has_finished() {
        let flags = Flags::default();
        let completion = match flags.pending(Ok(7)).poll() {
            Err(back) => back,
            Ok(outcome) => panic!("a pending completion polled as finished: {outcome:?}"),
        };
        assert!(!flags.waited(), "polling never waits");
        let completion = completion.poll().expect_err("still pending");
        flags.finish();
        assert_eq!(completion.poll().ok().map(Result::ok), Some(Some(7)));
        assert!(
            flags.waited(),
            "a finished completion's outcome is collected by waiting"
        );

        // The same through the registry: polled unfinished, then finished without failover.
        let world = World::new();
        let req = world.request();
        let flags = Flags::default();
        let a = Scripted::new("a", vec![flags.pending(Ok(4096))]);
        let b = Scripted::new("b", Vec::new());
        let registry = registry(&a, &b);
        let submitted = registry.submit(&req, Submit::Queue).unwrap();
        assert!(!submitted.is_finished());
        assert!(!submitted.is_finished());
        assert!(!flags.waited());
        flags.finish();
        assert!(submitted.is_finished());
        let done = submitted.finish(&registry, &req).unwrap();
        assert_eq!((done.bytes, done.backend), (4096, "a"));
    }

    #[test]
    fn dropping_an_unfinished_completion_waits_for_it() {
        let flags = Flags::default();
        drop(flags.pending(Ok(1)));
        assert!(flags.waited());

        let flags = Flags::default();
        let completion = flags.pending(Ok(1)).poll().expect_err("pending");
        drop(completion);
        assert!(
            flags.waited(),
            "a completion polled back still waits when dropped"
        );

        let world = World::new();
        let req = world.request();
        let flags = Flags::default();
        let a = Scripted::new("a", vec![flags.pending(Ok(4096))]);
        let b = Scripted::new("b", Vec::new());
        let registry = registry(&a, &b);
        let submitted = registry.submit(&req, Submit::Queue).unwrap();
        assert!(!flags.waited());
        drop(submitted);
        assert!(
            flags.waited(),
            "dropping a submitted request waits for its completion"
        );
    }
}
