/**
 * The packaged .vsix holds every file its manifest names and nothing from
 * the source tree: what `code --install-extension` needs, checked after
 * `npm run package`.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, it } from "node:test";

const EXT = path.resolve(__dirname, "..", "..", "..");
const VSIX = path.join(EXT, "leir-lsp.vsix");

function entries(): string[] {
  // A .vsix is a zip file; Python's zipfile lists it without extra tools.
  const listing = execFileSync(process.env.LEIR_PYTHON || "python3", [
    "-c",
    "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))",
    VSIX,
  ]).toString();
  return listing.split("\n").filter((l) => l.length > 0);
}

describe("leir-lsp.vsix", () => {
  it("exists (run `npm run package` first)", () => {
    assert.ok(existsSync(VSIX), `${VSIX} is missing`);
  });

  it("contains every file the manifest names", () => {
    const files = new Set(entries());
    const manifest = JSON.parse(readFileSync(path.join(EXT, "package.json"), "utf8"));
    const named: string[] = [manifest.main, manifest.icon];
    for (const lang of manifest.contributes.languages) {
      if (lang.configuration) {
        named.push(lang.configuration);
      }
    }
    for (const g of manifest.contributes.grammars) {
      named.push(g.path);
    }
    const readme = readFileSync(path.join(EXT, "README.md"), "utf8");
    for (const m of readme.matchAll(/!\[[^\]]*\]\(([^)]+)\)/g)) {
      named.push(m[1]);
    }
    for (const n of named) {
      const entry = `extension/${path.posix.normalize(n.replace(/^\.\//, ""))}`;
      assert.ok(files.has(entry), `${n} is named by the manifest or README but not in the .vsix`);
    }
  });

  it("ships the bundle, not the sources, tests or node_modules", () => {
    const files = entries();
    for (const f of files) {
      assert.doesNotMatch(f, /^extension\/(src|test|out|node_modules)\//, `${f} should not be packaged`);
    }
  });
});
