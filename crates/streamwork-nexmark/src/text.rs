//! [`Text`], the strings of the event model: short ones (every channel,
//! name, city, state and `extra` the generator makes) are kept inline, so
//! that an event crossing an exchange carries no allocation to be freed by
//! another thread, and a copy of one (a fan-out) allocates nothing.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use streamwork::state::rkyv;
use streamwork::state::rkyv::rancor::{Fallible, Source};
use streamwork::state::rkyv::string::{ArchivedString, StringResolver};
use streamwork::state::rkyv::{DeserializeUnsized, Place, SerializeUnsized};

/// An immutable UTF-8 string: up to 24 bytes inline, longer ones on the
/// heap (a [`CompactString`](compact_str::CompactString), the size of a
/// `String`). It reads as a `&str` (`Deref`), compares, hashes and orders as
/// one, and has the serde form of a string and the rkyv form of a `String`.
///
/// ```
/// use streamwork_nexmark::Text;
/// let channel = Text::from("Google");
/// assert_eq!(channel, "Google");
/// assert_eq!(channel.to_lowercase(), "google");
/// ```
#[derive(Clone, Default)]
pub struct Text(compact_str::CompactString);

impl Text {
    /// The text as a `&str`.
    #[inline]
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// A text that refers to `text` rather than holding a copy, however
    /// long: cloning it copies the reference, never the bytes, and
    /// allocates nothing.
    ///
    /// ```
    /// use streamwork_nexmark::Text;
    /// let url = Text::from_static("https://www.nexmark.com/abcde/fghij/klmno/item.htm?query=1");
    /// assert_eq!(url.clone(), url);
    /// ```
    #[inline]
    pub const fn from_static(text: &'static str) -> Self {
        Text(compact_str::CompactString::const_new(text))
    }
}

impl From<&str> for Text {
    #[inline]
    fn from(text: &str) -> Self {
        Text(compact_str::CompactString::new(text))
    }
}

impl From<String> for Text {
    #[inline]
    fn from(text: String) -> Self {
        Text(compact_str::CompactString::from(text))
    }
}

impl FromIterator<char> for Text {
    fn from_iter<I: IntoIterator<Item = char>>(chars: I) -> Self {
        Text(chars.into_iter().collect())
    }
}

impl From<Text> for String {
    fn from(text: Text) -> Self {
        text.0.into_string()
    }
}

impl Deref for Text {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Text {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Text {}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialOrd for Text {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for Text {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Text {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Text, E> {
                Ok(Text::from(text))
            }
            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Text, E> {
                Ok(Text::from(text))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// Archived as a `String` is (the same [`ArchivedString`]), so its layout
/// is a `String`'s.
impl streamwork::state::StateLayout for Text {
    const LAYOUT: u64 = <String as streamwork::state::StateLayout>::LAYOUT;
}

// Archived as a `String`: its archived form validates UTF-8 when checked.
impl rkyv::Archive for Text {
    type Archived = ArchivedString;
    type Resolver = StringResolver;

    fn resolve(&self, resolver: StringResolver, out: Place<ArchivedString>) {
        ArchivedString::resolve_from_str(self.as_str(), resolver, out);
    }
}

impl<S: Fallible + ?Sized> rkyv::Serialize<S> for Text
where
    S::Error: Source,
    str: SerializeUnsized<S>,
{
    fn serialize(&self, serializer: &mut S) -> Result<StringResolver, S::Error> {
        ArchivedString::serialize_from_str(self.as_str(), serializer)
    }
}

impl<D: Fallible + ?Sized> rkyv::Deserialize<Text, D> for ArchivedString
where
    str: DeserializeUnsized<str, D>,
{
    fn deserialize(&self, _: &mut D) -> Result<Text, D::Error> {
        Ok(Text::from(self.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_read_the_same() {
        for text in [
            "",
            "Google",
            "exactly twenty-four b!!!",
            "twenty-five bytes, a heap",
            "é☃ over the inline limit, on the heap",
        ] {
            let made = Text::from(text);
            assert_eq!(made.as_str(), text);
            assert_eq!(Text::from(text.to_string()), made);
            assert_eq!(String::from(made.clone()), text);
            let json = serde_json::to_string(&made).unwrap();
            assert_eq!(serde_json::from_str::<Text>(&json).unwrap(), made);
            let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&made).unwrap();
            let back: Text = rkyv::from_bytes::<Text, rkyv::rancor::Error>(&bytes).unwrap();
            assert_eq!(back, made);
        }
        assert_eq!(std::mem::size_of::<Text>(), std::mem::size_of::<String>());
        // A multi-byte character across the inline limit.
        let edge = "aaaaaaaaaaaaaaaaaaaaaaa☃";
        assert_eq!(Text::from(edge).as_str(), edge);
    }
}
