//! A body's data read into one buffer, bounded in bytes and in frames: see
//! [`BoundedRead`], by which [`ErrorBodyLayer`](super::ErrorBodyLayer),
//! [`BufferBodyLayer`](super::BufferBodyLayer) and the admin service read bodies.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ::http::HeaderMap;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::Body;

/// How many frames that carry no data (empty data frames, trailers, frames of a kind
/// unknown to `http-body`) a body may send while [`ErrorBodyLayer`](super::ErrorBodyLayer)
/// or [`BufferBodyLayer`](super::BufferBodyLayer) reads it: 1024. Past that, the read
/// stops as it does at the layer's byte limit. A well-behaved body sends one or two (its
/// trailers, an empty last frame); a peer can send such frames without end at no cost,
/// and they never bring a read to its byte limit.
pub const MAX_EMPTY_FRAMES: usize = 1024;

/// Where a read stops short of the body's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// As soon as the limit is read: the start of a body, the rest left unread.
    Limit,
    /// On a byte past the limit: a body read whole, which may be exactly the limit long.
    PastLimit,
}

/// Why a read stopped.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The body ended.
    End,
    /// A limit was reached and nothing more is read: of bytes, `past` holding what the
    /// last data frame brought beyond it, or of frames without data ([`MAX_EMPTY_FRAMES`]),
    /// `past` empty.
    Limit { past: Bytes },
    /// A trailers frame (a body's last, by the `http_body::Body` contract).
    Trailers(HeaderMap),
}

/// Why a body could not be read whole.
pub(crate) enum Unread<E> {
    /// It is longer than the limit (or sent more than [`MAX_EMPTY_FRAMES`] frames
    /// without data).
    TooLarge,
    /// It broke off.
    Body(E),
}

/// A body's data read into one buffer, frames not kept: at most its limit in bytes, and
/// at most [`MAX_EMPTY_FRAMES`] frames that carry none.
#[derive(Debug)]
pub(crate) struct BoundedRead {
    read: BytesMut,
    limit: usize,
    until: Until,
    empty_frames: usize,
}

impl BoundedRead {
    /// A read of the start of a body: it stops once `limit` bytes are read.
    pub(crate) fn start(limit: usize) -> Self {
        Self::new(limit, Until::Limit)
    }

    /// A read of a whole body: one byte past `limit` stops it.
    pub(crate) fn whole(limit: usize) -> Self {
        Self::new(limit, Until::PastLimit)
    }

    fn new(limit: usize, until: Until) -> Self {
        BoundedRead {
            read: BytesMut::new(),
            limit,
            until,
            empty_frames: 0,
        }
    }

