//! The strict parser of the two SCRAM client messages (RFC 5802 §7, with Kafka's
//! extensions): attributes in their fixed order, nothing unknown in the gs2 header, user names
//! unescaped, base64 decoded canonically. It only parses; `scram` decides what the parts mean.
//!
//! ```text
//! client-first  gs2-header client-first-bare
//!   gs2-header         "n," ["a=" saslname] ","       (only "n": no channel binding)
//!   client-first-bare  ["m=" ...","] "n=" saslname ",r=" nonce *("," key "=" value)
//! client-final  "c=" base64 ",r=" nonce *("," key "=" value) ",p=" base64
//! ```

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

/// Why a client message does not parse; `scram::ScramError` carries each on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("malformed SCRAM {part}")]
    Malformed { part: &'static str },
    #[error("{part} is not valid base64")]
    BadBase64 { part: &'static str },
    /// `p=` (the client wants channel binding) or `y` (it could, and thinks we cannot).
    #[error("SCRAM channel binding is not supported (gs2 flag {flag:?})")]
    ChannelBindingNotSupported { flag: String },
    /// RFC 5802: an `m=` attribute "MUST cause authentication failure".
    #[error("SCRAM mandatory extension (m=) is not supported")]
    MandatoryExtension,
}

/// The parts of a client-first message, borrowed from it where they are used verbatim.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFirst<'a> {
    /// `n,,` or `n,a=<saslname>,`, as sent: the client-final's `c=` must be its base64.
    pub gs2_header: &'a str,
    /// The unescaped authorization id, when the header carries one.
    pub authzid: Option<String>,
    /// The unescaped user name.
    pub user: String,
    pub client_nonce: &'a str,
    /// `client-first-message-bare`, as sent: the start of the AuthMessage.
    pub bare: &'a str,
    /// Kafka's `tokenauth` extension is true: the user name is a delegation token id.
    pub token_auth: bool,
}

/// The parts of a client-final message.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFinal<'a> {
    /// The decoded `c=` attribute: gs2 header plus channel-binding data (none here).
    pub channel_binding: Vec<u8>,
    pub nonce: &'a str,
    /// `client-final-message-without-proof`, as sent: the end of the AuthMessage.
    pub without_proof: &'a str,
    pub proof: Vec<u8>,
}

fn malformed(part: &'static str) -> MessageError {
    MessageError::Malformed { part }
}

/// Parses a client-first message.
pub fn parse_client_first(message: &str) -> Result<ClientFirst<'_>, MessageError> {
    let (flag, rest) = message.split_once(',').ok_or(malformed("gs2 header"))?;
    if flag != "n" {
        return Err(gs2_flag_error(flag));
    }
    let (authzid_attr, bare) = rest.split_once(',').ok_or(malformed("gs2 header"))?;
    let authzid = match authzid_attr {
        "" => None,
        attr => Some(decode_saslname(
            attr.strip_prefix("a=")
                .ok_or(malformed("authorization id"))?,
        )?),
    };
    let gs2_header = &message[..message.len() - bare.len()];
    let mut attrs = bare.split(',');
    let mut attr = attrs.next().unwrap_or_default();
    if attr.starts_with("m=") {
        return Err(MessageError::MandatoryExtension);
    }
    let user = decode_saslname(
        attr.strip_prefix("n=")
            .ok_or(malformed("user name attribute"))?,
    )?;
    attr = attrs.next().ok_or(malformed("nonce attribute"))?;
    let client_nonce = attr
        .strip_prefix("r=")
        .filter(|n| valid_nonce(n))
        .ok_or(malformed("client nonce"))?;
    let token_auth = parse_extensions(attrs)?;
    Ok(ClientFirst {
        gs2_header,
        authzid,
        user,
        client_nonce,
        bare,
        token_auth,
    })
}

/// The error for a gs2 flag other than `n`.
fn gs2_flag_error(flag: &str) -> MessageError {
    if flag == "y" || flag.starts_with("p=") {
        MessageError::ChannelBindingNotSupported {
            flag: flag.to_string(),
        }
    } else {
        malformed("gs2 header")
    }
}

