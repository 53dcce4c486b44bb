/**
 * Applying LSP text edits to a string, as an editor does: positions are
 * zero-based lines and UTF-16 code units, all edits refer to the original
 * text, and none overlap. Used where the client applies an edit itself (the
 * final program of `leir.optimize`) and by the end-to-end test to check the
 * text a code action produces.
 */

export interface Position {
  line: number;
  character: number;
}
export interface Range {
  start: Position;
  end: Position;
}
export interface TextEdit {
  range: Range;
  newText: string;
}

/** Offset of a position; a line past the end clamps to the end (as LSP says). */
export function offsetAt(text: string, pos: Position): number {
  let offset = 0;
  for (let line = 0; line < pos.line; line++) {
    const nl = text.indexOf("\n", offset);
    if (nl < 0) {
      return text.length;
    }
    offset = nl + 1;
  }
  let lineEnd = text.indexOf("\n", offset);
  if (lineEnd < 0) {
    lineEnd = text.length;
  }
  if (lineEnd > offset && text[lineEnd - 1] === "\r") {
    lineEnd -= 1;
  }
  return Math.min(offset + pos.character, lineEnd);
}

export function applyTextEdits(text: string, edits: readonly TextEdit[]): string {
  const spans = edits
    .map((e) => ({ start: offsetAt(text, e.range.start), end: offsetAt(text, e.range.end), newText: e.newText }))
    .sort((a, b) => a.start - b.start || a.end - b.end);
  for (let i = 1; i < spans.length; i++) {
    if (spans[i].start < spans[i - 1].end) {
      throw new Error("overlapping text edits");
    }
  }
  let out = "";
  let at = 0;
  for (const s of spans) {
    out += text.slice(at, s.start) + s.newText;
    at = s.end;
  }
  return out + text.slice(at);
}

/** The single edit that turns `text` into `newText` by its changed middle. */
export function minimalEdit(text: string, newText: string): TextEdit | undefined {
  if (text === newText) {
    return undefined;
  }
  let head = 0;
  while (head < text.length && head < newText.length && text[head] === newText[head]) {
    head++;
  }
  let tail = 0;
  while (
    tail < text.length - head &&
    tail < newText.length - head &&
    text[text.length - 1 - tail] === newText[newText.length - 1 - tail]
  ) {
    tail++;
  }
  return {
    range: { start: positionAt(text, head), end: positionAt(text, text.length - tail) },
    newText: newText.slice(head, newText.length - tail),
  };
}

export function positionAt(text: string, offset: number): Position {
  let line = 0;
  let lineStart = 0;
  for (let i = 0; i < offset; i++) {
    if (text[i] === "\n") {
      line++;
      lineStart = i + 1;
    }
  }
  return { line, character: offset - lineStart };
}
