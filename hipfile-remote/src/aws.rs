//! Endpoint, region and credentials for `s3://` URLs, found where the AWS CLI finds them.
//!
//! - Profile: `AWS_PROFILE`, else `default`.
//! - Credentials: `AWS_ACCESS_KEY_ID` with `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`);
//!   else the profile's section of the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`,
//!   else `~/.aws/credentials`, sections named `[name]`); else the profile's section of the config
//!   file (`AWS_CONFIG_FILE`, else `~/.aws/config`, sections `[default]` and `[profile name]`).
//!   None at all: requests go unsigned (public objects).
//! - Region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`, else `us-east-1`.
//! - Endpoint: `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, the profile's `s3 =` sub-section
//!   `endpoint_url`, the profile's `endpoint_url`; with one, buckets are addressed by path
//!   (`http://host/bucket/key`, what Ceph RGW and MinIO serve without wildcard DNS); without,
//!   AWS's regional endpoint with virtual-hosted buckets (`https://bucket.s3.region.amazonaws.com`).
//!   The profile's `s3 = addressing_style = virtual|path` overrides the choice.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusty_s3::{Bucket, Credentials, UrlStyle};
use url::Url;

use crate::error::{RemoteError, Result};

/// Where and as whom `s3://` requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwsConfig {
    /// The S3 endpoint (`https://s3.us-east-1.amazonaws.com` when none is configured).
    pub endpoint: Url,
    /// Whether buckets are addressed by path rather than by host name.
    pub path_style: bool,
    /// The region requests are signed for.
    pub region: String,
    /// Access key id, secret and session token; `None`: unsigned requests.
    pub credentials: Option<(String, String, Option<String>)>,
}

/// One INI file: section name -> key -> value; keys of an indented block under `key =` are
/// stored as `key.subkey`.
type Ini = HashMap<String, HashMap<String, String>>;

fn parse_ini(text: &str) -> Ini {
    let mut ini = Ini::new();
    let mut section: Option<String> = None;
    let mut nested: Option<String> = None;
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.trim().to_string());
            nested = None;
            continue;
        }
        let Some(section) = &section else { continue };
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim().to_ascii_lowercase(), value.trim().to_string());
        let indented = raw.starts_with(char::is_whitespace);
        let entry = ini.entry(section.clone()).or_default();
        match (&nested, indented) {
            (Some(parent), true) => {
                entry.insert(format!("{parent}.{key}"), value);
            }
            _ if value.is_empty() => nested = Some(key),
            _ => {
                nested = None;
                entry.insert(key, value);
            }
        }
    }
    ini
}

fn read_ini(path: &Path) -> Result<Ini> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(parse_ini(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ini::new()),
        Err(e) => Err(RemoteError::Config(format!(
            "reading {}: {e}",
            path.display()
        ))),
    }
}

impl AwsConfig {
    /// The configuration the process environment and the AWS files give.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The configuration the variables `lookup` answers give (`HOME` included, for the default
    /// file locations).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let home = get("HOME").map(PathBuf::from);
        let file = |var: &str, default: &str| -> Option<PathBuf> {
            get(var)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(".aws").join(default)))
        };
        let profile = get("AWS_PROFILE").unwrap_or_else(|| "default".to_string());
        let config = match file("AWS_CONFIG_FILE", "config") {
            Some(p) => read_ini(&p)?,
            None => Ini::new(),
        };
        let shared = match file("AWS_SHARED_CREDENTIALS_FILE", "credentials") {
            Some(p) => read_ini(&p)?,
            None => Ini::new(),
        };
        let config_section = if profile == "default" {
            config.get("default")
        } else {
            config.get(&format!("profile {profile}"))
        };
        let from_config = |key: &str| config_section.and_then(|s| s.get(key)).cloned();
        let from_shared = |key: &str| shared.get(&profile).and_then(|s| s.get(key)).cloned();

        let credentials = match (get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")) {
            (Some(key), Some(secret)) => Some((key, secret, get("AWS_SESSION_TOKEN"))),
            _ => {
                let pick = |key: &str| from_shared(key).or_else(|| from_config(key));
                match (pick("aws_access_key_id"), pick("aws_secret_access_key")) {
                    (Some(key), Some(secret)) => Some((key, secret, pick("aws_session_token"))),
                    _ => None,
                }
            }
        };
        let region = get("AWS_REGION")
            .or_else(|| get("AWS_DEFAULT_REGION"))
            .or_else(|| from_config("region"))
            .unwrap_or_else(|| "us-east-1".to_string());
        let configured = get("AWS_ENDPOINT_URL_S3")
            .or_else(|| get("AWS_ENDPOINT_URL"))
            .or_else(|| from_config("s3.endpoint_url"))
            .or_else(|| from_config("endpoint_url"));
        let path_style = match from_config("s3.addressing_style").as_deref() {
            Some("path") => true,
            Some("virtual") => false,
            _ => configured.is_some(),
        };
        let endpoint = configured.unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
        let endpoint = Url::parse(&endpoint).map_err(|e| {
            RemoteError::Config(format!("the S3 endpoint {endpoint:?} is not a URL: {e}"))
        })?;
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(RemoteError::Config(format!(
                "the S3 endpoint {endpoint} is not http(s)"
            )));
        }
        Ok(AwsConfig {
            endpoint,
            path_style,
            region,
            credentials,
        })
    }

    /// The bucket `name` at this endpoint.
    pub(crate) fn bucket(&self, name: &str) -> Result<Bucket> {
        let style = if self.path_style {
            UrlStyle::Path
        } else {
            UrlStyle::VirtualHost
        };
        Bucket::new(
            self.endpoint.clone(),
            style,
            name.to_string(),
            self.region.clone(),
        )
        .map_err(|e| RemoteError::InvalidUrl {
            url: format!("s3://{name}"),
            why: format!("bucket {name:?} at {}: {e}", self.endpoint),
        })
    }

    /// The credentials requests are signed with.
    pub(crate) fn signer(&self) -> Option<Credentials> {
        self.credentials
            .as_ref()
            .map(|(key, secret, token)| match token {
                Some(t) => Credentials::new_with_token(key, secret, t),
                None => Credentials::new(key, secret),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: Vec<(&str, String)>) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> =
            pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        move |k| map.get(k).cloned()
    }

    fn home_with(config: &str, credentials: &str) -> tempfile::TempDir {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".aws")).unwrap();
        std::fs::write(home.path().join(".aws/config"), config).unwrap();
        std::fs::write(home.path().join(".aws/credentials"), credentials).unwrap();
        home
    }

    const CONFIG: &str = "\
[default]
region = eu-west-1

