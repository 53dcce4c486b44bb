/**
 * The VS Code side of leir-lsp: starts the server, routes documents to it,
 * and turns its commands and notifications into editor UI.
 *
 * The decisions live in modules with no `vscode` import, unit-tested in
 * Node: which Python starts the server (interpreter.ts), which documents go
 * to it (attach.ts), what the client answers to `workspace/configuration`
 * (configuration.ts), what the status bar shows (status.ts), and the
 * trajectory page (trajectory.ts). This file only wires them to the API.
 */

import * as os from "node:os";
import { randomBytes } from "node:crypto";
import * as vscode from "vscode";
import {
  CancellationToken,
  DidOpenTextDocumentNotification,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  Middleware,
  ServerOptions,
  State,
} from "vscode-languageclient/node";

import { AttachTracker, isTvmScript } from "./attach";
import { answerConfigurationRequest, SECTION } from "./configuration";
import { probeServer, resolveServerCommand, ServerCommand } from "./interpreter";
import { activePythonEnvironment, onDidChangePythonEnvironment } from "./python";
import { initialState, RankerNotification, reduce, render, StatusEvent, StatusNotification, StatusState } from "./status";
import { minimalEdit } from "./textEdits";
import { latencyPoints, Trajectory, trajectoryHtml } from "./trajectory";

/** The server's commands (the shared contract). */
const SERVER = {
  measure: "leir.measure",
  optimize: "leir.optimize",
  convert: "leir.convert",
  showTrajectory: "leir.showTrajectory",
} as const;

/**
 * The extension's own command ids. They differ from the server's: the
 * language client registers every command the server announces under its
 * own name, and a second registration of the same id would fail.
 */
const COMMAND = {
  measure: "leir-lsp.measure",
  optimize: "leir-lsp.optimize",
  convert: "leir-lsp.convert",
  showTrajectory: "leir-lsp.showTrajectory",
  restart: "leir-lsp.restart",
  cancel: "leir-lsp.cancelMeasurement",
  showOutput: "leir-lsp.showOutput",
} as const;

interface MeasureResult {
  median_ms: number;
  min_ms?: number;
  max_ms?: number;
  runs?: number;
  target?: string;
  device?: string;
  verified?: boolean;
  cached?: boolean;
  vendor_ms?: number | null;
}

interface OptimizeResult extends Omit<Trajectory, "final" | "start_ms"> {
  /** null when cancelled before the start was measured. */
  start_ms: number | null;
  /** LEIR text (for a Python kernel, the optimized kernel's LEIR form); null when cancelled. */
  final: string | null;
  applied: boolean;
  cancelled?: boolean;
}

interface ConvertResult {
  language: "python" | "leir";
  text: string;
  title?: string;
}

let extension: LeirExtension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  extension = new LeirExtension(context);
  await extension.start();
}

export async function deactivate(): Promise<void> {
  await extension?.stop();
  extension = undefined;
}

class LeirExtension {
  private client: LanguageClient | undefined;
  private serverCommand: ServerCommand | undefined;
  private readonly output: vscode.LogOutputChannel;
  private readonly trace: vscode.OutputChannel;
  private readonly statusItem: vscode.StatusBarItem;
  private status: StatusState;
  private readonly tracker = new AttachTracker();
  /** Measure and optimize requests in flight: the status bar click cancels them. */
  private readonly running = new Set<vscode.CancellationTokenSource>();
  private readonly trajectories = new TrajectoryPanel();
  private starting: Promise<void> | undefined;

