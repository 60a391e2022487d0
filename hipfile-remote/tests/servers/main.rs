//! Tests against real servers (feature `server-tests`): nginx on loopback, and an S3 endpoint.
//! They fail, never skip, when their server is missing.
