//! Where an object lives: a parsed URL, and the signed request URLs for it.

use std::time::Duration;

use rusty_s3::{Bucket, Credentials, S3Action};
use url::Url;

use crate::aws::AwsConfig;
use crate::error::{RemoteError, Result};

/// How long a signed request URL stays valid: one request and its retries, not a session.
const SIGNED_FOR: Duration = Duration::from_secs(15 * 60);

/// A remote object's URL, as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectUrl {
    /// `s3://bucket/key`.
    S3 {
        /// The bucket.
        bucket: String,
        /// The key (everything after the bucket's `/`, kept as written).
        key: String,
    },
    /// `http://...` or `https://...`.
    Http(Url),
}

impl ObjectUrl {
    /// Parse `s3://bucket/key`, `http://host/path` or `https://host/path`.
    pub fn parse(text: &str) -> Result<Self> {
        let invalid = |why: &str| RemoteError::InvalidUrl {
            url: text.to_string(),
            why: why.to_string(),
        };
        if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, key) = rest
                .split_once('/')
                .ok_or_else(|| invalid("no key after the bucket (s3://bucket/key)"))?;
            if bucket.is_empty() {
                return Err(invalid("no bucket (s3://bucket/key)"));
            }
            if key.is_empty() {
                return Err(invalid("no key after the bucket (s3://bucket/key)"));
            }
            if bucket.contains(['?', '#', ' ']) {
                return Err(invalid("a bucket name cannot hold '?', '#' or spaces"));
            }
            return Ok(ObjectUrl::S3 {
                bucket: bucket.to_string(),
                key: key.to_string(),
            });
        }
        let url = Url::parse(text).map_err(|e| invalid(&e.to_string()))?;
        match url.scheme() {
            "http" | "https" if url.host().is_some() => Ok(ObjectUrl::Http(url)),
            "http" | "https" => Err(invalid("no host")),
            _ => Err(invalid("the scheme must be s3, http or https")),
        }
    }
}

impl std::fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectUrl::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
            ObjectUrl::Http(url) => write!(f, "{url}"),
        }
    }
}

/// An object and what signs requests for it.
#[derive(Clone, Debug)]
pub(crate) enum Object {
    S3 {
        bucket: Bucket,
        key: String,
        credentials: Option<Credentials>,
    },
    Http(Url),
}

