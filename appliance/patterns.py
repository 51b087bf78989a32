"""Regular expressions that Python's ``re``, the API's validator (pydantic: Rust's
``regex``) and every JSON Schema validator (ECMA-262) read the same way, built from the
limits the validators use, so the OpenAPI document can publish each rule as a ``pattern``.

The dialect is their common ground: ASCII character classes written out (no ``\\d``,
``\\w`` or ``\\s``, which are Unicode-aware in some of the three), no look-around (Rust's
``regex`` has none), no inline flags (ECMA-262 has none: a case-insensitive word is
written ``[Nn][Uu][Ll][Ll]``), and anchored with ``^...$`` by :func:`anchored` (a JSON
Schema ``pattern`` is searched, not matched). Rules a regular expression states only with
look-around ("does not start with a reserved word", "at least 64M") are built here as
plain alternations from the validator's own constants.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

DIGITS = "0-9"
_CLASS_SPECIAL = set("\\]^-[")  # escaped inside a class (Rust and ECMA-262 agree on these)


def anchored(body: str) -> str:
    """``body`` as a whole-string pattern (for ``Field(pattern=...)``)."""
    return f"^(?:{body})$"


def char_class(chars: Iterable[str]) -> str:
    """A class of exactly ``chars``: runs of letters and digits as ranges, every other
    character listed once (escaped where a class needs it)."""
    chosen = sorted(set(chars))
    if not chosen:
        raise ValueError("an empty character class matches nothing")
    parts: list[str] = []
    i = 0
    while i < len(chosen):
        j = i
        while (j + 1 < len(chosen) and chosen[j + 1].isalnum() and chosen[i].isalnum()
               and ord(chosen[j + 1]) == ord(chosen[j]) + 1):
            j += 1
        if j - i >= 2:
            parts.append(f"{chosen[i]}-{chosen[j]}")
        else:
            parts.extend(_class_char(c) for c in chosen[i:j + 1])
        i = j + 1
    return "[" + "".join(parts) + "]"


def _class_char(c: str) -> str:
    if c in _CLASS_SPECIAL:
        return "\\" + c
    if not c.isprintable() or ord(c) > 126:
        return f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
    return c


def literal(text: str) -> str:
    """``text`` matched literally."""
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in text)


def no_case(word: str) -> str:
    """``word`` matched in any case: ``[Nn][Uu][Ll][Ll]``."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else literal(c) for c in word)


def letters_digits(extra: str = "", upper: bool = True, lower: bool = True) -> set[str]:
    """The characters of a class: ASCII digits, letters of the cases asked, ``extra``."""
    chars = set(string.digits) | set(extra)
    if upper:
        chars |= set(string.ascii_uppercase)
    if lower:
        chars |= set(string.ascii_lowercase)
    return chars


# --- numbers ------------------------------------------------------------------------------

def int_range(lo: int, hi: int) -> str:
    """The decimal integers from ``lo`` to ``hi`` (both >= 0), leading zeros allowed (as
    ``int()`` reads them)."""
    if not 0 <= lo <= hi:
        raise ValueError(f"int_range({lo}, {hi})")
    return "0*(?:" + "|".join(_digits_between(str(a), str(b))
                              for a, b in _same_length_spans(lo, hi)) + ")"


def int_at_least(lo: int) -> str:
    """The decimal integers from ``lo`` up, leading zeros allowed."""
    width = len(str(lo))
    longer = f"[1-9][0-9]{{{width},}}"
    return f"(?:{int_range(lo, 10 ** width - 1)}|0*{longer})"


def _same_length_spans(lo: int, hi: int) -> list[tuple[int, int]]:
    spans = []
    while lo <= hi:
        top = min(hi, 10 ** len(str(lo)) - 1)
        spans.append((lo, top))
        lo = top + 1
    return spans


