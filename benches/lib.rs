//! Shared workloads for the benchmarks.
