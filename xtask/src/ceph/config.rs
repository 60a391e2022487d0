//! The cluster's `ceph.conf`, keyring and monitor map.

use std::process::{Command, Stdio};

use super::{Cluster, MARK, OSD_BYTES};

/// The keyring's path as a string argument.
pub fn key_path(cluster: &Cluster) -> Result<String, String> {
    cluster
        .keyring()
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| "the cluster directory is not UTF-8".to_string())
}

/// A UUID for the OSD, from the kernel's generator.
pub fn osd_uuid() -> Result<String, String> {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("/proc/sys/kernel/random/uuid: {e}"))
}

/// Makes the directory tree, `ceph.conf`, the keyring (with a key and its capabilities for
/// every daemon and client, so no daemon registers its own) and the monitor map.
pub fn write_config(cluster: &Cluster, (mon_port, rgw_port): (u16, u16)) -> Result<(), String> {
    let dir = cluster
        .dir
        .to_str()
        .ok_or("the cluster directory is not UTF-8")?;
    // Admin sockets are Unix sockets, whose paths hold at most 107 bytes.
    let longest = format!("{dir}/run/client.rgw.x.asok");
    if longest.len() > 107 {
        return Err(format!(
            "the cluster directory {dir} is too long for the daemons' admin sockets \
             ({longest} is over 107 bytes); set HIPFILE_CEPH_DIR to a shorter one"
        ));
    }
    for sub in [
        "", "log", "run", "crash", "mon/a", "mgr/x", "osd/0", "mds/a", "rgw", "mnt",
    ] {
        let path = cluster.dir.join(sub);
        std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let write = |name: &str, text: &str| {
        std::fs::write(cluster.path(name), text).map_err(|e| format!("{dir}/{name}: {e}"))
    };
    write(
        MARK,
        "a single-node Ceph cluster of `cargo xtask ceph up`\n",
    )?;
    let fsid = osd_uuid()?;
    write("ceph.conf", &config_text(dir, &fsid, mon_port, rgw_port))?;
    let keyring = key_path(cluster)?;
    for (i, (name, caps)) in KEYS.iter().enumerate() {
        let mut args = vec![keyring.as_str()];
        if i == 0 {
            args.push("--create-keyring");
        }
        args.extend_from_slice(&["--gen-key", "-n", name]);
        for (service, cap) in *caps {
            args.extend_from_slice(&["--cap", service, cap]);
        }
        run_quiet("ceph-authtool", &args)?;
    }
    let mon_addr = format!("[v2:127.0.0.1:{mon_port}]");
    let monmap = format!("{dir}/monmap");
    run_quiet(
        "monmaptool",
        &[
            "--create", "--fsid", &fsid, "--addv", "a", &mon_addr, &monmap,
        ],
    )
}

/// Every key of the cluster with its capabilities.
const KEYS: &[(&str, &[(&str, &str)])] = &[
    ("mon.", &[("mon", "allow *")]),
    (
        "client.admin",
        &[
            ("mon", "allow *"),
            ("osd", "allow *"),
            ("mds", "allow *"),
            ("mgr", "allow *"),
        ],
    ),
    (
        "mgr.x",
        &[
            ("mon", "allow profile mgr"),
            ("osd", "allow *"),
            ("mds", "allow *"),
        ],
    ),
    (
        "osd.0",
        &[
            ("mon", "allow profile osd"),
            ("mgr", "allow profile osd"),
            ("osd", "allow *"),
        ],
    ),
    (
        "mds.a",
        &[
            ("mon", "allow profile mds"),
            ("mgr", "allow profile mds"),
            ("osd", "allow *"),
            ("mds", "allow"),
        ],
    ),
    (
        "client.rgw.x",
        &[
            ("mon", "allow rw"),
            ("osd", "allow rwx"),
            ("mgr", "allow rw"),
        ],
    ),
    (
        "client.fuse",
        &[("mon", "allow r"), ("osd", "allow rw"), ("mds", "allow rw")],
    ),
];

/// The cluster's `ceph.conf`.
fn config_text(dir: &str, fsid: &str, mon_port: u16, rgw_port: u16) -> String {
    format!(
        "\
# A single-node test cluster of `cargo xtask ceph up`; `cargo xtask ceph down` removes it.
[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = {dir}/keyring
log file = {dir}/log/$name.log
admin socket = {dir}/run/$name.asok
pid file = {dir}/run/$name.pid
run dir = {dir}/run
crash dir = {dir}/crash
mon data = {dir}/mon/$id
mgr data = {dir}/mgr/$id
osd data = {dir}/osd/$id
mds data = {dir}/mds/$id
osd objectstore = memstore
memstore device bytes = {OSD_BYTES}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
# The monitor's store is small; the disk it is on is the CI machine's, not the cluster's.
mon data avail warn = 1
mon data avail crit = 1

[client]
# Command line tools (ceph, radosgw-admin) share the name client.admin: no socket, no pid file.
admin socket =
pid file =

[client.rgw.x]
admin socket = {dir}/run/$name.asok
pid file = {dir}/run/$name.pid
rgw data = {dir}/rgw
rgw frontends = beast endpoint=127.0.0.1:{rgw_port}
rgw thread pool size = 64
# Deleted objects' data is freed a minute after, not hours: the tests' buckets are emptied as
# they end, and the OSD's memstore is small.
rgw gc obj min wait = 60
rgw gc processor period = 60

[client.fuse]
admin socket = {dir}/run/$name.asok
pid file = {dir}/run/$name.pid
"
    )
}

/// Runs a tool to its end, its output shown only when it fails.
pub fn run_quiet(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {} failed ({}):\n{}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_keeps_every_path_in_the_cluster_directory() {
        let text = config_text("/t/ceph", "fsid", 3300, 7480);
        assert!(text.contains("mon host = v2:127.0.0.1:3300\n"));
        assert!(text.contains("rgw frontends = beast endpoint=127.0.0.1:7480\n"));
        assert!(text.contains("osd objectstore = memstore\n"));
        for line in text.lines() {
            if let Some((key, value)) = line.split_once(" = ") {
                if value.starts_with('/') {
                    assert!(value.starts_with("/t/ceph/"), "{key} = {value}");
                }
            }
        }
    }
}
