"""Split a SQL script into statements on `;` outside quotes and comments.

Why our own splitter: `trajpriv sql -f script.sql` runs several statements, and a `;` inside a
string literal (`WHERE note = 'a;b'`), a quoted identifier or a comment must not cut one in two.
Spark SQL quotes strings with '...' or "..." (a backslash escapes the next character, a doubled
quote is two adjacent literals), identifiers with `...` (a doubled backtick escapes), and has
`-- line` and `/* block */` comments (block comments nest).
"""

from __future__ import annotations

from dataclasses import dataclass

from udfs.errors import InputDataError


@dataclass(frozen=True)
class Statement:
    """One statement of a script and the line (1-based) it starts on, for error messages."""

    text: str
    line: int


def split_statements(script: str, source: str = "<script>") -> list[Statement]:
    """The statements of `script`, stripped, without empty ones (only blanks or comments).

    An unterminated quote or block comment is an InputDataError naming `source` and the line
    where it opened.
    """
    out: list[Statement] = []
    buf: list[str] = []
    has_code = False  # the current statement holds more than blanks and comments
    start_line, line = 1, 1
    i, n = 0, len(script)
    while i < n:
        ch = script[i]
        nxt = script[i + 1] if i + 1 < n else ""
        if ch in "'\"`":
            end = _quoted_end(script, i)
            if end < 0:
                kind = "identifier" if ch == "`" else "string"
                raise InputDataError(f"{source}, line {line}: unterminated {kind} opened by {ch}: "
                                     f"close it with {ch}")
            chunk = script[i:end]
            buf.append(chunk)
            if not has_code:
                start_line, has_code = line, True
            line += chunk.count("\n")
            i = end
        elif ch == "-" and nxt == "-":
            end = script.find("\n", i)
            end = n if end < 0 else end
            buf.append(script[i:end])
            i = end
        elif ch == "/" and nxt == "*":
            end = _comment_end(script, i)
            if end < 0:
                raise InputDataError(f"{source}, line {line}: unterminated /* comment: close it "
                                     "with */")
            chunk = script[i:end]
            buf.append(chunk)
            line += chunk.count("\n")
            i = end
        elif ch == ";":
            if has_code:
                out.append(Statement("".join(buf).strip(), start_line))
            buf, has_code = [], False
            i += 1
        else:
            if not ch.isspace() and not has_code:
                start_line, has_code = line, True
            line += ch == "\n"
            buf.append(ch)
            i += 1
    if has_code:
        out.append(Statement("".join(buf).strip(), start_line))
    return out


def _quoted_end(text: str, i: int) -> int:
    """Index just past the quote that closes the one at `i`; -1 when none does."""
    quote, j = text[i], i + 1
    while j < len(text):
        ch = text[j]
        if ch == "\\" and quote != "`":
            j += 2
            continue
        if ch == quote:
            if quote == "`" and j + 1 < len(text) and text[j + 1] == "`":
                j += 2  # `` inside an identifier
                continue
            return j + 1
        j += 1
    return -1


def _comment_end(text: str, i: int) -> int:
    """Index just past the */ that closes the (possibly nested) block comment at `i`."""
    depth, j = 0, i
    while j < len(text) - 1:
        pair = text[j:j + 2]
        if pair == "/*":
            depth, j = depth + 1, j + 2
        elif pair == "*/":
            depth, j = depth - 1, j + 2
            if depth == 0:
                return j
        else:
            j += 1
    return -1
