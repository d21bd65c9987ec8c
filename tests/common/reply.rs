//! What a scripted inner service answers, as a value: the tests that run a breaker
//! over an in-process service script its replies with [`Reply`] and judge them with a
//! classifier of their own.

/// What a scripted inner service answers with (a value its test's classifier judges),
/// or, for [`Reply::Fallback`] and [`Reply::FallbackAfter`], what a fallback answers in
/// its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// A good answer: a success.
    Ok,
    /// An answer that says the service is unavailable (a 503 returned as a value): a
    /// failure.
    Failed,
    /// An answer the classifier neither counts as a success nor as a failure.
    Ignored,
    /// A 429 asking for this many seconds.
    Limited(u64),
    /// An answer whose classification panics.
    ClassifierBomb,
    /// Only a fallback says this: the call was not made.
    Fallback,
    /// Only a fallback says this: the call was not made. With the wait the service asked
    /// for beyond the next probe, in whole seconds from when the call was skipped.
    FallbackAfter(Option<u64>),
}
