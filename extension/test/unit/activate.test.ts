/**
 * extension.ts against a small stand-in for the `vscode` module (VS Code
 * itself cannot run here): activation registers every contributed command,
 * a server that cannot start is reported with its fix in a message and on
 * the status bar, and Restricted Mode refuses to measure.
 *
 * The stand-in implements what extension.ts calls; any other name the
 * language client library reads while loading is an empty class.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import Module from "node:module";
import * as path from "node:path";
import { describe, it } from "node:test";

type Fn = (...args: unknown[]) => unknown;

interface Fake {
  vscode: Record<string, unknown>;
  commands: Map<string, Fn>;
  messages: { level: string; text: string }[];
  context: Map<string, unknown>;
  status: { text: string; tooltip: string; command: unknown; shown: boolean };
  settings: Record<string, unknown>;
  trusted: boolean;
  activeDocument?: { languageId: string; uri: { toString(): string }; getText(): string; version: number };
}

function fakeVscode(settings: Record<string, unknown>, trusted: boolean): Fake {
  const disposable = { dispose() {} };
  const event = () => disposable;
  const fake: Fake = {
    vscode: {},
    commands: new Map(),
    messages: [],
    context: new Map(),
    status: { text: "", tooltip: "", command: undefined, shown: false },
    settings,
    trusted,
  };
  const channel = () => ({
    info() {},
    warn() {},
    error() {},
    trace() {},
    debug() {},
    append() {},
    appendLine() {},
    show() {},
    dispose() {},
  });
  const message = (level: string) => (text: string) => {
    fake.messages.push({ level, text });
    return Promise.resolve(undefined);
  };
  class CancellationTokenSource {
    token = { isCancellationRequested: false, onCancellationRequested: event };
    cancel() {
      this.token.isCancellationRequested = true;
    }
    dispose() {}
  }
  const known: Record<string, unknown> = {
    window: {
      createOutputChannel: channel,
      createStatusBarItem: () => {
        const item = fake.status as Record<string, unknown>;
        item.show = () => (fake.status.shown = true);
        item.dispose = () => {};
        return item;
      },
      showErrorMessage: message("error"),
      showWarningMessage: message("warning"),
      showInformationMessage: message("info"),
      onDidChangeActiveTextEditor: event,
      get activeTextEditor() {
        return fake.activeDocument ? { document: fake.activeDocument } : undefined;
      },
      withProgress: (_o: unknown, task: Fn) => task({ report() {} }, { isCancellationRequested: false, onCancellationRequested: event }),
    },
    commands: {
      registerCommand: (id: string, fn: Fn) => {
        assert.ok(!fake.commands.has(id), `${id} registered twice`);
        fake.commands.set(id, fn);
        return disposable;
      },
      executeCommand: (id: string, ...args: unknown[]) => {
        if (id === "setContext") {
          fake.context.set(args[0] as string, args[1]);
        }
        return Promise.resolve(undefined);
      },
    },
    workspace: {
      get isTrusted() {
        return fake.trusted;
      },
      workspaceFolders: undefined,
      getConfiguration: () => ({ get: (key: string, dflt?: unknown) => (key in fake.settings ? fake.settings[key] : dflt) }),
      onDidChangeConfiguration: event,
      onDidGrantWorkspaceTrust: event,
      onDidChangeTextDocument: event,
    },
    extensions: { getExtension: () => undefined },
    StatusBarAlignment: { Left: 1, Right: 2 },
    ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
    ViewColumn: { Active: -1, Beside: -2, One: 1 },
    CancellationTokenSource,
  };
  fake.vscode = new Proxy(known, {
    get(target, name: string) {
      if (!(name in target)) {
        // What the client library extends or reads while loading.
        target[name] = class {};
      }
      return target[name];
    },
  });
  return fake;
}

const EXT = path.resolve(__dirname, "..", "..", "..");
const COMPILED = path.join(EXT, "out", "src", "extension.js");

/** A fresh copy of extension.js (and the client library) bound to `fake`. */
function loadExtension(fake: Fake): { activate: Fn; deactivate: Fn } {
  const mod = Module as unknown as { _load: Fn };
  const original = mod._load;
  for (const key of Object.keys(require.cache)) {
    if (key.startsWith(path.join(EXT, "out", "src")) || key.includes(`${path.sep}vscode-languageclient${path.sep}`) || key.includes("python-extension")) {
      delete require.cache[key];
    }
  }
  mod._load = function (request: unknown, ...rest: unknown[]) {
    return request === "vscode" ? fake.vscode : original.call(this, request, ...rest);
  };
  try {
    // A fresh CommonJS load is the point: `import` would share the cached module.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    return require(COMPILED);
  } finally {
    mod._load = original;
  }
}

const context = () => ({ subscriptions: [] as { dispose(): void }[] });

describe("activate (with a stand-in for vscode)", () => {
  it("registers every contributed command and reports a server that cannot start, with the fix", async () => {
    const fake = fakeVscode({ interpreter: ["/nonexistent/bin/python"] }, true);
    const ext = loadExtension(fake);
    await ext.activate(context());
    const manifest = JSON.parse(readFileSync(path.join(EXT, "package.json"), "utf8"));
    for (const c of manifest.contributes.commands) {
      assert.ok(fake.commands.has(c.command), `${c.command} is not registered`);
    }
    const error = fake.messages.find((m) => m.level === "error");
    assert.ok(error, "no error message for a missing interpreter");
    assert.match(error.text, /\/nonexistent\/bin\/python \(from leir\.interpreter\) was not found/);
    assert.match(error.text, /leir\.interpreter/);
    assert.equal(fake.status.text, "$(error) LEIR");
    assert.ok(fake.status.shown);
    await ext.deactivate();
  });

  it("refuses to measure or optimize in Restricted Mode", async () => {
    const fake = fakeVscode({ interpreter: ["/nonexistent/bin/python"] }, false);
    fake.activeDocument = { languageId: "leir", uri: { toString: () => "file:///m.leir" }, getText: () => "", version: 1 };
    const ext = loadExtension(fake);
    await ext.activate(context());
    fake.messages.length = 0;
    await fake.commands.get("leir-lsp.measure")!();
    await fake.commands.get("leir-lsp.optimize")!();
    assert.equal(fake.messages.length, 2);
    for (const m of fake.messages) {
      assert.equal(m.level, "warning");
      assert.match(m.text, /Restricted Mode/);
    }
    await ext.deactivate();
  });

  it("asks for a LEIR or TVMScript file when the active one is neither", async () => {
    const fake = fakeVscode({ interpreter: ["/nonexistent/bin/python"] }, true);
    fake.activeDocument = { languageId: "python", uri: { toString: () => "file:///p.py" }, getText: () => "print(1)\n", version: 1 };
    const ext = loadExtension(fake);
    await ext.activate(context());
    fake.messages.length = 0;
    await fake.commands.get("leir-lsp.convert")!();
    assert.deepEqual(fake.messages.map((m) => m.level), ["warning"]);
    assert.match(fake.messages[0].text, /open a \.leir file or a Python file with TVMScript/);
    assert.equal(fake.context.get("leir.tvmscript"), false);
    await ext.deactivate();
  });
});
