//! Answers in rocketmq-apis' terms: every application outcome travels in the response's
//! `Status` (gRPC status stays OK, as RocketMQ's proxy does it); only the Telemetry stream uses
//! gRPC error statuses.

use tidemark_protocol::{RemotingCommand, ResponseCode};

use crate::proto::{Code, Status};

pub fn ok() -> Status {
    status(Code::Ok, "OK")
}

pub fn status(code: Code, message: impl Into<String>) -> Status {
    Status {
        code: code as i32,
        message: message.into(),
    }
}

/// The v2 code a broker's remoting answer maps to.
pub fn code_of(code: ResponseCode, remark: &str) -> Code {
    match code {
        ResponseCode::Success => Code::Ok,
        ResponseCode::TopicNotExist => Code::TopicNotFound,
        ResponseCode::SubscriptionGroupNotExist => Code::ConsumerGroupNotFound,
        ResponseCode::NoPermission => Code::Forbidden,
        ResponseCode::MessageIllegal if remark.contains("too large") || remark.contains("size") => {
            Code::MessageBodyTooLarge
        }
        ResponseCode::MessageIllegal => Code::BadRequest,
        ResponseCode::InvalidParameter => Code::BadRequest,
        ResponseCode::SubscriptionParseFailed => Code::IllegalFilterExpression,
        ResponseCode::NoMessage | ResponseCode::PullNotFound | ResponseCode::PollingTimeout => {
            Code::MessageNotFound
        }
        ResponseCode::PollingFull | ResponseCode::SystemBusy | ResponseCode::FlowControl => {
            Code::TooManyRequests
        }
        ResponseCode::FlushDiskTimeout => Code::MasterPersistenceTimeout,
        ResponseCode::FlushSlaveTimeout => Code::SlavePersistenceTimeout,
        ResponseCode::SlaveNotAvailable => Code::HaNotAvailable,
        ResponseCode::RequestCodeNotSupported => Code::NotImplemented,
        _ => Code::InternalServerError,
    }
}

/// A broker's remoting answer as a v2 status (the remark becomes the message).
pub fn from_response(response: &RemotingCommand) -> Status {
    let remark = response.remark.as_deref().unwrap_or("");
    let code = code_of(response.response_code(), remark);
    status(
        code,
        if code == Code::Ok {
            "OK".to_owned()
        } else {
            remark.to_owned()
        },
    )
}

/// One status for a batch of results: their shared code, or MULTIPLE_RESULTS.
pub fn combined<'a>(statuses: impl IntoIterator<Item = &'a Status>) -> Status {
    let mut first: Option<&Status> = None;
    for status in statuses {
        match first {
            None => first = Some(status),
            Some(seen) if seen.code != status.code => {
                return self::status(Code::MultipleResults, "entries ended differently")
            }
            Some(_) => {}
        }
    }
    first.cloned().unwrap_or_else(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_report_their_shared_code_or_multiple_results() {
        let (a, b) = (ok(), status(Code::InvalidReceiptHandle, "expired"));
        assert_eq!(combined([&a, &a]).code, Code::Ok as i32);
        assert_eq!(combined([&a, &b]).code, Code::MultipleResults as i32);
        assert_eq!(combined([]).code, Code::Ok as i32);
        assert_eq!(
            code_of(ResponseCode::TopicNotExist, ""),
            Code::TopicNotFound
        );
        assert_eq!(
            code_of(ResponseCode::PollingFull, ""),
            Code::TooManyRequests
        );
    }
}