    /// The limit, in bytes.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The bytes read so far.
    #[cfg_attr(not(feature = "admin"), allow(dead_code))]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.read
    }

    /// The bytes read so far, taken out.
    pub(crate) fn take(&mut self) -> Bytes {
        self.read.split().freeze()
    }

    /// Reads `body`'s frames until it ends, breaks off, sends its trailers or a limit is
    /// reached. Called again after [`Stop::Trailers`], it reads on.
    pub(crate) fn poll_read<B: Body + Unpin>(
        &mut self,
        body: &mut B,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Stop, B::Error>> {
        loop {
            let full = self.until == Until::Limit && self.read.len() >= self.limit;
            if full || self.empty_frames > MAX_EMPTY_FRAMES {
                return Poll::Ready(Ok(Stop::Limit { past: Bytes::new() }));
            }
            let frame = match ready!(Pin::new(&mut *body).poll_frame(cx)) {
                None => return Poll::Ready(Ok(Stop::End)),
                Some(Err(error)) => return Poll::Ready(Err(error)),
                Some(Ok(frame)) => frame,
            };
            let mut data = match frame.into_data() {
                Ok(data) if data.has_remaining() => data,
                Ok(_) => {
                    self.empty_frames += 1;
                    continue;
                }
                Err(frame) => {
                    self.empty_frames += 1;
                    match frame.into_trailers() {
                        Ok(trailers) => return Poll::Ready(Ok(Stop::Trailers(trailers))),
                        Err(_) => continue,
                    }
                }
            };
            let room = self.limit - self.read.len();
            let fits = data.remaining().min(room);
            self.read.put((&mut data).take(fits));
            if data.has_remaining() {
                let past = data.copy_to_bytes(data.remaining());
                return Poll::Ready(Ok(Stop::Limit { past }));
            }
        }
    }

    /// Reads `body` whole (made with [`whole`](Self::whole)); trailers are skipped. A
    /// length announced past the limit is refused before a byte is read.
    pub(crate) fn poll_read_whole<B: Body + Unpin>(
        &mut self,
        body: &mut B,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Unread<B::Error>>> {
        debug_assert_eq!(self.until, Until::PastLimit);
        if body.size_hint().lower() > (self.limit - self.read.len()) as u64 {
            return Poll::Ready(Err(Unread::TooLarge));
        }
        loop {
            match ready!(self.poll_read(body, cx)) {
                Ok(Stop::End) => return Poll::Ready(Ok(())),
                Ok(Stop::Trailers(_)) => continue,
                Ok(Stop::Limit { .. }) => return Poll::Ready(Err(Unread::TooLarge)),
                Err(error) => return Poll::Ready(Err(Unread::Body(error))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::task::Waker;

    use http_body::{Frame, SizeHint};

    use super::*;

    /// A peer that sends `empty` empty data frames, then `data`, then ends; it counts
    /// the frames it was asked for.
    struct Flood {
        empty: usize,
        data: Option<Bytes>,
        polled: usize,
    }

    impl Body for Flood {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.polled += 1;
            if self.empty > 0 {
                self.empty -= 1;
                return Poll::Ready(Some(Ok(Frame::data(Bytes::new()))));
            }
            Poll::Ready(self.data.take().map(|data| Ok(Frame::data(data))))
        }

        fn size_hint(&self) -> SizeHint {
            SizeHint::new()
        }
    }

    fn read(reader: &mut BoundedRead, body: &mut Flood) -> Stop {
        let mut cx = Context::from_waker(Waker::noop());
        match reader.poll_read(body, &mut cx) {
            Poll::Ready(Ok(stop)) => stop,
            Poll::Ready(Err(never)) => match never {},
            Poll::Pending => panic!("the flood is always ready"),
        }
    }

    #[test]
    fn a_few_empty_frames_are_read_past_and_a_flood_of_them_stops_the_read() {
        let mut body = Flood {
            empty: 3,
            data: Some(Bytes::from_static(b"ok")),
            polled: 0,
        };
        let mut reader = BoundedRead::whole(8);
        assert!(matches!(read(&mut reader, &mut body), Stop::End));
        assert_eq!(reader.bytes(), b"ok");

        let mut body = Flood {
            empty: usize::MAX,
            data: None,
            polled: 0,
        };
        let mut reader = BoundedRead::start(8);
        assert!(matches!(read(&mut reader, &mut body), Stop::Limit { past } if past.is_empty()));
        assert_eq!(body.polled, MAX_EMPTY_FRAMES + 1);
    }

    #[test]
    fn the_start_stops_at_the_limit_and_a_whole_read_only_past_it() {
        let exactly = || Flood {
            empty: 0,
            data: Some(Bytes::from_static(b"12345678")),
            polled: 0,
        };
        let mut reader = BoundedRead::start(8);
        let mut body = exactly();
        assert!(matches!(read(&mut reader, &mut body), Stop::Limit { past } if past.is_empty()));
        assert_eq!((reader.bytes(), body.polled), (&b"12345678"[..], 1));

        let mut reader = BoundedRead::whole(8);
        assert!(matches!(read(&mut reader, &mut exactly()), Stop::End));

        let mut reader = BoundedRead::whole(6);
        let stop = read(&mut reader, &mut exactly());
        assert!(matches!(stop, Stop::Limit { past } if past == "78"));
        assert_eq!(reader.bytes(), b"123456");
    }
}
