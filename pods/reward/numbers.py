"""Exact numbers: answers that are plain numbers are parsed and compared here, never by floats.

The rule (README, "Rewards"):
- Integers, fractions (`3/4`, `\\frac{3}{4}`, `\\dfrac`, mixed `1\\frac{1}{2}` = 3/2) and scientific notation
  (`4.2e1`, `1.5 \\times 10^{3}`) are exact values. Two exact values are equal only if they are equal.
- A reference written as a decimal states a precision: `3.14` has 2 places. A prediction is equal to it if
  it rounds (half away from zero) to the reference at those places: `3.14159` matches `3.14`, `3.15` does
  not. A reference without a decimal point (`42`, `\\frac{1}{2}`) is exact: `41.99999996` is not 42.
  `Grader(round_to_reference=False)` (reward.round_to_reference) makes decimals exact too.
- `rel_tol` (reward.rel_tol, default 0) adds a relative tolerance, applied only when a side is a decimal.
- Units are dropped: `$5`, `5 \\%`, `90^\\circ`. A percentage also matches its fraction: `50%` = 50 = 0.5.
- Wrappers and noise are removed: `$..$`, `\\(..\\)`, `\\boxed{}`, `\\text{}`, zero-width characters,
  a Unicode minus, a lead-in `The answer is` / `Answer:`, a final full stop.

Anything else (`\\sqrt{2}`, `x = 5`, `18 \\text{ dollars}`) is not a plain number and goes to math-verify.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

MAX_DIGITS = 4000  # longer numerals are not plain numbers (int() refuses > 4300 digits by default)
MAX_EXPONENT = 1000  # |k| in 1e{k}: larger ones are left to math-verify and its time limit

_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u200e\u200f\u2060\ufeff\u00ad"), None)
_SPACES = dict.fromkeys(map(ord, "\u00a0\u2009\u202f\u2007"), " ") | {ord("\u2212"): "-", ord("\u2013"): "-"}
_LEAD_IN = re.compile(r"^(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:|=)\s*", re.I)
_WRAPPERS = [(r"\boxed{", "}"), (r"\fbox{", "}"), (r"\text{", "}"), (r"\mathrm{", "}"), (r"\mathbf{", "}"),
             ("$$", "$$"), ("$", "$"), (r"\(", r"\)"), (r"\[", r"\]"), ("{", "}")]  # fmt: skip
_UNITS_AFTER = [r"^{\circ}", r"^\circ", "°", r"\%", "%"]
_INT = r"(?:\d{1,3}(?:,\d{3})+|\d+)"
_DECIMAL = re.compile(rf"(?P<int>{_INT})?(?:\.(?P<frac>\d*))?")
_EXP = re.compile(
    r"(?:[eE](?P<e1>[+-]?\d+)|\s*(?:\\times|\\cdot|×|\*)\s*10\s*\^\s*(?:\{\s*(?P<e2>[+-]?\d+)\s*\}|(?P<e3>[+-]?\d)))$"
)
_PLAIN_INT = re.compile(r"[+-]?[0-9]+")  # ASCII digits only: re's \d and int() take other scripts' digits too
_FRAC = re.compile(
    r"(?:(?P<whole>\d+)\s*)?\\[dt]?frac(?:\{\s*(?P<a>[+-]?\d+)\s*\}\{\s*(?P<b>[+-]?\d+)\s*\}|(?P<a1>\d)(?P<b1>\d))"
)
_SLASH = re.compile(r"(?:(?P<whole>\d+)\s+)?(?P<a>\d+)\s*/\s*(?P<b>\d+)")


@dataclass(frozen=True)
class Number:
    value: Fraction
    decimals: int | None = None  # places the text states after a decimal point; None: an exact value
    percent: bool = False  # written with a % sign (value is the number before it)


def normalise(s: str) -> str:
    """Strip what does not change the value: invisible characters, wrappers, a lead-in phrase."""
    s = s.translate(_INVISIBLE).translate(_SPACES).strip()
    s = _LEAD_IN.sub("", s, count=1)
    for _ in range(8):  # nested wrappers, bounded
        before = s
        s = s.strip().removesuffix(".").strip() if not s.strip().endswith("..") else s.strip()
        for head, tail in _WRAPPERS:
            if s.startswith(head) and s.endswith(tail) and len(s) >= len(head) + len(tail):
                inner = s[len(head) : len(s) - len(tail)]
                if head == "{" and not _balanced(inner):
                    continue
                s = inner.strip()
                break
        if s == before:
            break
    return s


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += {"{": 1, "}": -1}.get(c, 0)
        if depth < 0:
            return False
    return depth == 0


def parse_number(text: str) -> Number | None:
    """A plain number as an exact Number, else None.

    >>> parse_number("$1,000$").value, parse_number("-\\\\frac{3}{4}").value, parse_number("4.2e1").value
    (Fraction(1000, 1), Fraction(-3, 4), Fraction(42, 1))
    >>> parse_number("2.50").decimals, parse_number("12%").percent, parse_number("x")
    (2, True, None)
    """
    if not isinstance(text, str) or len(text) > MAX_DIGITS + 200:
        return None
    if _PLAIN_INT.fullmatch(text) and len(text) <= MAX_DIGITS:  # "42", "-7": what the rest gives, sooner
        return Number(Fraction(int(text)))
    return _parse(text)


def _parse(text: str) -> Number | None:
    """parse_number's general path (any text the fast path does not take)."""
    s = normalise(text)
    percent = False
    for unit in _UNITS_AFTER:
        if s.endswith(unit):
            percent = unit in ("%", r"\%")
            s = s[: -len(unit)].strip()
            break
    s = s.replace("{,}", ",").replace(r"\,", ",").replace(r"\!", "")
    sign = 1
    if s.startswith(("+", "-")):
        sign, s = (-1 if s[0] == "-" else 1), s[1:].strip()
    s = s.replace(r"\$", "$").removeprefix("$").strip()  # currency: -$5, $5
    if s.startswith(("+", "-")):  # $-5
        sign, s = sign * (-1 if s[0] == "-" else 1), s[1:].strip()
    got = _parse_unsigned(s)
    if got is None:
        return None
    value, decimals = got
    return Number(sign * value, decimals, percent)


