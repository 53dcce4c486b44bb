/**
 * End to end: the real Python server, driven over stdio with vscode-jsonrpc
 * by the same messages VS Code's language client sends, and answering the
 * server's requests with the extension's own code (configuration.ts).
 *
 * initialize -> initialized (the server pulls `leir` settings) -> didOpen an
 * example -> hover -> codeAction -> codeAction/resolve -> apply the edit; the
 * resulting text must equal what `leir apply` makes of the same step (the
 * library, reached without the server). Then the same action on a changed
 * document must be refused.
 *
 * The server runs on $LEIR_PYTHON, else python3 (what the extension falls
 * back to), from the repository root.
 */

import assert from "node:assert/strict";
import { ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";
import { pathToFileURL } from "node:url";
import { createMessageConnection, MessageConnection, StreamMessageReader, StreamMessageWriter } from "vscode-jsonrpc/node";

import { isTvmScript } from "../../src/attach";
import { answerConfigurationRequest, DEFAULTS, serverConfiguration } from "../../src/configuration";
import { probeServer, resolveServerCommand } from "../../src/interpreter";
import { applyTextEdits, TextEdit } from "../../src/textEdits";

// out/test/e2e/ -> extension/ -> repository root
const ROOT = path.resolve(__dirname, "..", "..", "..", "..");
const EXAMPLE = path.join(ROOT, "examples", "matmul.leir");
const PYTHON = process.env.LEIR_PYTHON || "python3";
/** Resolve verifies the step numerically (TVM builds and runs both programs): minutes on a busy 2-core machine. */
const SLOW = { timeout: 600_000 };

/** The user settings the test client holds, as `workspace.getConfiguration("leir").get(key)` returns them. */
const SETTINGS: Record<string, unknown> = { target: "llvm", autoMeasure: false, measurementBudget: 4, "model.enabled": false };

interface CodeAction {
  title: string;
  kind?: string;
  data?: { uri: string; version: number; kernel: string | null; step: { id: string; args: Record<string, unknown> } };
  edit?: {
    changes?: Record<string, TextEdit[]>;
    documentChanges?: { textDocument: { uri: string; version: number | null }; edits: TextEdit[] }[];
  };
}

/** `line:character` of the first occurrence of `needle` (plus `delta` characters). */
function positionOf(text: string, needle: string, delta = 0): { line: number; character: number } {
  const at = text.indexOf(needle);
  assert.ok(at >= 0, `${needle} not in the example`);
  const lines = text.slice(0, at + delta).split("\n");
  return { line: lines.length - 1, character: lines[lines.length - 1].length };
}

function editsFor(action: CodeAction, uri: string, version: number): TextEdit[] {
  const edit = action.edit;
  assert.ok(edit, `resolve returned no edit for "${action.title}"`);
  if (edit.documentChanges) {
    const change = edit.documentChanges.find((c) => c.textDocument.uri === uri);
    assert.ok(change, "the edit does not touch the document");
    assert.equal(change.textDocument.version, version, "the edit must name the version it was computed on");
    return change.edits;
  }
  assert.ok(edit.changes?.[uri], "the edit does not touch the document");
  return edit.changes[uri];
}

describe("leir-lsp over stdio, as the extension drives it", () => {
  let server: ChildProcess;
  let conn: MessageConnection;
  let stderr = "";
  let shutDown = false;
  const configurationRequests: unknown[][] = [];
  let configured: () => void;
  const firstConfiguration = new Promise<void>((resolve) => (configured = resolve));

  before(async () => {
    const cmd = resolveServerCommand({ interpreter: [PYTHON] });
    const probe = await probeServer(cmd);
    assert.ok(probe.ok, probe.message);
    server = spawn(cmd.command, cmd.args, { cwd: ROOT, stdio: ["pipe", "pipe", "pipe"] });
    server.stderr!.on("data", (d) => (stderr += String(d)));
    conn = createMessageConnection(new StreamMessageReader(server.stdout!), new StreamMessageWriter(server.stdin!));
    conn.onRequest("workspace/configuration", (params: { items: { section?: string }[] }) => {
      const answer = answerConfigurationRequest(params.items, (key) => SETTINGS[key]);
      configurationRequests.push(answer);
      configured();
      return answer;
    });
    conn.onRequest("client/registerCapability", () => null);
    conn.onRequest("client/unregisterCapability", () => null);
    conn.onRequest("window/workDoneProgress/create", () => null);
    conn.onRequest("workspace/applyEdit", () => ({ applied: false, failureReason: "the test applies edits itself" }));
    conn.onRequest("workspace/semanticTokens/refresh", () => null);
    conn.onRequest("workspace/codeLens/refresh", () => null);
    conn.onRequest("workspace/diagnostic/refresh", () => null);
    conn.onNotification(() => undefined); // logMessage, publishDiagnostics, leir/status, $/progress
    conn.listen();
  });

  after(async () => {
    if (conn && server.exitCode === null && !shutDown) {
      try {
        await conn.sendRequest("shutdown");
        await conn.sendNotification("exit");
      } catch {
        // already gone: the assertions say why
      }
    }
    if (conn) {
      conn.dispose();
    }
    if (server && server.exitCode === null) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.kill();
          resolve();
        }, 10_000);
        server.once("exit", () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  });

  it("initializes, pulls the leir settings from the client, hovers, lists, resolves and applies one step", SLOW, async () => {
    const init = (await conn.sendRequest("initialize", {
      processId: process.pid,
      clientInfo: { name: "leir-e2e", version: "0" },
      rootUri: pathToFileURL(ROOT).href,
      workspaceFolders: [{ uri: pathToFileURL(ROOT).href, name: "leir-lsp" }],
      initializationOptions: { trusted: true },
      capabilities: {
        workspace: { configuration: true, applyEdit: true, workspaceEdit: { documentChanges: true }, didChangeConfiguration: { dynamicRegistration: true } },
        window: { workDoneProgress: true },
        textDocument: {
          synchronization: { dynamicRegistration: true, didSave: true },
          hover: { contentFormat: ["markdown", "plaintext"] },
          codeAction: {
            dataSupport: true,
            resolveSupport: { properties: ["edit"] },
            isPreferredSupport: true,
            codeActionLiteralSupport: { codeActionKind: { valueSet: ["", "quickfix", "refactor", "refactor.rewrite", "source"] } },
          },
          publishDiagnostics: { relatedInformation: true, versionSupport: true },
        },
      },
    })) as { capabilities: Record<string, unknown>; serverInfo?: { name: string } };
    assert.equal(init.serverInfo?.name, "leir-lsp");
    assert.ok(init.capabilities.hoverProvider, "the server announces no hoverProvider");
    const codeActionProvider = init.capabilities.codeActionProvider as { resolveProvider?: boolean } | undefined;
    assert.ok(codeActionProvider?.resolveProvider, "the server announces no codeActionProvider with resolveProvider");
    await conn.sendNotification("initialized", {});

    // The server pulls `leir` on initialized; the client answers with the contract's keys.
    await firstConfiguration;
    assert.deepEqual(configurationRequests[0][0], {
      target: "llvm",
      rpcTracker: "",
      rpcKey: "",
      autoMeasure: false,
      measurementBudget: 4,
      memoryBudgetMB: null,
      model: { enabled: false, tier: "embedded", sol: { budget: 0.5, runtime: "torch", precision: "fp32" } },
      modelEnabled: false,
      modelTier: "embedded",
      suggestionsOnSave: false,
    });

    const text = readFileSync(EXAMPLE, "utf8");
    const uri = pathToFileURL(EXAMPLE).href;
    await conn.sendNotification("textDocument/didOpen", { textDocument: { uri, languageId: "leir", version: 1, text } });

    // Hover on the k loop: what the analysis knows about it.
    const kLoop = positionOf(text, "L^{256}_{k}");
    const hover = (await conn.sendRequest("textDocument/hover", { textDocument: { uri }, position: kLoop })) as {
      contents: { kind: string; value: string } | string;
    } | null;
    assert.ok(hover, "no hover on the k loop");
    const hoverText = typeof hover.contents === "string" ? hover.contents : hover.contents.value;
    assert.match(hoverText, /\bk\b/, `the hover on loop k does not mention k: ${hoverText}`);
    assert.match(hoverText, /256/, `the hover on loop k does not give its extent: ${hoverText}`);

    // Code actions at the k loop: refactor.rewrite, with data, without an edit (computed on resolve).
    const actions = (await conn.sendRequest("textDocument/codeAction", {
      textDocument: { uri },
      range: { start: kLoop, end: kLoop },
      context: { diagnostics: [], only: ["refactor.rewrite"], triggerKind: 1 },
    })) as CodeAction[] | null;
    assert.ok(actions && actions.length > 0, "no code action at the k loop");
    for (const a of actions) {
      assert.equal(a.kind, "refactor.rewrite");
      assert.equal(a.edit, undefined, `"${a.title}" carries its edit before resolve`);
      assert.equal(a.data?.uri, uri);
      assert.equal(a.data?.version, 1);
    }
    const chosen = actions.find((a) => a.data?.step.id === "split") ?? actions[0];
    const resolved = (await conn.sendRequest("codeAction/resolve", chosen)) as CodeAction;
    const edited = applyTextEdits(text, editsFor(resolved, uri, 1));
    assert.notEqual(edited, text, `"${chosen.title}" changed nothing`);

    // The same step through the library, without the server.
    const expected = execFileSync(PYTHON, ["-m", "leir.tools.cli", "apply", EXAMPLE, "--step", "-"], {
      cwd: ROOT,
      input: JSON.stringify(chosen.data!.step),
      encoding: "utf8",
    });
    assert.equal(edited, expected, `"${chosen.title}": the server's edit differs from leir apply`);

    // An action listed for version 1 is refused once the document is at version 2.
    await conn.sendNotification("textDocument/didChange", {
      textDocument: { uri, version: 2 },
      contentChanges: [{ range: { start: { line: 0, character: 0 }, end: { line: 0, character: 0 } }, text: "# edited\n" }],
    });
    await assert.rejects(
      conn.sendRequest("codeAction/resolve", chosen) as Promise<unknown>,
      /changed|version|stale/i,
      "a stale action was resolved",
    );
  });

  it("serves a TVMScript kernel in a Python file: the step's edit is what leir apply makes of it", SLOW, async () => {
    // The server's own printer output must be recognised as TVMScript by the client's attach rule.
    const dir = mkdtempSync(path.join(os.tmpdir(), "leir-e2e-"));
    const file = path.join(dir, "matmul.py");
    const text = execFileSync(PYTHON, ["-m", "leir.tools.cli", "convert", EXAMPLE, "--to", "tvmscript"], { cwd: ROOT, encoding: "utf8" });
    writeFileSync(file, text);
    assert.ok(isTvmScript(text), "the client would not send the converted kernel to the server");
    const uri = pathToFileURL(file).href;
    await conn.sendNotification("textDocument/didOpen", { textDocument: { uri, languageId: "python", version: 1, text } });

    const at = positionOf(text, "T.grid(");
    const actions = (await conn.sendRequest("textDocument/codeAction", {
      textDocument: { uri },
      range: { start: at, end: at },
      context: { diagnostics: [], only: ["refactor.rewrite"], triggerKind: 1 },
    })) as CodeAction[] | null;
    assert.ok(actions && actions.length > 0, "no code action on the kernel's loops");
    const chosen = actions.find((a) => a.data?.step.id === "split") ?? actions[0];
    assert.equal(chosen.data?.version, 1);
    const resolved = (await conn.sendRequest("codeAction/resolve", chosen)) as CodeAction;
    const edited = applyTextEdits(text, editsFor(resolved, uri, 1));
    assert.notEqual(edited, text);
    const args = ["-m", "leir.tools.cli", "apply", file, "--step", "-"];
    if (chosen.data?.kernel) {
      args.push("--kernel", chosen.data.kernel);
    }
    const expected = execFileSync(PYTHON, args, { cwd: ROOT, input: JSON.stringify(chosen.data!.step), encoding: "utf8" });
    assert.equal(edited, expected, `"${chosen.title}": the server's edit differs from leir apply`);
  });

  it("exits cleanly on shutdown and exit", SLOW, async () => {
    shutDown = true;
    await conn.sendRequest("shutdown");
    await conn.sendNotification("exit");
    const code = await new Promise<number | null>((resolve) => {
      if (server.exitCode !== null) {
        resolve(server.exitCode);
      } else {
        server.once("exit", (c) => resolve(c));
      }
    });
    assert.equal(code, 0, `server exited with ${code}; stderr:\n${stderr.slice(-2000)}`);
  });
});

