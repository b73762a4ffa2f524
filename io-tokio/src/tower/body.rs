//! The response body that holds the permit until the client has it all.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::tower::admit::Held;

pin_project! {
    /// The body of a response from [`Inflight`](crate::tower::Inflight):
    /// the inner service's body, holding the request's permit until it has
    /// yielded its last frame, failed, or been dropped (a client that hangs
    /// up mid-body frees the slot); or the body of a rejection.
    pub struct InflightBody<B> {
        #[pin]
        kind: Kind<B>,
        held: Option<Held>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<B> {
        Served { #[pin] body: B },
        Rejected { bytes: Option<Bytes> },
    }
}

impl<B> InflightBody<B> {
    pub(crate) fn served(body: B, held: Held) -> Self {
        Self {
            kind: Kind::Served { body },
            held: Some(held),
        }
    }

    pub(crate) fn rejected(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Rejected {
                bytes: Some(bytes).filter(|bytes| !bytes.is_empty()),
            },
            held: None,
        }
    }
}

impl<B> Body for InflightBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        match this.kind.project() {
            KindProjection::Served { body } => {
                let frame = ready!(body.poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) {
                    // The body ended or failed: the request is over, whether
                    // or not the server drops this body soon.
                    this.held.take();
                }
                Poll::Ready(frame)
            }
            KindProjection::Rejected { bytes } => Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes.into())))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Served { body } => body.is_end_stream(),
            Kind::Rejected { bytes } => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Served { body } => body.size_hint(),
            Kind::Rejected { bytes } => SizeHint::with_exact(bytes.as_ref().map_or(0, |bytes| bytes.len() as u64)),
        }
    }
}

impl<B> std::fmt::Debug for InflightBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Served { .. } => "served",
            Kind::Rejected { .. } => "rejected",
        };
        f.debug_struct("InflightBody")
            .field("kind", &kind)
            .field("holds_permit", &self.held.is_some())
            .finish()
    }
}