/// A request the client can make of an object.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Action<'a> {
    Head,
    Get,
    Put,
    CreateUpload,
    UploadPart { part: u16, upload_id: &'a str },
    Complete { upload_id: &'a str },
    Abort { upload_id: &'a str },
}

impl Object {
    /// The object `url` names, with the AWS configuration `aws` for `s3://` (read from the
    /// environment when `None`).
    pub(crate) fn resolve(url: &ObjectUrl, aws: Option<&AwsConfig>) -> Result<Self> {
        match url {
            ObjectUrl::Http(u) => Ok(Object::Http(u.clone())),
            ObjectUrl::S3 { bucket, key } => {
                let owned;
                let aws = match aws {
                    Some(a) => a,
                    None => {
                        owned = AwsConfig::from_env()?;
                        &owned
                    }
                };
                Ok(Object::S3 {
                    bucket: aws.bucket(bucket)?,
                    key: key.clone(),
                    credentials: aws.signer(),
                })
            }
        }
    }

    /// The URL of `action` on the object: presigned (SigV4 in the query string) for S3, so the
    /// request's headers (`Range`, `Content-MD5`) need no signing; the object's URL for HTTP.
    pub(crate) fn url(&self, action: Action<'_>) -> Result<Url> {
        match self {
            Object::Http(u) => match action {
                Action::Head | Action::Get => Ok(u.clone()),
                _ => Err(RemoteError::Unsupported(format!(
                    "{u}: plain HTTP objects are read only; writes need s3://"
                ))),
            },
            Object::S3 {
                bucket,
                key,
                credentials,
            } => {
                let c = credentials.as_ref();
                Ok(match action {
                    Action::Head => bucket.head_object(c, key).sign(SIGNED_FOR),
                    Action::Get => bucket.get_object(c, key).sign(SIGNED_FOR),
                    Action::Put => bucket.put_object(c, key).sign(SIGNED_FOR),
                    Action::CreateUpload => bucket.create_multipart_upload(c, key).sign(SIGNED_FOR),
                    Action::UploadPart { part, upload_id } => {
                        bucket.upload_part(c, key, part, upload_id).sign(SIGNED_FOR)
                    }
                    Action::Complete { upload_id } => bucket
                        .complete_multipart_upload(c, key, upload_id, std::iter::empty())
                        .sign(SIGNED_FOR),
                    Action::Abort { upload_id } => bucket
                        .abort_multipart_upload(c, key, upload_id)
                        .sign(SIGNED_FOR),
                })
            }
        }
    }

    /// The body of CompleteMultipartUpload for the parts' ETags, in part order.
    pub(crate) fn complete_body(&self, upload_id: &str, etags: &[String]) -> String {
        match self {
            Object::S3 {
                bucket,
                key,
                credentials,
            } => bucket
                .complete_multipart_upload(
                    credentials.as_ref(),
                    key,
                    upload_id,
                    etags.iter().map(String::as_str),
                )
                .body(),
            Object::Http(_) => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_bucket_and_key_or_an_http_url() {
        assert_eq!(
            ObjectUrl::parse("s3://bucket/dir/file.bin").unwrap(),
            ObjectUrl::S3 {
                bucket: "bucket".into(),
                key: "dir/file.bin".into()
            }
        );
        let http = ObjectUrl::parse("https://example.com:8443/a/b?x=1").unwrap();
        assert!(matches!(&http, ObjectUrl::Http(u) if u.port() == Some(8443)));
        assert_eq!(http.to_string(), "https://example.com:8443/a/b?x=1");
        assert_eq!(
            ObjectUrl::parse("s3://b/k with space").unwrap().to_string(),
            "s3://b/k with space"
        );
        for bad in [
            "s3://bucket",
            "s3://bucket/",
            "s3:///key",
            "ftp://host/file",
            "/local/path",
            "http://",
            "",
        ] {
            let e = ObjectUrl::parse(bad).unwrap_err();
            assert!(matches!(e, RemoteError::InvalidUrl { .. }), "{bad}: {e}");
        }
    }

    fn ceph() -> AwsConfig {
        AwsConfig {
            endpoint: Url::parse("http://127.0.0.1:7480").unwrap(),
            path_style: true,
            region: "default".into(),
            credentials: Some(("AK".into(), "SK".into(), None)),
        }
    }

    #[test]
    fn an_endpoint_addresses_buckets_by_path_and_signs_each_action() {
        let url = ObjectUrl::parse("s3://bkt/dir/obj").unwrap();
        let object = Object::resolve(&url, Some(&ceph())).unwrap();
        let get = object.url(Action::Get).unwrap();
        assert_eq!(get.path(), "/bkt/dir/obj");
        assert_eq!(get.host_str(), Some("127.0.0.1"));
        assert!(get.query().unwrap().contains("X-Amz-Signature="));
        let part = object
            .url(Action::UploadPart {
                part: 3,
                upload_id: "u-1",
            })
            .unwrap();
        let query = part.query().unwrap();
        assert!(query.contains("partNumber=3") && query.contains("uploadId=u-1"));
        let body = object.complete_body("u-1", &["\"e1\"".into(), "\"e2\"".into()]);
        assert!(body.contains("<PartNumber>2</PartNumber>") && body.contains("e2"));
        let http = Object::resolve(&ObjectUrl::parse("http://h/o").unwrap(), None).unwrap();
        assert!(matches!(
            http.url(Action::Put),
            Err(RemoteError::Unsupported(_))
        ));
    }

    /// AWS's published example of a presigned GET ("Authenticating Requests: Using Query
    /// Parameters (AWS Signature Version 4)"): this crate's bucket and credentials for it give
    /// AWS's signature, so requests to AWS are signed as AWS checks them.
    #[test]
    fn a_presigned_get_matches_aws_published_example() {
        let aws = AwsConfig {
            endpoint: Url::parse("https://s3.amazonaws.com").unwrap(),
            path_style: false,
            region: "us-east-1".into(),
            credentials: Some((
                "AKIAIOSFODNN7EXAMPLE".into(),
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
                None,
            )),
        };
        let bucket = aws.bucket("examplebucket").unwrap();
        let credentials = aws.signer().unwrap();
        let time: jiff::Timestamp = "2013-05-24T00:00:00Z".parse().unwrap();
        let url = bucket
            .get_object(Some(&credentials), "test.txt")
            .sign_with_time(Duration::from_secs(86400), &time);
        assert_eq!(url.host_str(), Some("examplebucket.s3.amazonaws.com"));
        assert!(url.query().unwrap().ends_with(
            "X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        ));
    }
}
