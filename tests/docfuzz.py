"""Random documents through the server's request handlers (issue 12.3),
shared by ``tests/test_document_fuzz.py`` (hypothesis, a few hundred
documents in CI) and ``bench/fuzz_documents.py`` (the long run).

``exercise(server, text, language, positions)`` calls what each LSP method
calls, on a ``DocumentSnapshot`` of the text: diagnostics
(``document_diagnostics`` and ``to_lsp``), hover, the code-action listing,
code lenses, document symbols, semantic tokens, folding ranges and
formatting, at the given positions. It checks that every result is
well-formed (every range inside the document) and lets through only the
typed refusals (``JsonRpcException``); anything else propagates.

Python (TVMScript-looking) documents go through the pure-Python steps only
(kernel discovery, symbols, folds, the diagnostics of a file without
kernels): their TVM parsing is another component's, in a worker process.
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: Pieces of LEIR for token soup (with the limits' edge values).
LEIR_PIECES = [
    "L", "P", "V", "U", "B", "^{", "_{", "{", "}", "=", "0", "1", "4", "32", "2.5", "1e-05", "inf",
    "[", "]", ";", ",", "i", "j", "k", "tx", "bx", "X", "C", "S", "f32", "f16", "i32", "bool", "g", "s", "l",
    "+", "-", "*", "/", "//", "%", "**", "(", ")", "<", "<=", "==", ">", "&", "|", "!", "+=", "max", "exp",
    "where", "in", "out", "tmp", ":", "@", "#c\n", "\n", " ", "  ", "2147483647", "2147483648",
    "1000000000000000000000000000000", "4611686018427387904", "C_{i,j}", "X_{i,k}", "L^{64}_{i}",
    "L^{1000000000000}_{i}", "P^{8}_{j=0}", "\t", "é", "😀", "\x00",
]

PYTHON_PIECES = [
    "from tvm.script import tirx as T\n", "import numpy as np\n", "@T.prim_func\n", "@T.prim_func(s_tir=True)\n",
    "@I.ir_module\n", "class Module:\n", "def main(A: T.Buffer((128,), \"float32\")):\n", "    ", "\n",
    "for i in range(128):\n", "with T.sblock(\"A\"):\n", "vi = T.axis.spatial(128, i)\n", "A[vi] = 1.0\n",
    "T.evaluate(0)\n", "def f(x):\n", "return x\n", "(", ")", ":", "[", "]", "'''", "\"", "#", "x = 1\n",
    "__import__('os')\n", "lambda: 0\n", "\t", "é",
]


def examples() -> list[str]:
    return [p.read_text() for p in sorted(EXAMPLES.glob("*.leir"))]


def generated(rng: random.Random, bases: list[str]) -> tuple[str, str]:
    """One random document and its language ("leir" or "tvmscript")."""
    kind = rng.random()
    if kind < 0.05:
        return _python(rng), "tvmscript"
    if kind < 0.30:
        return "".join(rng.choice(LEIR_PIECES) for _ in range(rng.randint(0, 120))), "leir"
    if kind < 0.40:
        return _pathological(rng), "leir"
    return mutated(rng, rng.choice(bases)), "leir"


def mutated(rng: random.Random, text: str) -> str:
    """A few edits of ``text``: deletions, insertions of LEIR pieces,
    duplicated slices, changed numbers."""
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        n = len(text)
        a = rng.randint(0, n)
        b = min(n, a + rng.randint(0, 12))
        if r < 0.25:
            text = text[:a] + text[b:]
        elif r < 0.55:
            text = text[:a] + rng.choice(LEIR_PIECES) + text[a:]
        elif r < 0.7:
            text = text[:a] + text[a:b] * rng.randint(2, 4) + text[a:]
        else:
            numbers = list(re.finditer(r"[0-9]+", text))
            if numbers:
                m = rng.choice(numbers)
                new = rng.choice(["0", "1", "3", "7", "2147483647", "2147483646", "2147483648", str(2**62),
                                  "1" + "0" * rng.randint(10, 40), str(rng.randint(1, 10**6))])
                text = text[:m.start()] + new + text[m.end():]
    return text


def _pathological(rng: random.Random) -> str:
    """Deep nesting, huge extents, many indices, long expressions: each
    around a limit of ``leir.limits`` / ``leir.parser``."""
    k = rng.randrange(7)
    if k == 0:  # many loops
        n = rng.choice([10, 63, 64, 65, 200])
        return "".join(f"L^{{2}}_{{i{d}}}\n" for d in range(n)) + "[ Y_{i0} += X_{i0,i1}; ];\n"
    if k == 1:  # nested bodies
        n = rng.choice([5, 99, 100, 101, 300])
        return "L^{2}_{i} " * 1 + "[ " * n + "Y_{i} = 1; " + "]; " * n
    if k == 2:  # many indices
        n = rng.choice([3, 32, 33, 500])
        return "L^{2}_{i} [ Y_{" + ",".join(["i"] * n) + "} = X_{" + ",".join(["i"] * rng.choice([1, n])) + "}; ];\n"
    if k == 3:  # huge extents
        e = rng.choice([2**31 - 1, 2**31, 2**31 - 2, 10**12, 10**30, 2**20])
        return f"L^{{{e}}}_{{i}}\n  L^{{{rng.choice([1, 2, e])}}}_{{j}} [\n    C_{{i,j}} += A_{{i,j}}*2;\n  ];\n"
    if k == 4:  # long sums and deep parentheses
        n = rng.choice([10, 199, 200, 201, 1000])
        if rng.random() < 0.5:
            return "L^{4}_{i} [ Y_{i} = " + "+".join(["X_{i}"] * n) + "; ];\n"
        return "L^{4}_{i} [ Y_{i} = " + "(" * n + "X_{i}" + ")" * n + "; ];\n"
    if k == 5:  # huge indices and declarations
        return rng.choice([
            "in X: f32[2147483648]\nL^{4}_{i} [ Y_{i} = X_{i}; ];\n",
            "L^{4}_{i} [ Y_{i*1000000000000} = 1; ];\n",
            "L^{4}_{i} [ Y_{i+2147483647} = 1; ];\n",
            "in X: f32[" + ",".join(["2"] * 40) + "]\n",
            "L^{2147483647}_{i=2}[Y_{i}=1;];",
            "L^{65536}_{i}L^{65536}_{j}L^{65536}_{k}L^{65536}_{l}[Y_{i,j,k,l}=1;];",
        ])
    return "\n".join(f"L^{{{rng.randint(1, 64)}}}_{{i}} [ Y{t}_{{i}} = X{t}_{{i}}*2; ];" for t in range(rng.randint(1, 50)))


def _python(rng: random.Random) -> str:
    return "".join(rng.choice(PYTHON_PIECES) for _ in range(rng.randint(0, 60)))


def positions(rng: random.Random, text: str, count: int) -> list[int]:
    """Offsets to ask at: random ones, the start, the end, and loop headers."""
    out = {0, len(text)}
    loops = [m.start() + 1 for m in re.finditer(r"[LPVUB]\^", text)]
    out.update(rng.sample(loops, min(len(loops), count // 2)))
    while len(out) < min(count + 2, len(text) + 1):  # a short text has fewer distinct offsets
        out.add(rng.randint(0, len(text)))
    return sorted(out)


# ------------------------------------------------------------------ the calls


class Malformed(AssertionError):
    pass


def _lines(text: str) -> list[int]:
    """UTF-16 length of each line, as LSP counts lines (\\n, \\r\\n, \\r)."""
    return [len(line.encode("utf-16-le")) // 2 for line in re.split(r"\r\n|\r|\n", text)]


def _check_position(lines: list[int], p, what: str) -> None:
    if not (0 <= p.line < len(lines) and 0 <= p.character <= lines[p.line]):
        raise Malformed(f"{what}: position {p.line}:{p.character} outside the document "
                        f"({len(lines)} lines; line length {lines[p.line] if 0 <= p.line < len(lines) else '-'})")


def _check_range(lines: list[int], r, what: str) -> None:
    _check_position(lines, r.start, what)
    _check_position(lines, r.end, what)
    if (r.start.line, r.start.character) > (r.end.line, r.end.character):
        raise Malformed(f"{what}: range ends before it starts")


def _symbols(lines, found, what="documentSymbol") -> None:
    for s in found:
        _check_range(lines, s.range, what)
        _check_range(lines, s.selection_range, what)
        if not s.name:
            raise Malformed(f"{what}: empty name")
        _symbols(lines, s.children or [], what)


def exercise(server, text: str, language: str, offsets: list[int], uri: str | None = None,
             budget_scale: float = 1.0) -> dict:
    """Every handler's work on one document; raises on a malformed result
    or an untyped exception. Returns counts of what answered."""
    from lsprotocol import types
    from pygls.exceptions import JsonRpcException

    from leir import cancel
    from leir_server import diagnostics, suggestions
    from leir_server.api.requests import text_document_code_action as code_action
    from leir_server.api.requests import text_document_code_lens as code_lens
    from leir_server.api.requests import text_document_document_symbol as symbol
    from leir_server.api.requests import text_document_folding_range as folding
    from leir_server.api.requests import text_document_formatting as formatting
    from leir_server.api.requests import text_document_hover as hover
    from leir_server.api.requests import text_document_semantic_tokens_full as semantic
    from leir_server.schedule import BUDGET_S
    from leir_server.session.snapshot import DocumentSnapshot

    uri = uri or ("file:///fuzz/doc.leir" if language == "leir" else "file:///fuzz/doc.py")
    snapshot = DocumentSnapshot(uri, 1, text, language)
    lines = _lines(text)
    counts = {"refused": 0, "over budget": 0}

    def call(what, function, *args):
        # Under the budget the server gives the request (leir_server.schedule).
        budget = BUDGET_S.get(what, 10.0) * budget_scale
        try:
            with cancel.running(cancel.Token(deadline=time.monotonic() + budget)):
                return function(*args)
        except cancel.Cancelled as e:
            if e.reason != "over budget":
                raise
            counts["over budget"] += 1
            return None
        except JsonRpcException:
            counts["refused"] += 1
            return None

    python = language != "leir"
    if not python or not snapshot.kernels:
        found = call("diagnostics", diagnostics.document_diagnostics, snapshot)  # no budget: linear
        for d in diagnostics.to_lsp(snapshot, found or []):
            _check_range(lines, d.range, f"diagnostic {d.code}")
            for r in d.related_information or []:
                _check_range(lines, r.location.range, "related location")
    tree = call("documentSymbol", symbol.symbols, snapshot) or []
    _symbols(lines, tree)
    for f in call("foldingRange", folding.folding_ranges, snapshot) or []:
        if not (0 <= f.start_line <= f.end_line < len(lines)):
            raise Malformed(f"foldingRange {f.start_line}-{f.end_line} outside {len(lines)} lines")
    kernels = call("codeLens", suggestions.kernel_names, snapshot) or []
    for _, span in kernels:
        _check_position(lines, snapshot.position(span.start), "codeLens")
    if python:
        return counts
    data = call("semanticTokens", semantic.tokens, snapshot) or []
    if len(data) % 5:
        raise Malformed("semantic tokens: not a multiple of 5")
    line = char = 0
    for k in range(0, len(data), 5):
        dl, dc, length = data[k:k + 3]
        line, char = line + dl, (char + dc if dl == 0 else dc)
        if not (line < len(lines) and char + length <= lines[line]) or length <= 0:
            raise Malformed(f"semantic token {line}:{char}+{length} outside the document")
    result = call("formatting", formatting.formatting, snapshot)
    if result is not None:
        edits, refusal = result
        for e in edits or []:
            _check_range(lines, e.range, "formatting edit")
    for offset in offsets:
        position = snapshot.position(offset)
        _check_position(lines, position, "position")
        text_at = call("hover", hover.hover_markdown, server, snapshot, offset)
        if text_at is not None and not isinstance(text_at, str):
            raise Malformed("hover: not a string")
        actions = call("codeAction", suggestions.compute, server, snapshot, offset, code_action.MAX_ACTIONS) or []
        for s in actions:
            if s.span is not None:
                _check_position(lines, snapshot.position(s.span.start), "code action span")
            s.step.to_json()
    lenses = call("codeLens", code_lens._latencies, server, snapshot, kernels)
    if lenses is not None and set(lenses) != {k for k, _ in kernels}:
        raise Malformed("codeLens: latencies for other kernels")
    _ = types
    return counts
