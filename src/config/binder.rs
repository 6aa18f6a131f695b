//! The leniency of .NET's configuration binder, as a serde adapter.
//!
//! YARP reads `appsettings.json` through `Microsoft.Extensions.Configuration`, which
//! flattens every value to a string and binds keys case-insensitively. So a YARP user's
//! file may write `"clusterId"` for `ClusterId`, `"Order": "5"` for `5`, or
//! `"Enabled": "True"` for `true`, and environment overrides are strings by nature.
//! [`Binder`] wraps any self-describing serde [`Deserializer`] (JSON, TOML, a
//! `serde_json::Value`) and gives the model those rules:
//!
//! * a struct's keys match its fields ignoring ASCII case (the canonical name is handed
//!   on, so `deny_unknown_fields` still rejects a key that matches no field, as written);
//! * an enum's variants match ignoring ASCII case;
//! * a string is read as a number or a boolean where one is expected, and a number or a
//!   boolean as a string where a string is expected.
//!
//! Map keys (route, cluster and destination ids, header names in `Metadata`) keep their
//! case. The adapter sits *outside* `serde_path_to_error`'s tracker, so error paths name
//! keys as the file wrote them.

use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    Unexpected, VariantAccess, Visitor,
};

/// A deserializer with the .NET binder's rules (see the module docs).
pub(crate) struct Binder<D>(pub(crate) D);

/// What the caller asked for, which decides how a scalar of another kind is read.
#[derive(Clone, Copy)]
enum Want {
    /// Anything: values are handed on as they are (nested values still bound).
    Any,
    /// A boolean.
    Bool,
    /// An integer.
    Int,
    /// A floating-point number.
    Float,
    /// A string.
    Str,
    /// A struct with these fields.
    Struct(&'static [&'static str]),
    /// An enum with these variants.
    Enum(&'static [&'static str]),
}

/// A visitor handing values on with the binder's rules.
struct Bound<V> {
    inner: V,
    want: Want,
}

fn bound<V>(inner: V, want: Want) -> Bound<V> {
    Bound { inner, want }
}

/// The field or variant among `names` that `key` names ignoring ASCII case.
fn canonical(names: &'static [&'static str], key: &str) -> Option<&'static str> {
    names.iter().find(|n| n.eq_ignore_ascii_case(key)).copied()
}

macro_rules! forward_any {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.0.$method(bound(visitor, Want::Any))
        }
    )*};
}