[profile ceph]
region = default
s3 =
    endpoint_url = http://127.0.0.1:7480
    addressing_style = path
aws_access_key_id = from-config
aws_secret_access_key = config-secret

[profile plain]
endpoint_url = http://minio:9000
";
    const CREDENTIALS: &str = "\
[default]
aws_access_key_id = AKIDEFAULT
aws_secret_access_key = default-secret

# comment
[plain]
aws_access_key_id = AKIPLAIN
aws_secret_access_key = plain-secret
aws_session_token = token
";

    #[test]
    fn the_default_profile_reads_the_home_files_and_addresses_aws_by_host() {
        let home = home_with(CONFIG, CREDENTIALS);
        let c = AwsConfig::from_lookup(lookup(vec![("HOME", home.path().display().to_string())]))
            .unwrap();
        assert_eq!(c.region, "eu-west-1");
        assert_eq!(c.endpoint.as_str(), "https://s3.eu-west-1.amazonaws.com/");
        assert!(!c.path_style);
        assert_eq!(
            c.credentials,
            Some(("AKIDEFAULT".into(), "default-secret".into(), None))
        );
    }

    #[test]
    fn a_named_profile_takes_its_nested_s3_endpoint_and_config_credentials() {
        let home = home_with(CONFIG, CREDENTIALS);
        let c = AwsConfig::from_lookup(lookup(vec![
            ("HOME", home.path().display().to_string()),
            ("AWS_PROFILE", "ceph".into()),
        ]))
        .unwrap();
        assert_eq!(c.region, "default");
        assert_eq!(c.endpoint.as_str(), "http://127.0.0.1:7480/");
        assert!(c.path_style);
        assert_eq!(
            c.credentials,
            Some(("from-config".into(), "config-secret".into(), None))
        );
        let plain = AwsConfig::from_lookup(lookup(vec![
            ("HOME", home.path().display().to_string()),
            ("AWS_PROFILE", "plain".into()),
        ]))
        .unwrap();
        assert_eq!(plain.endpoint.as_str(), "http://minio:9000/");
        assert!(
            plain.path_style,
            "a configured endpoint is addressed by path"
        );
        assert_eq!(
            plain.credentials,
            Some((
                "AKIPLAIN".into(),
                "plain-secret".into(),
                Some("token".into())
            ))
        );
    }

    #[test]
    fn the_environment_wins_over_the_files_and_names_them() {
        let home = home_with(CONFIG, CREDENTIALS);
        let elsewhere = tempfile::tempdir().unwrap();
        let config = elsewhere.path().join("cfg");
        std::fs::write(&config, "[default]\nregion = ap-south-1\n").unwrap();
        let c = AwsConfig::from_lookup(lookup(vec![
            ("HOME", home.path().display().to_string()),
            ("AWS_CONFIG_FILE", config.display().to_string()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/creds".into()),
            ("AWS_ACCESS_KEY_ID", "AKIENV".into()),
            ("AWS_SECRET_ACCESS_KEY", "env-secret".into()),
            ("AWS_SESSION_TOKEN", "env-token".into()),
            ("AWS_ENDPOINT_URL", "http://general:1".into()),
            ("AWS_ENDPOINT_URL_S3", "http://s3only:2".into()),
        ]))
        .unwrap();
        assert_eq!(
            c.region, "ap-south-1",
            "AWS_CONFIG_FILE replaced ~/.aws/config"
        );
        assert_eq!(c.endpoint.as_str(), "http://s3only:2/");
        assert_eq!(
            c.credentials,
            Some((
                "AKIENV".into(),
                "env-secret".into(),
                Some("env-token".into())
            ))
        );
        let r = AwsConfig::from_lookup(lookup(vec![
            ("AWS_DEFAULT_REGION", "us-west-2".into()),
            ("AWS_REGION", "ca-central-1".into()),
            ("AWS_ENDPOINT_URL", "http://general:1".into()),
        ]))
        .unwrap();
        assert_eq!(r.region, "ca-central-1");
        assert_eq!(r.endpoint.as_str(), "http://general:1/");
        assert_eq!(r.credentials, None, "no files, no keys: unsigned");
    }

    #[test]
    fn an_endpoint_that_is_not_http_is_a_config_error() {
        for endpoint in ["not a url", "ftp://host"] {
            let e = AwsConfig::from_lookup(lookup(vec![("AWS_ENDPOINT_URL", endpoint.into())]))
                .unwrap_err();
            assert!(matches!(e, RemoteError::Config(_)), "{endpoint}: {e}");
        }
    }
}
