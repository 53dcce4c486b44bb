import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { applyTextEdits, minimalEdit, offsetAt } from "../../src/textEdits";

describe("text edits", () => {
  it("applies several edits against the original text, in any order", () => {
    const text = "L^{4}_{i} [\n  A_{i} = 0;\n];\n";
    const out = applyTextEdits(text, [
      { range: { start: { line: 1, character: 10 }, end: { line: 1, character: 11 } }, newText: "1.5" },
      { range: { start: { line: 0, character: 3 }, end: { line: 0, character: 4 } }, newText: "8" },
    ]);
    assert.equal(out, "L^{8}_{i} [\n  A_{i} = 1.5;\n];\n");
  });

  it("refuses overlapping edits", () => {
    const r = { start: { line: 0, character: 0 }, end: { line: 0, character: 3 } };
    assert.throws(() => applyTextEdits("abcdef", [{ range: r, newText: "x" }, { range: r, newText: "y" }]), /overlapping/);
  });

  it("clamps positions past the end of a line (CRLF too) and of the text", () => {
    assert.equal(offsetAt("ab\r\ncd", { line: 0, character: 99 }), 2);
    assert.equal(offsetAt("ab\ncd", { line: 5, character: 0 }), 5);
  });

  it("finds the one edit between two texts", () => {
    const before = "a\nb\nc\n";
    const after = "a\nB1\nB2\nc\n";
    const edit = minimalEdit(before, after)!;
    assert.equal(applyTextEdits(before, [edit]), after);
    assert.equal(minimalEdit(before, before), undefined);
  });
});
