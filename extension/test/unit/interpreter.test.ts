import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { probeServer, resolveServerCommand } from "../../src/interpreter";

describe("resolveServerCommand", () => {
  it("leir.server.path wins over everything", () => {
    const cmd = resolveServerCommand({
      serverPath: "/opt/leir/bin/leir-lsp",
      interpreter: ["/venv/bin/python"],
      pythonExtension: ["/conda/bin/python"],
    });
    assert.deepEqual(cmd, { command: "/opt/leir/bin/leir-lsp", args: ["--stdio"], source: "leir.server.path" });
  });

  it("leir.interpreter wins over the Python extension, and keeps its extra arguments", () => {
    const cmd = resolveServerCommand({ interpreter: ["/venv/bin/python", "-X", "utf8"], pythonExtension: ["/conda/bin/python"] });
    assert.equal(cmd.command, "/venv/bin/python");
    assert.deepEqual(cmd.args, ["-X", "utf8", "-m", "leir_server", "--stdio"]);
    assert.equal(cmd.source, "leir.interpreter");
    assert.deepEqual(cmd.python, ["/venv/bin/python", "-X", "utf8"]);
  });

  it("uses the Python extension's environment when no setting names one", () => {
    const cmd = resolveServerCommand({ serverPath: "  ", interpreter: [""], pythonExtension: ["/conda/bin/python"] });
    assert.equal(cmd.command, "/conda/bin/python");
    assert.equal(cmd.source, "Python extension");
  });

  it("falls back to python3", () => {
    const cmd = resolveServerCommand({});
    assert.deepEqual([cmd.command, ...cmd.args], ["python3", "-m", "leir_server", "--stdio"]);
    assert.equal(cmd.source, "python3 on PATH");
  });

  it("expands ${workspaceFolder} and ~ in settings", () => {
    const a = resolveServerCommand({ interpreter: ["${workspaceFolder}/.venv/bin/python"], workspaceFolder: "/w" });
    assert.equal(a.command, "/w/.venv/bin/python");
    const b = resolveServerCommand({ serverPath: "~/bin/leir-lsp", home: "/home/me" });
    assert.equal(b.command, "/home/me/bin/leir-lsp");
  });
});

describe("probeServer", () => {
  it("says a missing interpreter was not found, where it came from, and how to fix it", async () => {
    const cmd = resolveServerCommand({ interpreter: ["/nonexistent/bin/python"] });
    const r = await probeServer(cmd);
    assert.equal(r.ok, false);
    assert.match(r.message!, /\/nonexistent\/bin\/python \(from leir\.interpreter\) was not found/);
    assert.match(r.message!, /change the leir\.interpreter setting/);
  });

  it("says the server module is not installed for a Python that lacks it", async () => {
    const cmd = resolveServerCommand({});
    const r = await probeServer(cmd, 30_000, "no_such_module_for_leir_tests");
    assert.equal(r.ok, false);
    assert.match(r.message!, /not installed for python3 \(from python3 on PATH\)/);
    assert.match(r.message!, /python3 -m pip install leir-lsp/);
    assert.match(r.message!, /Python: Select Interpreter/);
  });

  it("reports a server.path that is not a program", async () => {
    const r = await probeServer(resolveServerCommand({ serverPath: "/etc/hostname" }));
    assert.equal(r.ok, false);
    assert.match(r.message!, /leir\.server\.path/);
  });

  it("accepts a Python that has the module, and returns what --version printed", async () => {
    // `python3 -m json.tool --version` is not a thing; `platform` prints a line and exits 0.
    const cmd = resolveServerCommand({});
    const r = await probeServer(cmd, 30_000, "platform");
    assert.equal(r.ok, true, r.message);
    assert.ok(r.version && r.version.length > 0);
  });
});
