//! Which paths a request may take: the per-file-handle [`IoPolicy`] (fall back to the staged
//! engine, or the direct path or an error) and the driver-wide set of direct mechanisms that may
//! be used ([`P2pMechanisms`], what cuFile's `cuFileDriverSetP2PFlags` sets).
//!
//! The policy is enforced in one place, the registry's dispatch ([`crate::Registry::submit`]):
//! under [`IoPolicy::DirectOnly`] only backends of [`crate::IoPath::Direct`] are offered the
//! handle's requests (synchronous ones, batch entries and stream-ordered ops alike); when none
//! of them runs it, the request fails with [`crate::ErrorKind::IoNotSupported`] and a message
//! naming each backend's reason, and no byte is moved. The mechanisms are the direct backend's
//! business: the fastpath declines ([`crate::Decline::P2pMechanismMasked`]) when the platform's
//! P2P driver is not in the set, and the request then falls back or fails closed per handle.

use std::fmt;

/// How the requests of one registered file may be served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IoPolicy {
    /// The highest-ranked accepting backend runs the request, and a failure eligible for
    /// failover moves it to the next one: the direct path where it can, the staged engine
    /// where it cannot. The default, and upstream hipFile's behaviour.
    #[default]
    Fallback,
    /// The direct path or an error: only direct backends may run the requests; none is staged
    /// through host memory, not even after a direct backend failed.
    DirectOnly,
}

impl IoPolicy {
    /// Every policy, in the order of their C values ([`IoPolicy::code`]).
    pub const ALL: [IoPolicy; 2] = [IoPolicy::Fallback, IoPolicy::DirectOnly];

    /// `fallback` or `direct_only`: the names the environment, Python and the tools use.
    pub fn name(self) -> &'static str {
        match self {
            IoPolicy::Fallback => "fallback",
            IoPolicy::DirectOnly => "direct_only",
        }
    }

    /// The policy named `name` ([`IoPolicy::name`], any case; `direct` also names
    /// [`IoPolicy::DirectOnly`]).
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "fallback" => Some(IoPolicy::Fallback),
            "direct_only" | "direct" => Some(IoPolicy::DirectOnly),
            _ => None,
        }
    }

    /// The value of the C enum `hipFileIoPolicy_t` (0: fall back, 1: direct only).
    pub fn code(self) -> u32 {
        match self {
            IoPolicy::Fallback => 0,
            IoPolicy::DirectOnly => 1,
        }
    }

    /// The policy whose C value is `code`; `None` for any other value.
    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.code() == code)
    }
}

impl fmt::Display for IoPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One direct (P2P) mechanism a platform's P2P driver moves bytes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum P2pMechanism {
    /// AMD: the KFD's direct IO (`hipAmdFileRead/Write`), the kernel DMAing between the
    /// storage device and VRAM over PCI peer-to-peer.
    AmdKfd,
    /// NVIDIA GPUDirect Storage through the nvidia-fs kernel driver (NVIDIA's libcufile with
    /// nvidia-fs loaded).
    NvidiaFs,
    /// The simulated GPU's P2P driver: O_DIRECT straight into simulated device memory. It
    /// stands for a PCI peer-to-peer DMA by the kernel (no nvidia-fs, no dma-buf).
    Sim,
}

impl P2pMechanism {
    /// Every mechanism, in the order of their bits.
    pub const ALL: [P2pMechanism; 3] = [
        P2pMechanism::AmdKfd,
        P2pMechanism::NvidiaFs,
        P2pMechanism::Sim,
    ];

    /// Its bit in [`P2pMechanisms`].
    pub fn bit(self) -> u32 {
        match self {
            P2pMechanism::AmdKfd => 1,
            P2pMechanism::NvidiaFs => 1 << 1,
            P2pMechanism::Sim => 1 << 2,
        }
    }

    /// The name of the platform P2P driver that is this mechanism
    /// (`hipfile_hip::P2pDriver::name`): `amd-kfd`, `cufile`, `sim`.
    pub fn driver_name(self) -> &'static str {
        match self {
            P2pMechanism::AmdKfd => "amd-kfd",
            P2pMechanism::NvidiaFs => "cufile",
            P2pMechanism::Sim => "sim",
        }
    }

    /// The mechanism of the platform P2P driver named `name`; `None` for a driver this list
    /// does not know.
    pub fn of_driver(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.driver_name() == name)
    }

    /// A short name for reports and settings: `amd_kfd`, `nvidia_fs`, `sim`.
    pub fn name(self) -> &'static str {
        match self {
            P2pMechanism::AmdKfd => "amd_kfd",
            P2pMechanism::NvidiaFs => "nvidia_fs",
            P2pMechanism::Sim => "sim",
        }
    }

    /// The cuFile P2P flags ([`cufile_p2p`]) that allow this mechanism.
    pub fn cufile_flags(self) -> u32 {
        match self {
            P2pMechanism::AmdKfd => cufile_p2p::PCI_P2PDMA | cufile_p2p::DMABUF,
            P2pMechanism::NvidiaFs => cufile_p2p::NVFS,
            P2pMechanism::Sim => cufile_p2p::PCI_P2PDMA,
        }
    }
}

