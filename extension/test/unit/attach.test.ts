import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { AttachTracker, isTvmScript } from "../../src/attach";

const doc = (uri: string, languageId: string, text: string) => ({ uri, languageId, getText: () => text });

const PRIM_FUNC = `from tvm.script import tir as T

@T.prim_func
def main(A: T.Buffer((4,), "float32")):
    pass
`;

describe("isTvmScript", () => {
  it("recognises prim_func, ir_module and tvm.script imports", () => {
    assert.ok(isTvmScript(PRIM_FUNC));
    assert.ok(isTvmScript("@I.ir_module\nclass Module:\n    pass\n"));
    assert.ok(isTvmScript("import tvm.script\n"));
    // What `leir convert --to tvmscript` prints: imports commented out, decorator with arguments.
    assert.ok(isTvmScript("# from tvm.script import tirx as T\n\n@T.prim_func(s_tir=True)\ndef matmul(): pass\n"));
    assert.ok(isTvmScript("    @T.prim_func\n    def f(): pass\n"));
  });

  it("does not take ordinary Python, or TVMScript named in a comment or string, for TVMScript", () => {
    assert.ok(!isTvmScript("import numpy as np\nprint(np.zeros(3))\n"));
    assert.ok(!isTvmScript('x = "@T.prim_func"\n# use @T.prim_func here\n'));
  });
});

describe("AttachTracker", () => {
  it("forwards LEIR documents and TVMScript, skips other Python", () => {
    const t = new AttachTracker();
    assert.equal(t.onOpen(doc("file:///a.leir", "leir", "")), "forward");
    assert.equal(t.onOpen(doc("file:///k.py", "python", PRIM_FUNC)), "forward");
    assert.equal(t.onOpen(doc("file:///plain.py", "python", "print(1)\n")), "skip");
    assert.equal(t.onOpen(doc("file:///notes.md", "markdown", PRIM_FUNC)), "skip");
    assert.ok(t.isAttached("file:///k.py"));
    assert.ok(!t.isAttached("file:///plain.py"));
  });

  it("opens a Python document on the server when it becomes TVMScript, then forwards changes", () => {
    const t = new AttachTracker();
    assert.equal(t.onOpen(doc("file:///p.py", "python", "")), "skip");
    assert.equal(t.onChange(doc("file:///p.py", "python", "import os\n")), "skip");
    assert.equal(t.onChange(doc("file:///p.py", "python", PRIM_FUNC)), "open");
    assert.equal(t.onChange(doc("file:///p.py", "python", PRIM_FUNC + "\n")), "forward");
    // Deleting the decorator keeps it attached: the server must see every later change.
    assert.equal(t.onChange(doc("file:///p.py", "python", "")), "forward");
  });

  it("closes only what it opened, and forgets everything on clear", () => {
    const t = new AttachTracker();
    t.onOpen(doc("file:///a.leir", "leir", ""));
    assert.equal(t.onClose({ uri: "file:///b.py" }), "skip");
    assert.equal(t.onClose({ uri: "file:///a.leir" }), "forward");
    assert.equal(t.onClose({ uri: "file:///a.leir" }), "skip");
    t.onOpen(doc("file:///c.leir", "leir", ""));
    t.clear();
    assert.ok(!t.isAttached("file:///c.leir"));
  });
});
