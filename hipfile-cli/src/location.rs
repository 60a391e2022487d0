//! Where `cp`'s SRC and DST are: a local path, or a remote object named by its URL
//! (`s3://bucket/key`, `http://host/path`, `https://host/path`; the scheme in any case).
//!
//! A local path that happens to start like a URL is written so that it does not
//! (`./s3://...`). Only the scheme is looked at here; the rest of the URL is the remote
//! client's to check, before any byte moves.

use std::path::Path;

/// The schemes that name a remote object.
pub const SCHEMES: [&str; 3] = ["s3://", "http://", "https://"];

/// One side of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location<'a> {
    /// A file (or directory) on this machine.
    Local(&'a Path),
    /// A remote object, by its URL.
    Object(&'a str),
}

/// What `arg` names: a URL of one of [`SCHEMES`] is an object, anything else a path.
pub fn locate(arg: &Path) -> Location<'_> {
    match arg.to_str() {
        Some(text) if is_url(text) => Location::Object(text),
        _ => Location::Local(arg),
    }
}

/// Whether `text` starts with one of [`SCHEMES`], in any case.
pub fn is_url(text: &str) -> bool {
    SCHEMES.iter().any(|scheme| {
        text.get(..scheme.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
    })
}

/// Whether `url` names an S3 object (`s3://`), the only kind a copy can write.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub fn is_s3(url: &str) -> bool {
    url.get(..5)
        .is_some_and(|h| h.eq_ignore_ascii_case("s3://"))
}

/// The last segment of `url`'s path (its query and fragment left out), as the name of a file
/// the object is copied into; `None` when the path ends in `/` or has no segment.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub fn object_name(url: &str) -> Option<&str> {
    let rest = &url[url.find("://").map_or(0, |i| i + 3)..];
    let path = rest.split(['?', '#']).next().unwrap_or("");
    let (_, tail) = path.split_once('/')?;
    let name = tail.rsplit('/').next()?;
    (!name.is_empty() && name != "." && name != "..").then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_of_the_three_schemes_are_objects_and_anything_else_is_a_path() {
        for url in [
            "s3://bucket/key",
            "S3://bucket/key",
            "http://127.0.0.1:8080/a",
            "HTTPS://example.invalid/a/b",
        ] {
            assert_eq!(locate(Path::new(url)), Location::Object(url));
        }
        for path in [
            "data.bin",
            "./s3://bucket/key",
            "s3:/bucket",
            "ftp://x/y",
            "",
            "é",
        ] {
            assert_eq!(locate(Path::new(path)), Location::Local(Path::new(path)));
        }
        assert!(is_s3("s3://b/k") && is_s3("S3://b/k"));
        assert!(!is_s3("http://b/k") && !is_s3("s3"));
    }

    #[test]
    fn the_object_name_is_the_last_segment_of_the_path() {
        assert_eq!(object_name("s3://bucket/dir/key.bin"), Some("key.bin"));
        assert_eq!(object_name("http://h:80/a/b?x=1/2#f"), Some("b"));
        assert_eq!(object_name("s3://bucket/key"), Some("key"));
        assert_eq!(object_name("http://h/"), None);
        assert_eq!(object_name("http://h"), None);
        assert_eq!(object_name("s3://bucket/dir/"), None);
        assert_eq!(object_name("http://h/a/.."), None);
    }
}
