//! Remote objects (`s3://bucket/key`, `http(s)://...`) for `hipfile cp` and `hipfile bench
//! --remote`, through the crate hipfile-remote: ranged requests on a pool of connections land
//! in the staged engine's pinned lanes and from there in GPU memory; writes are multipart
//! uploads from GPU memory. Built with the cargo feature `remote` (on by default).
//!
//! The settings are hipfile-remote's [`RemoteOptions`]: its defaults, then the
//! `HIPFILE_REMOTE_*` variables of the environment, then the flags `--request-size` and
//! `--connections` ([`RemoteArgs`]). S3 endpoints and credentials come from the `AWS_*`
//! variables, as for any S3 client.

pub mod copy;

use hipfile_remote::RemoteOptions;

pub use crate::remote_args::RemoteArgs;

/// The settings of remote requests: the library's defaults, the environment's
/// `HIPFILE_REMOTE_*`, then the flags.
pub fn options(args: &RemoteArgs) -> Result<RemoteOptions, String> {
    let mut options = RemoteOptions::from_env().map_err(|e| e.to_string())?;
    if let Some(size) = args.request_size {
        options.request_size = size;
    }
    if let Some(n) = args.connections {
        options.connections = n;
    }
    options.validate().map_err(|e| e.to_string())?;
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote_args::connections;

    #[test]
    fn the_flags_override_the_settings_and_a_count_of_0_is_refused() {
        let flags = RemoteArgs {
            request_size: Some(1 << 20),
            connections: Some(3),
        };
        let o = options(&flags).unwrap();
        assert_eq!((o.request_size, o.connections), (1 << 20, 3));
        assert!(flags.given() && !RemoteArgs::default().given());
        assert_eq!(connections("4"), Ok(4));
        assert!(connections("0").unwrap_err().contains("at least 1"));
        assert!(connections("many").unwrap_err().contains("not a number"));
    }
}
