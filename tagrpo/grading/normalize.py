"""String normalisation of final answers before any equivalence check.

MATH-style gold answers and model answers differ in presentation far more often than in value:
``\\dfrac`` vs ``\\frac``, ``50\\%`` vs ``50``, ``30^\\circ`` vs ``30``, ``5\\text{ cm}`` vs ``5``,
``1,000`` vs ``1000``, ``x = 3`` vs ``3``, ``1.325e-27`` vs ``1.325 \\times 10^{-27}``.
:func:`normalize_answer` removes that presentation so that most correct answers are decided by a
string or number comparison, and what reaches math-verify is clean LaTeX (math-verify, for
instance, fails to parse ``50\\%``).

What is *not* presentation is kept:

* words: only unit words (:data:`UNIT_NAMES`, e.g. ``cm``, ``square units``, ``km/h``,
  ``dollars``, ``ways``) are stripped from ``\\text{}``; ``3 \\text{ or more}`` keeps its words,
  and :class:`NormalizedAnswer` says so (``words``), so that the grader compares such answers as
  strings instead of letting math-verify drop the text;
* the unit itself: stripped units are returned (``units``, canonical names), so that ``5 cm``
  and ``5 m`` are not the same answer while ``5 cm`` and ``5`` are;
* Euler's e: ``e`` notation becomes ``\\times 10^{k}`` only in a number token (``1.5e-3``,
  ``2E8``: digits, ``e``, an integer exponent, nothing alphanumeric around); ``e^{2}``, ``2e``
  and ``2e - 3`` (with spaces) stay Euler's number.

Everything here is plain string processing: nothing is ever evaluated. Every step is linear in
the answer's length (braces are paired in one pass), so a hostile answer cannot stall it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tagrpo.grading.extract import brace_pairs

# Commands whose argument is text rather than mathematics.
_TEXT_COMMAND = re.compile(r"\\(?:text|textrm|textbf|textit|textnormal|textsf|mbox|mathrm)\s*+\{")
# Words that join several answers: "1 \text{ and } 2" means the list "1, 2".
_CONNECTORS = {"and", "or", ",", ", and"}

_SINGULAR_COUNT_NOUNS = (
    "way", "student", "teacher", "person", "child", "boy", "girl", "adult", "point",
    "edge", "face", "vertex", "digit", "integer", "number", "piece", "box", "ball",
    "marble", "card", "game", "round", "step", "move", "time", "meal", "dog", "cat",
    "apple", "cookie", "page", "book", "seat", "ticket", "handshake", "tree", "square",
    "triangle", "rectangle", "cube", "coin", "stamp", "side", "diagonal", "line", "pair",
    "solution", "value", "outfit", "committee", "arrangement", "combination", "path",
    "route", "letter", "word", "term", "question", "problem", "sandwich", "pizza",
    "cupcake", "egg", "candy", "candie", "flower", "car", "bike", "chair", "table",
    "team", "player", "member", "visitor", "customer", "worker", "employee", "bag",
    "jar", "bottle", "can", "shirt", "hat", "pencil", "pen", "sheet", "tile", "brick",
    "block", "row", "column", "cell", "region", "triple",
)  # fmt: skip
# Unit words, by canonical name. Physical units, money, angles, and the count nouns that MATH
# answers carry ("12 \text{ ways}"); nothing else is stripped. Case matters for symbols (mm vs
# Mm); full words also match in any case.
UNIT_NAMES: dict[str, tuple[str, ...]] = {
    # length, area and volume words
    "m": ("m", "meter", "meters", "metre", "metres"),
    "cm": ("cm", "centimeter", "centimeters", "centimetre", "centimetres"),
    "mm": ("mm", "millimeter", "millimeters", "millimetre", "millimetres"),
    "km": ("km", "kilometer", "kilometers", "kilometre", "kilometres"),
    "nm": ("nm", "nanometer", "nanometers", "nanometre", "nanometres"),
    "um": ("um", "µm", "μm", "micrometer", "micrometers", "micron", "microns"),
    "angstrom": ("Å", "\\AA", "angstrom", "angstroms"),
    "in": ("in", "inch", "inches"),
    "ft": ("ft", "foot", "feet"),
    "yd": ("yd", "yard", "yards"),
    "mi": ("mi", "mile", "miles"),
    "au": ("AU", "au"),
    "pc": ("pc", "parsec", "parsecs"),
    "kpc": ("kpc",),
    "Mpc": ("Mpc",),
    "ly": ("ly", "lightyear", "lightyears"),
    "acre": ("acre", "acres"),
    "hectare": ("ha", "hectare", "hectares"),
    "L": ("L", "liter", "liters", "litre", "litres"),
    "mL": ("mL", "ml", "milliliter", "milliliters", "millilitre", "millilitres"),
    "gal": ("gal", "gallon", "gallons"),
    "qt": ("qt", "quart", "quarts"),
    "pt": ("pint", "pints"),
    "cup": ("cup", "cups"),
    "unit": ("unit", "units"),
    # mass
    "g": ("g", "gm", "gram", "grams", "gramme", "grammes"),
    "kg": ("kg", "kilogram", "kilograms"),
    "mg": ("mg", "milligram", "milligrams"),
    "lb": ("lb", "lbs", "pound", "pounds"),
    "oz": ("oz", "ounce", "ounces"),
    "ton": ("ton", "tons", "tonne", "tonnes"),
    # time
    "s": ("s", "sec", "secs", "second", "seconds"),
    "ms": ("ms", "millisecond", "milliseconds"),
    "min": ("min", "mins", "minute", "minutes"),
    "h": ("h", "hr", "hrs", "hour", "hours"),
    "day": ("day", "days"),
    "week": ("week", "weeks"),
    "month": ("month", "months"),
    "yr": ("yr", "yrs", "year", "years"),
    "mph": ("mph",),
    "kph": ("kph", "kmh"),
    # physics
    "J": ("J", "joule", "joules"),
    "kJ": ("kJ",),
    "eV": ("eV",),
    "keV": ("keV",),
    "MeV": ("MeV",),
    "GeV": ("GeV",),
    "erg": ("erg", "ergs"),
    "W": ("W", "watt", "watts"),
    "kW": ("kW", "kilowatt", "kilowatts"),
    "K": ("K", "kelvin", "kelvins"),
    "Hz": ("Hz", "hertz"),
    "kHz": ("kHz",),
    "MHz": ("MHz",),
    "GHz": ("GHz",),
    "N": ("N", "newton", "newtons"),
    "Pa": ("Pa", "pascal", "pascals"),
    "kPa": ("kPa",),
    "atm": ("atm",),
    "bar": ("bar",),
    "V": ("V", "volt", "volts"),
    "mol": ("mol", "mole", "moles"),
    "cal": ("cal", "calorie", "calories"),
    "kcal": ("kcal",),
    "ohm": ("ohm", "ohms", "\\Omega"),
    # angles and money
    "degree": ("deg", "degree", "degrees", "°"),
    "rad": ("rad", "radian", "radians"),
    "dollar": ("\\$", "dollar", "dollars", "USD", "usd"),
    "cent": ("cent", "cents"),
    "euro": ("euro", "euros"),
    "percent": ("percent",),
    # count nouns: the thing counted is not part of the value ("12 \text{ ways}" is 12)
    **{noun: (noun, noun + "s") for noun in _SINGULAR_COUNT_NOUNS},
    "people": ("people", "persons"),
    "children": ("children",),
    "vertices": ("vertices",),
    "boxes": ("boxes",),
    "candies": ("candies",),
}

# Names that say what is counted, not how it is measured: they never conflict with another unit
# ("12 \text{ ways}" and "12 \text{ arrangements}" are both 12).
COUNT_NOUNS = frozenset(
    {*_SINGULAR_COUNT_NOUNS, "unit", "people", "children", "vertices", "boxes", "candies"}
)
_UNIT_BY_WORD: dict[str, str] = {}
for _canonical, _forms in UNIT_NAMES.items():
    for _form in _forms:
        _UNIT_BY_WORD.setdefault(_form, _canonical)
_UNIT_BY_LOWER_WORD = {form.lower(): name for form, name in _UNIT_BY_WORD.items() if len(form) > 3}
# Words that shape a unit without being one: "square units", "sq. ft", "km per hour".
_UNIT_MODIFIERS = {"square": "sq", "sq": "sq", "sq.": "sq", "cubic": "cu", "cu": "cu", "per": "/"}
_UNIT_TOKEN = re.compile(
    r"\s*+(?:(?P<word>\\AA|\\Omega|\\\$|[A-Za-zµμÅ°]+\.?)|(?P<slash>/|\\cdot)"
    r"|(?P<power>\^\s*+\{?\s*+-?\d\s*+\}?))\s*+"
)

# Bare unit words after a number ("5 cm", "12 square units"): a conservative list, since a
# trailing letter may also be a variable ("5 m" stays, "5 meters" goes).
_TRAILING_UNITS = re.compile(
    r"(?<=[\d}])\s++(?P<unit>(?:square\s++|cubic\s++)?(?:units?|cm|mm|km|meters?|metres?|feet|"
    r"foot|ft|inches|inch|miles?|mph|degrees?|dollars?|cents?|hours?|minutes?|seconds?|days?|"
    r"weeks?|years?|pounds?|ounces?|grams?|kg|liters?|litres?|people|students|ways)"
    r"(?:\s*+\^\s*+\{?\s*+[23]\s*+\}?)?+)$"
)
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_MIXED_NUMBER = re.compile(r"(-?)(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}")
# A bare variable on the left of "x = 3", "x_1 = 3", "\theta = 3": the only left-hand side that
# may be dropped (an equation such as "x - 3z = 0" or "3 = 4" keeps its sides).
_SIMPLE_LHS = re.compile(
    r"\s*+(?:[A-Za-z]|\\[A-Za-z]+)(?:_(?:\{[A-Za-z0-9]+\}|[A-Za-z0-9]+))?+\s*+"
)
_WHOLE_BOX = re.compile(r"\\(?:boxed|fbox)\s*+\{")
# Spacing commands; "(?<!\\)" keeps the row separator "\\" of matrices ("\\ 0", "\\,") intact.
_SPACING = re.compile(r"(?<!\\)\\[!,;:>]|\\displaystyle|\\textstyle")
_WIDE_SPACE = re.compile(r"\\q?quad(?![A-Za-z])|~|(?<!\\)\\ ")
_SIZING = re.compile(r"\\left\.|\\right\.|\\(?:left|right|[bB]igg?[lr]?)(?![A-Za-z])")
_DEGREES = re.compile(r"\^\s*+\{\s*+\\circ\s*+\}|\^\s*+\\circ|\\circ\s*+$|°|\\degree(?![A-Za-z])")
_FRAC_SHORTHAND = (
    (re.compile(r"\\frac\s*+(\d)\s*+(\d)"), r"\\frac{\1}{\2}"),
    (re.compile(r"\\frac\s*+(\d)\s*+\{"), r"\\frac{\1}{"),
    (re.compile(r"\\frac\s*+(\{[^{}]*+\})\s*+(\d)"), r"\\frac\1{\2}"),
    (re.compile(r"\\sqrt\s*+(\d)"), r"\\sqrt{\1}"),
)
# A number in e notation: mantissa, e/E, integer exponent; nothing alphanumeric (or a dot)
# around it, so "e^{2}", "2e" and "7p+4e" keep Euler's number.
_E_NOTATION = re.compile(r"(?<![\w.\\])(\d+(?:\.\d*)?|\.\d+)[eE]([-+]?)0*(\d+)(?![\w.])")
# "1.5 \cdot 10^{3}", "1.5 × 10^3", "1.5\times10^{+3}": one spelling, "\times 10^{k}".
_POWER_OF_TEN = re.compile(
    r"\s*+(?:\\times|\\cdot|×|\*)\s*+10\s*+\^\s*+(?:\{\s*+([-+]?)\s*+0*(\d+)\s*+\}|([-+]?)0*(\d+))"
)
_BARE_POWER_OF_TEN = re.compile(r"^10\s*+\^\s*+(?:\{\s*+([-+]?)\s*+0*(\d+)\s*+\}|([-+]?)0*(\d+))$")


@dataclass(frozen=True)
class NormalizedAnswer:
    """One normalised answer, with what normalisation took out of it.

    ``units``: canonical names of the unit words stripped (``("cm",)``); ``words``: True when
    text that is not a unit was kept (``3 \\text{ or more}``): such an answer can only be
    compared as a string.
    """

    text: str
    units: tuple[str, ...] = ()
    words: bool = False


def unit_name(phrase: str) -> str | None:
    """Canonical name of a unit phrase (``"square units"`` -> ``"sq unit"``), None if not one.

    A phrase is a unit when every word in it is a unit word or a modifier (square, cubic,
    per); ``/``, ``\\cdot`` and integer powers may join them (``km/h``, ``m s^{-1}``).
    """
    position, parts, has_unit = 0, [], False
    phrase = phrase.strip()
    while position < len(phrase):
        token = _UNIT_TOKEN.match(phrase, position)
        if token is None or token.end() == position:
            return None
        position = token.end()
        word = token.group("word")
        if word is not None:
            if word.lower() in _UNIT_MODIFIERS:
                parts.append(_UNIT_MODIFIERS[word.lower()])
                continue
            bare = word.rstrip(".")
            name = _UNIT_BY_WORD.get(bare) or _UNIT_BY_LOWER_WORD.get(bare.lower())
            if name is None:
                return None
            parts.append(name)
            has_unit = True
        elif token.group("slash") is not None:
            parts.append("/")
        else:
            parts.append("^" + re.sub(r"[^\d-]", "", token.group("power")))
    return " ".join(parts).replace(" ^", "^") if has_unit else None


def measurement_units(units: tuple[str, ...]) -> frozenset[str]:
    """The unit words among ``units`` that measure (``cm``, ``km``, ``h``), count nouns left out.

    Compared as a set of words: powers and "/" are presentation here (``km/h`` and
    ``\\mathrm{km}\\,\\mathrm{h}^{-1}`` give the same words; ``cm^2`` and ``cm`` too).
    """
    measured = set()
    for unit in units:
        words = [part for part in re.split(r"[\s/]+|\^-?\d+", unit) if part]
        if not all(word in COUNT_NOUNS or word in ("sq", "cu") for word in words):
            measured.update(word for word in words if word not in ("sq", "cu"))
    return frozenset(measured)


def _strip_text_commands(text: str) -> tuple[str, list[str], bool]:
    """Drop unit ``\\text{...}`` next to a value; unwrap every other text command.

    Returns the text, the canonical units dropped and whether non-unit words were kept.
    """
    if "\\" not in text:
        return text, [], False
    pairs = brace_pairs(text)
    pieces: list[tuple[str, bool]] = []  # (fragment, is_text_argument)
    position = 0
    for match in _TEXT_COMMAND.finditer(text):
        if match.start() < position:
            continue  # nested inside a text command already consumed
        close = pairs.get(match.end() - 1)
        if close is None:
            break
        pieces.append((text[position : match.start()], False))
        pieces.append((text[match.end() : close], True))
        position = close + 1
    if not pieces:
        return text, [], False
    pieces.append((text[position:], False))

    outside = "".join(fragment for fragment, is_text in pieces if not is_text)
    if outside.count("=") == 1:  # in "x = \text{Evelyn}" the text is the value, not a unit
        outside = outside.split("=")[1]
    has_value = bool(re.search(r"[0-9A-Za-z\\]", outside))
    result: list[str] = []
    units: list[str] = []
    words = False
    after_unit = False  # the previous text was a unit, joined to this one by "/" or a space
    for fragment, is_text in pieces:
        if not is_text:
            result.append(fragment)
            after_unit = after_unit and _UNIT_JOINT.fullmatch(fragment) is not None
            continue
        content = fragment.strip()
        unit = unit_name(content) if has_value else None
        # A one-letter unit needs a space before it ("\text{ m}", "\mathrm{~s}") or a unit
        # before it ("\mathrm{km} / \mathrm{s}"): "\mathrm{e}" or "\text{m}" may be a symbol.
        if content in _CONNECTORS:
            result.append(", ")
            after_unit = False
        elif unit is not None and (len(content) > 1 or fragment[:1].isspace() or after_unit):
            result.append(" ")  # a unit such as "\text{ cm}": the value is outside
            units.append(unit)
            after_unit = True
        else:
            after_unit = False
            result.append(fragment)
            words = words or re.search(r"[A-Za-z]{2}", content) is not None
    joined = "".join(result)
    if units:
        joined = _strip_dangling_unit_glue(joined)
    return joined, units, words


_UNIT_JOINT = re.compile(r"\s*+(?:/|\\cdot)?+\s*+(?:\^\s*+\{?\s*+-?\d\s*+\}?)?+\s*+")
_DANGLING_GLUE = re.compile(r"(?:/|\\cdot|\^\s*+\{?\s*+-?\d\s*+\}?)$")


def _strip_dangling_unit_glue(text: str) -> str:
    """After units are dropped, "/" or a unit's power ("\\text{cm}^2") would dangle."""
    while True:
        stripped = text.rstrip()
        match = _DANGLING_GLUE.search(stripped[-12:])
        if match is None or not stripped[: len(stripped) - len(match.group())].strip():
            return stripped
        text = stripped[: len(stripped) - len(match.group())]


