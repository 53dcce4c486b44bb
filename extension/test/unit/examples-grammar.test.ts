/**
 * The grammar on every examples/*.leir: no token is marked invalid, every
 * loop header is coloured as a loop with its extent and variable, and every
 * `#` comment is a comment. (test/grammar/tokens.leir checks each token
 * class in detail; this checks the grammar holds up on the real workloads.)
 */

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { before, describe, it } from "node:test";
import * as oniguruma from "vscode-oniguruma";
import * as vsctm from "vscode-textmate";

const EXT = path.resolve(__dirname, "..", "..", "..");
const EXAMPLES = path.join(EXT, "..", "examples");

async function loadGrammar(): Promise<vsctm.IGrammar> {
  const wasm = readFileSync(require.resolve("vscode-oniguruma/release/onig.wasm"));
  await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (patterns: string[]) => new oniguruma.OnigScanner(patterns),
      createOnigString: (s: string) => new oniguruma.OnigString(s),
    }),
    loadGrammar: async (scopeName: string) =>
      scopeName === "source.leir"
        ? vsctm.parseRawGrammar(readFileSync(path.join(EXT, "syntaxes", "leir.tmLanguage.json"), "utf8"), "leir.tmLanguage.json")
        : null,
  });
  const grammar = await registry.loadGrammar("source.leir");
  assert.ok(grammar);
  return grammar;
}

interface Token {
  text: string;
  scopes: string[];
}

function tokenize(grammar: vsctm.IGrammar, text: string): Token[][] {
  let state = vsctm.INITIAL;
  return text.split("\n").map((line) => {
    const r = grammar.tokenizeLine(line, state);
    state = r.ruleStack;
    return r.tokens.map((t) => ({ text: line.slice(t.startIndex, t.endIndex), scopes: t.scopes }));
  });
}

describe("grammar on examples/*.leir", () => {
  let grammar: vsctm.IGrammar;
  before(async () => {
    grammar = await loadGrammar();
  });

  const files = readdirSync(EXAMPLES).filter((f) => f.endsWith(".leir"));

  it("finds the examples", () => {
    assert.ok(files.length >= 10, `only ${files.length} examples`);
  });

  for (const file of files) {
    it(file, () => {
      const text = readFileSync(path.join(EXAMPLES, file), "utf8");
      const lines = tokenize(grammar, text);
      lines.forEach((tokens, i) => {
        const where = `${file}:${i + 1}`;
        for (const t of tokens) {
          assert.ok(!t.scopes.some((s) => s.startsWith("invalid")), `${where}: "${t.text}" is marked invalid`);
        }
        const line = text.split("\n")[i];
        const loops = [...line.matchAll(/\b([LPVUB])\^\{(\d+)\}_\{([A-Za-z_]\w*)/g)];
        for (const m of loops) {
          const has = (s: string, scope: string) => tokens.some((t) => t.text === s && t.scopes.some((x) => x.startsWith(scope)));
          assert.ok(has(m[1], "keyword.control.loop"), `${where}: loop kind ${m[1]} not coloured`);
          assert.ok(has(m[2], "constant.numeric.integer.extent"), `${where}: extent ${m[2]} not coloured`);
          assert.ok(has(m[3], "variable.parameter.loop"), `${where}: loop variable ${m[3]} not coloured`);
        }
        const hash = line.indexOf("#");
        if (hash >= 0) {
          const comment = tokens.find((t) => t.text.startsWith("#"));
          assert.ok(comment?.scopes.includes("comment.line.number-sign.leir"), `${where}: comment not coloured`);
        }
      });
    });
  }
});
