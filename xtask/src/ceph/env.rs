//! The env file `up` writes for a shell and for `cargo xtask ceph test`, and the S3 keys in it.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::S3_REGION;
use crate::json;

/// The first S3 key pair of `radosgw-admin user create`'s answer.
pub fn s3_keys(user: &str) -> Result<(String, String), String> {
    let doc = json::parse(user).map_err(|e| format!("radosgw-admin user create: {e}"))?;
    let key = doc
        .items_at("keys")
        .first()
        .ok_or("radosgw-admin user create: the user has no S3 key")?;
    match (key.str_at("access_key"), key.str_at("secret_key")) {
        (Some(access), Some(secret)) => Ok((access.to_string(), secret.to_string())),
        _ => Err("radosgw-admin user create: a key without access_key or secret_key".into()),
    }
}

/// What the env file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Env {
    pub access: String,
    pub secret: String,
    pub endpoint: String,
    pub cephfs: PathBuf,
    pub dir: PathBuf,
    pub conf: PathBuf,
}

impl Env {
    fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", self.access.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_REGION", S3_REGION.to_string()),
            ("HIPFILE_CEPHFS_DIR", self.cephfs.display().to_string()),
            ("HIPFILE_CEPH_DIR", self.dir.display().to_string()),
            ("CEPH_CONF", self.conf.display().to_string()),
        ]
    }

    /// `export NAME='value'` lines, each value quoted for a POSIX shell.
    pub fn to_shell(&self) -> String {
        let mut out =
            String::from("# The test cluster of `cargo xtask ceph up`: source this file.\n");
        for (name, value) in self.vars() {
            let _ = writeln!(out, "export {name}='{}'", value.replace('\'', "'\\''"));
        }
        out
    }
}

/// The variables of an env file `up` wrote.
pub fn read_env(text: &str) -> Result<Vec<(String, String)>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (name, quoted) = line
                .strip_prefix("export ")
                .and_then(|rest| rest.split_once('='))
                .ok_or_else(|| format!("not an export line: {line:?}"))?;
            let value = quoted
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .ok_or_else(|| format!("not a quoted value: {line:?}"))?
                .replace("'\\''", "'");
            Ok((name.to_string(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_env_file_reads_back_what_was_written_quotes_and_all() {
        let env = Env {
            access: "AK".into(),
            secret: "it's s3cr3t".into(),
            endpoint: "http://127.0.0.1:7480".into(),
            cephfs: "/t/ceph/mnt".into(),
            dir: "/t/ceph".into(),
            conf: "/t/ceph/ceph.conf".into(),
        };
        let text = env.to_shell();
        assert!(text.contains("export AWS_ENDPOINT_URL='http://127.0.0.1:7480'\n"));
        assert!(text.contains("export AWS_REGION='us-east-1'\n"));
        let vars = read_env(&text).unwrap();
        let names: Vec<&str> = vars.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_ENDPOINT_URL",
                "AWS_REGION",
                "HIPFILE_CEPHFS_DIR",
                "HIPFILE_CEPH_DIR",
                "CEPH_CONF"
            ]
        );
        assert_eq!(vars[1].1, "it's s3cr3t");
        assert_eq!(vars[4].1, "/t/ceph/mnt");
        assert!(read_env("AWS_REGION=x\n").is_err());
        assert!(read_env("export AWS_REGION=x\n").is_err());
    }

    #[test]
    fn s3_keys_come_from_the_users_first_key() {
        let user = r#"{"user_id": "hipfile-test", "keys": [
            {"user": "hipfile-test", "access_key": "AK1", "secret_key": "SK1"}]}"#;
        assert_eq!(s3_keys(user), Ok(("AK1".into(), "SK1".into())));
        assert!(s3_keys(r#"{"keys": []}"#).is_err());
        assert!(s3_keys("not json").is_err());
    }
}