def _parse_unsigned(s: str) -> tuple[Fraction, int | None] | None:
    if not s or sum(c.isdigit() for c in s) > MAX_DIGITS:
        return None
    if m := _FRAC.fullmatch(s) or _SLASH.fullmatch(s):
        a, b = m.group("a") or m.group("a1"), m.group("b") or m.group("b1")
        if int(b) == 0:
            return None
        whole = m.group("whole")
        if whole is not None and (a.startswith(("-", "+")) or b.startswith(("-", "+"))):
            return None
        return Fraction(int(whole or 0)) + Fraction(int(a), int(b)), None
    exponent = 0
    if e := _EXP.search(s):
        exponent = int(e.group("e1") or e.group("e2") or e.group("e3"))
        if abs(exponent) > MAX_EXPONENT:
            return None
        s = s[: e.start()].strip()
    m = _DECIMAL.fullmatch(s)
    if not m or not (m.group("int") or m.group("frac")):
        return None
    digits = (m.group("int") or "0").replace(",", "") + (m.group("frac") or "")
    places = len(m.group("frac") or "")
    value = Fraction(int(digits), 10**places) * Fraction(10) ** exponent
    has_point = m.group("frac") is not None
    return value, (max(0, places - exponent) if has_point else None)


def numbers_equal(pred: Number, gold: Number, rel_tol: float = 0.0, round_to_reference: bool = True) -> bool:
    """The module's rule: exact values, the reference's stated decimals, an optional relative tolerance.

    >>> a = parse_number
    >>> numbers_equal(a("41.99999996"), a("42")), numbers_equal(a("3.14159"), a("3.14"))
    (False, True)
    >>> numbers_equal(a("0.5000001"), a("\\\\frac{1}{2}")), numbers_equal(a("50%"), a("0.5"))
    (False, True)
    """
    preds = [(pred.value, pred.decimals)]
    golds = [(gold.value, gold.decimals)]
    if pred.percent and not gold.percent:
        preds.append((pred.value / 100, None if pred.decimals is None else pred.decimals + 2))
    if gold.percent and not pred.percent:
        golds.append((gold.value / 100, None if gold.decimals is None else gold.decimals + 2))
    return any(_equal(p, pd, g, gd, rel_tol, round_to_reference) for p, pd in preds for g, gd in golds)


def _equal(p: Fraction, pd: int | None, g: Fraction, gd: int | None, rel_tol: float, rounding: bool) -> bool:
    if p == g:
        return True
    if rounding and gd is not None and _round(p, gd) == g:
        return True
    if rel_tol > 0 and (pd is not None or gd is not None):
        return abs(p - g) <= Fraction(rel_tol) * max(abs(p), abs(g))
    return False


def _round(x: Fraction, places: int) -> Fraction:
    """x rounded half away from zero to `places` decimals, exactly."""
    scale = 10**places
    q = abs(x) * scale
    n = int(q + Fraction(1, 2))  # floor(|x| * 10^k + 1/2)
    return Fraction(n if x >= 0 else -n, scale)
