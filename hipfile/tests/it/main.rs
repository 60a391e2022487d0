//! Integration tests of the facade: one binary, a module per concern.

mod api;
mod registration;
