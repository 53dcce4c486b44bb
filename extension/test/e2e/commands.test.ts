/**
 * End to end: the server's commands as the extension calls them
 * (workspace/executeCommand with one object argument), and its
 * notifications fed to the client's own status bar and trajectory models:
 * convert, measure (leir/status -> status bar), optimize one step
 * (leir/trajectory -> trajectory page), showTrajectory.
 *
 * Measuring builds and times the kernel on this CPU: the budget is the
 * smallest the server accepts.
 */

import assert from "node:assert/strict";
import { ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";
import { pathToFileURL } from "node:url";
import { createMessageConnection, MessageConnection, StreamMessageReader, StreamMessageWriter } from "vscode-jsonrpc/node";

import { isTvmScript } from "../../src/attach";
import { answerConfigurationRequest } from "../../src/configuration";
import { resolveServerCommand } from "../../src/interpreter";
import { initialState, reduce, render, StatusNotification } from "../../src/status";
import { latencyPoints, Trajectory, trajectoryHtml } from "../../src/trajectory";

const ROOT = path.resolve(__dirname, "..", "..", "..", "..");
const EXAMPLE = path.join(ROOT, "examples", "matmul.leir");
const PYTHON = process.env.LEIR_PYTHON || "python3";
const SLOW = { timeout: 600_000 };
const SETTINGS: Record<string, unknown> = { target: "llvm", measurementBudget: 4, "model.enabled": false };

describe("leir-lsp commands and notifications, as the extension uses them", () => {
  let server: ChildProcess;
  let conn: MessageConnection;
  let stderr = "";
  const statuses: StatusNotification[] = [];
  const trajectories: Trajectory[] = [];
  const uri = pathToFileURL(EXAMPLE).href;
  const execute = <T>(command: string, arg: object) =>
    conn.sendRequest("workspace/executeCommand", { command, arguments: [arg] }) as Promise<T>;

  before(async () => {
    const cmd = resolveServerCommand({ interpreter: [PYTHON] });
    server = spawn(cmd.command, cmd.args, { cwd: ROOT, stdio: ["pipe", "pipe", "pipe"] });
    server.stderr!.on("data", (d) => (stderr += String(d)));
    conn = createMessageConnection(new StreamMessageReader(server.stdout!), new StreamMessageWriter(server.stdin!));
    conn.onRequest("workspace/configuration", (p: { items: { section?: string }[] }) =>
      answerConfigurationRequest(p.items, (key) => SETTINGS[key]),
    );
    conn.onRequest("client/registerCapability", () => null);
    conn.onRequest("window/workDoneProgress/create", () => null);
    conn.onRequest("workspace/codeLens/refresh", () => null);
    conn.onRequest("workspace/semanticTokens/refresh", () => null);
    conn.onNotification("leir/status", (s: StatusNotification) => statuses.push(s));
    conn.onNotification("leir/trajectory", (t: Trajectory) => trajectories.push(t));
    conn.onNotification(() => undefined);
    conn.listen();
    const init = (await conn.sendRequest("initialize", {
      processId: process.pid,
      rootUri: pathToFileURL(ROOT).href,
      initializationOptions: { trusted: true },
      capabilities: { workspace: { configuration: true }, window: { workDoneProgress: true } },
    })) as { capabilities: { executeCommandProvider?: { commands: string[] } } };
    const commands = init.capabilities.executeCommandProvider?.commands ?? [];
    for (const c of ["leir.measure", "leir.optimize", "leir.convert", "leir.showTrajectory", "leir.restart"]) {
      assert.ok(commands.includes(c), `the server does not announce ${c} (it announces ${commands.join(", ") || "none"})`);
    }
    await conn.sendNotification("initialized", {});
    await conn.sendNotification("textDocument/didOpen", {
      textDocument: { uri, languageId: "leir", version: 1, text: readFileSync(EXAMPLE, "utf8") },
    });
  });

  after(async () => {
    try {
      await conn.sendRequest("shutdown");
      await conn.sendNotification("exit");
    } catch {
      // gone already
    }
    conn.dispose();
    if (server.exitCode === null) {
      server.kill();
    }
  });

  it("convert gives TVMScript that the client attaches", SLOW, async () => {
    const result = await execute<{ language: string; text: string; title: string }>("leir.convert", { uri });
    assert.equal(result.language, "python");
    assert.ok(isTvmScript(result.text), "the converted kernel is not recognised as TVMScript");
    assert.ok(result.title.length > 0);
  });

  it("measure returns the latency, and its leir/status notifications drive the status bar", SLOW, async () => {
    const result = await execute<{ median_ms: number; min_ms: number; max_ms: number; target: string }>("leir.measure", { uri });
    assert.ok(result.median_ms > 0 && result.min_ms <= result.median_ms && result.median_ms <= result.max_ms);
    assert.equal(result.target, "llvm");
    // The status bar through the notifications as they came: spinning, then the latency.
    let state = reduce(initialState(true), { kind: "server", state: "running" });
    const views = statuses.map((s) => render((state = reduce(state, { kind: "status", status: s }))));
    assert.ok(views.some((v) => v.text.includes("measuring") && v.command === "cancel"), "no measuring state was shown");
    const last = statuses[statuses.length - 1];
    assert.equal(last.measuring, false);
    assert.equal(last.lastLatencyMs, result.median_ms);
    assert.match(views[views.length - 1].text, /^\$\(pulse\) llvm · .+ \$\(watch\) /);
  });

  it("optimize streams leir/trajectory; the final notification renders as the trajectory page", SLOW, async () => {
    const result = await execute<{ start_ms: number; steps: Trajectory["steps"]; final: string; applied: boolean }>("leir.optimize", {
      uri,
      steps: 1,
      budget: 4,
    });
    assert.equal(result.applied, false);
    assert.ok(trajectories.length > 0, "no leir/trajectory notification");
    const final = trajectories[trajectories.length - 1];
    assert.equal(final.uri, uri);
    assert.equal(final.done, true);
    assert.deepEqual(final.steps, result.steps);
    const page = trajectoryHtml({ ...final, start_ms: result.start_ms }, { cspSource: "vscode-resource:", nonce: "n" });
    const points = latencyPoints({ ...final, start_ms: result.start_ms });
    assert.equal(points.length, 1 + result.steps.length);
    assert.equal((page.match(/<circle /g) ?? []).length, points.length);
    for (const s of result.steps) {
      assert.ok(s.reasoning, `step ${s.id} has no reasoning`);
    }
  });

  it("showTrajectory answers {uri, kernel, steps}", SLOW, async () => {
    const result = await execute<Trajectory>("leir.showTrajectory", { uri });
    assert.equal(result.uri, uri);
    assert.ok(Array.isArray(result.steps));
  });

  it("refuses a command on a document it does not have, with a message", SLOW, async () => {
    await assert.rejects(execute("leir.measure", { uri: "file:///nowhere/missing.leir" }), (e: Error) => e.message.length > 0);
  });
});
