//! Records as JSON rows for the server, with what JSON cannot say said
//! another way: a NaN or infinite float, which serde_json writes as
//! `null`, goes as the string `"NaN"`, `"Infinity"` or `"-Infinity"`,
//! which PostgreSQL's float and numeric columns read as those values.

use serde::Serialize;
use serde::ser;
use serde_json::Value;
use streamwork_core::FormatError;

/// `record` as a JSON value, its non-finite floats as strings; or why not.
pub(crate) fn to_row<T: Serialize>(record: &T) -> Result<Value, FormatError> {
    let mut value = serde_json::to_value(record).map_err(|e| FormatError::new(e.to_string()))?;
    let mut finder = NonFinite::default();
    match record.serialize(&mut finder) {
        Ok(()) => {}
        Err(Found::Unplaced) => {
            return Err(
                "it holds a NaN or infinite float inside a map, which a row cannot carry".into(),
            );
        }
        Err(Found::Custom(e)) => return Err(FormatError::new(e)),
    }
    for (path, float) in finder.found {
        let text = if float.is_nan() {
            "NaN"
        } else if float > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        };
        let mut at = &mut value;
        for step in &path {
            at = match (at, step) {
                (Value::Object(map), Step::Field(name)) => map
                    .get_mut(*name)
                    .ok_or_else(|| format!("field `{name}` is missing from its JSON"))?,
                (Value::Array(items), Step::Index(i)) => items
                    .get_mut(*i)
                    .ok_or_else(|| format!("element {i} is missing from its JSON"))?,
                _ => return Err("its JSON does not have the shape of its fields".into()),
            };
        }
        *at = Value::String(text.into());
    }
    Ok(value)
}

/// One step from a value to a part of it, as serde_json lays it out.
#[derive(Clone, Debug)]
enum Step {
    Field(&'static str),
    Index(usize),
}

/// Walks a record and notes where its non-finite floats are.
#[derive(Default)]
struct NonFinite {
    path: Vec<Step>,
    found: Vec<(Vec<Step>, f64)>,
    /// Inside a map: places cannot be named.
    in_map: usize,
}

#[derive(Debug)]
enum Found {
    /// A non-finite float inside a map.
    Unplaced,
    Custom(String),
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::Unplaced => f.write_str("a non-finite float in a map"),
            Found::Custom(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for Found {}

impl ser::Error for Found {
    fn custom<M: std::fmt::Display>(message: M) -> Self {
        Found::Custom(message.to_string())
    }
}

impl NonFinite {
    fn float(&mut self, value: f64) -> Result<(), Found> {
        if value.is_finite() {
            return Ok(());
        }
        if self.in_map > 0 {
            return Err(Found::Unplaced);
        }
        self.found.push((self.path.clone(), value));
        Ok(())
    }

    fn within<T: Serialize + ?Sized>(&mut self, step: Step, value: &T) -> Result<(), Found> {
        self.path.push(step);
        let result = value.serialize(&mut *self);
        self.path.pop();
        result
    }
}

/// The `Serializer` methods of values that hold no float: each does nothing.
macro_rules! skip_values {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(
            fn $method(self, _: $ty) -> Result<(), Found> {
                Ok(())
            }
        )*
    };
}

/// Serializes nothing but notes floats; a compound's parts are walked with
/// their place.
impl<'a> ser::Serializer for &'a mut NonFinite {
    type Ok = ();
    type Error = Found;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Map<'a>;
    type SerializeStruct = Fields<'a>;
    type SerializeStructVariant = Fields<'a>;

    fn serialize_f32(self, v: f32) -> Result<(), Found> {
        self.float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Found> {
        self.float(v)
    }
    skip_values! {
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
    }
    fn serialize_none(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Found> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        value.serialize(self)
    }
    /// serde_json writes `{"Variant": value}`.
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        self.within(Step::Field(variant), value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>, Found> {
        Ok(Seq::new(self, false))
    }
    fn serialize_tuple(self, _: usize) -> Result<Seq<'a>, Found> {
        Ok(Seq::new(self, false))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Seq<'a>, Found> {
        Ok(Seq::new(self, false))
    }
    /// serde_json writes `{"Variant": [..]}`.
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Seq<'a>, Found> {
        self.path.push(Step::Field(variant));
        Ok(Seq::new(self, true))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Map<'a>, Found> {
        self.in_map += 1;
        Ok(Map { walk: self })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Fields<'a>, Found> {
        Ok(Fields {
            walk: self,
            variant: false,
        })
    }
    /// serde_json writes `{"Variant": {..}}`.
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Fields<'a>, Found> {
        self.path.push(Step::Field(variant));
        Ok(Fields {
            walk: self,
            variant: true,
        })
    }
}

/// The elements of a sequence, tuple or tuple variant.
struct Seq<'a> {
    walk: &'a mut NonFinite,
    next: usize,
    variant: bool,
}

