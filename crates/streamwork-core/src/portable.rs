//! Records that can cross processes: what a keyed exchange carries when a
//! job runs as stages in several processes, each keyed exchange through a
//! partitioned log (see `streamwork::scaleout`).
//!
//! Every record type of a keyed exchange (`stream.key_by(...)`, `.key(...)`
//! in `job!`) is [`Portable`]: it has serde's `Serialize` and
//! `Deserialize`, so that the same job runs in one process or in many (as
//! Timely Dataflow asks `ExchangeData` of what it exchanges). In one
//! process nothing is encoded: records move between threads as values.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::FormatError;
use crate::record::Data;

/// A record type that can cross processes: encoded with
/// [postcard](https://docs.rs/postcard) (compact; every value of every
/// field, `NaN` and `i64::MIN` included, comes back as it was).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is the record of a keyed exchange, which can cross processes, and it cannot be encoded",
    label = "records keyed here need serde's `Serialize` and `Deserialize`",
    note = "derive them on the record type: `#[derive(Clone, serde::Serialize, serde::Deserialize)]` (a keyed exchange carries its records through Kafka when the job runs as stages in several processes)"
)]
pub trait Portable: Data {
    /// Appends the record's bytes to `out`.
    fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), FormatError>;
    /// The record of `bytes`, as [`encode_into`](Self::encode_into) wrote it.
    fn decode(bytes: &[u8]) -> Result<Self, FormatError>;
}

impl<T: Data + Serialize + DeserializeOwned> Portable for T {
    fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), FormatError> {
        let taken = std::mem::take(out);
        match postcard::to_extend(self, taken) {
            Ok(filled) => {
                *out = filled;
                Ok(())
            }
            Err(error) => Err(FormatError::new(error.to_string())),
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        let (value, rest) =
            postcard::take_from_bytes(bytes).map_err(|e| FormatError::new(e.to_string()))?;
        if rest.is_empty() {
            Ok(value)
        } else {
            Err(FormatError::new(format!(
                "{} bytes after the record",
                rest.len()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Portable + PartialEq + std::fmt::Debug>(value: T) {
        let mut bytes = Vec::new();
        value.encode_into(&mut bytes).unwrap();
        assert_eq!(T::decode(&bytes).unwrap(), value);
    }

    #[test]
    fn extreme_values_come_back_as_they_were() {
        round_trip(i64::MIN);
        round_trip(i64::MAX);
        round_trip(u64::MAX);
        round_trip((String::from("ünïcödé"), (-0.0f64).to_bits()));
        round_trip(vec![String::new(); 3]);
        round_trip(Some("x".repeat(1 << 20)));
        let mut bytes = Vec::new();
        f64::NAN.encode_into(&mut bytes).unwrap();
        assert!(f64::decode(&bytes).unwrap().is_nan());
    }

    #[test]
    fn encoding_appends() {
        let mut bytes = vec![7u8];
        42u32.encode_into(&mut bytes).unwrap();
        assert_eq!(bytes[0], 7);
        assert_eq!(u32::decode(&bytes[1..]).unwrap(), 42);
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        assert!(String::decode(&[200, 200, 200]).is_err());
        assert!(u64::decode(&[]).is_err());
        assert!(<(u8, u8)>::decode(&[1, 2, 3]).is_err());
        let mut bytes = Vec::new();
        String::from("word").encode_into(&mut bytes).unwrap();
        bytes[1] = 0xff;
        assert!(String::decode(&bytes).is_err());
    }
}
