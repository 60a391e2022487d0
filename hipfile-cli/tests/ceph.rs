//! `hipfile check` on a machine with a CephFS mount (ceph-fuse): the mount is listed as a FUSE
//! network filesystem, O_DIRECT is probed and accepted there, reads are staged, and the
//! fastpath declines it by its type.
//!
//! The mount is `HIPFILE_CEPHFS_DIR`, which `cargo xtask ceph up` starts and writes to
//! `target/ceph/env`; `cargo xtask ceph test` runs this target with that environment. Built only
//! with the feature `ceph`; without the variable the test fails and says how to get a mount.

use std::process::Command;

use serde_json::Value;

/// `HIPFILE_CEPHFS_DIR`.
fn cephfs() -> String {
    match std::env::var("HIPFILE_CEPHFS_DIR") {
        Ok(dir) if !dir.is_empty() => dir,
        _ => panic!(
            "HIPFILE_CEPHFS_DIR is not set: this test needs a CephFS mount; `cargo xtask ceph up` \
             starts a single-node cluster and mounts one, and `cargo xtask ceph test` runs it \
             with its environment (or `source target/ceph/env` first)"
        ),
    }
}

/// `hipfile check --platform sim` with `extra`; returns stdout.
fn check(extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(["check", "--platform", "sim"])
        .args(extra)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn check_lists_the_cephfs_mount_as_fuse_network_with_staged_o_direct_reads() {
    let dir = cephfs();
    let doc: Value = serde_json::from_str(&check(&["--json"])).unwrap();
    let Some(fs) = doc["filesystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|fs| fs["mount_point"] == dir.as_str())
    else {
        panic!("hipfile check does not list {dir}:\n{doc:#}");
    };
    assert_eq!(fs["filesystem"], "fuse.ceph-fuse (FUSE, network)", "{fs:#}");
    assert_eq!(fs["source"], "ceph-fuse", "{fs:#}");
    assert_eq!(
        (&fs["fuse"], &fs["network"]),
        (&Value::Bool(true), &Value::Bool(true))
    );
    assert_eq!(
        fs["o_direct"], true,
        "ceph-fuse accepts O_DIRECT opens: {fs:#}"
    );
    assert_eq!(fs["fastpath_filesystem"], false);
    assert_eq!(
        fs["declined_because"],
        "filesystem fuse.ceph-fuse is not supported"
    );
    assert_eq!(fs["read_mode"], "staged, O_DIRECT when cold", "{fs:#}");

    // The row, which goes on the next line when the mount point is too long for its column.
    let table = check(&[]);
    let lines: Vec<&str> = table.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&dir))
        .unwrap_or_else(|| panic!("no row for {dir}:\n{table}"));
    let row = if lines[at].trim_end() == dir {
        lines[at + 1]
    } else {
        &lines[at][dir.len()..]
    };
    let mut rest = row;
    for cell in [
        "fuse.ceph-fuse (FUSE, network)",
        "yes",
        "staged, O_DIRECT when cold",
        "declines: filesystem fuse.ceph-fuse is not supported",
    ] {
        let found = rest
            .find(cell)
            .unwrap_or_else(|| panic!("{cell:?} not in the row of {dir}:\n{table}"));
        rest = &rest[found + cell.len()..];
    }
}
