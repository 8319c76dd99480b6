//! `MessagingService`'s methods: each RPC finds its client and hands the call to the gateway
//! module that owns it. Application outcomes are in the responses' `Status`; a gRPC error status
//! means the call itself was malformed (`connection` answers undecodable requests itself).
//!
//! Plain methods, not tonic's generated server trait: its methods return boxed futures, a
//! heap allocation and a copy of the call's state on every call, and `connection` is the only
//! caller.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Response, Streaming};

use crate::gateway::{Gateway, Peer};
use crate::proto::*;
use crate::status::{ok, status};

/// The service one connection is served by: the gateway behind an `Arc`, and the connection's
/// ends (RocketMQ's proxy reads them per call from the transport; here each connection has its
/// own service, so a call costs no lookup).
#[derive(Debug, Clone)]
pub struct Service {
    gateway: Arc<Gateway>,
    peer: Peer,
}

impl Service {
    pub fn new(gateway: Arc<Gateway>, peer: Peer) -> Self {
        Self { gateway, peer }
    }
}

type Answer<T> = Result<Response<T>, tonic::Status>;
type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

/// The remaining time of a call's deadline (`grpc-timeout`), if the client set one.
fn deadline<T>(request: &Request<T>) -> Option<std::time::Duration> {
    let value = request.metadata().get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => std::time::Duration::from_secs(amount * 3_600),
        "M" => std::time::Duration::from_secs(amount * 60),
        "S" => std::time::Duration::from_secs(amount),
        "m" => std::time::Duration::from_millis(amount),
        "u" => std::time::Duration::from_micros(amount),
        "n" => std::time::Duration::from_nanos(amount),
        _ => return None,
    })
}

macro_rules! caller_or_answer {
    ($self:ident, $request:ident, $response:ident { $($field:ident: $value:expr),* }) => {
        match $self.gateway.caller(&$request, $self.peer) {
            Ok(caller) => caller,
            Err(failure) => {
                return Ok(Response::new($response {
                    status: Some(failure),
                    $($field: $value),*
                }))
            }
        }
    };
}

impl Service {
    pub(crate) async fn query_route(
        &self,
        request: Request<QueryRouteRequest>,
    ) -> Answer<QueryRouteResponse> {
        let caller = caller_or_answer!(
            self,
            request,
            QueryRouteResponse {
                message_queues: Vec::new()
            }
        );
        let answer = self
            .gateway
            .query_route(&caller, request.into_inner())
            .await;
        Ok(Response::new(answer))
    }

    pub(crate) async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Answer<HeartbeatResponse> {
        let caller = caller_or_answer!(self, request, HeartbeatResponse {});
        Ok(Response::new(HeartbeatResponse {
            status: Some(self.gateway.heartbeat(&caller).await),
        }))
    }

    pub(crate) async fn send_message(
        &self,
        request: Request<SendMessageRequest>,
    ) -> Answer<SendMessageResponse> {
        let caller = caller_or_answer!(
            self,
            request,
            SendMessageResponse {
                entries: Vec::new()
            }
        );
        Ok(Response::new(
            self.gateway
                .send_message(&caller, request.into_inner())
                .await,
        ))
    }

    pub(crate) async fn query_assignment(
        &self,
        request: Request<QueryAssignmentRequest>,
    ) -> Answer<QueryAssignmentResponse> {
        let caller = caller_or_answer!(
            self,
            request,
            QueryAssignmentResponse {
                assignments: Vec::new()
            }
        );
        Ok(Response::new(
            self.gateway
                .query_assignment(&caller, request.into_inner())
                .await,
        ))
    }

    pub(crate) async fn receive_message(
        &self,
        request: Request<ReceiveMessageRequest>,
    ) -> Answer<BoxStream<ReceiveMessageResponse>> {
        let frames = match self.gateway.caller(&request, self.peer) {
            Ok(caller) => {
                let deadline = deadline(&request);
                self.gateway
                    .receive_message(&caller, request.into_inner(), deadline)
                    .await
            }
            Err(failure) => vec![ReceiveMessageResponse {
                content: Some(receive_message_response::Content::Status(failure)),
            }],
        };
        let stream: BoxStream<ReceiveMessageResponse> =
            Box::pin(tokio_stream::iter(frames.into_iter().map(Ok)));
        Ok(Response::new(stream))
    }

    pub(crate) async fn ack_message(
        &self,
        request: Request<AckMessageRequest>,
    ) -> Answer<AckMessageResponse> {
        let caller = caller_or_answer!(
            self,
            request,
            AckMessageResponse {
                entries: Vec::new()
            }
        );
        Ok(Response::new(
            self.gateway
                .ack_message(&caller, request.into_inner())
                .await,
        ))
    }

