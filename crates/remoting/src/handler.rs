//! Handlers from async closures.

use std::future::Future;

use tidemark_protocol::RemotingCommand;

use crate::channel::{Channel, Reply, ReplyFuture, RequestHandler};

struct FnHandler<F>(F);

impl<F, Fut> RequestHandler for FnHandler<F>
where
    F: Fn(Channel, RemotingCommand) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    fn handle(&self, channel: Channel, request: RemotingCommand) -> ReplyFuture {
        Box::pin((self.0)(channel, request))
    }
}

/// A handler from an async closure.
pub fn handler_fn<F, Fut>(function: F) -> impl RequestHandler
where
    F: Fn(Channel, RemotingCommand) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    FnHandler(function)
}
