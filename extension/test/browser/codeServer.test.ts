/**
 * The packaged extension in a real VS Code: code-server (VS Code 1.100 in
 * the browser) installs leir-lsp.vsix, Debian's Chromium driven by
 * playwright-core opens examples/matmul.leir, shows the hover on loop k,
 * opens the code actions there and applies the first one; the saved file
 * must equal what `leir apply` makes of the step with that title.
 * Screenshots of each stage go to $LEIR_SCREENSHOTS (default
 * build/extension-browser/).
 *
 * Needs $CODE_SERVER (the code-server executable) and $CHROMIUM (default
 * /usr/bin/chromium): `make extension-browser-test` installs the first and
 * says which Debian packages are missing. Not part of `make test`: installing
 * code-server builds native modules for minutes.
 */

import assert from "node:assert/strict";
import { ChildProcess, execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";
import { Browser, chromium, Page } from "playwright-core";

const EXT = path.resolve(__dirname, "..", "..", "..");
const ROOT = path.resolve(EXT, "..");
const VSIX = path.join(EXT, "leir-lsp.vsix");
const CODE_SERVER = process.env.CODE_SERVER ?? "";
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const PYTHON = process.env.LEIR_PYTHON || "python3";
const SHOTS = process.env.LEIR_SCREENSHOTS || path.join(ROOT, "build", "extension-browser");
/** Starting VS Code, the server, and verifying a step take minutes on 2 busy cores. */
const SLOW = { timeout: 600_000 };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `probe` every half second until it returns something, for at most `ms`. */
async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined> | T | undefined): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) {
      return value;
    }
    if (Date.now() > end) {
      throw new Error(`gave up waiting for ${what}`);
    }
    await sleep(500);
  }
}

/** Opens a workspace file with Quick Open, once the workbench has indexed the folder. */
async function openFile(page: Page, name: string): Promise<void> {
  await until(`${name} to open`, 180_000, async () => {
    await page.keyboard.press("Escape");
    await page.keyboard.press("Control+P");
    await sleep(1000);
    await page.keyboard.type(name);
    const row = page.locator(".quick-input-list .monaco-list-row", { hasText: name });
    try {
      await row.first().waitFor({ timeout: 10_000 });
    } catch {
      return undefined;
    }
    await page.keyboard.press("Enter");
    try {
      await page.locator(".tab.active", { hasText: name }).first().waitFor({ timeout: 10_000 });
      return true;
    } catch {
      return undefined;
    }
  });
}