/// Checks the `key=value` extensions after the nonce and reports whether `tokenauth` is true
/// (compared as Java's `Boolean.parseBoolean`, ignoring case). Others are ignored, as Kafka
/// does, but must be well formed and not repeated.
fn parse_extensions<'a>(attrs: impl Iterator<Item = &'a str>) -> Result<bool, MessageError> {
    let mut seen: Vec<&str> = Vec::new();
    let mut token_auth = false;
    for attr in attrs {
        let (key, value) = parse_extension(attr)?;
        if seen.contains(&key) {
            return Err(malformed("extension (repeated)"));
        }
        seen.push(key);
        if key == "tokenauth" {
            token_auth = value.eq_ignore_ascii_case("true");
        }
    }
    Ok(token_auth)
}

/// One extension: letters, `=`, then a non-empty ASCII value without NUL or `,` (Kafka's
/// `ALPHA "=" VALUE`).
fn parse_extension(attr: &str) -> Result<(&str, &str), MessageError> {
    let (key, value) = attr.split_once('=').ok_or(malformed("extension"))?;
    let key_ok = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphabetic());
    let value_ok = !value.is_empty() && value.bytes().all(|b| (0x01..=0x7f).contains(&b));
    if key_ok && value_ok {
        Ok((key, value))
    } else {
        Err(malformed("extension"))
    }
}

/// Parses a client-final message.
pub fn parse_client_final(message: &str) -> Result<ClientFinal<'_>, MessageError> {
    let (without_proof, proof_attr) = message
        .rsplit_once(',')
        .ok_or(malformed("client-final message"))?;
    let proof = decode_base64(
        proof_attr
            .strip_prefix("p=")
            .ok_or(malformed("proof attribute"))?,
        "proof",
    )?;
    let mut attrs = without_proof.split(',');
    let binding_attr = attrs.next().unwrap_or_default();
    let binding = binding_attr
        .strip_prefix("c=")
        .ok_or(malformed("channel binding attribute"))?;
    let channel_binding = decode_base64(binding, "channel binding")?;
    let nonce_attr = attrs.next().ok_or(malformed("nonce attribute"))?;
    let nonce = nonce_attr
        .strip_prefix("r=")
        .filter(|n| valid_nonce(n))
        .ok_or(malformed("nonce"))?;
    parse_extensions(attrs)?;
    Ok(ClientFinal {
        channel_binding,
        nonce,
        without_proof,
        proof,
    })
}

/// Canonical, padded standard base64; an empty value is refused (no attribute here is empty).
fn decode_base64(value: &str, part: &'static str) -> Result<Vec<u8>, MessageError> {
    if value.is_empty() {
        return Err(MessageError::BadBase64 { part });
    }
    BASE64
        .decode(value)
        .map_err(|_| MessageError::BadBase64 { part })
}

