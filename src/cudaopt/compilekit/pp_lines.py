"""A source's logical lines as the C preprocessor sees them, for the include scan (sandbox.py).

Translation phases 1-3 as NVRTC applies them in C++17 mode: line splices (backslash-newline,
also before CRLF) joined; block comments, which may span lines and stand anywhere a space may,
replaced by one space (so a comment spanning lines joins them, as ``#/*..*/include`` shows);
``//`` comments removed; string and character literals, with their prefixes (``u8 u U L``) and
raw strings (``R"d(...)d"``, in which splices are not undone but refused), kept whole so that
nothing inside one can start a line or a comment. pp-numbers are read whole, so a digit
separator (``1'000``) does not open a character literal. Trigraphs are not replaced: NVRTC's
C++17 mode ignores them (it warns "support for trigraphs is disabled"), and so does this.

Where compilers are known to differ, the source is refused instead of guessed at: whitespace
between a backslash and the newline, a bare carriage return, a NUL, an unterminated comment or
raw string. An unterminated ``'`` or ``"`` ends at the end of its line, as it does in NVRTC.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

_SPLICE = re.compile(r"\\\r?\n")
_BAD_SPLICE = re.compile(r"\\[ \t\f\v]+\r?\n")
_TOKEN = re.compile(
    r"(?P<newline>\r?\n)|(?P<block>/\*)|(?P<comment>//[^\r\n]*)"
    r"|(?P<number>\.?\d(?:[eEpP][+-]|'\w|[\w.])*)"  # a pp-number: 1'000 opens no character literal
    r"|(?P<quote>[\"'])"
    # identifiers and punctuation up to anything above (a literal's prefix stays in the run)
    r"|(?P<plain>(?:[A-Za-z_$\u0080-\U0010ffff][\w$\u0080-\U0010ffff]*|[^\r\n/\"'\w$.\u0080-\U0010ffff]+"
    r"|/(?![*/])|\.(?!\d))+)"
)
_PREFIX = re.compile(r"(?<![\w$\u0080-\U0010ffff])(?:u8|u|U|L)?R?$")
_RAW_DELIM = re.compile(r'[^ ()\\\t\v\f\n"]{0,16}\(')


class SourceError(ValueError):
    """A source the scan will not guess about; the message names the line."""


@dataclass
class Line:
    """One logical line: ``code`` with every literal's contents blanked (``""`` / ``''``) and
    ``text`` with literals whole; ``number`` is the physical line it starts on (1-based)."""

    number: int
    code: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def add(self, code: str, text: str | None = None) -> None:
        self.code.append(code)
        self.text.append(code if text is None else text)


def logical_lines(source: str) -> list[tuple[int, str, str]]:
    """``(line number, code, text)`` for each logical line of ``source`` (see :class:`Line`)."""
    if "\x00" in source:
        raise SourceError(f"line {_line_of(source, source.index(chr(0)))}: a NUL character is not allowed")
    if (m := _BAD_SPLICE.search(source)) is not None:
        raise SourceError(f"line {_line_of(source, m.start())}: whitespace after a line-continuation "
                          "backslash is not allowed")
    if (m := re.search(r"\r(?!\n)", source)) is not None:
        raise SourceError(f"line {_line_of(source, m.start())}: a carriage return without a newline "
                          "is not allowed")
    return [(ln.number, "".join(ln.code), "".join(ln.text)) for ln in _Lexer(source).run()]


def _line_of(source: str, offset: int) -> int:
    return source.count("\n", 0, offset) + 1


class _Lexer:
    def __init__(self, source: str):
        self.raw = source
        # the spliced text, and for each of its characters the offset in the raw source
        self.text, self.origin = _splice(source)
        self.lines: list[Line] = [Line(1)]
        self.newlines = [m.start() for m in re.finditer("\n", source)]

    def line_no(self, pos: int) -> int:
        """The physical line (1-based) of the raw source that position ``pos`` of the spliced text is on."""
        offset = self.origin[min(pos, len(self.origin) - 1)] if self.origin else 0
        return bisect.bisect_left(self.newlines, offset) + 1

    def run(self) -> list[Line]:
        text, i, n = self.text, 0, len(self.text)
        while i < n:
            m = _TOKEN.match(text, i)
            kind, i = m.lastgroup, m.end()
            if kind == "newline":
                self.lines.append(Line(self.line_no(i) if i < n else self.line_no(i - 1) + 1))
            elif kind == "block":
                end = text.find("*/", i)
                if end < 0:
                    raise SourceError(f"line {self.line_no(m.start())}: unterminated comment")
                self.lines[-1].add(" ")
                i = end + 2
            elif kind == "quote":
                # R"...", u8R"...": a raw string when the run before ends in such a prefix
                prefix = _PREFIX.search(text, max(0, i - 4), i - 1)
                raw = prefix is not None and prefix.group().endswith("R") and text[i - 1] == '"'
                i = self.raw_string(i - 1) if raw else self.quoted(i - 1)
            elif kind != "comment":
                self.lines[-1].add(m.group())
        return self.lines

    def quoted(self, start: int) -> int:
        """An ordinary string or character literal; unterminated, it ends at the end of the line."""
        text, quote, i = self.text, self.text[start], start + 1
        while i < len(text) and text[i] != quote and text[i] != "\n" and not text.startswith("\r\n", i):
            i += 2 if text[i] == "\\" and i + 1 < len(text) and text[i + 1] not in "\r\n" else 1
        end = i + 1 if i < len(text) and text[i] == quote else i
        self.lines[-1].add(quote * 2, text[start:end])
        return end

    def raw_string(self, start: int) -> int:
        """``R"delim( ... )delim"``: read in the raw source, where a splice would be undone."""
        raw_start = self.origin[start]
        head = _RAW_DELIM.match(self.raw, raw_start + 1)
        if head is None:
            raise SourceError(f"line {self.line_no(start)}: malformed raw string literal delimiter")
        closing = ")" + head.group()[:-1] + '"'
        raw_end = self.raw.find(closing, head.end())
        if raw_end < 0:
            raise SourceError(f"line {self.line_no(start)}: unterminated raw string literal")
        raw_end += len(closing)
        body = self.raw[raw_start:raw_end]
        if _SPLICE.search(body):
            raise SourceError(f"line {self.line_no(start)}: a line splice inside a raw string literal "
                              "is not allowed")
        self.lines[-1].add('""', body)
        # no splice inside: the spliced text holds the same characters, one for one
        return start + len(body)


def _splice(source: str) -> tuple[str, list[int]]:
    """``source`` with every backslash-newline removed, and where each character came from."""
    pieces, origin, last = [], [], 0
    for m in _SPLICE.finditer(source):
        pieces.append(source[last:m.start()])
        origin.extend(range(last, m.start()))
        last = m.end()
    pieces.append(source[last:])
    origin.extend(range(last, len(source)))
    return "".join(pieces), origin