describe("the client's settings and the server's Settings", () => {
  const settingsOf = (config: unknown) =>
    JSON.parse(
      execFileSync(
        PYTHON,
        [
          "-c",
          "import json, sys, dataclasses; from leir_server.session import Settings; " +
            "s, problems = Settings.from_json(json.loads(sys.argv[1])); print(json.dumps([dataclasses.asdict(s), problems]))",
          JSON.stringify(config),
        ],
        { cwd: ROOT, encoding: "utf8" },
      ),
    ) as [Record<string, unknown>, string[]];

  it("have the same defaults", () => {
    const [fromServer, problems] = settingsOf(null);
    assert.deepEqual(problems, []);
    assert.deepEqual(fromServer, {
      target: DEFAULTS.target,
      rpc_tracker: DEFAULTS.rpcTracker,
      rpc_key: DEFAULTS.rpcKey,
      auto_measure: DEFAULTS.autoMeasure,
      measurement_budget: DEFAULTS.measurementBudget,
      memory_budget_mb: DEFAULTS.memoryBudgetMB,
      model_enabled: DEFAULTS.modelEnabled,
      model_tier: DEFAULTS.modelTier,
      model_sol_budget: DEFAULTS.model.sol.budget,
      model_sol_runtime: DEFAULTS.model.sol.runtime,
      model_sol_precision: DEFAULTS.model.sol.precision,
      suggestions_on_save: DEFAULTS.suggestionsOnSave,
    });
  });

  it("every value the client sends is taken by the server, none ignored", () => {
    const config = serverConfiguration(
      (key) =>
        ({
          target: "rpc",
          rpcTracker: "127.0.0.1:9190",
          rpcKey: "board",
          autoMeasure: true,
          measurementBudget: 7,
          memoryBudgetMB: 2500,
          "model.enabled": false,
          "model.tier": "smollm2",
          "model.sol.budget": 0.7,
          "model.sol.runtime": "onnx",
          "model.sol.precision": "int8",
          suggestionsOnSave: true,
        })[key],
    );
    const [fromServer, problems] = settingsOf(config);
    assert.deepEqual(problems, []);
    assert.deepEqual(fromServer, {
      target: "rpc",
      rpc_tracker: "127.0.0.1:9190",
      rpc_key: "board",
      auto_measure: true,
      measurement_budget: 7,
      memory_budget_mb: 2500,
      model_enabled: false,
      model_tier: "smollm2",
      model_sol_budget: 0.7,
      model_sol_runtime: "onnx",
      model_sol_precision: "int8",
      suggestions_on_save: true,
    });
  });
});
