//! Conversion between `serde_json::Value` and protobuf's `google.protobuf.Struct` / `Value`.
//!
//! Protobuf numbers are `f64`; converting back, a number with no fractional part that fits `i64` becomes
//! an integer again, so `{"id": 3}` round-trips as `{"id": 3}` rather than `{"id": 3.0}`.

use prost_types::{ListValue, Struct, Value, value::Kind};
use serde_json::{Map, Number, Value as Json};

/// Why a JSON value could not become a protobuf `Struct`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JsonError {
    /// A `Struct` must come from a JSON object.
    #[error("expected a JSON object, found {0}")]
    NotAnObject(&'static str),
}

fn kind_name(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// Converts any JSON value into a protobuf `Value`.
pub fn to_value(value: Json) -> Value {
    let kind = match value {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Kind::StringValue(s),
        Json::Array(items) => Kind::ListValue(ListValue {
            values: items.into_iter().map(to_value).collect(),
        }),
        Json::Object(map) => Kind::StructValue(map_to_struct(map)),
    };
    Value { kind: Some(kind) }
}

fn map_to_struct(map: Map<String, Json>) -> Struct {
    Struct {
        fields: map.into_iter().map(|(k, v)| (k, to_value(v))).collect(),
    }
}

/// Converts a JSON object into a protobuf `Struct`; any other JSON value is an error.
pub fn to_struct(value: Json) -> Result<Struct, JsonError> {
    match value {
        Json::Object(map) => Ok(map_to_struct(map)),
        other => Err(JsonError::NotAnObject(kind_name(&other))),
    }
}

/// Converts a JSON object map into a protobuf `Struct`.
pub fn object_to_struct(map: Map<String, Json>) -> Struct {
    map_to_struct(map)
}

/// Converts a protobuf `Value` into JSON. A missing kind is `null`.
pub fn from_value(value: Value) -> Json {
    match value.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(b),
        Some(Kind::NumberValue(n)) => number(n),
        Some(Kind::StringValue(s)) => Json::String(s),
        Some(Kind::ListValue(list)) => {
            Json::Array(list.values.into_iter().map(from_value).collect())
        }
        Some(Kind::StructValue(s)) => Json::Object(struct_to_map(s)),
    }
}

/// Converts a protobuf `Struct` into a JSON object map.
pub fn struct_to_map(value: Struct) -> Map<String, Json> {
    value
        .fields
        .into_iter()
        .map(|(k, v)| (k, from_value(v)))
        .collect()
}

/// Converts a protobuf `Struct` into a JSON object.
pub fn from_struct(value: Struct) -> Json {
    Json::Object(struct_to_map(value))
}

/// Converts an optional `Struct` (an absent message field) into a JSON object; absent is `{}`.
pub fn from_optional_struct(value: Option<Struct>) -> Json {
    value.map_or_else(|| Json::Object(Map::new()), from_struct)
}

// 2^53: integers up to this magnitude are exact in f64.
const MAX_EXACT_INT: f64 = 9_007_199_254_740_992.0;

fn number(n: f64) -> Json {
    if n.fract() == 0.0 && n.abs() <= MAX_EXACT_INT {
        // In range and integral, so the cast is exact.
        #[allow(clippy::cast_possible_truncation)]
        return Json::Number(Number::from(n as i64));
    }
    Number::from_f64(n).map_or(Json::Null, Json::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_nested_objects_and_keeps_integers_integral() {
        let original = json!({
            "id": 3, "x": 0.25, "name": "OK", "flags": [true, null, -7], "nested": {"k": "v"}
        });
        let back = from_struct(to_struct(original.clone()).unwrap());
        assert_eq!(back, original);
    }

    #[test]
    fn non_objects_are_rejected_with_their_kind() {
        assert_eq!(
            to_struct(json!([1])),
            Err(JsonError::NotAnObject("an array"))
        );
        assert_eq!(
            to_struct(json!("s")),
            Err(JsonError::NotAnObject("a string"))
        );
    }

    #[test]
    fn non_finite_numbers_become_null() {
        assert_eq!(number(f64::NAN), Json::Null);
        assert_eq!(number(1.5), json!(1.5));
    }
}
