/**
 * How the server is started: which program, with which arguments, and why
 * that one.
 *
 * Order (the vscode-python-tools-extension-template's): the `leir.server.path`
 * setting, then `leir.interpreter`, then the Python extension's active
 * environment, then `python3` on PATH. A Python interpreter runs the server
 * as `python -m leir_server`, which needs nothing on PATH.
 *
 * No `vscode` import: the order and the start-up probe are unit-tested in
 * plain Node.
 */

import { execFile } from "node:child_process";

/** The module `python -m` runs (server/ installs as `leir_server`). */
export const SERVER_MODULE = "leir_server";

export type Source = "leir.server.path" | "leir.interpreter" | "Python extension" | "python3 on PATH";

export interface ServerCommand {
  command: string;
  args: string[];
  /** Which setting or fallback chose it, for messages. */
  source: Source;
  /** The Python that must have `leir_server` installed (absent for server.path). */
  python?: string[];
}

export interface ResolveInput {
  serverPath?: string;
  interpreter?: readonly string[];
  /** The Python extension's active environment: executable then arguments. */
  pythonExtension?: readonly string[];
  /** `${workspaceFolder}` and `~` are expanded in settings, as VS Code users expect. */
  workspaceFolder?: string;
  home?: string;
}

function expand(value: string, input: ResolveInput): string {
  let out = value;
  if (input.workspaceFolder !== undefined) {
    out = out.split("${workspaceFolder}").join(input.workspaceFolder);
  }
  if (input.home !== undefined && (out === "~" || out.startsWith("~/"))) {
    out = input.home + out.slice(1);
  }
  return out;
}

export function resolveServerCommand(input: ResolveInput): ServerCommand {
  const serverPath = (input.serverPath ?? "").trim();
  if (serverPath) {
    return { command: expand(serverPath, input), args: ["--stdio"], source: "leir.server.path" };
  }
  const fromSetting = (input.interpreter ?? []).map((s) => s.trim()).filter((s) => s.length > 0);
  if (fromSetting.length > 0) {
    return withPython(fromSetting.map((s) => expand(s, input)), "leir.interpreter");
  }
  const fromExtension = (input.pythonExtension ?? []).filter((s) => s.length > 0);
  if (fromExtension.length > 0) {
    return withPython([...fromExtension], "Python extension");
  }
  return withPython(["python3"], "python3 on PATH");
}

function withPython(python: string[], source: Source): ServerCommand {
  const [command, ...rest] = python;
  return { command, args: [...rest, "-m", SERVER_MODULE, "--stdio"], source, python };
}

export interface ProbeResult {
  ok: boolean;
  /** One line saying what is wrong and what to do, when not ok. */
  message?: string;
  /** `leir-lsp VERSION`, when ok. */
  version?: string;
}

function fixFor(cmd: ServerCommand): string {
  switch (cmd.source) {
    case "leir.server.path":
      return "Correct or clear the leir.server.path setting.";
    case "leir.interpreter":
      return `Install it there (${cmd.python!.join(" ")} -m pip install leir-lsp), or change the leir.interpreter setting.`;
    default:
      return `Install it (${cmd.python!.join(" ")} -m pip install leir-lsp), select a Python environment that has it (Python: Select Interpreter), or set leir.interpreter.`;
  }
}

/**
 * Runs the chosen command with `--version` to find out, before the language
 * client starts it, whether it exists and has the server installed: a client
 * whose server exits at once only says "Connection to server got closed".
 */
export function probeServer(cmd: ServerCommand, timeoutMs = 30_000, module = SERVER_MODULE): Promise<ProbeResult> {
  const args = cmd.python ? [...cmd.python.slice(1), "-m", module, "--version"] : ["--version"];
  return new Promise((resolve) => {
    execFile(cmd.command, args, { timeout: timeoutMs, windowsHide: true }, (error, stdout, stderr) => {
      if (!error) {
        resolve({ ok: true, version: String(stdout).trim() });
        return;
      }
      const err = error as NodeJS.ErrnoException & { killed?: boolean };
      const where = `${cmd.command} (from ${cmd.source})`;
      let problem: string;
      if (err.code === "ENOENT") {
        problem = `${where} was not found.`;
      } else if (err.code === "EACCES") {
        problem = `${where} is not executable.`;
      } else if (err.killed) {
        problem = `${where} did not answer --version within ${Math.round(timeoutMs / 1000)} s.`;
      } else if (cmd.python && /No module named/.test(String(stderr))) {
        problem = `The LEIR language server (${module}) is not installed for ${cmd.python.join(" ")} (from ${cmd.source}).`;
      } else {
        const last = String(stderr).trim().split("\n").pop() ?? "";
        problem = `${where} failed to start${last ? `: ${last}` : "."}`;
      }
      resolve({ ok: false, message: `${problem} ${fixFor(cmd)}` });
    });
  });
}
