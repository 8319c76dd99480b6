//! How a refused append is answered (appends themselves go through
//! [`crate::message_log::MessageLog`]).

use tidemark_protocol::RemotingCommand;
use tidemark_protocol::ResponseCode;
use tidemark_store::StoreError;

use super::error;

/// The response code a failed append maps to.
pub(super) fn store_error_response(failure: &StoreError) -> RemotingCommand {
    let code = match failure {
        StoreError::MessageTooLarge { .. } | StoreError::Message(_) => ResponseCode::MessageIllegal,
        StoreError::DiskFull { .. }
        | StoreError::DiskNearlyFull { .. }
        | StoreError::SyncFailed { .. }
        | StoreError::Closed => ResponseCode::ServiceNotAvailable,
        _ => ResponseCode::SystemError,
    };
    error(code, format!("message not stored: {failure}"))
}