  constructor(private readonly context: vscode.ExtensionContext) {
    this.output = vscode.window.createOutputChannel("LEIR", { log: true });
    this.trace = vscode.window.createOutputChannel("LEIR Trace");
    this.statusItem = vscode.window.createStatusBarItem("leir.status", vscode.StatusBarAlignment.Right, 100);
    this.statusItem.name = "LEIR";
    this.status = initialState(vscode.workspace.isTrusted);
    context.subscriptions.push(this.output, this.trace, this.statusItem, this.trajectories);

    const register = (id: string, fn: (...args: unknown[]) => unknown) =>
      context.subscriptions.push(vscode.commands.registerCommand(id, fn));
    register(COMMAND.measure, () => this.measure());
    register(COMMAND.optimize, () => this.optimize());
    register(COMMAND.convert, () => this.convert());
    register(COMMAND.showTrajectory, () => this.showTrajectory());
    register(COMMAND.restart, () => this.restart());
    register(COMMAND.cancel, () => this.cancelRunning());
    register(COMMAND.showOutput, () => this.output.show());

    context.subscriptions.push(
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration("leir.target")) {
          this.showConfiguredTarget();
        }
        if (e.affectsConfiguration("leir.server.path") || e.affectsConfiguration("leir.interpreter")) {
          this.output.info("Server command setting changed: restarting the server");
          void this.restart();
        }
      }),
      // The server learns whether it may compile and run code only at start.
      vscode.workspace.onDidGrantWorkspaceTrust(() => {
        this.update({ kind: "trust", trusted: true });
        this.output.info("Workspace trusted: restarting the server with measurement enabled");
        void this.restart();
      }),
      vscode.window.onDidChangeActiveTextEditor((editor) => this.updateContext(editor)),
      vscode.workspace.onDidChangeTextDocument((e) => {
        if (e.document === vscode.window.activeTextEditor?.document) {
          this.updateContext(vscode.window.activeTextEditor);
        }
      }),
    );
    onDidChangePythonEnvironment(context, () => {
      if (this.serverCommand?.source === "Python extension" || this.serverCommand?.source === "python3 on PATH") {
        this.output.info("Python environment changed: restarting the server");
        void this.restart();
      }
    });
    this.updateContext(vscode.window.activeTextEditor);
    this.update({ kind: "server", state: "starting" });
    this.showConfiguredTarget();
    this.statusItem.show();
  }

  // ---- lifecycle ---------------------------------------------------------

  async start(): Promise<void> {
    if (!this.starting) {
      this.starting = this.startClient().finally(() => (this.starting = undefined));
    }
    return this.starting;
  }

  private async startClient(): Promise<void> {
    this.update({ kind: "server", state: "starting" });
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    const config = vscode.workspace.getConfiguration(SECTION);
    const command = resolveServerCommand({
      serverPath: config.get<string>("server.path"),
      interpreter: config.get<string[]>("interpreter"),
      pythonExtension: await activePythonEnvironment(this.output),
      workspaceFolder: folder,
      home: os.homedir(),
    });
    this.serverCommand = command;
    this.output.info(`Server command (${command.source}): ${[command.command, ...command.args].join(" ")}`);
    const probe = await probeServer(command);
    if (!probe.ok) {
      this.fail(probe.message!);
      return;
    }
    this.output.info(`Found ${probe.version}`);

    const serverOptions: ServerOptions = {
      command: command.command,
      args: command.args,
      options: { cwd: folder, env: { ...process.env, PYTHONUNBUFFERED: "1" } },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { language: "leir" },
        { language: "python", scheme: "file" },
        { language: "python", scheme: "untitled" },
      ],
      outputChannel: this.output,
      traceOutputChannel: this.trace,
      // Tells the server to pull the `leir` section again after a change.
      synchronize: { configurationSection: SECTION },
      // The server compiles and runs nothing in an untrusted workspace.
      initializationOptions: { trusted: vscode.workspace.isTrusted },
      middleware: this.middleware(),
    };
    const client = new LanguageClient("leir", "LEIR Language Server", serverOptions, clientOptions);
    this.client = client;
    this.tracker.clear();
    client.onDidChangeState((e) => {
      if (e.newState === State.Running) {
        this.update({ kind: "server", state: "running" });
      } else if (e.newState === State.Stopped && this.status.server !== "failed") {
        this.update({ kind: "server", state: "stopped" });
      }
    });
    // Registered before start: the server may send them as soon as it is initialized.
    client.onNotification("leir/status", (s: StatusNotification) => this.update({ kind: "status", status: s }));
    client.onNotification("leir/ranker", (r: RankerNotification) => this.update({ kind: "ranker", ranker: r }));
    client.onNotification("leir/trajectory", (t: Trajectory) => this.trajectories.update(t, this.context));
    try {
      await client.start();
    } catch (e) {
      this.client = undefined;
      this.fail(`${command.command} started but the language server did not initialize: ${errorText(e)}`);
    }
  }

  async stop(): Promise<void> {
    this.cancelRunning();
    const client = this.client;
    this.client = undefined;
    if (client) {
      try {
        await client.stop(5000);
      } catch (e) {
        this.output.warn(`Stopping the server: ${errorText(e)}`);
      }
    }
  }

  async restart(): Promise<void> {
    await this.starting;
    await this.stop();
    await this.start();
  }

  private fail(message: string): void {
    this.output.error(message);
    this.update({ kind: "server", state: "failed", failure: message });
    const actions = ["Select Interpreter", "Open Settings", "Show Output"];
    void vscode.window.showErrorMessage(`LEIR: ${message}`, ...actions).then((choice) => {
      if (choice === "Select Interpreter") {
        void vscode.commands.executeCommand("python.setInterpreter");
      } else if (choice === "Open Settings") {
        void vscode.commands.executeCommand("workbench.action.openSettings", "leir.interpreter");
      } else if (choice === "Show Output") {
        this.output.show();
      }
    });
  }

  private middleware(): Middleware {
    const tracker = this.tracker;
    // Requests about a Python file the server was not told about get no answer.
    const attached = (doc: vscode.TextDocument) => doc.languageId !== "python" || tracker.isAttached(doc.uri.toString());
    const asDoc = (doc: vscode.TextDocument) => ({ uri: doc.uri.toString(), languageId: doc.languageId, getText: () => doc.getText() });
    return {
      workspace: {
        configuration: (params) =>
          answerConfigurationRequest(params.items, (key) => {
            const scope = params.items.find((i) => i.scopeUri)?.scopeUri;
            return vscode.workspace.getConfiguration(SECTION, scope ? vscode.Uri.parse(scope) : undefined).get(key);
          }),
      },
      didOpen: (doc, next) => (tracker.onOpen(asDoc(doc)) === "forward" ? next(doc) : Promise.resolve()),
      didChange: async (event, next) => {
        const decision = tracker.onChange(asDoc(event.document));
        if (decision === "forward") {
          return next(event);
        }
        if (decision === "open" && this.client) {
          // It just became TVMScript: the server gets the whole current text.
          const doc = event.document;
          await this.client.sendNotification(DidOpenTextDocumentNotification.type, {
            textDocument: { uri: doc.uri.toString(), languageId: doc.languageId, version: doc.version, text: doc.getText() },
          });
        }
      },
      didClose: (doc, next) => (tracker.onClose({ uri: doc.uri.toString() }) === "forward" ? next(doc) : Promise.resolve()),
      didSave: (doc, next) => (attached(doc) ? next(doc) : Promise.resolve()),
      willSave: (event, next) => (attached(event.document) ? next(event) : Promise.resolve()),
      willSaveWaitUntil: (event, next) => (attached(event.document) ? next(event) : Promise.resolve([])),
      provideHover: (doc, pos, token, next) => (attached(doc) ? next(doc, pos, token) : undefined),
      provideCodeActions: (doc, range, ctx, token, next) => (attached(doc) ? next(doc, range, ctx, token) : undefined),
      provideCodeLenses: (doc, token, next) => (attached(doc) ? next(doc, token) : undefined),
      provideDocumentSymbols: (doc, token, next) => (attached(doc) ? next(doc, token) : undefined),
      provideInlayHints: (doc, range, token, next) => (attached(doc) ? next(doc, range, token) : undefined),
      provideFoldingRanges: (doc, ctx, token, next) => (attached(doc) ? next(doc, ctx, token) : undefined),
      provideDocumentFormattingEdits: (doc, opts, token, next) => (attached(doc) ? next(doc, opts, token) : undefined),
      provideCompletionItem: (doc, pos, ctx, token, next) => (attached(doc) ? next(doc, pos, ctx, token) : undefined),
      provideDefinition: (doc, pos, token, next) => (attached(doc) ? next(doc, pos, token) : undefined),
      provideReferences: (doc, pos, opts, token, next) => (attached(doc) ? next(doc, pos, opts, token) : undefined),
      provideDocumentHighlights: (doc, pos, token, next) => (attached(doc) ? next(doc, pos, token) : undefined),
      provideDocumentSemanticTokens: (doc, token, next) => (attached(doc) ? next(doc, token) : undefined),
      provideDocumentSemanticTokensEdits: (doc, previous, token, next) => (attached(doc) ? next(doc, previous, token) : undefined),
      provideDocumentRangeSemanticTokens: (doc, range, token, next) => (attached(doc) ? next(doc, range, token) : undefined),
    };
  }

  // ---- status bar and context keys --------------------------------------

  private update(event: StatusEvent): void {
    this.status = reduce(this.status, event);
    const view = render(this.status);
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.command =
      view.command === "cancel"
        ? COMMAND.cancel
        : view.command === "openSettings"
          ? { title: "Settings", command: "workbench.action.openSettings", arguments: ["leir.target"] }
          : COMMAND.showOutput;
    void vscode.commands.executeCommand("setContext", "leir.measuring", this.status.measuring || this.running.size > 0);
  }

  /** The configured target until the server reports the device it measures on. */
  private showConfiguredTarget(): void {
    const target = vscode.workspace.getConfiguration(SECTION).get<string>("target", "llvm");
    this.update({ kind: "status", status: { target, device: "", measuring: this.status.measuring } });
  }

  private updateContext(editor: vscode.TextEditor | undefined): void {
    const doc = editor?.document;
    const tvm = doc !== undefined && doc.languageId === "python" && isTvmScript(doc.getText());
    void vscode.commands.executeCommand("setContext", "leir.tvmscript", tvm);
  }

  // ---- commands -----------------------------------------------------------

  /** The active LEIR or TVMScript document, or a message saying there is none. */
  private activeDocument(): vscode.TextDocument | undefined {
    const doc = vscode.window.activeTextEditor?.document;
    if (doc && (doc.languageId === "leir" || (doc.languageId === "python" && isTvmScript(doc.getText())))) {
      return doc;
    }
    void vscode.window.showWarningMessage("LEIR: open a .leir file or a Python file with TVMScript first.");
    return undefined;
  }

  private async runningClient(): Promise<LanguageClient | undefined> {
    await this.starting;
    if (this.client?.isRunning()) {
      return this.client;
    }
    const choice = await vscode.window.showErrorMessage("LEIR: the language server is not running.", "Restart", "Show Output");
    if (choice === "Restart") {
      void this.restart();
    } else if (choice === "Show Output") {
      this.output.show();
    }
    return undefined;
  }

  private refuseUntrusted(what: string): boolean {
    if (vscode.workspace.isTrusted) {
      return false;
    }
    void vscode.window.showWarningMessage(
      `LEIR: ${what} compiles and runs the kernel, which is off in Restricted Mode. Trust the workspace to enable it.`,
    );
    return true;
  }

  private async execute<T>(command: string, arg: object, token?: vscode.CancellationToken): Promise<T | undefined> {
    const client = await this.runningClient();
    if (!client) {
      return undefined;
    }
    try {
      return (await client.sendRequest(
        ExecuteCommandRequest.type,
        { command, arguments: [arg] },
        token as CancellationToken | undefined,
      )) as T;
    } catch (e) {
      if (token?.isCancellationRequested) {
        this.output.info(`${command} cancelled`);
        return undefined;
      }
      void vscode.window.showErrorMessage(`LEIR: ${errorText(e)}`);
      return undefined;
    }
  }

  private track(): vscode.CancellationTokenSource {
    const cts = new vscode.CancellationTokenSource();
    this.running.add(cts);
    void vscode.commands.executeCommand("setContext", "leir.measuring", true);
    return cts;
  }

  private untrack(cts: vscode.CancellationTokenSource): void {
    this.running.delete(cts);
    cts.dispose();
    void vscode.commands.executeCommand("setContext", "leir.measuring", this.status.measuring || this.running.size > 0);
  }

  private cancelRunning(): void {
    if (this.running.size === 0 && this.status.measuring) {
      // Started by the server itself (leir.autoMeasure), not by a command of ours.
      void vscode.window.showInformationMessage(
        "LEIR: this measurement was started by the server (leir.autoMeasure); it ends on its own. Turn leir.autoMeasure off to stop them.",
      );
      return;
    }
    for (const cts of this.running) {
      cts.cancel();
    }
  }

  private async measure(): Promise<void> {
    const doc = this.activeDocument();
    if (!doc || this.refuseUntrusted("Measuring")) {
      return;
    }
    const cts = this.track();
    try {
      const result = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Window, title: "LEIR: measuring", cancellable: true },
        (_progress, token) => {
          token.onCancellationRequested(() => cts.cancel());
          return this.execute<MeasureResult>(SERVER.measure, { uri: doc.uri.toString() }, cts.token);
        },
      );
      if (result && typeof result.median_ms === "number") {
        const spread =
          result.min_ms !== undefined && result.max_ms !== undefined ? `, min ${fmtMs(result.min_ms)}, max ${fmtMs(result.max_ms)}` : "";
        const runs = result.runs ? ` over ${result.runs} runs` : "";
        const where = result.target ? ` on ${result.target}${result.device ? ` (${result.device})` : ""}` : "";
        const notes = [result.verified ? "verified" : "", result.cached ? "from cache" : ""].filter(Boolean).join(", ");
        const vendor = typeof result.vendor_ms === "number" ? `; vendor library ${fmtMs(result.vendor_ms)}` : "";
        void vscode.window.showInformationMessage(
          `LEIR: median ${fmtMs(result.median_ms)}${spread}${runs}${where}${notes ? ` (${notes})` : ""}${vendor}.`,
        );
      }
    } finally {
      this.untrack(cts);
    }
  }

  private async optimize(): Promise<void> {
    const doc = this.activeDocument();
    if (!doc || this.refuseUntrusted("Optimizing")) {
      return;
    }
    const defaultSteps = vscode.workspace.getConfiguration(SECTION).get<number>("optimize.steps", 20);
    const answer = await vscode.window.showInputBox({
      title: "LEIR: Optimize",
      prompt: "How many verified, measured steps to search for",
      value: String(defaultSteps),
      validateInput: (v) => (/^\s*[1-9][0-9]{0,2}\s*$/.test(v) ? undefined : "A whole number from 1 to 999"),
    });
    if (answer === undefined) {
      return;
    }
    const steps = Number(answer.trim());
    const version = doc.version;
    const uri = doc.uri.toString();
    this.trajectories.show({ uri, steps: [], done: false }, this.context);
    const cts = this.track();
    let result: OptimizeResult | undefined;
    try {
      result = await this.execute<OptimizeResult>(SERVER.optimize, { uri, steps }, cts.token);
    } finally {
      this.untrack(cts);
    }
    if (!result) {
      return;
    }
    const { start_ms: startMs, final: finalText, ...rest } = result;
    this.trajectories.update({ ...rest, start_ms: startMs ?? undefined, uri, done: true }, this.context);
    const n = result.steps.length;
    if (result.cancelled || startMs === null || finalText === null) {
      void vscode.window.showInformationMessage(`LEIR: optimize cancelled after ${n} step${n === 1 ? "" : "s"}; nothing applied.`);
      return;
    }
    if (n === 0) {
      void vscode.window.showInformationMessage("LEIR: no step made this kernel faster within the budget.");
      return;
    }
    // From the steps' own paired measurements, as the trajectory view plots them.
    const points = latencyPoints({ uri, steps: result.steps, start_ms: startMs });
    const first = points[0]?.ms ?? startMs;
    const last = points[points.length - 1]?.ms ?? startMs;
    const summary = `LEIR: ${n} step${n === 1 ? "" : "s"}, ${fmtMs(first)} → ${fmtMs(last)} (${(first / last).toFixed(2)}×).`;
    // The final program is LEIR: it replaces a .leir document; for a Python
    // kernel it opens beside it (the steps apply to the kernel one by one
    // through the code actions).
    const actions = doc.languageId === "leir" ? ["Apply", "Open Result"] : ["Open Result (LEIR)"];
    const choice = await vscode.window.showInformationMessage(summary, ...actions);
    if (choice === "Apply") {
      await this.applyFinal(doc, version, finalText);
    } else if (choice?.startsWith("Open Result")) {
      const opened = await vscode.workspace.openTextDocument({ language: "leir", content: finalText });
      await vscode.window.showTextDocument(opened, { preview: false, viewColumn: vscode.ViewColumn.Beside });
    }
  }

  /** Replaces the document with the optimized program, only if it is unchanged since. */
  private async applyFinal(doc: vscode.TextDocument, version: number, finalText: string): Promise<void> {
    if (doc.isClosed || doc.version !== version) {
      void vscode.window.showErrorMessage("LEIR: the document changed while optimizing; nothing applied. Run Optimize again.");
      return;
    }
    const edit = minimalEdit(doc.getText(), finalText);
    if (!edit) {
      return;
    }
    const we = new vscode.WorkspaceEdit();
    we.replace(
      doc.uri,
      new vscode.Range(edit.range.start.line, edit.range.start.character, edit.range.end.line, edit.range.end.character),
      edit.newText,
    );
    if (!(await vscode.workspace.applyEdit(we))) {
      void vscode.window.showErrorMessage("LEIR: the editor refused the edit.");
    }
  }

  private async convert(): Promise<void> {
    const doc = this.activeDocument();
    if (!doc) {
      return;
    }
    const result = await this.execute<ConvertResult>(SERVER.convert, { uri: doc.uri.toString() });
    if (!result) {
      return;
    }
    const opened = await vscode.workspace.openTextDocument({
      language: result.language === "python" ? "python" : "leir",
      content: result.text,
    });
    await vscode.window.showTextDocument(opened, { preview: false, viewColumn: vscode.ViewColumn.Beside });
  }

  private async showTrajectory(): Promise<void> {
    const doc = this.activeDocument();
    if (!doc) {
      return;
    }
    const result = await this.execute<Trajectory>(SERVER.showTrajectory, { uri: doc.uri.toString() });
    if (result) {
      this.trajectories.show({ ...result, uri: result.uri ?? doc.uri.toString() }, this.context);
    }
  }
}