def _digits_between(a: str, b: str) -> str:
    """Strings of len(a) digits from a to b (equal lengths); a leading 0 only for 0."""
    if len(a) == 1:
        return a if a == b else f"[{a}-{b}]"
    if a[0] == b[0]:
        return literal(a[0]) + _group(_digits_between(a[1:], b[1:]))
    parts = []
    rest = len(a) - 1
    if a[1:] != "0" * rest:
        parts.append(a[0] + _group(_digits_between(a[1:], "9" * rest)))
        first = int(a[0]) + 1
    else:
        first = int(a[0])
    if b[1:] != "9" * rest:
        last = int(b[0]) - 1
        tail = b[0] + _group(_digits_between("0" * rest, b[1:]))
    else:
        last, tail = int(b[0]), ""
    if first <= last:
        lead = str(first) if first == last else f"[{first}-{last}]"
        parts.append(f"{lead}[0-9]{{{rest}}}")
    if tail:
        parts.append(tail)
    return "|".join(parts) if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def _group(pattern: str) -> str:
    return pattern if "|" not in pattern or pattern.startswith("(?:") else f"(?:{pattern})"


def other_digits(word: str) -> str:
    """Strings of ``len(word)`` digits other than ``word``."""
    return "(?:" + "|".join(f"{word[:i]}{char_class(set(string.digits) - {d})}"
                            + (f"[0-9]{{{len(word) - i - 1}}}" if i < len(word) - 1 else "")
                            for i, d in enumerate(word)) + ")"


def months_except(month: str) -> str:
    """The months 01-12 other than ``month`` (two digits)."""
    return "(?:" + "|".join(f"{m:02d}" for m in range(1, 13) if f"{m:02d}" != month) + ")"


def fraction_at_least(threshold: Fraction) -> str:
    """Digits ``F`` after a decimal point with ``0.F >= threshold`` (0 < threshold < 1,
    a terminating decimal such as 1/16 = 0.0625)."""
    digits = _terminating_digits(threshold)
    options = []
    for i, d in enumerate(digits):
        if d != "9":
            bigger = "9" if d == "8" else f"[{int(d) + 1}-9]"
            options.append(digits[:i] + bigger + "[0-9]*")
    options.append(digits + "[0-9]*")
    return "(?:" + "|".join(options) + ")"


def _terminating_digits(value: Fraction) -> str:
    if not 0 < value < 1:
        raise ValueError(value)
    digits = ""
    while value:
        value *= 10
        digit = int(value)
        digits += str(digit)
        value -= digit
        if len(digits) > 80:
            raise ValueError("not a terminating decimal")
    return digits


