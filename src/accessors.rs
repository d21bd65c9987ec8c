//! The accessors of a middleware on the service it wraps, written once for every
//! middleware of the crate (as tower-http does).

/// `get_ref`, `get_mut` and `into_inner` on a middleware whose wrapped service of type
/// `$inner` is its field `inner`. An optional sentence is added to `into_inner`'s docs.
macro_rules! inner_service_accessors {
    ($inner:ty $(, into_inner: $note:literal)?) => {
        /// The wrapped service.
        pub fn get_ref(&self) -> &$inner {
            &self.inner
        }

        /// The wrapped service, mutably.
        pub fn get_mut(&mut self) -> &mut $inner {
            &mut self.inner
        }

        /// The wrapped service, unwrapped.
        $(#[doc = $note])?
        pub fn into_inner(self) -> $inner {
            self.inner
        }
    };
}

pub(crate) use inner_service_accessors;