/** One webview panel that shows the trajectory of one document at a time. */
class TrajectoryPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private current: Trajectory | undefined;

  show(t: Trajectory, context: vscode.ExtensionContext): void {
    this.current = t;
    if (!this.panel) {
      this.panel = vscode.window.createWebviewPanel(
        "leir.trajectory",
        "LEIR Trajectory",
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        // A page with no script: nothing to enable, no local files to read.
        { enableScripts: false, localResourceRoots: [] },
      );
      this.panel.onDidDispose(() => (this.panel = undefined), null, context.subscriptions);
    } else {
      this.panel.reveal(undefined, true);
    }
    this.render();
  }

  /** A `leir/trajectory` notification or a result: shown if it is the document on view. */
  update(t: Trajectory, context: vscode.ExtensionContext): void {
    if (this.panel && this.current && this.current.uri !== t.uri) {
      return;
    }
    if (!this.panel) {
      this.show(t, context);
      return;
    }
    this.current = t;
    this.render();
  }

  private render(): void {
    if (!this.panel) {
      return;
    }
    const nonce = randomBytes(16).toString("base64");
    this.panel.title = this.current?.kernel ? `LEIR Trajectory: ${this.current.kernel}` : "LEIR Trajectory";
    this.panel.webview.html = trajectoryHtml(this.current, { cspSource: this.panel.webview.cspSource, nonce });
  }

  dispose(): void {
    this.panel?.dispose();
  }
}

function fmtMs(ms: number): string {
  return ms < 1 ? `${(ms * 1000).toPrecision(3)} µs` : `${ms.toPrecision(3)} ms`;
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