def decimal_at_least(threshold: Fraction) -> str:
    """Decimal numbers ``N`` or ``N.F`` (leading zeros allowed, as ``float()`` reads
    them) whose value is at least ``threshold`` (> 0, a terminating decimal)."""
    if threshold <= 0:
        raise ValueError(threshold)
    whole = -(-threshold.numerator // threshold.denominator)  # ceil
    options = [int_at_least(whole) + "(?:\\.[0-9]+)?"]
    if threshold.denominator != 1:  # N = floor(threshold), F at least what is left
        floor = whole - 1
        options.append(f"0*{floor if floor else '0'}\\." + fraction_at_least(threshold - floor))
    return "(?:" + "|".join(options) + ")"


def decimal_up_to(top: int, fraction_digits: int) -> str:
    """Decimal numbers above 0 and at most ``top`` (a whole number > 1), with up to
    ``fraction_digits`` digits after the point (a fraction below 1 ends in a non-zero
    digit, so no long run of zeros rounds to 0)."""
    frac = f"(?:\\.[0-9]{{1,{fraction_digits}}})?"
    return ("(?:" + f"{int_range(1, top - 1)}{frac}"
            + f"|0*0\\.[0-9]{{0,{fraction_digits - 1}}}[1-9]"
            + f"|0*{top}(?:\\.0{{1,{fraction_digits}}})?" + ")")


# --- words a value must not be or start with ----------------------------------------------

@dataclass
class _Node:
    children: dict[frozenset[str], _Node] = field(default_factory=dict)
    ends: str = ""  # "word": a refused word ends here; "prefix": a refused prefix does


def avoiding(first: set[str], rest: set[str], words: Sequence[Sequence[set[str]]] = (),
             prefixes: Sequence[Sequence[set[str]]] = (), max_length: int | None = None
             ) -> str:
    """Strings of one ``first`` character then ``rest`` characters (``max_length`` in
    all; None: no limit) that are none of ``words`` and start with none of ``prefixes``.
    A word is a sequence of character sets (``{"N", "n"}``: that letter in either case;
    all digits: any digit); the sets at one position of two words are equal or
    disjoint."""
    root = _Node()
    for kind, items in (("word", words), ("prefix", prefixes)):
        for word in items:
            node = root
            for chars in word:
                key = frozenset(chars)
                if any(other != key and other & key for other in node.children):
                    raise ValueError("partly overlapping character sets")
                node = node.children.setdefault(key, _Node())
            node.ends = "prefix" if "prefix" in (kind, node.ends) else kind
    body = _avoid(root, first, rest, max_length, 0)
    if body is None:
        raise ValueError("no string is left")
    return body


def _avoid(node: _Node, first: set[str], rest: set[str], max_length: int | None,
           depth: int) -> str | None:
    """What may follow once the characters leading to ``node`` (``depth`` of them) are
    taken; None when nothing may."""
    can_end = depth > 0 and not node.ends
    left = None if max_length is None else max_length - depth
    options: list[str] = []
    if left is None or left > 0:
        allowed = first if depth == 0 else rest
        taken = set().union(*node.children) if node.children else set()
        free = allowed - taken
        if free:  # off every word: the rest is free
            if left is None:
                more = char_class(rest) + "*"
            else:
                more = f"{char_class(rest)}{{0,{left - 1}}}" if left > 1 else ""
            options.append(char_class(free) + more)
        for chars, child in sorted(node.children.items(), key=lambda kv: sorted(kv[0])):
            usable = set(chars) & allowed
            if not usable or child.ends == "prefix":
                continue  # a refused prefix is complete: nothing may follow it
            after = _avoid(child, first, rest, max_length, depth + 1)
            if after is None:
                continue
            head = char_class(usable) if len(usable) > 1 else literal(next(iter(usable)))
            options.append(head + after)
    if not options:
        return "" if can_end else None
    body = "(?:" + "|".join(options) + ")"
    return body + "?" if can_end else body


def word_sets(word: str, any_case: bool = True) -> list[set[str]]:
    """``word`` as the character sets :func:`avoiding` takes."""
    return [{c.lower(), c.upper()} if any_case and c.isalpha() else {c} for c in word]


# --- base64 -------------------------------------------------------------------------------

B64 = "[A-Za-z0-9+/]"
_B64_ALPHABET = string.ascii_uppercase + string.ascii_lowercase + string.digits + "+/"


def base64_starting_with(prefix: bytes) -> str:
    """Padded base64 (as ``base64.b64decode(validate=True)`` takes it) of any bytes that
    start with ``prefix``."""
    whole = len(prefix) // 3 * 3
    fixed = "".join(literal(c) for c in _b64(prefix[:whole]))
    rest = prefix[whole:]
    tail = f"(?:{B64}{{4}})*(?:{B64}{{2}}==|{B64}{{3}}=)?"
    if not rest:
        return fixed + tail
    b0 = rest[0]
    c0 = literal(_B64_ALPHABET[b0 >> 2])
    if len(rest) == 1:  # the group holds b0 alone (==), b0 and a byte (=), or three bytes
        c1 = _chars(((b0 & 3) << 4) | n for n in range(16))
        return f"{fixed}{c0}{c1}(?:==|{B64}=|{B64}{B64}{tail})"
    b1 = rest[1]
    c1 = literal(_B64_ALPHABET[((b0 & 3) << 4) | (b1 >> 4)])
    c2 = _chars(((b1 & 15) << 2) | n for n in range(4))
    return f"{fixed}{c0}{c1}{c2}(?:=|{B64}{tail})"


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def _chars(indexes: Iterable[int]) -> str:
    return char_class(_B64_ALPHABET[i] for i in indexes)