/// cuFile 1.16's P2P flags (`CUfileP2PFlags_t`, `cuFileDriverSetP2PFlags`): bit positions
/// `CUFILE_P2PDMA` = 0, `CUFILE_NVFS` = 1, `CUFILE_DMABUF` = 2, `CUFILE_C2C` = 3,
/// `CUFILE_NVIDIA_PEERMEM` = 4, and a flag set is the OR of `1 << position`
/// (`CU_FILE_P2P_FLAG_PCI_P2PDMA` = 1, `..._NVFS` = 2, `..._DMABUF` = 4, `..._C2C` = 8; cuFile
/// names no mask constant for `NVIDIA_PEERMEM`, whose bit is 16).
pub mod cufile_p2p {
    /// PCI peer-to-peer DMA by the kernel (`1 << CUFILE_P2PDMA`).
    pub const PCI_P2PDMA: u32 = 1;
    /// nvidia-fs (`1 << CUFILE_NVFS`).
    pub const NVFS: u32 = 1 << 1;
    /// dma-buf (`1 << CUFILE_DMABUF`).
    pub const DMABUF: u32 = 1 << 2;
    /// Chip-to-chip on Grace systems (`1 << CUFILE_C2C`). No mechanism of ours.
    pub const C2C: u32 = 1 << 3;
    /// nvidia-peermem, for RDMA file systems (`1 << CUFILE_NVIDIA_PEERMEM`). No mechanism of
    /// ours.
    pub const NVIDIA_PEERMEM: u32 = 1 << 4;
    /// Every flag cuFile 1.16 defines.
    pub const ALL: u32 = PCI_P2PDMA | NVFS | DMABUF | C2C | NVIDIA_PEERMEM;
}

/// The set of direct mechanisms the driver may use ([`crate::Settings::p2p_mechanisms`]); all
/// of them by default. A set without the platform's mechanism makes the fastpath decline every
/// request, which then falls back or fails closed per handle ([`IoPolicy`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct P2pMechanisms(u32);

impl P2pMechanisms {
    /// No direct mechanism.
    pub const NONE: P2pMechanisms = P2pMechanisms(0);
    /// Every direct mechanism (the default).
    pub const ALL: P2pMechanisms = P2pMechanisms(1 | 1 << 1 | 1 << 2);

    /// The set of the bits `bits` ([`P2pMechanism::bit`]); `None` when a bit names no
    /// mechanism.
    pub fn from_bits(bits: u32) -> Option<Self> {
        (bits & !Self::ALL.0 == 0).then_some(P2pMechanisms(bits))
    }

    /// The bits of the set.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// The set of `mechanisms`.
    pub fn of(mechanisms: &[P2pMechanism]) -> Self {
        P2pMechanisms(mechanisms.iter().fold(0, |bits, m| bits | m.bit()))
    }

    /// Whether `mechanism` may be used.
    pub fn allows(self, mechanism: P2pMechanism) -> bool {
        self.0 & mechanism.bit() != 0
    }

    /// Whether the platform P2P driver named `name` may be used; a driver this list does not
    /// know is never allowed, so nothing goes direct through a mechanism the set cannot name.
    pub fn allows_driver(self, name: &str) -> bool {
        P2pMechanism::of_driver(name).is_some_and(|m| self.allows(m))
    }

    /// The mechanisms in the set, in bit order.
    pub fn iter(self) -> impl Iterator<Item = P2pMechanism> {
        P2pMechanism::ALL
            .into_iter()
            .filter(move |m| self.allows(*m))
    }

    /// The names of the mechanisms in the set ([`P2pMechanism::name`]).
    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(P2pMechanism::name).collect()
    }

    /// Parse a comma separated list of names ([`P2pMechanism::name`]; `all` and `none` name
    /// the whole and the empty set); `None` when a name is unknown.
    pub fn parse(list: &str) -> Option<Self> {
        let mut set = P2pMechanisms::NONE;
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            set.0 |= match name.to_ascii_lowercase().as_str() {
                "all" => Self::ALL.0,
                "none" => 0,
                other => P2pMechanism::ALL
                    .into_iter()
                    .find(|m| m.name() == other)?
                    .bit(),
            };
        }
        Some(set)
    }

    /// The mechanisms cuFile P2P `flags` ([`cufile_p2p`]) allow: 0, cuFile's default (no flag
    /// set: the driver's own mode), allows every mechanism; otherwise each mechanism one of
    /// whose flags ([`P2pMechanism::cufile_flags`]) is set. `CUFILE_C2C` and
    /// `CUFILE_NVIDIA_PEERMEM` allow nothing of ours, so a set of only those masks every
    /// direct path. `None` when a bit is not a cuFile 1.16 flag.
    pub fn from_cufile_flags(flags: u32) -> Option<Self> {
        if flags & !cufile_p2p::ALL != 0 {
            return None;
        }
        if flags == 0 {
            return Some(Self::ALL);
        }
        Some(P2pMechanisms(
            P2pMechanism::ALL
                .into_iter()
                .filter(|m| m.cufile_flags() & flags != 0)
                .fold(0, |bits, m| bits | m.bit()),
        ))
    }
}

