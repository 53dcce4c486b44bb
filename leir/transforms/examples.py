"""The before/after examples in every transformation's docstring, parsed
so that a test can run them (the documentation cannot rot).

Format, inside the docstring::

    Example: what it shows

        step: {"block": "S", "loop": "k", "factors": [8, 32]}

        before:
        <LEIR with a $0 cursor marker>

        after:
        <the expected canonical LEIR>

A ``before`` without ``after`` but with ``refused: CODE`` documents a case
where the step is not offered and asking for it raises that error code.
``listed: no`` (after ``step:``) documents a step that applies but that the
listing does not offer (a form plans and traces use, such as reorder's
``"order"``: a run of loops has too many orders to list them all).
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from types import ModuleType

CURSOR = "$0"


@dataclass(frozen=True)
class DocExample:
    title: str
    args: dict
    before: str  # without the cursor marker
    cursor: int | None  # offset of the marker in ``before``
    after: str | None
    refused: str | None
    #: Whether the listing offers the step at the cursor (``listed: no``).
    listed: bool = True


_EXAMPLE = re.compile(r"^Example:(?P<title>.*)$", re.M)


def examples(module: ModuleType) -> list[DocExample]:
    doc = textwrap.dedent(module.__doc__ or "")
    # The first line of a docstring is not indented; dedent the rest alone.
    first, _, rest = (module.__doc__ or "").partition("\n")
    doc = first + "\n" + textwrap.dedent(rest)
    starts = [m for m in _EXAMPLE.finditer(doc)]
    out = []
    for k, m in enumerate(starts):
        end = starts[k + 1].start() if k + 1 < len(starts) else len(doc)
        out.append(_parse(m.group("title").strip(), textwrap.dedent(doc[m.end():end])))
    return out


def _parse(title: str, body: str) -> DocExample:
    sections = re.split(r"^(step|listed|before|after|refused):[ \t]*", body, flags=re.M)
    parts: dict[str, str] = {}
    for name, text in zip(sections[1::2], sections[2::2]):
        parts[name] = text
    if "step" not in parts or "before" not in parts:
        raise ValueError(f"docstring example {title!r} needs 'step:' and 'before:'")
    args = json.loads(parts["step"].strip())
    before = _block(parts["before"])
    cursor = before.find(CURSOR)
    if cursor >= 0:
        before = before[:cursor] + before[cursor + len(CURSOR):]
    after = _block(parts["after"]) if "after" in parts else None
    refused = parts["refused"].strip() if "refused" in parts else None
    listed = parts.get("listed", "yes").strip()
    if listed not in ("yes", "no"):
        raise ValueError(f"docstring example {title!r}: 'listed:' is yes or no, got {listed!r}")
    return DocExample(title, args, before, cursor if cursor >= 0 else None, after, refused, listed == "yes")


def _block(text: str) -> str:
    lines = text.strip("\n").splitlines()
    return textwrap.dedent("\n".join(lines)).strip("\n") + "\n"
