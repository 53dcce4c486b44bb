/**
 * Which documents the language client sends to the server.
 *
 * Every `.leir` document goes to the server. A Python document goes only
 * once it holds TVMScript (`@T.prim_func`, `@I.ir_module`, or an import of
 * `tvm.script`): the server would otherwise check every Python file of a
 * workspace and report "no kernel" in each. A Python file that gains
 * TVMScript while it is edited is opened on the server at that moment, with
 * its whole text.
 *
 * No `vscode` import: the rules are unit-tested in plain Node.
 */

/** What the TVMScript printer writes, and what people write by hand. */
const TVMSCRIPT = /^\s*@(?:T\.prim_func|I\.ir_module|tvm\.script\.(?:tir\.prim_func|ir_module))\b|^\s*from\s+tvm\.script\s+import\b|^\s*import\s+tvm\.script\b/m;

export function isTvmScript(text: string): boolean {
  return TVMSCRIPT.test(text);
}

export interface DocumentLike {
  uri: string;
  languageId: string;
  getText(): string;
}

/** For an open or a change: send it, send a didOpen first, or drop it. */
export type SyncDecision = "forward" | "open" | "skip";

export class AttachTracker {
  private readonly attached = new Set<string>();

  /** `didOpen`: forward a LEIR document, or a Python one with TVMScript. */
  onOpen(doc: DocumentLike): SyncDecision {
    if (this.wanted(doc)) {
      this.attached.add(doc.uri);
      return "forward";
    }
    return "skip";
  }

  /** `didChange`: forward when attached; open when it just became TVMScript. */
  onChange(doc: DocumentLike): SyncDecision {
    if (this.attached.has(doc.uri)) {
      return "forward";
    }
    if (this.wanted(doc)) {
      this.attached.add(doc.uri);
      return "open";
    }
    return "skip";
  }

  /** `didClose`: forward only what the server was told about. */
  onClose(doc: { uri: string }): SyncDecision {
    return this.attached.delete(doc.uri) ? "forward" : "skip";
  }

  /** Requests (hover, code actions...) go to the server only for these. */
  isAttached(uri: string): boolean {
    return this.attached.has(uri);
  }

  /** The server restarted: it knows no document until they are reopened. */
  clear(): void {
    this.attached.clear();
  }

  private wanted(doc: DocumentLike): boolean {
    if (doc.languageId === "leir") {
      return true;
    }
    return doc.languageId === "python" && isTvmScript(doc.getText());
  }
}
