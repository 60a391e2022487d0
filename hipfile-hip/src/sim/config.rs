//! How a simulated GPU is built ([`SimConfig`]) and which ROCm ABI generation it imitates
//! ([`SimAbi`]), which decides what the C library built from it reports.

/// Which ROCm ABI generation the simulator imitates (matters to the C library built from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimAbi {
    /// ROCm 5.x: `hipMemoryType` Host=0, Device=1, Array=2, Unified=3, Managed=4.
    Rocm5,
    /// ROCm 6 and later: Unregistered=0, Host=1, Device=2, Managed=3, Array=10, Unified=11.
    Rocm6,
}

impl SimAbi {
    /// What `hipRuntimeGetVersion` reports for this generation.
    pub fn runtime_version(self) -> i32 {
        match self {
            SimAbi::Rocm5 => 50_221_153,
            SimAbi::Rocm6 => 60_342_134,
        }
    }
}

/// How to build a simulated GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Number of simulated devices (at least 1).
    pub devices: i32,
    /// The ABI generation reported.
    pub abi: SimAbi,
    /// Whether the simulated platform offers a P2P driver ([`SimP2p`](super::SimP2p)).
    pub p2p: bool,
    /// Whether its streams can wait for a value in host memory
    /// ([`GpuRuntime::stream_wait_value`]); without, that call fails with `hipErrorNotSupported`.
    ///
    /// [`GpuRuntime::stream_wait_value`]: crate::GpuRuntime::stream_wait_value
    pub memops: bool,
    /// Whether it makes contexts of the library's own ([`GpuRuntime::context_create`]), as the
    /// CUDA platform does; without, that call answers `None`, as the HIP platform does.
    ///
    /// [`GpuRuntime::context_create`]: crate::GpuRuntime::context_create
    pub own_contexts: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            devices: 1,
            abi: SimAbi::Rocm6,
            p2p: true,
            memops: true,
            own_contexts: true,
        }
    }
}

impl SimConfig {
    /// The configuration that `lookup` (a variable's name to its value) gives:
    /// `HIPFILE_SIM_DEVICES` (a count from 1 to 64, default 1), `HIPFILE_SIM_ROCM` (`5` or `6`,
    /// default 6), `HIPFILE_SIM_P2P` (`false` turns the P2P driver off; default on) and
    /// `HIPFILE_SIM_MEMOPS` (`false` or `0` turns stream memory operations off; default on).
    /// Unparseable values fall back to the defaults. [`crate::PlatformOptions`] reads these with
    /// the rest of the platform options.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut cfg = SimConfig::default();
        if let Some(n) = lookup("HIPFILE_SIM_DEVICES")
            .and_then(|v| v.trim().parse::<i32>().ok())
            .filter(|n| *n >= 1 && *n <= 64)
        {
            cfg.devices = n;
        }
        if lookup("HIPFILE_SIM_ROCM").is_some_and(|v| v.trim() == "5") {
            cfg.abi = SimAbi::Rocm5;
        }
        if lookup("HIPFILE_SIM_P2P").is_some_and(|v| v.trim().eq_ignore_ascii_case("false")) {
            cfg.p2p = false;
        }
        if lookup("HIPFILE_SIM_MEMOPS").is_some_and(|v| {
            let v = v.trim();
            v == "0" || v.eq_ignore_ascii_case("false")
        }) {
            cfg.memops = false;
        }
        cfg
    }
}