impl<'a> Seq<'a> {
    /// The walk of a sequence's elements; `variant`: of a tuple variant,
    /// whose name was pushed onto the path.
    fn new(walk: &'a mut NonFinite, variant: bool) -> Self {
        Seq {
            walk,
            next: 0,
            variant,
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        let index = self.next;
        self.next += 1;
        self.walk.within(Step::Index(index), value)
    }

    fn finish(self) -> Result<(), Found> {
        if self.variant {
            self.walk.path.pop();
        }
        Ok(())
    }
}

/// The four serde traits of elements, each walking its element in place.
macro_rules! elements {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for Seq<'_> {
            type Ok = ();
            type Error = Found;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
                self.element(value)
            }
            fn end(self) -> Result<(), Found> {
                self.finish()
            }
        }
    )*};
}

elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// A map's entries: walked, but its places are not named.
struct Map<'a> {
    walk: &'a mut NonFinite,
}

impl ser::SerializeMap for Map<'_> {
    type Ok = ();
    type Error = Found;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Found> {
        key.serialize(&mut *self.walk)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        value.serialize(&mut *self.walk)
    }
    fn end(self) -> Result<(), Found> {
        self.walk.in_map -= 1;
        Ok(())
    }
}

/// A struct's or struct variant's fields.
struct Fields<'a> {
    walk: &'a mut NonFinite,
    variant: bool,
}

impl Fields<'_> {
    fn field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Found> {
        self.walk.within(Step::Field(key), value)
    }

    fn finish(self) -> Result<(), Found> {
        if self.variant {
            self.walk.path.pop();
        }
        Ok(())
    }
}

/// The two serde traits of named fields, each walking its field by name.
macro_rules! fields {
    ($($trait:ident),*) => {$(
        impl ser::$trait for Fields<'_> {
            type Ok = ();
            type Error = Found;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Found> {
                self.field(key, value)
            }
            fn end(self) -> Result<(), Found> {
                self.finish()
            }
        }
    )*};
}

fields!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Serialize)]
    struct Reading {
        id: i64,
        value: f64,
        low: f32,
        parts: Vec<f64>,
        inner: Inner,
        maybe: Option<f64>,
        kind: Kind,
    }

    #[derive(Serialize)]
    struct Inner {
        x: f64,
    }

    #[derive(Serialize)]
    enum Kind {
        Pair(f64, f64),
    }

    #[test]
    fn non_finite_floats_become_the_strings_postgres_reads() {
        let row = to_row(&Reading {
            id: i64::MIN,
            value: f64::NAN,
            low: f32::NEG_INFINITY,
            parts: vec![1.0, f64::INFINITY],
            inner: Inner { x: f64::NAN },
            maybe: Some(f64::NAN),
            kind: Kind::Pair(0.5, f64::NEG_INFINITY),
        })
        .unwrap();
        assert_eq!(
            row,
            serde_json::json!({
                "id": i64::MIN,
                "value": "NaN",
                "low": "-Infinity",
                "parts": [1.0, "Infinity"],
                "inner": {"x": "NaN"},
                "maybe": "NaN",
                "kind": {"Pair": [0.5, "-Infinity"]},
            })
        );
    }

    #[test]
    fn a_non_finite_float_in_a_map_is_refused_and_finite_ones_pass() {
        let mut map = BTreeMap::new();
        map.insert("a".to_string(), f64::NAN);
        assert!(to_row(&map).unwrap_err().reason().contains("inside a map"));
        map.insert("a".to_string(), 2.5);
        assert_eq!(to_row(&map).unwrap(), serde_json::json!({"a": 2.5}));
    }
}
