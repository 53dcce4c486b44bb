import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { GEOMETRY, latencyPoints, logRange, plotSvg, project, Trajectory, trajectoryHtml } from "../../src/trajectory";

const T: Trajectory = {
  uri: "file:///w/matmul.leir",
  kernel: "main",
  done: true,
  steps: [
    { id: "tile", args: { loops: ["j", "k"] }, latency_before_ms: 10, latency_after_ms: 1, speedup: 10, reasoning: "k is innermost with stride 256" },
    { id: "vectorize", args: { loop: "ji" }, latency_before_ms: 1, latency_after_ms: 0.1, speedup: 10, reasoning: "unit stride <b>" },
  ],
};

describe("trajectory", () => {
  it("takes the start latency and the latency after each measured step", () => {
    assert.deepEqual(
      latencyPoints(T).map((p) => [p.step, p.ms]),
      [[0, 10], [1, 1], [2, 0.1]],
    );
    // A start measured apart from the first step's paired "before": the step's own figure is plotted.
    assert.deepEqual(latencyPoints({ ...T, start_ms: 35 }).map((p) => p.ms), [10, 1, 0.1]);
    assert.deepEqual(latencyPoints({ uri: "u", steps: [], start_ms: 35 }).map((p) => p.ms), [35]);
    const unmeasured: Trajectory = { uri: "u", steps: [{ id: "split" }, { id: "fuse", latency_after_ms: 3 }] };
    assert.deepEqual(latencyPoints(unmeasured).map((p) => p.step), [2]);
  });

  it("plots on a log scale: equal ratios are equal distances", () => {
    assert.deepEqual(logRange([10, 1, 0.1]), [-1, 1]);
    assert.deepEqual(logRange([5, 5]), [0, 1]);
    const xy = project(latencyPoints(T));
    assert.ok(Math.abs((xy[1].y - xy[0].y) - (xy[2].y - xy[1].y)) < 1e-9);
    assert.equal(xy[0].y, GEOMETRY.top); // 10 ms is the top decade
    assert.equal(xy[2].y, GEOMETRY.height - GEOMETRY.bottom); // 0.1 ms the bottom one
    assert.equal(xy[0].x, GEOMETRY.left);
    assert.equal(xy[2].x, GEOMETRY.width - GEOMETRY.right);
  });

  it("draws one point per latency and says when there is none", () => {
    assert.equal((plotSvg(latencyPoints(T)).match(/<circle /g) ?? []).length, 3);
    assert.match(plotSvg([]), /No measured latency yet/);
  });

  it("escapes server text and allows no script", () => {
    const html = trajectoryHtml(T, { cspSource: "vscode-webview://x", nonce: "abc123" });
    assert.match(html, /unit stride &lt;b&gt;/);
    assert.doesNotMatch(html, /<b>/);
    assert.doesNotMatch(html, /<script/i);
    assert.match(html, /default-src 'none'/);
    assert.match(html, /<style nonce="abc123">/);
    assert.match(html, /10\.0 ms → 100 µs \(100\.00×\)/);
  });

  it("marks a plan's steps, the whole plan's latency on its last step only", () => {
    const plan: Trajectory = {
      uri: "file:///w/mm.leir",
      done: true,
      steps: [
        { id: "split", plan: { goal: "a tiled contraction", step: 1, of: 2 } },
        { id: "vectorize", latency_before_ms: 13, latency_after_ms: 0.41, speedup: 31.7, plan: { goal: "a tiled contraction", step: 2, of: 2 } },
      ],
    };
    const html = trajectoryHtml(plan, { cspSource: "s", nonce: "n" });
    assert.match(html, /plan step 1 of 2 toward a tiled contraction: not timed alone/);
    assert.match(html, /plan step 2 of 2 toward a tiled contraction: 13\.0 ms → 410 µs \(31\.70×\), the whole plan/);
    assert.deepEqual(latencyPoints(plan).map((p) => [p.step, p.ms]), [[0, 13], [2, 0.41]]);
  });

  it("names the file, and says whether an empty trajectory is a finished search", () => {
    const opts = { cspSource: "s", nonce: "n" };
    assert.match(trajectoryHtml(T, opts), /<h1 title="file:\/\/\/w\/matmul\.leir">main — matmul\.leir<\/h1>/);
    assert.match(trajectoryHtml({ uri: "file:///a%20b.leir", steps: [], done: true }, opts), /a b\.leir[\s\S]*No step made this kernel faster/);
    assert.match(trajectoryHtml({ uri: "file:///a.leir", steps: [] }, opts), /No step applied yet/);
  });

  it("shows progress while optimize is still streaming steps", () => {
    const html = trajectoryHtml({ uri: "u", steps: [T.steps[0]], done: false }, { cspSource: "s", nonce: "n" });
    assert.match(html, /Optimizing… \(1 step so far\)/);
  });
});
