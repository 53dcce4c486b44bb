"""Tokens of the canonical LEIR form against the equivalent TVMScript, per
bundled example, with the SmolLM2 BPE tokenizer (leir.tools.token_counts).

    python bench/token_ratio.py [--docs docs/token-ratio.md]

Both sides are comment-free (TVM's printer writes none): the LEIR side is
what `leir fmt` prints for the program with its comments removed, the
TVMScript side is what `leir convert --to tvmscript` prints.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from leir import ast as A  # noqa: E402
from leir.bridge.document import load_leir  # noqa: E402
from leir.format import canonical_program  # noqa: E402
from leir.printer import print_program  # noqa: E402


def strip_comments(program: A.Program) -> A.Program:
    def item(node):
        if isinstance(node, A.Equation):
            return replace(node, comments=A.NO_COMMENTS)
        return replace(
            node,
            loops=tuple(replace(l, comments=A.NO_COMMENTS) for l in node.loops),
            body=tuple(item(b) for b in node.body),
            end_comments=A.NO_COMMENTS,
            open_comments=A.NO_COMMENTS,
        )

    return replace(
        program,
        decls=tuple(replace(d, comments=A.NO_COMMENTS) for d in program.decls),
        units=tuple(item(u) for u in program.units),
        end_comments=A.NO_COMMENTS,
    )


def measure(path: Path) -> dict:
    from leir.bridge.lower import to_tvmscript
    from leir.tools.token_counts import count_tokens

    doc = load_leir(path.read_text())
    program = strip_comments(canonical_program(doc.analysis, minimal=True))
    compact_program = strip_comments(doc.analysis.complete_program())
    canonical = print_program(program)
    compact = print_program(compact_program, "compact")
    tvmscript = to_tvmscript(doc.analysis, path.stem)
    row = {
        "workload": path.stem,
        "leir_tokens": count_tokens(canonical),
        "compact_tokens": count_tokens(compact),
        "tvmscript_tokens": count_tokens(tvmscript),
        "leir_chars": len(canonical),
        "tvmscript_chars": len(tvmscript),
    }
    row["ratio"] = row["tvmscript_tokens"] / row["leir_tokens"]
    row["compact_ratio"] = row["tvmscript_tokens"] / row["compact_tokens"]
    return row


def table(rows: list[dict]) -> str:
    lines = [
        "| workload | LEIR tokens (canonical) | LEIR tokens (compact) | TVMScript tokens | ratio (canonical) | ratio (compact) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['leir_tokens']} | {r['compact_tokens']} | {r['tvmscript_tokens']} "
            f"| {r['ratio']:.2f}x | {r['compact_ratio']:.2f}x |"
        )
    ratios = [r["ratio"] for r in rows]
    lines.append(
        f"| **median** | | | | **{statistics.median(ratios):.2f}x** | "
        f"**{statistics.median(r['compact_ratio'] for r in rows):.2f}x** |"
    )
    lines.append(f"| **minimum** | | | | **{min(ratios):.2f}x** | **{min(r['compact_ratio'] for r in rows):.2f}x** |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path, help="also write the table into this markdown file")
    args = parser.parse_args()
    from leir.tools.token_counts import tokenizer_name

    rows = [measure(p) for p in sorted((ROOT / "examples").glob("*.leir"))]
    out = table(rows)
    print(f"tokenizer: {tokenizer_name()}")
    print(out)
    below = [r["workload"] for r in rows if r["ratio"] < 3.0]
    print(f"\nworkloads under the 3x target (canonical): {', '.join(below) if below else 'none'}")
    if args.docs:
        args.docs.write_text(
            "# Token ratio: canonical LEIR vs TVMScript\n\n"
            f"Measured with `python bench/token_ratio.py --docs {args.docs}` using the {tokenizer_name()} tokenizer.\n"
            "Both sides without comments; TVMScript is TVM 0.27's printer output of the lowered PrimFunc.\n\n"
            + out + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
