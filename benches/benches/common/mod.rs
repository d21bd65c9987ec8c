//! What the benches share: a no-op service, and one call through a service driven by
//! hand, with no runtime in the way.
#![allow(dead_code)] // each bench uses its own subset

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::pin;
use std::task::{Context, Poll};

use tower::{service_fn, Service};

pub(crate) type Noop = tower::util::ServiceFn<fn(u64) -> Ready<Result<u64, Infallible>>>;

/// A service that answers its request at once.
pub(crate) fn noop() -> Noop {
    service_fn(|x: u64| ready(Ok(x)))
}

/// One call through `svc`: `poll_ready`, `call` and one poll of the response future. The
/// services here are always ready and their futures ready at once. Whether it answered
/// `Ok`: every entrant's result is checked the same way, whatever its type.
#[inline]
pub(crate) fn call_once<S: Service<u64>>(svc: &mut S, cx: &mut Context<'_>, request: u64) -> bool {
    match svc.poll_ready(cx) {
        Poll::Ready(Ok(())) => {}
        _ => unreachable!("the benchmark's services are always ready"),
    }
    let future = pin!(svc.call(request));
    match future.poll(cx) {
        Poll::Ready(result) => result.is_ok(),
        Poll::Pending => unreachable!("the benchmark's futures are ready at once"),
    }
}
