//! Streamwork's macros: `#[operator]`, `#[derive(Outputs)]`, `#[derive(State)]`,
//! `#[state_data]` and `job!`.
//!
//! The entry points here are thin: each macro's logic lives in its own
//! module, over `proc_macro2` tokens so it can be unit-tested:
//! * `operator`: an `Operator` impl from a function or an impl block;
//! * `outputs`: named, typed output channels with a typestate
//!   that makes an unconnected channel a compile error;
//! * `state`: an operator struct's state, checkpointed by the
//!   framework field by field;
//! * `state_data`: a type the framework can keep in checkpoints;
//! * `job`: parse → graph IR → structural checks → codegen to the
//!   typed builder, every problem reported with a span on the user's tokens.
//!
//! Use them through the `streamwork` facade, which re-exports them.

#![warn(missing_docs)]

use proc_macro::TokenStream;

mod diag;
mod job;
mod operator;
mod outputs;
mod state;
mod state_data;

/// Turns a function or an impl block into an `Operator`.
///
/// On a function `fn name(value: In, out: &mut Out)`, it generates a unit
/// struct `Name` (the function name in CamelCase, or `#[operator(name = X)]`)
/// implementing `Operator`. On an impl block with
/// `fn on_record(&mut self, value: In, out: &mut Out)` (and optionally
/// `open(&mut self, ctx: &InstanceContext)` and `on_end(&mut self, out: &mut Out)`),
/// it implements `Operator` for the type, whose fields are per-instance state.
/// A first parameter `key: CurrentKey<'_, K>` makes the operator keyed by `K`:
/// it then only connects to a stream keyed by `K`. An impl block may also
/// define `on_watermark`, `on_processing_time`, `on_batch_end` and
/// `before_barrier`; with `#[operator(event_time)]` the operator only
/// connects to watermarked streams. A keyed impl block with
/// `fn combine(&self, earlier: &mut In, later: In)` (two records of one key
/// merged into one that leaves the same state) gets a combiner before its
/// keyed exchange (`Operator::COMBINES`).
///
/// State is declared, never assumed: the struct of an impl block is
/// checkpointed through its `#[derive(State)]` (a compile error without
/// one), unless the block says it keeps nothing across records,
/// `#[operator(stateless)]`, which the types then check: its per-record
/// and per-tick methods take `&self` (`&mut self` is a compile error), so
/// nothing they do reaches the next record. A function is stateless.
#[proc_macro_attribute]
pub fn operator(args: TokenStream, item: TokenStream) -> TokenStream {
    operator::expand(args.into(), item.into()).into()
}

/// Derives `Outputs` for a struct of `Collector<T>` fields: one named output
/// channel per field.
#[proc_macro_derive(Outputs)]
pub fn derive_outputs(item: TokenStream) -> TokenStream {
    outputs::expand(item.into()).into()
}

/// Derives the state the framework checkpoints for an operator struct:
/// every named field is state (a keyed kind such as `KeyedState<K, V>`,
/// snapshotted by key group and restored at any parallelism, or an
/// `InstanceState<T>`), unless marked `#[state(transient)]`. A field added
/// later starts empty; a field removed is refused at restore unless the
/// struct says `#[state(forget("name"))]`.
///
/// A transient field is left out of checkpoints, so it must hold nothing an
/// output depends on across records (configuration, a cache, a scratch
/// buffer): after a restore it starts as `Default` makes it. A state kind
/// marked transient is a compile error (in a struct without generic
/// parameters); for other types the types cannot tell, and the mark is the
/// author's promise.
#[proc_macro_derive(State, attributes(state))]
pub fn derive_state(item: TokenStream) -> TokenStream {
    state::expand(item.into()).into()
}

/// Makes a struct or enum `StateData`: something the framework can keep
/// in checkpoints (a window's accumulator, a join's rows, a value of
/// `KeyedState`). It derives rkyv's `Archive`, `Serialize` and
/// `Deserialize` through `streamwork::state::rkyv`, the version the
/// framework archives with, so the crate needs no rkyv dependency of its own.
/// Every field must be archivable too.
///
/// ```text
/// #[streamwork::state_data]
/// #[derive(Clone, Debug, Default)]
/// struct Spend {
///     total: u64,
///     last_seen: i64,
/// }
/// ```
#[proc_macro_attribute]
pub fn state_data(args: TokenStream, item: TokenStream) -> TokenStream {
    state_data::expand(args.into(), item.into()).into()
}

/// Describes a job graph; evaluates to `Result<JobGraph, GraphError>`.
///
/// ```text
/// job! {
///     name "vehicle_count";
///     source lines = FileSource::text("in.txt");
///     operator parsed[2] = ParseVehicle <- lines.shuffle();
///     operator counts[2] = CountVehicles::default() <- parsed.key(|v: &String| v.clone());
///     operator split { cars, trucks } = SplitByKind <- counts;
///     sink out = StdoutSink::display() <- split.cars;
///     drop split.trucks;
/// }
/// ```
///
/// `name`, settings and `[parallelism]` take any expression (a generic
/// function may build jobs of one shape, `name format!("q{n}");`). A
/// declarative macro may write part of a job and leave the rest to its
/// caller; a stream the caller reads is named by the caller, as any
/// variable a `macro_rules!` shares with its caller is.
///
/// Inputs of several types: `<- left(a), right(b)` for an operator whose
/// input is an `Either` of the two (a join), or
/// `<- port(a => Reading::Count), port(b => Reading::Name), ...` for an
/// operator whose input is one of them (an enum `Reading`).
#[proc_macro]
pub fn job(input: TokenStream) -> TokenStream {
    job::expand(input.into()).into()
}