impl Default for P2pMechanisms {
    fn default() -> Self {
        Self::ALL
    }
}

impl fmt::Debug for P2pMechanisms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

impl fmt::Display for P2pMechanisms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("none");
        }
        f.write_str(&self.names().join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_round_trip_through_names_and_c_values() {
        for p in IoPolicy::ALL {
            assert_eq!(IoPolicy::from_name(p.name()), Some(p));
            assert_eq!(IoPolicy::from_code(p.code()), Some(p));
        }
        assert_eq!(IoPolicy::default(), IoPolicy::Fallback);
        assert_eq!(IoPolicy::from_name(" Direct "), Some(IoPolicy::DirectOnly));
        assert_eq!(IoPolicy::from_name("staged"), None);
        assert_eq!(IoPolicy::from_code(2), None);
        assert_eq!(IoPolicy::from_code(u32::MAX), None);
    }

    #[test]
    fn mechanisms_name_the_platform_drivers_and_refuse_unknown_bits() {
        assert_eq!(P2pMechanisms::default(), P2pMechanisms::ALL);
        for m in P2pMechanism::ALL {
            assert_eq!(P2pMechanism::of_driver(m.driver_name()), Some(m));
            assert!(P2pMechanisms::ALL.allows_driver(m.driver_name()));
            assert!(!P2pMechanisms::NONE.allows_driver(m.driver_name()));
            let only = P2pMechanisms::of(&[m]);
            assert_eq!(P2pMechanisms::from_bits(only.bits()), Some(only));
            assert_eq!(only.names(), [m.name()]);
        }
        assert!(!P2pMechanisms::ALL.allows_driver("someone-else"));
        assert_eq!(P2pMechanisms::from_bits(8), None);
        assert_eq!(P2pMechanisms::from_bits(u32::MAX), None);
        assert_eq!(P2pMechanisms::NONE.to_string(), "none");
        assert_eq!(P2pMechanisms::ALL.to_string(), "amd_kfd,nvidia_fs,sim");
    }

    #[test]
    fn mechanism_lists_parse_by_name() {
        assert_eq!(P2pMechanisms::parse("all"), Some(P2pMechanisms::ALL));
        assert_eq!(P2pMechanisms::parse("none"), Some(P2pMechanisms::NONE));
        assert_eq!(P2pMechanisms::parse(""), Some(P2pMechanisms::NONE));
        assert_eq!(
            P2pMechanisms::parse(" SIM , amd_kfd"),
            Some(P2pMechanisms::of(&[
                P2pMechanism::Sim,
                P2pMechanism::AmdKfd
            ]))
        );
        assert_eq!(P2pMechanisms::parse("sim,gds"), None);
    }

    #[test]
    fn the_statistics_document_carries_the_refusals_and_the_mechanisms() {
        let snap = crate::StatsSnapshot {
            refused_by_policy: 2,
            p2p_mechanisms: P2pMechanisms::of(&[P2pMechanism::Sim]).names(),
            ..crate::StatsSnapshot::default()
        };
        let doc = snap.to_json(1);
        assert_eq!(doc["refused_by_policy"], 2);
        assert_eq!(doc["p2p_mechanisms"], serde_json::json!(["sim"]));
    }

    #[test]
    fn cufile_flags_allow_the_mechanisms_they_name() {
        use cufile_p2p::*;
        let set = |flags| P2pMechanisms::from_cufile_flags(flags).unwrap();
        assert_eq!(set(0), P2pMechanisms::ALL, "no flag: the driver's own mode");
        assert_eq!(
            set(PCI_P2PDMA),
            P2pMechanisms::of(&[P2pMechanism::AmdKfd, P2pMechanism::Sim])
        );
        assert_eq!(set(NVFS), P2pMechanisms::of(&[P2pMechanism::NvidiaFs]));
        assert_eq!(set(DMABUF), P2pMechanisms::of(&[P2pMechanism::AmdKfd]));
        assert_eq!(set(C2C), P2pMechanisms::NONE);
        assert_eq!(set(NVIDIA_PEERMEM), P2pMechanisms::NONE);
        assert_eq!(set(C2C | NVIDIA_PEERMEM), P2pMechanisms::NONE);
        assert_eq!(set(ALL), P2pMechanisms::ALL);
        assert_eq!(P2pMechanisms::from_cufile_flags(1 << 5), None);
        assert_eq!(P2pMechanisms::from_cufile_flags(NVFS | 1 << 31), None);
    }
}
