//! Connectors.
