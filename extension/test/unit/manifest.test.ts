/**
 * package.json and the code agree: every contributed command is registered,
 * every menu entry names a contributed command, and every key the server
 * reads is a contributed setting.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, it } from "node:test";

import { DEFAULTS } from "../../src/configuration";

const EXT = path.resolve(__dirname, "..", "..", "..");
const manifest = JSON.parse(readFileSync(path.join(EXT, "package.json"), "utf8"));
const source = readFileSync(path.join(EXT, "src", "extension.ts"), "utf8");

describe("package.json", () => {
  const contributed = new Set<string>(manifest.contributes.commands.map((c: { command: string }) => c.command));

  it("registers every contributed command in extension.ts", () => {
    for (const id of contributed) {
      assert.ok(source.includes(`"${id}"`), `${id} is contributed but extension.ts never names it`);
    }
  });

  it("names only contributed commands in menus", () => {
    for (const [menu, items] of Object.entries(manifest.contributes.menus as Record<string, { command?: string }[]>)) {
      for (const item of items) {
        if (item.command) {
          assert.ok(contributed.has(item.command), `${menu} names ${item.command}, which is not contributed`);
        }
      }
    }
  });

  it("does not reuse the server's command ids (the language client registers those)", () => {
    for (const id of ["leir.measure", "leir.optimize", "leir.convert", "leir.showTrajectory", "leir.restart"]) {
      assert.ok(!contributed.has(id), `${id} would be registered twice`);
    }
  });

  it("contributes a setting for every key the server reads", () => {
    const props = manifest.contributes.configuration.properties as Record<string, { default: unknown }>;
    const flat: Record<string, unknown> = {
      ...DEFAULTS,
      "model.enabled": DEFAULTS.model.enabled,
      "model.tier": DEFAULTS.model.tier,
      "model.sol.budget": DEFAULTS.model.sol.budget,
      "model.sol.runtime": DEFAULTS.model.sol.runtime,
      "model.sol.precision": DEFAULTS.model.sol.precision,
    };
    delete flat.model;
    delete flat.modelEnabled;
    delete flat.modelTier;
    for (const [key, value] of Object.entries(flat)) {
      assert.ok(props[`leir.${key}`], `leir.${key} is not a contributed setting`);
      assert.deepEqual(props[`leir.${key}`].default, value, `leir.${key}: default differs from the server's`);
    }
  });

  it("declares limited support for untrusted workspaces and restricts the server command settings", () => {
    const untrusted = manifest.capabilities.untrustedWorkspaces;
    assert.equal(untrusted.supported, "limited");
    assert.deepEqual([...untrusted.restrictedConfigurations].sort(), ["leir.interpreter", "leir.server.path"]);
  });

  it("keeps @types/vscode equal to engines.vscode (vsce refuses a newer one)", () => {
    assert.equal(`^${manifest.devDependencies["@types/vscode"]}`, manifest.engines.vscode);
  });
});
