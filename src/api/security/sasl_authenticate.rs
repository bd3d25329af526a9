//! SaslAuthenticate (key 36, v0–2): one token of the exchange the handshake chose. A
//! failure answers SASL_AUTHENTICATION_FAILED after `connection.failed.authentication.delay.ms`
//! (so that guessing passwords is slow) and closes the connection. v1+ carries the
//! session lifetime (KIP-368): the client re-authenticates before it runs out.

use crate::metrics::AuthFailure;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse};
use kafka_protocol::ResponseError;

use super::{credential_lookup, Closing};
use crate::api::context::RequestContext;
use crate::api::str_bytes;
use crate::model::monotonic_ms;
use crate::security::session::AuthStep;

pub async fn handle(
    ctx: &RequestContext,
    request: SaslAuthenticateRequest,
) -> Closing<SaslAuthenticateResponse> {
    let Some(sasl) = &ctx.connection.sasl else {
        return Closing {
            response: SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code()),
            close: None,
        };
    };
    let store = ctx.services.store.as_ref();
    let step = sasl.lock().authenticate(
        &request.auth_bytes,
        |user, mechanism| credential_lookup(store, user, mechanism),
        monotonic_ms() as i64,
    );
    let failed = |code: ResponseError, message: String, reason: AuthFailure| {
        crate::metrics::authentication_failed(ctx.listener(), reason);
        Closing {
            response: SaslAuthenticateResponse::default()
                .with_error_code(code.code())
                .with_error_message(Some(str_bytes(message.clone()))),
            close: Some(message),
        }
    };
    match step {
        AuthStep::Continue(token) => Closing {
            response: SaslAuthenticateResponse::default().with_auth_bytes(token.into()),
            close: None,
        },
        AuthStep::Done {
            token,
            user,
            session_lifetime_ms,
        } => {
            let mechanism = sasl
                .lock()
                .authenticated()
                .map_or("", |auth| auth.mechanism.name());
            metrics::counter!(crate::metrics::SASL_AUTHENTICATIONS_TOTAL, "mechanism" => mechanism)
                .increment(1);
            tracing::debug!(peer = %ctx.peer, user, mechanism, "SASL authentication succeeded");
            Closing {
                response: SaslAuthenticateResponse::default()
                    .with_auth_bytes(token.into())
                    .with_session_lifetime_ms(session_lifetime_ms),
                close: None,
            }
        }
        AuthStep::Failed {
            client_message,
            log,
        } => {
            tracing::warn!(peer = %ctx.peer, listener = ctx.listener(), reason = %log, "SASL authentication failed");
            tokio::time::sleep(ctx.services.server.security.failed_authentication_delay).await;
            failed(
                ResponseError::SaslAuthenticationFailed,
                client_message,
                AuthFailure::Credentials,
            )
        }
        AuthStep::IllegalState(why) => failed(
            ResponseError::IllegalSaslState,
            why.to_string(),
            AuthFailure::Protocol,
        ),
    }
}
