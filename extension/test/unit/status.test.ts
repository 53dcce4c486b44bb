import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { formatLatency, initialState, reduce, render, StatusState } from "../../src/status";

const running = (trusted = true): StatusState => reduce(initialState(trusted), { kind: "server", state: "running" });

describe("status bar", () => {
  it("spins while the server starts and shows the error when it failed", () => {
    assert.match(render(initialState(true)).text, /loading~spin/);
    const failed = reduce(initialState(true), { kind: "server", state: "failed", failure: "python3 was not found" });
    const view = render(failed);
    assert.match(view.text, /\$\(error\)/);
    assert.match(view.tooltip, /python3 was not found/);
    assert.equal(view.command, "showOutput");
  });

  it("shows the configured target alone until the server names the device", () => {
    const s = reduce(running(), { kind: "status", status: { target: "cuda", device: "", measuring: false } });
    assert.equal(render(s).text, "$(pulse) cuda");
  });

  it("shows target and device, then a spinner while measuring that cancels on click", () => {
    let s = reduce(running(), { kind: "status", status: { target: "llvm", device: "x86-64 avx2", measuring: false } });
    assert.equal(render(s).text, "$(pulse) llvm · x86-64 avx2");
    assert.equal(render(s).command, "openSettings");
    s = reduce(s, { kind: "status", status: { target: "llvm", device: "x86-64 avx2", measuring: true } });
    assert.equal(render(s).text, "$(sync~spin) llvm · x86-64 avx2: measuring");
    assert.equal(render(s).command, "cancel");
  });

  it("shows the last latency and keeps it when a later notification has none", () => {
    let s = reduce(running(), {
      kind: "status",
      status: { target: "cuda", device: "H100", measuring: false, lastLatencyMs: 0.0123, uri: "file:///m.leir" },
    });
    assert.equal(render(s).text, "$(pulse) cuda · H100 $(watch) 12.3 µs");
    assert.match(render(s).tooltip, /file:\/\/\/m\.leir/);
    s = reduce(s, { kind: "status", status: { target: "cuda", device: "H100", measuring: true } });
    s = reduce(s, { kind: "status", status: { target: "cuda", device: "H100", measuring: false } });
    assert.equal(s.lastLatencyMs, 0.0123);
    assert.match(render(s).text, /12\.3 µs/);
  });

  it("says what ranks the suggestions once the server has, and keeps it", () => {
    let s = reduce(running(), { kind: "status", status: { target: "llvm", device: "cpu", measuring: true } });
    assert.doesNotMatch(render(s).tooltip, /ranked/);
    s = reduce(s, { kind: "ranker", ranker: { ranker: "heuristic" } });
    assert.equal(s.measuring, true); // a ranker notification says nothing about measuring
    s = reduce(s, { kind: "status", status: { target: "llvm", device: "cpu", measuring: false } });
    assert.match(render(s).tooltip, /Suggestions ranked by the heuristic \(no local model loaded\)/);
    s = reduce(s, { kind: "ranker", ranker: { ranker: "model" } });
    s = reduce(s, { kind: "status", status: { target: "llvm", device: "cpu", measuring: true } });
    s = reduce(s, { kind: "status", status: { target: "llvm", device: "cpu", measuring: false } });
    assert.equal(s.ranker, "model");
    assert.match(render(s).tooltip, /Suggestions ranked by the local model \(model\)/);
  });

  it("says how the model's reasoning is decoded, as the latest notification says it", () => {
    let s = reduce(running(), { kind: "status", status: { target: "llvm", device: "cpu", measuring: false } });
    s = reduce(s, {
      kind: "ranker",
      ranker: { ranker: "model", reasoning: "reasoning decoded with SOL at budget 0.5 (torch (cpu))" },
    });
    assert.match(
      render(s).tooltip,
      /Suggestions ranked by the local model \(model\), reasoning decoded with SOL at budget 0\.5 \(torch \(cpu\)\)\. /,
    );
    s = reduce(s, {
      kind: "ranker",
      ranker: { ranker: "model", reasoning: "reasoning decoded with SOL at budget 0.5 (net keep 0.54, torch (cpu))" },
    });
    assert.match(render(s).tooltip, /net keep 0\.54/);
    s = reduce(s, { kind: "ranker", ranker: { ranker: "reversed" } }); // a ranker that says nothing of its reasoning
    assert.equal(s.rankerReasoning, undefined);
    assert.match(render(s).tooltip, /Suggestions ranked by the local model \(reversed\)\. /);
  });

  it("stops spinning when the server stops", () => {
    let s = reduce(running(), { kind: "status", status: { target: "llvm", device: "cpu", measuring: true } });
    s = reduce(s, { kind: "server", state: "stopped" });
    assert.equal(s.measuring, false);
    assert.doesNotMatch(render(s).text, /spin/);
  });

  it("says restricted mode in an untrusted workspace, until trust is granted", () => {
    let s = reduce(running(false), { kind: "status", status: { target: "llvm", device: "cpu", measuring: false } });
    assert.match(render(s).text, /\$\(shield\)/);
    assert.match(render(s).tooltip, /Restricted mode/);
    s = reduce(s, { kind: "trust", trusted: true });
    assert.match(render(s).text, /\$\(pulse\)/);
  });

  it("formats latencies with three significant digits in a fitting unit", () => {
    assert.equal(formatLatency(0.5), "500 µs");
    assert.equal(formatLatency(2.345), "2.35 ms");
    assert.equal(formatLatency(1234), "1.23 s");
  });
});
