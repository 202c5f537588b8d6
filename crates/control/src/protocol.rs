//! JSON-RPC 2.0 framing and error codes (JSON-RPC 2.0 specification, section 5.1), and the
//! hex encoding the methods use for binary NVMe structures (Identify data, log pages), so a
//! client decodes them with `nvme_spec`'s `from_bytes` exactly as if it had read them itself.

use serde_json::{json, Value};

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON is not a valid request object (or the request is too large).
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// The controller answered with an error (the message is the driver's).
pub const CONTROLLER_ERROR: i64 = -32000;
/// No controller of that name is served.
pub const UNKNOWN_CONTROLLER: i64 = -32001;
/// The peer's uid is not allowed.
pub const PERMISSION_DENIED: i64 = -32002;
/// Too many clients are connected.
pub const TOO_MANY_CLIENTS: i64 = -32003;

/// The version string every message carries.
pub const VERSION: &str = "2.0";

/// An error answer to return from a method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    /// One of the codes above.
    pub code: i64,
    /// What went wrong.
    pub message: String,
}

impl RpcError {
    /// An error with `code` and `message`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Invalid parameters.
    pub fn params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }
}

impl From<nvme_driver::Error> for RpcError {
    fn from(e: nvme_driver::Error) -> Self {
        Self::new(CONTROLLER_ERROR, e.to_string())
    }
}

/// A success response to request `id`.
pub fn response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": VERSION, "id": id, "result": result})
}

/// An error response to request `id` (`null` when it could not be read).
pub fn error_response(id: &Value, error: &RpcError) -> Value {
    json!({
        "jsonrpc": VERSION,
        "id": id,
        "error": {"code": error.code, "message": error.message},
    })
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// The bytes of a hex string (`None` for odd length or a non-hex digit).
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The bytes of a hex string as a fixed-size array (`None` if the length differs).
pub fn from_hex_array<const N: usize>(s: &str) -> Option<[u8; N]> {
    from_hex(s)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_refusals() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(from_hex(&to_hex(&bytes)).unwrap(), bytes);
        assert_eq!(to_hex(&[0x0f, 0xa0]), "0fa0");
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex_array::<2>("0fa0"), Some([0x0f, 0xa0]));
        assert_eq!(from_hex_array::<3>("0fa0"), None);
    }

    #[test]
    fn responses_carry_version_and_id() {
        let ok = response(&json!(7), json!({"a": 1}));
        assert_eq!(ok["jsonrpc"], "2.0");
        assert_eq!(ok["id"], 7);
        let err = error_response(&Value::Null, &RpcError::new(PARSE_ERROR, "bad"));
        assert_eq!(err["error"]["code"], PARSE_ERROR);
        assert!(err["id"].is_null());
    }
}