describe("leir-lsp.vsix in code-server", () => {
  let server: ChildProcess | undefined;
  let browser: Browser | undefined;
  let page: Page;
  let workspace: string;
  let log = "";

  before(async () => {
    assert.ok(CODE_SERVER && existsSync(CODE_SERVER), "set CODE_SERVER to the code-server executable (make extension-browser-test)");
    assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install chromium`);
    assert.ok(existsSync(VSIX), `${VSIX} is missing: npm run package`);
    mkdirSync(SHOTS, { recursive: true });
    workspace = mkdtempSync(path.join(os.tmpdir(), "leir-ws-"));
    copyFileSync(path.join(ROOT, "examples", "matmul.leir"), path.join(workspace, "matmul.leir"));
    copyFileSync(path.join(ROOT, "examples", "matmul.leir"), path.join(workspace, "matmul_optimize.leir"));
    const data = mkdtempSync(path.join(os.tmpdir(), "leir-code-server-"));
    const extensions = path.join(data, "extensions");
    mkdirSync(path.join(data, "User"), { recursive: true });
    writeFileSync(
      path.join(data, "User", "settings.json"),
      JSON.stringify({
        "leir.interpreter": [PYTHON],
        "workbench.startupEditor": "none",
        "security.workspace.trust.enabled": false,
        "telemetry.telemetryLevel": "off",
        "extensions.autoCheckUpdates": false,
        "update.mode": "none",
      }),
    );
    const installed = execFileSync(CODE_SERVER, ["--user-data-dir", data, "--extensions-dir", extensions, "--install-extension", VSIX], {
      encoding: "utf8",
    });
    assert.match(installed, /successfully installed/);
    const port = 20000 + (process.pid % 20000);
    server = spawn(
      CODE_SERVER,
      ["--auth", "none", "--bind-addr", `127.0.0.1:${port}`, "--user-data-dir", data, "--extensions-dir", extensions, "--disable-telemetry", workspace],
      { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] },
    );
    server.stdout!.on("data", (d) => (log += String(d)));
    server.stderr!.on("data", (d) => (log += String(d)));
    await until("code-server to listen", 120_000, async () => {
      try {
        return (await fetch(`http://127.0.0.1:${port}/healthz`)).ok ? true : undefined;
      } catch {
        return undefined;
      }
    });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
    page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}`);
    await page.waitForSelector(".monaco-workbench", { timeout: 180_000 });
  });

  after(async () => {
    await browser?.close();
    server?.kill();
  });

  it("installs, hovers, lists code actions and applies one; the file is what leir apply makes", SLOW, async () => {
    await openFile(page, "matmul.leir");

    // The language mode in the status bar is the extension's language.
    await until("the LEIR language mode", 60_000, async () =>
      ((await page.locator(".statusbar-item").allInnerTexts()).some((t) => t.trim() === "LEIR") ? true : undefined),
    );

    // Hover on loop k (line 4), until the server's hover is shown.
    await page.keyboard.press("Control+G");
    await page.keyboard.type("4:5");
    await page.keyboard.press("Enter");
    const hover = await until("the hover on loop k", 240_000, async () => {
      await page.keyboard.press("Control+K");
      await page.keyboard.press("Control+I");
      await sleep(1500);
      const text = await page.locator(".monaco-hover-content").allInnerTexts();
      return text.join("\n").includes("256 iterations") ? text.join("\n") : undefined;
    });
    assert.match(hover, /loop\s+k/);
    await page.screenshot({ path: path.join(SHOTS, "hover.png") });
    await page.keyboard.press("Escape");

    // The code actions there: the first one's title, then apply it.
    await page.keyboard.press("Control+Period");
    const title = await until("the code action menu", 120_000, async () => {
      const rows = await page.locator(".action-widget .monaco-list-row.action").allInnerTexts();
      return rows.length > 0 ? rows[0].trim() : undefined;
    });
    await page.screenshot({ path: path.join(SHOTS, "code-actions.png") });
    await page.keyboard.press("Enter");

    // Resolve verifies the step numerically; then save and compare.
    const original = readFileSync(path.join(ROOT, "examples", "matmul.leir"), "utf8");
    const file = path.join(workspace, "matmul.leir");
    const saved = await until("the edit to be applied and saved", 300_000, async () => {
      await page.keyboard.press("Control+S");
      await sleep(1000);
      const text = readFileSync(file, "utf8");
      return text !== original ? text : undefined;
    });
    await page.screenshot({ path: path.join(SHOTS, "applied.png") });

    const steps = JSON.parse(execFileSync(PYTHON, ["-m", "leir.tools.cli", "actions", path.join(ROOT, "examples", "matmul.leir"), "--json"], { cwd: ROOT, encoding: "utf8" })) as {
      title: string;
    }[];
    // The menu may add what was measured: "Swap loops j and k (measured 13.8x)".
    const bare = title.replace(/\s*\(measured [^)]*\)$/, "");
    const step = steps.find((s) => s.title === bare);
    assert.ok(step, `"${title}" is not among leir actions' titles`);
    const expected = execFileSync(PYTHON, ["-m", "leir.tools.cli", "apply", path.join(ROOT, "examples", "matmul.leir"), "--step", "-"], {
      cwd: ROOT,
      input: JSON.stringify(step),
      encoding: "utf8",
    });
    assert.equal(saved, expected, `"${title}" in VS Code differs from leir apply; code-server log:\n${log.slice(-2000)}`);
  });

  it("optimizes two steps from the command palette and shows the trajectory view", SLOW, async () => {
    await openFile(page, "matmul_optimize.leir");
    await page.keyboard.press("F1");
    await page.waitForSelector(".quick-input-widget input", { timeout: 30_000 });
    await page.keyboard.type("LEIR: Optimize Kernel");
    await page.locator(".quick-input-list .monaco-list-row", { hasText: "Optimize Kernel" }).first().waitFor({ timeout: 30_000 });
    await page.keyboard.press("Enter");
    // The input box asks how many steps.
    await page.locator(".quick-input-widget", { hasText: "verified, measured steps" }).waitFor({ timeout: 30_000 });
    await page.keyboard.press("Control+A");
    await page.keyboard.type("2");
    await page.keyboard.press("Enter");
    // The trajectory view opens at once and fills in when the search ends.
    const body = await until("the trajectory view to show the result", 480_000, async () => {
      for (const frame of page.frames()) {
        try {
          const text = String(await frame.evaluate("document.body ? document.body.innerText : ''"));
          if (text.includes("matmul_optimize.leir") && !text.includes("Optimizing…") && /→|No step/.test(text)) {
            return text;
          }
        } catch {
          // a frame that went away
        }
      }
      return undefined;
    });
    assert.doesNotMatch(body, /Optimizing…/);
    await page.screenshot({ path: path.join(SHOTS, "trajectory.png") });
    // The status bar names the target and the device once something was measured.
    const items = await page.locator(".statusbar-item").allInnerTexts();
    assert.ok(items.some((t) => /llvm/.test(t)), `no status bar item names the target: ${items.join(" | ")}`);
  });
});
