//! Text from outside (profile names and notes, a client's name, a lock holder's description)
//! shown in a terminal or the window: control characters could move the cursor, recolour or
//! rewrite the screen, and bidirectional controls could make text read differently from what
//! it is ("Trojan Source"). Such characters are refused where text is stored, and escaped where
//! text is only shown.

/// Whether `character` must never be shown as it is: C0/C1 controls (ESC starts terminal
/// escapes), and the Unicode bidirectional controls and invisible marks that can reorder text.
pub fn is_unsafe(character: char) -> bool {
    character.is_control()
        || matches!(
            character,
            '\u{061C}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

/// The first character of `text` that must not be stored, if any.
pub fn first_unsafe(text: &str) -> Option<char> {
    text.chars().find(|character| is_unsafe(*character))
}

/// Why a stored text field (`field`) holding `character` is refused, the character escaped.
pub fn unsafe_character(field: &str, character: char) -> String {
    format!(
        "{field} may not hold the character {}: it is a control or bidirectional formatting character that could change how text is shown",
        character.escape_unicode()
    )
}

/// `text` with every unsafe character written as an escape (`\u{1b}`), safe to print.
pub fn printable(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for character in text.chars() {
        if is_unsafe(character) {
            shown.push_str(&character.escape_unicode().to_string());
        } else {
            shown.push(character);
        }
    }
    shown
}

/// A path as a message shows it: lossy UTF-8, unsafe characters escaped. A file named
/// "\x1b[2J.toml" must not clear the terminal that lists it.
pub fn path(path: &std::path::Path) -> String {
    printable(&path.to_string_lossy())
}

/// Writes `value` as pretty JSON in which every unsafe character of a string (see
/// [`is_unsafe`]) is a `\uXXXX` escape. The strings decode to exactly what they were — a
/// script still gets the real file name — but the bytes printed hold no ESC and no bidi
/// control, so `--json` output in a terminal cannot move the cursor or reorder a line.
/// (serde_json escapes C0 controls itself, not C1 controls nor U+202E and its kin.)
pub fn write_json_pretty<W: std::io::Write, T: serde::Serialize + ?Sized>(
    writer: W,
    value: &T,
) -> serde_json::Result<()> {
    let mut serializer = serde_json::Serializer::with_formatter(writer, SafeJson::default());
    value.serialize(&mut serializer)
}

/// serde_json's pretty layout, with unsafe characters escaped inside strings.
#[derive(Default)]
struct SafeJson {
    pretty: serde_json::ser::PrettyFormatter<'static>,
}

impl serde_json::ser::Formatter for SafeJson {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut rest = fragment;
        while let Some(at) = rest.find(is_unsafe) {
            writer.write_all(&rest.as_bytes()[..at])?;
            let character = rest[at..].chars().next().unwrap_or_default();
            let mut units = [0u16; 2];
            for unit in character.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            rest = &rest[at + character.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }

    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.pretty.begin_array(writer)
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.pretty.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.pretty.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        self.pretty.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.pretty.begin_object(writer)
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.pretty.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.pretty.begin_object_key(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        self.pretty.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        self.pretty.end_object_value(writer)
    }
}

/// "GPU-5a1e0c2d…": the first 12 characters of a UUID, enough to tell cards apart in a
/// sentence or a table.
pub fn short_uuid(uuid: &str) -> String {
    let short: String = uuid.chars().take(12).collect();
    if short.len() < uuid.len() {
        format!("{short}…")
    } else {
        short
    }
}

/// A number as people write it: "70", "62.5"; far-out magnitudes in exponent form, so a
/// mistyped 1e300 does not print 300 digits.
pub fn number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude != 0.0 && !(1e-3..1e6).contains(&magnitude) {
        format!("{value:e}")
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_terminal_and_bidi_controls_and_keeps_the_rest() {
        assert_eq!(printable("Quiet 70 % — nights"), "Quiet 70 % — nights");
        assert_eq!(printable("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(printable("x\u{202E}y"), "x\\u{202e}y");
        assert_eq!(first_unsafe("ok\u{2066}"), Some('\u{2066}'));
        assert_eq!(first_unsafe("日本語 ✓"), None);
        assert!(is_unsafe('\u{9b}'), "C1 CSI");
        assert!(is_unsafe('\n'));
    }

    #[test]
    fn json_escapes_unsafe_characters_and_decodes_to_the_same_text() {
        let value =
            serde_json::json!({"path": "a\u{1b}[2Jb\u{202E}c\u{9b}d \"é\" 日本", "n": [1, 2]});
        let mut bytes = Vec::new();
        write_json_pretty(&mut bytes, &value).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert!(first_unsafe(&text.replace('\n', "")).is_none(), "{text}");
        assert!(
            text.contains("\\u202e") && text.contains("\\u009b"),
            "{text}"
        );
        assert!(text.contains("é") && text.contains("日本"), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
        // The layout is serde_json's pretty one.
        assert_eq!(
            text,
            serde_json::to_string_pretty(&back)
                .unwrap()
                .replace('\u{1b}', "\\u001b")
                .replace('\u{202E}', "\\u202e")
                .replace('\u{9b}', "\\u009b")
        );
    }
}
