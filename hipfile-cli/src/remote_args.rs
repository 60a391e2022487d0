//! The flags of the commands that read or write remote objects (`cp`, `bench --remote`),
//! apart from the module that runs them ([`crate::remote`]), so that `cp`'s arguments name them
//! without `cp` and `remote` naming each other.

use clap::Args;

use crate::size::parse_size;

/// The flags of a command that reads or writes remote objects.
#[derive(Clone, Debug, Default, Args)]
pub struct RemoteArgs {
    /// Bytes per ranged request to a remote object (and per part of an upload, at least 5 MiB
    /// there), with an optional unit K, M, G (default: HIPFILE_REMOTE_REQUEST_SIZE, else 8M).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub request_size: Option<usize>,
    /// Requests to a remote object in flight at once, each on a connection of its own
    /// (default: HIPFILE_REMOTE_CONNECTIONS, else 16).
    #[arg(long, value_parser = connections, value_name = "N")]
    pub connections: Option<usize>,
}

impl RemoteArgs {
    /// Whether a flag was given.
    pub fn given(&self) -> bool {
        self.request_size.is_some() || self.connections.is_some()
    }
}

/// A count of connections: a whole number above 0.
pub fn connections(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("0 connections: at least 1 is needed".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?} is not a number of connections")),
    }
}
