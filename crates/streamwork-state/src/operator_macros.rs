//! What every operator whose keyed state goes through a
//! [`KeyedCheckpoint`](crate::KeyedCheckpoint) field named `checkpoint`
//! writes alike (windows and joins): its `checkpointed()` builder and its
//! `open` and `statefulness`. For the framework's operator crates; users
//! write `#[derive(State)]` instead.

/// A `checkpointed()` builder: turns the operator's `checkpoint` on. The
/// doc comments given say what it puts in the checkpoints; the types in
/// `where [...]` must then be archivable; `layout N` (default 1) is bumped
/// whenever the operator changes what it keeps.
#[doc(hidden)]
#[macro_export]
macro_rules! keyed_checkpointed_builder {
    ($(#[$doc:meta])* where [$($data:ty),+ $(,)?]) => {
        $crate::keyed_checkpointed_builder!($(#[$doc])* where [$($data),+], layout 1);
    };
    ($(#[$doc:meta])* where [$($data:ty),+ $(,)?], layout $layout:literal) => {
        $(#[$doc])*
        pub fn checkpointed(mut self) -> Self
        where
            $($data: $crate::StateData,)+
        {
            self.checkpoint = $crate::KeyedCheckpoint::enabled_at_layout($layout);
            self
        }
    };
}

/// The `open` and `statefulness` of an `Operator` impl, over the operator's
/// `checkpoint` field; `$transient` is what it says when built without
/// checkpoints (the fix, for a job that needs them).
#[doc(hidden)]
#[macro_export]
macro_rules! keyed_checkpoint_hooks {
    ($transient:expr) => {
        fn open(&mut self, ctx: &::streamwork_core::InstanceContext) {
            self.checkpoint.open(ctx);
        }

        fn statefulness(&self) -> ::streamwork_core::Statefulness {
            self.checkpoint.statefulness($transient)
        }
    };
}