/// A nonce is one or more printable ASCII characters other than `,` (RFC 5802 `printable`).
pub fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// Unescapes a `saslname` (RFC 5802 §5.1): `=2C` is `,` and `=3D` is `=`; any other `=`,
/// a NUL, or an empty name is refused. Non-ASCII UTF-8 is accepted, as the RFC says (Kafka's
/// pattern admits ASCII only; no Kafka client escapes differently for it).
pub fn decode_saslname(name: &str) -> Result<String, MessageError> {
    if name.is_empty() || name.contains('\0') {
        return Err(malformed("user name"));
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3);
        match escape {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(malformed("user name escape")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Escapes a user name into a `saslname`: the inverse of [`decode_saslname`] (what a client
/// sends; the broker needs it only for its own clients and tests).
pub fn encode_saslname(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_first_parts_are_extracted() {
        let first =
            parse_client_first("n,a=us=3Der,n=us=3Der,r=abc,tokenauth=false").expect("parse");
        assert_eq!(first.gs2_header, "n,a=us=3Der,");
        assert_eq!(first.authzid.as_deref(), Some("us=er"));
        assert_eq!(first.user, "us=er");
        assert_eq!(first.client_nonce, "abc");
        assert_eq!(first.bare, "n=us=3Der,r=abc,tokenauth=false");
        assert!(!first.token_auth);
    }

    #[test]
    fn client_first_without_authzid_has_the_short_header() {
        let first = parse_client_first("n,,n=user,r=rOprNGfwEbeRWgbNEkqO").expect("parse");
        assert_eq!(first.gs2_header, "n,,");
        assert_eq!(first.authzid, None);
        assert_eq!(first.bare, "n=user,r=rOprNGfwEbeRWgbNEkqO");
    }

    #[test]
    fn malformed_client_firsts_are_refused() {
        let cases = [
            "",
            "n",
            "n,",
            "n,,",
            "x,,n=user,r=abc",
            "N,,n=user,r=abc",
            "n,admin,n=user,r=abc",
            "n,a=,n=user,r=abc",
            "n,,n=,r=abc",
            "n,,n=user",
            "n,,n=user,r=",
            "n,,r=abc,n=user",
            "n,,u=user,r=abc",
            "n,,n=us=er,r=abc",
            "n,,n=us=2c,r=abc",
            "n,,n=user=,r=abc",
            "n,,n=us\0er,r=abc",
            "n,,n=user,r=a b",
            "n,,n=user,r=abc,",
            "n,,n=user,r=abc,1x=y",
            "n,,n=user,r=abc,x",
            "n,,n=user,r=abc,x=",
            "n,,n=user,r=abc,x=é",
            "n,,n=user,r=abc,x=1,x=2",
            "n,,n=user,r=abé",
        ];
        for case in cases {
            assert!(parse_client_first(case).is_err(), "{case:?} was accepted");
        }
    }

    #[test]
    fn gs2_flags_asking_for_channel_binding_get_their_own_error() {
        for flag in ["y", "p=tls-unique", "p=tls-exporter"] {
            let message = format!("{flag},,n=user,r=abc");
            assert_eq!(
                parse_client_first(&message),
                Err(MessageError::ChannelBindingNotSupported {
                    flag: flag.to_string()
                })
            );
        }
    }

    #[test]
    fn client_final_parts_are_extracted() {
        let last = parse_client_final("c=biws,r=abcdef,ext=1,p=AAEC").expect("parse");
        assert_eq!(last.channel_binding, b"n,,");
        assert_eq!(last.nonce, "abcdef");
        assert_eq!(last.without_proof, "c=biws,r=abcdef,ext=1");
        assert_eq!(last.proof, vec![0, 1, 2]);
    }

    #[test]
    fn malformed_client_finals_are_refused() {
        let cases = [
            "",
            "c=biws",
            "c=biws,r=abc",
            "c=biws,r=abc,p=",
            "c=biws,p=AAEC",
            "r=abc,c=biws,p=AAEC",
            "c=,r=abc,p=AAEC",
            "c=biws,r=,p=AAEC",
            "c=biws,r=abc,p=AAE",
            "c=biws,r=abc,p=AAF=",
            "c=biws,r=abc,p=AA==,",
            "c=biws,r=abc,x,p=AAEC",
            "c=biws,r=abc,p=AAEC,x=1",
            "c=biws,r=abc,P=AAEC",
        ];
        for case in cases {
            assert!(parse_client_final(case).is_err(), "{case:?} was accepted");
        }
    }

    #[test]
    fn saslname_escapes_round_trip() {
        for user in ["plain", "a=b", "a,b", "=,=,", "=2C", "ünïcode", "x=3D"] {
            let encoded = encode_saslname(user);
            assert!(!encoded.contains(','), "{encoded}");
            assert_eq!(decode_saslname(&encoded).as_deref(), Ok(user));
        }
        assert_eq!(encode_saslname("a=b,c"), "a=3Db=2Cc");
    }

    #[test]
    fn nonce_alphabet_is_printable_ascii_without_comma() {
        assert!(valid_nonce("%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"));
        assert!(valid_nonce("~!"));
        for bad in ["", " ", "a,b", "a\tb", "\u{7f}", "é"] {
            assert!(!valid_nonce(bad), "{bad:?}");
        }
    }
}
