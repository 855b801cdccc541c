//! Streamwork.
