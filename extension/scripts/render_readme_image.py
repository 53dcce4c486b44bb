"""Render the README picture from what the real server sent.

    LEIR_E2E_CAPTURE=media/hover-and-actions.capture.json npm run test:e2e
    python3 scripts/render_readme_image.py media/hover-and-actions.capture.json media/hover-and-actions.png

The end-to-end test (test/e2e/server.test.ts) writes the capture: the
example's text, the hover the server returned on the k loop and the titles of
the code actions it listed there. This script draws them in the layout of a
VS Code editor (code, hover box, code action menu). It is a rendering, not a
screenshot: no VS Code was run, and the code colours only approximate the
extension's grammar. Needs Pillow and the DejaVu fonts.
"""

from __future__ import annotations

import json
import re
import sys

from PIL import Image, ImageDraw, ImageFont

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
FONT_BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf"
SANS = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
SANS_BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"

BG, FG, GUTTER = (30, 30, 30), (212, 212, 212), (133, 133, 133)
PANEL, BORDER, SELECT = (37, 37, 38), (69, 69, 69), (4, 57, 94)
COLOURS = {  # Dark+ colours for the grammar's scopes
    "comment": (106, 153, 85), "loop": (197, 134, 192), "number": (181, 206, 168),
    "var": (156, 220, 254), "tensor": (78, 201, 176), "op": (212, 212, 212), "func": (220, 220, 170),
}
TOKEN = re.compile(r"(?P<comment>#.*)|(?P<loop>\b[LPVUB](?=\^))|(?P<number>\d+)|(?P<tensor>[A-Za-z_]\w*(?=_\{))"
                   r"|(?P<func>\b(?:exp|max|min|sqrt)\b)|(?P<var>[A-Za-z_]\w*)|(?P<op>\S)")


def code_line(draw, x, y, line, font):
    at = 0
    for m in TOKEN.finditer(line):
        draw.text((x + font.getlength(line[:m.start()]), y), m.group(), font=font, fill=COLOURS[m.lastgroup])
        at = m.end()
    return at


def hover_lines(markdown: str, limit: int) -> list[tuple[str, bool]]:
    """(text, bold) per line: the hover's first block, markdown marks dropped."""
    out = []
    headings = 0
    for raw in markdown.split("\n"):
        if raw.strip() == "---":
            continue
        if raw.startswith("###"):
            headings += 1
            if headings > 1:  # the loop's facts and the best step's reasoning
                break
        if not raw.strip():
            continue
        bold = raw.startswith("**") or raw.startswith("###")
        text = raw.lstrip("#").strip().replace("**", "").replace("`", "").strip("_")
        text = "• " + text[2:] if text.startswith("- ") else text
        out.append((text, bold))
    return out[:limit]


def wrap(text: str, font, width: float) -> list[str]:
    words, lines, cur = text.split(" "), [], ""
    for w in words:
        trial = f"{cur} {w}".strip()
        if font.getlength(trial) > width and cur:
            lines.append(cur)
            cur = w
        else:
            cur = trial
    return lines + [cur]


def main(capture_path: str, out_path: str) -> None:
    cap = json.load(open(capture_path))
    W, H = 1240, 760
    img = Image.new("RGB", (W, H), BG)
    d = ImageDraw.Draw(img)
    mono, mono_b = ImageFont.truetype(FONT, 17), ImageFont.truetype(FONT_BOLD, 17)
    sans, sans_b = ImageFont.truetype(SANS, 14), ImageFont.truetype(SANS_BOLD, 14)
    small = ImageFont.truetype(SANS, 12)

    # Tab bar
    d.rectangle([0, 0, W, 34], fill=(37, 37, 38))
    d.rectangle([0, 0, 190, 34], fill=BG)
    d.text((14, 9), cap["file"].split("/")[-1], font=sans, fill=FG)
    # Code
    lh, x0, y0 = 26, 64, 48
    lines = cap["text"].rstrip("\n").split("\n")
    for i, line in enumerate(lines):
        y = y0 + i * lh
        d.text((14, y), f"{i + 1:>3}", font=mono, fill=GUTTER)
        code_line(d, x0, y, line, mono)
    cursor = cap["position"]
    cx = x0 + mono.getlength(lines[cursor["line"]][:cursor["character"]])
    cy = y0 + cursor["line"] * lh
    d.line([cx, cy, cx, cy + 20], fill=(174, 175, 173), width=2)
    # Lightbulb
    d.text((x0 - 22, cy), "💡" if False else "✦", font=mono_b, fill=(255, 204, 0))

    # Hover box, below the code so that it hides none of it
    hx, hy, hw = cx, y0 + len(lines) * lh + 6, 640
    rows = []
    for text, bold in hover_lines(cap["hover"], 20):
        f = sans_b if bold else sans
        for part in wrap(text, f, hw - 24):
            rows.append((part, f))
    hh = 16 + 21 * len(rows)
    d.rectangle([hx, hy, hx + hw, hy + hh], fill=PANEL, outline=BORDER)
    for i, (text, f) in enumerate(rows):
        d.text((hx + 12, hy + 8 + i * 21), text, font=f, fill=FG)

    # Code action menu
    mx, my, mw = hx + hw + 24, cy + 8, 420
    titles = cap["actions"][:12]
    mh = 34 + 24 * len(titles)
    d.rectangle([mx, my, mx + mw, my + mh], fill=PANEL, outline=BORDER)
    d.text((mx + 12, my + 8), "Rewrite", font=sans_b, fill=GUTTER)
    for i, t in enumerate(titles):
        ty = my + 30 + i * 24
        if i == 0:
            d.rectangle([mx + 1, ty - 2, mx + mw - 1, ty + 20], fill=SELECT)
        d.text((mx + 14, ty), t, font=sans, fill=FG)
    more = len(cap["actions"]) - len(titles)
    if more > 0:
        d.text((mx + 14, my + mh + 6), f"… and {more} more", font=small, fill=GUTTER)

    d.text((14, H - 22), "Rendered from the leir-lsp server's real hover and code action replies "
           f"for {cap['file']} (scripts/render_readme_image.py); not a screenshot of VS Code.",
           font=small, fill=GUTTER)
    img.save(out_path, optimize=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