macro_rules! scalar {
    ($want:expr => $($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.0.deserialize_any(bound(visitor, $want))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Binder<D> {
    type Error = D::Error;

    forward_any! {
        deserialize_any deserialize_char deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier
    }
    scalar!(Want::Bool => deserialize_bool);
    scalar!(Want::Int => deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64);
    scalar!(Want::Float => deserialize_f32 deserialize_f64);
    scalar!(Want::Str => deserialize_str deserialize_string);

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_ignored_any(visitor)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_unit_struct(name, bound(visitor, Want::Any))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_newtype_struct(name, bound(visitor, Want::Any))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple(len, bound(visitor, Want::Any))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_tuple_struct(name, len, bound(visitor, Want::Any))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_struct(name, fields, bound(visitor, Want::Struct(fields)))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_enum(name, variants, bound(visitor, Want::Enum(variants)))
    }
}

impl<V> Bound<V> {
    /// A number where a string is wanted becomes its decimal text.
    fn number<'de, E: de::Error>(
        self,
        n: impl fmt::Display + Copy,
        pass: impl FnOnce(V) -> Result<V::Value, E>,
    ) -> Result<V::Value, E>
    where
        V: Visitor<'de>,
    {
        match self.want {
            Want::Str => self.inner.visit_string(n.to_string()),
            _ => pass(self.inner),
        }
    }

    /// A string where a scalar of another kind is wanted, read as that kind
    /// (`"5"`, `"True"`, `"0.5"`), as .NET's binder converts its string values.
    fn text<'de, E: de::Error>(
        self,
        v: &str,
        pass: impl FnOnce(V) -> Result<V::Value, E>,
    ) -> Result<V::Value, E>
    where
        V: Visitor<'de>,
    {
        let trimmed = v.trim();
        match self.want {
            Want::Bool => match trimmed.to_ascii_lowercase().as_str() {
                "true" => self.inner.visit_bool(true),
                "false" => self.inner.visit_bool(false),
                _ => Err(E::invalid_value(Unexpected::Str(v), &self.inner)),
            },
            Want::Int => {
                if let Ok(n) = trimmed.parse::<u64>() {
                    self.inner.visit_u64(n)
                } else if let Ok(n) = trimmed.parse::<i64>() {
                    self.inner.visit_i64(n)
                } else {
                    Err(E::invalid_value(Unexpected::Str(v), &self.inner))
                }
            }
            Want::Float => match trimmed.parse::<f64>() {
                Ok(n) if n.is_finite() => self.inner.visit_f64(n),
                _ => Err(E::invalid_value(Unexpected::Str(v), &self.inner)),
            },
            _ => pass(self.inner),
        }
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Bound<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<V::Value, E> {
        self.number(v, |inner| inner.visit_bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<V::Value, E> {
        self.number(v, |inner| inner.visit_i64(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.number(v, |inner| inner.visit_u64(v))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<V::Value, E> {
        self.number(v, |inner| inner.visit_i128(v))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<V::Value, E> {
        self.number(v, |inner| inner.visit_u128(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        self.number(v, |inner| inner.visit_f64(v))
    }

    fn visit_char<E: de::Error>(self, v: char) -> Result<V::Value, E> {
        self.inner.visit_char(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.text(v, |inner| inner.visit_str(v))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.text(v, |inner| inner.visit_borrowed_str(v))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        match self.want {
            Want::Bool | Want::Int | Want::Float => self.visit_str(&v),
            _ => self.inner.visit_string(v),
        }
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<V::Value, E> {
        self.inner.visit_bytes(v)
    }

    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<V::Value, E> {
        self.inner.visit_borrowed_bytes(v)
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<V::Value, E> {
        self.inner.visit_byte_buf(v)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Binder(d))
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Binder(d))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(BoundSeq(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        let fields = match self.want {
            Want::Struct(fields) => Some(fields),
            _ => None,
        };
        self.inner.visit_map(BoundMap { map, fields })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        let variants = match self.want {
            Want::Enum(variants) => variants,
            _ => &[],
        };
        self.inner.visit_enum(BoundEnum { data, variants })
    }
}

/// A seed whose value is deserialized with the binder's rules.
struct BoundSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for BoundSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Binder(d))
    }
}

/// A seed for a struct key or enum variant: the key as written, handed on as the
/// canonical name it matches ignoring case (or as written when it matches none).
struct KeySeed<S> {
    inner: S,
    names: &'static [&'static str],
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        let key = d.deserialize_str(KeyText)?;
        match canonical(self.names, &key) {
            Some(name) => self.inner.deserialize(name.into_deserializer()),
            None => self
                .inner
                .deserialize(IntoDeserializer::<D::Error>::into_deserializer(key)),
        }
    }
}

/// Reads a key as text.
struct KeyText;

impl Visitor<'_> for KeyText {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
}

struct BoundSeq<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for BoundSeq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(BoundSeed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

struct BoundMap<A> {
    map: A,
    /// The struct's fields, when the map is read as a struct (keys matched ignoring
    /// case); `None` for a map, whose keys are data.
    fields: Option<&'static [&'static str]>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for BoundMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        match self.fields {
            Some(names) => self.map.next_key_seed(KeySeed { inner: seed, names }),
            None => self.map.next_key_seed(seed),
        }
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.map.next_value_seed(BoundSeed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

struct BoundEnum<A> {
    data: A,
    variants: &'static [&'static str],
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for BoundEnum<A> {
    type Error = A::Error;
    type Variant = BoundVariant<A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let (value, variant) = self.data.variant_seed(KeySeed {
            inner: seed,
            names: self.variants,
        })?;
        Ok((value, BoundVariant(variant)))
    }
}

struct BoundVariant<A>(A);

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for BoundVariant<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(BoundSeed(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, bound(visitor, Want::Any))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0
            .struct_variant(fields, bound(visitor, Want::Struct(fields)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "PascalCase", deny_unknown_fields)]
    struct Inner {
        cluster_id: Option<String>,
        order: Option<i32>,
        enabled: Option<bool>,
        rate: Option<f64>,
        mode: Option<Mode>,
        #[serde(default)]
        metadata: BTreeMap<String, String>,
        #[serde(default)]
        list: Vec<Inner>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    enum Mode {
        ExactHeader,
        HeaderPrefix,
    }

    fn bind(json: &str) -> Result<Inner, String> {
        let mut de = serde_json::Deserializer::from_str(json);
        Inner::deserialize(Binder(&mut de)).map_err(|e| e.to_string())
    }

    #[test]
    fn keys_and_variants_ignore_case_but_ids_keep_it() {
        let v = bind(
            r#"{"clusterID": "c", "ORDER": 2, "mode": "headerprefix",
                "Metadata": {"Key": "V"}, "list": [{"clusterid": "x"}]}"#,
        )
        .unwrap();
        assert_eq!(v.cluster_id.as_deref(), Some("c"));
        assert_eq!(v.order, Some(2));
        assert_eq!(v.mode, Some(Mode::HeaderPrefix));
        assert_eq!(v.metadata.keys().collect::<Vec<_>>(), ["Key"]);
        assert_eq!(v.list[0].cluster_id.as_deref(), Some("x"));
    }

    #[test]
    fn scalars_convert_as_dotnet_does() {
        let v =
            bind(r#"{"ClusterId": 5, "Order": " -3", "Enabled": "True", "Rate": "0.5"}"#).unwrap();
        assert_eq!(v.cluster_id.as_deref(), Some("5"));
        assert_eq!(v.order, Some(-3));
        assert_eq!(v.enabled, Some(true));
        assert_eq!(v.rate, Some(0.5));
        let v = bind(r#"{"Metadata": {"a": 1, "b": true}}"#).unwrap();
        assert_eq!(v.metadata["a"], "1");
        assert_eq!(v.metadata["b"], "true");
    }

    #[test]
    fn bad_values_and_unknown_keys_are_still_errors() {
        let e = bind(r#"{"Order": "first"}"#).unwrap_err();
        assert!(e.contains("invalid value: string \"first\""), "{e}");
        let e = bind(r#"{"Order": "99999999999"}"#).unwrap_err();
        assert!(e.contains("i32"), "{e}");
        let e = bind(r#"{"Enabled": "yes"}"#).unwrap_err();
        assert!(e.contains("invalid value"), "{e}");
        let e = bind(r#"{"Pathh": "/"}"#).unwrap_err();
        assert!(e.contains("unknown field `Pathh`"), "{e}");
        let e = bind(r#"{"order": 1, "Order": 2}"#).unwrap_err();
        assert!(e.contains("duplicate field `Order`"), "{e}");
    }
}