def _unwrap_whole(text: str) -> str:
    """``\\boxed{x}`` -> ``x`` and ``{x}`` -> ``x`` when the group spans the whole string.

    Braces are paired once and the window shrinks from both ends: linear however deep.
    """
    pairs = brace_pairs(text)
    low, high = 0, len(text)
    while True:
        while low < high and text[low].isspace():
            low += 1
        while high > low and text[high - 1].isspace():
            high -= 1
        match = _WHOLE_BOX.match(text, low, high)
        open_index = match.end() - 1 if match else (low if text.startswith("{", low) else None)
        if open_index is None or open_index >= high or pairs.get(open_index) != high - 1:
            return text[low:high]
        low, high = open_index + 1, high - 1


def _strip_math_delimiters(text: str) -> str:
    text = text.replace("\\$", "").replace("$", "")  # currency and inline-math markers
    for opener, closer in (("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(opener) and text.endswith(closer):
            text = text[len(opener) : -len(closer)]
    return text.strip()


def _strip_trailing_stops(text: str) -> str:
    """Trailing spaces, full stops and ``\\.`` go (one backwards pass)."""
    end = len(text)
    while end:
        char = text[end - 1]
        if char.isspace():
            end -= 1
        elif char == ".":
            end -= 2 if end >= 2 and text[end - 2] == "\\" else 1
        else:
            break
    return text[:end]


def top_level_equals(text: str) -> int:
    """How many ``=`` signs are outside every brace group (``\\sum_{i=1}`` has none)."""
    if "=" not in text:
        return 0
    depth, count = 0, 0
    for token in re.finditer(r"\\.|[{}=]", text):
        char = token.group()
        if char == "{":
            depth += 1
        elif char == "}":
            depth = max(depth - 1, 0)
        elif char == "=" and depth == 0:
            count += 1
    return count


def _drop_simple_lhs(text: str) -> str:
    """``x = 3`` -> ``3``; leaves equations, chains and systems (``a=1, b=2``) alone."""
    if text.count("=") != 1 or re.search(r"[<>!]|\\[lg]eq?|\\ne", text):
        return text
    lhs, rhs = text.split("=")
    if rhs.strip() and _SIMPLE_LHS.fullmatch(lhs):
        return rhs.strip()
    return text


def _mixed_number(text: str) -> str:
    """``137 \\frac{1}{2}`` (a MATH-style mixed number) -> ``\\frac{275}{2}``."""
    match = _MIXED_NUMBER.fullmatch(text)
    if not match:
        return text
    sign, whole, numerator, denominator = match.groups()
    if int(denominator) == 0 or len(whole) > 12:
        return text
    return f"{sign}\\frac{{{int(whole) * int(denominator) + int(numerator)}}}{{{denominator}}}"


def _power_of_ten(match: re.Match[str]) -> str:
    sign = match.group(1) if match.group(2) is not None else match.group(3)
    digits = match.group(2) if match.group(2) is not None else match.group(4)
    return f" \\times 10^{{{'-' if sign == '-' else ''}{digits}}}"


def _scientific_notation(text: str) -> str:
    """``1.5e-3`` / ``1.5 \\cdot 10^{-3}`` / ``1.5×10^-3`` -> ``1.5 \\times 10^{-3}``."""
    if "e" in text or "E" in text:
        text = _E_NOTATION.sub(
            lambda m: f"{m.group(1)} \\times 10^{{{'-' if m.group(2) == '-' else ''}{m.group(3)}}}",
            text,
        )
    if "10" in text:
        text = _POWER_OF_TEN.sub(_power_of_ten, text)
        bare = _BARE_POWER_OF_TEN.match(text)
        if bare:
            text = _power_of_ten(bare).replace(" \\times ", "")
    return text


def normalize_full(answer: str | None, keep_lhs: bool = False) -> NormalizedAnswer:
    """:func:`normalize_answer` plus the units it stripped and whether words remain."""
    if not answer:
        return NormalizedAnswer("")
    text = answer.replace("\n", " ").strip()
    text = _strip_math_delimiters(text)
    text = _unwrap_whole(text)
    text = _SIZING.sub("", text)
    text = _WIDE_SPACE.sub(" ", _SPACING.sub("", text))
    text = re.sub(r"\\[dt]frac(?![A-Za-z])", r"\\frac", text)
    text = re.sub(r"\\[dt]binom(?![A-Za-z])", r"\\binom", text)
    text = _DEGREES.sub("", text)
    text = text.replace("\\%", "").replace("%", "")
    text, units, words = _strip_text_commands(text)
    text = text.replace("{,}", ",")
    text = re.sub(r"\s+", " ", text).strip()
    trailing = _TRAILING_UNITS.search(text)
    if trailing:
        units.append(unit_name(trailing.group("unit")) or trailing.group("unit"))
        text = text[: trailing.start()]
    text = _strip_trailing_stops(text)
    if not keep_lhs:
        text = _drop_simple_lhs(text)
    text = _unwrap_whole(text)
    for pattern, replacement in _FRAC_SHORTHAND:
        text = pattern.sub(replacement, text)
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    text = re.sub(r"^(-?)\.(\d)", r"\g<1>0.\2", text)  # ".5" -> "0.5"
    text = _scientific_notation(text)
    text = _mixed_number(text)
    return NormalizedAnswer(text.strip(), tuple(units), words)


def normalize_answer(answer: str | None, keep_lhs: bool = False) -> str:
    """Presentation-free form of one final answer (a box's content or a gold answer).

    ``x = 3`` becomes ``3`` unless ``keep_lhs``: the grader keeps left-hand sides when both
    answers have one, so that the lines ``y = 3`` and ``x = 3`` stay different. Only a bare
    variable on the left is ever dropped.
    """
    return normalize_full(answer, keep_lhs).text


def compact(normalized: str) -> str:
    """Whitespace-free key for the exact comparison of two normalised answers."""
    return re.sub(r"\s+", "", normalized)


def split_tuple(normalized: str) -> tuple[str, str, list[str]] | None:
    """``(a, b, c)`` -> ``("(", ")", ["a", "b", "c"])`` when one bracket pair spans the string.

    Only round and square brackets with at least two top-level elements qualify; sets
    (``\\{...\\}``) and unions (``(0,1) \\cup (2,3)``) do not.
    """
    text = normalized.strip()
    if len(text) < 5 or text[0] not in "([" or text[-1] not in ")]":
        return None
    depth = 0
    parts: list[str] = []
    start = 1
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0 and index != len(text) - 1:
                return None  # the opening bracket closes early: not one group
        elif char == "," and depth == 1:
            parts.append(text[start:index].strip())
            start = index + 1
        index += 1
    if depth != 0:
        return None
    parts.append(text[start:-1].strip())
    if len(parts) < 2 or not all(parts):
        return None
    return text[0], text[-1], parts
