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
}
