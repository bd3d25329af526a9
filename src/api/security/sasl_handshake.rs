//! SaslHandshake (key 17, v0–1): the client names a mechanism; after v0 the tokens come
//! as bare frames (see `TokenFraming::Raw`), after v1 in SaslAuthenticate requests. On a
//! listener without SASL Kafka answers ILLEGAL_SASL_STATE and keeps the connection; on a
//! SASL listener an unknown or disabled mechanism gets UNSUPPORTED_SASL_MECHANISM with
//! the enabled list, and the connection closes.

use crate::metrics::AuthFailure;
use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};
use kafka_protocol::ResponseError;

use super::Closing;
use crate::api::context::RequestContext;
use crate::api::str_bytes;
use crate::security::session::{HandshakeError, TokenFraming};

pub async fn handle(
    ctx: &RequestContext,
    request: SaslHandshakeRequest,
) -> Closing<SaslHandshakeResponse> {
    let Some(sasl) = &ctx.connection.sasl else {
        return Closing {
            response: SaslHandshakeResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code()),
            close: None,
        };
    };
    let mut session = sasl.lock();
    let mechanisms = session.enabled_mechanisms().map(str_bytes).collect();
    let response = SaslHandshakeResponse::default().with_mechanisms(mechanisms);
    let framing = if ctx.api_version == 0 {
        TokenFraming::Raw
    } else {
        TokenFraming::Requests
    };
    match session.handshake_framed(request.mechanism.as_str(), framing) {
        Ok(_) => Closing {
            response,
            close: None,
        },
        Err(error) => {
            let (code, reason) = match &error {
                HandshakeError::Unsupported(_) => (
                    ResponseError::UnsupportedSaslMechanism,
                    AuthFailure::Mechanism,
                ),
                HandshakeError::IllegalState(_) => {
                    (ResponseError::IllegalSaslState, AuthFailure::Protocol)
                }
            };
            crate::metrics::authentication_failed(ctx.listener(), reason);
            tracing::info!(peer = %ctx.peer, %error, "SASL handshake refused");
            Closing {
                response: response.with_error_code(code.code()),
                close: Some(error.to_string()),
            }
        }
    }
}