    pub(crate) async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<ForwardMessageToDeadLetterQueueRequest>,
    ) -> Answer<ForwardMessageToDeadLetterQueueResponse> {
        let caller = caller_or_answer!(self, request, ForwardMessageToDeadLetterQueueResponse {});
        Ok(Response::new(
            self.gateway
                .forward_to_dead_letter_queue(&caller, request.into_inner())
                .await,
        ))
    }

    pub(crate) async fn pull_message(
        &self,
        request: Request<PullMessageRequest>,
    ) -> Answer<BoxStream<PullMessageResponse>> {
        let frames = match self.gateway.caller(&request, self.peer) {
            Ok(caller) => {
                self.gateway
                    .pull_message(&caller, request.into_inner())
                    .await
            }
            Err(failure) => vec![PullMessageResponse {
                content: Some(pull_message_response::Content::Status(failure)),
            }],
        };
        let stream: BoxStream<PullMessageResponse> =
            Box::pin(tokio_stream::iter(frames.into_iter().map(Ok)));
        Ok(Response::new(stream))
    }

    pub(crate) async fn update_offset(
        &self,
        request: Request<UpdateOffsetRequest>,
    ) -> Answer<UpdateOffsetResponse> {
        let caller = caller_or_answer!(self, request, UpdateOffsetResponse {});
        Ok(Response::new(
            self.gateway
                .update_offset(&caller, request.into_inner())
                .await,
        ))
    }

    pub(crate) async fn get_offset(
        &self,
        request: Request<GetOffsetRequest>,
    ) -> Answer<GetOffsetResponse> {
        let caller = caller_or_answer!(self, request, GetOffsetResponse { offset: 0 });
        Ok(Response::new(
            self.gateway.get_offset(&caller, request.into_inner()).await,
        ))
    }

    pub(crate) async fn query_offset(
        &self,
        request: Request<QueryOffsetRequest>,
    ) -> Answer<QueryOffsetResponse> {
        let caller = caller_or_answer!(self, request, QueryOffsetResponse { offset: 0 });
        Ok(Response::new(
            self.gateway
                .query_offset(&caller, request.into_inner())
                .await,
        ))
    }

    pub(crate) async fn end_transaction(
        &self,
        request: Request<EndTransactionRequest>,
    ) -> Answer<EndTransactionResponse> {
        let caller = caller_or_answer!(self, request, EndTransactionResponse {});
        Ok(Response::new(
            self.gateway
                .end_transaction(&caller, request.into_inner())
                .await,
        ))
    }

    pub(crate) async fn telemetry(
        &self,
        request: Request<Streaming<TelemetryCommand>>,
    ) -> Answer<BoxStream<TelemetryCommand>> {
        let caller = self
            .gateway
            .caller(&request, self.peer)
            .map_err(|failure| {
                // RocketMQ's proxy (ACL 1.0) closes a refused telemetry stream this way.
                if failure.code == crate::proto::Code::Unauthorized as i32 {
                    tonic::Status::permission_denied(failure.message)
                } else {
                    tonic::Status::invalid_argument(failure.message)
                }
            })?;
        let (outbound, receiver) = tokio::sync::mpsc::channel(16);
        tokio::spawn(
            self.gateway
                .clone()
                .telemetry(caller, request.into_inner(), outbound),
        );
        let stream: BoxStream<TelemetryCommand> =
            Box::pin(tokio_stream::wrappers::ReceiverStream::new(receiver));
        Ok(Response::new(stream))
    }

    pub(crate) async fn notify_client_termination(
        &self,
        request: Request<NotifyClientTerminationRequest>,
    ) -> Answer<NotifyClientTerminationResponse> {
        let caller = caller_or_answer!(self, request, NotifyClientTerminationResponse {});
        if let Some(session) = self.gateway.sessions.close(&caller.session.client_id) {
            self.gateway.forget(session).await;
        }
        Ok(Response::new(NotifyClientTerminationResponse {
            status: Some(ok()),
        }))
    }

    pub(crate) async fn change_invisible_duration(
        &self,
        request: Request<ChangeInvisibleDurationRequest>,
    ) -> Answer<ChangeInvisibleDurationResponse> {
        let caller = caller_or_answer!(
            self,
            request,
            ChangeInvisibleDurationResponse {
                receipt_handle: String::new()
            }
        );
        Ok(Response::new(
            self.gateway
                .change_invisible_duration(&caller, request.into_inner())
                .await,
        ))
    }

    pub(crate) async fn recall_message(
        &self,
        request: Request<RecallMessageRequest>,
    ) -> Answer<RecallMessageResponse> {
        let caller = caller_or_answer!(
            self,
            request,
            RecallMessageResponse {
                message_id: String::new()
            }
        );
        Ok(Response::new(
            self.gateway
                .recall_message(&caller, request.into_inner())
                .await,
        ))
    }

    pub(crate) async fn sync_lite_subscription(
        &self,
        request: Request<SyncLiteSubscriptionRequest>,
    ) -> Answer<SyncLiteSubscriptionResponse> {
        let _caller = caller_or_answer!(self, request, SyncLiteSubscriptionResponse {});
        Ok(Response::new(SyncLiteSubscriptionResponse {
            status: Some(status(
                Code::Unsupported,
                "lite topics are not supported by Tidemark",
            )),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_in_every_unit() {
        let mut request = Request::new(());
        request
            .metadata_mut()
            .insert("grpc-timeout", "23S".parse().expect("ascii"));
        assert_eq!(deadline(&request), Some(std::time::Duration::from_secs(23)));
        request
            .metadata_mut()
            .insert("grpc-timeout", "150m".parse().expect("ascii"));
        assert_eq!(
            deadline(&request),
            Some(std::time::Duration::from_millis(150))
        );
        request
            .metadata_mut()
            .insert("grpc-timeout", "x".parse().expect("ascii"));
        assert_eq!(deadline(&request), None);
    }
}
