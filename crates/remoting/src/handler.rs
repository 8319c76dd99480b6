use std::future::Future;
use std::pin::Pin;

use tidemark_protocol::RemotingCommand;

use crate::channel::Channel;

/// What a handler answers to a request.
#[derive(Debug)]
pub enum Reply {
    /// Send this response; the channel copies the request's opaque and sets the response flag.
    Response(RemotingCommand),
    /// Nothing to send (the request was oneway, or the handler answered through the channel).
    NoResponse,
    /// This peer does not serve the request's code: answered with REQUEST_CODE_NOT_SUPPORTED.
    Unsupported,
}

/// A boxed reply future, so handlers can be stored as trait objects.
pub type ReplyFuture = Pin<Box<dyn Future<Output = Reply> + Send + 'static>>;

/// Serves the requests that arrive on a channel (from clients on a server, from the broker on
/// a client). Each request runs in its own task, so a slow one (a held pull) does not stall
/// the connection; replies to oneway requests are never sent.
pub trait RequestHandler: Send + Sync + 'static {
    fn handle(&self, channel: Channel, request: RemotingCommand) -> ReplyFuture;

    /// Called once when a channel closes, whatever the reason.
    fn on_close(&self, _channel: &Channel) {}
}

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
