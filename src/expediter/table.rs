//! The status report's text tables, laid out for a terminal: each column as wide as its
//! widest cell in display columns (a CJK character or an emoji takes two, a combining
//! accent none), so that every column starts at the same place on every row whatever
//! script a tool's name is written in. Cells are never cut: a long one widens its column.

use std::borrow::Cow;

use unicode_width::UnicodeWidthStr;

use crate::escape::one_line;

/// Renders `rows` under `header` as an ASCII-ruled table, each row one line. Every row
/// has as many cells as the header (the report's own rows).
pub(super) fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    // Each cell as shown (`one_line`): a character that would break the row or the columns
    // around it is written as its escape, so that a row stays one line, reads in its own
    // order, and is as wide as the terminal shows it (those characters are all of zero
    // width: the columns would still measure straight while the row showed otherwise).
    let header: Vec<Cow<'_, str>> = header.iter().map(|cell| one_line(cell)).collect();
    let rows: Vec<Vec<Cow<'_, str>>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| one_line(cell)).collect())
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|row| row[i].width())
                .chain([header[i].width()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let rule: String = widths
        .iter()
        .map(|w| format!("+{}", "-".repeat(w + 2)))
        .collect::<String>()
        + "+\n";
    let line = |out: &mut String, cells: &[Cow<'_, str>]| {
        for (cell, width) in cells.iter().zip(&widths) {
            out.push_str("| ");
            out.push_str(cell);
            out.push_str(&" ".repeat(width - cell.width() + 1));
        }
        out.push_str("|\n");
    };
    out.push_str(&rule);
    line(out, &header);
    out.push_str(&rule);
    for row in &rows {
        line(out, row);
    }
    out.push_str(&rule);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The display column at which each `|` or `+` of a line starts.
    fn borders(line: &str) -> Vec<usize> {
        line.char_indices()
            .filter(|(_, c)| matches!(c, '|' | '+'))
            .map(|(at, _)| line[..at].width())
            .collect()
    }

    #[test]
    fn wide_and_zero_width_characters_keep_the_columns_straight() {
        let mut out = String::new();
        let rows = [
            vec!["検索".to_string(), "OPEN".to_string()],
            vec!["🔍web".to_string(), "CLOSED".to_string()],
            vec!["cafe\u{301}".to_string(), "HALF_OPEN".to_string()],
            vec!["read".to_string(), "—".to_string()],
        ];
        table(&mut out, &["Tool", "State"], &rows);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 8, "{out}");
        let first = borders(lines[0]);
        for line in &lines {
            assert_eq!(borders(line), first, "{line:?} in:\n{out}");
        }
        // The widest name, 🔍web, is 5 columns: "| " + 5 + " "; 検索 and the accented
        // cafe take 4, HALF_OPEN 9.
        assert_eq!(first, [0, 8, 20], "{out}");
    }

    #[test]
    fn a_control_character_in_a_cell_is_escaped_and_the_row_stays_one_line() {
        let mut out = String::new();
        let rows = [vec!["evil\nname\t".to_string(), "OPEN".to_string()]];
        table(&mut out, &["Tool", "State"], &rows);
        assert_eq!(out.lines().count(), 5, "{out}");
        assert!(out.contains("| evil\\nname\\t | OPEN  |"), "{out}");
    }

    #[test]
    fn a_bidi_override_or_a_line_separator_in_a_cell_is_escaped() {
        let mut out = String::new();
        let rows = [vec![
            "safe\u{202e}txt.exe\u{2028}x".to_string(),
            "OPEN".to_string(),
        ]];
        table(&mut out, &["Tool", "State"], &rows);
        assert!(
            !out.contains('\u{202e}') && !out.contains('\u{2028}'),
            "{out}"
        );
        assert!(out.contains("safe\\u{202e}txt.exe\\u{2028}x"), "{out}");
    }
}
