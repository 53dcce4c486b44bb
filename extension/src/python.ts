/**
 * The Python extension's active environment, when that extension is
 * installed (it is optional: without it the server runs on `python3`).
 */

import { PythonExtension } from "@vscode/python-extension";
import * as vscode from "vscode";

async function api(): Promise<PythonExtension | undefined> {
  if (!vscode.extensions.getExtension("ms-python.python")) {
    return undefined;
  }
  try {
    return await PythonExtension.api();
  } catch {
    return undefined;
  }
}

/** The active interpreter for the first workspace folder, as [executable]. */
export async function activePythonEnvironment(log: vscode.LogOutputChannel): Promise<string[] | undefined> {
  const python = await api();
  if (!python) {
    return undefined;
  }
  try {
    const resource = vscode.workspace.workspaceFolders?.[0]?.uri;
    const envPath = python.environments.getActiveEnvironmentPath(resource);
    const env = await python.environments.resolveEnvironment(envPath);
    const executable = env?.executable.uri?.fsPath;
    if (executable) {
      log.info(`Python extension's active environment: ${executable}`);
      return [executable];
    }
    log.warn(`The Python extension's active environment (${envPath.path}) has no interpreter`);
  } catch (e) {
    log.warn(`Could not read the Python extension's environment: ${e instanceof Error ? e.message : String(e)}`);
  }
  return undefined;
}

export function onDidChangePythonEnvironment(context: vscode.ExtensionContext, listener: () => void): void {
  void api().then((python) => {
    if (python) {
      context.subscriptions.push(python.environments.onDidChangeActiveEnvironmentPath(() => listener()));
    }
  });
}
