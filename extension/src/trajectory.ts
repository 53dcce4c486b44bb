/**
 * The trajectory view's model and page: the applied steps in order with their
 * reasoning, and the latency after each step on a log scale.
 *
 * The page is static HTML with an inline SVG plot and no script at all, so
 * its Content-Security-Policy can forbid scripts outright; the view updates by
 * replacing the page when a `leir/trajectory` notification arrives.
 *
 * No `vscode` import: unit-tested in plain Node.
 */

/** One step as the server reports it (`leir.optimize`, `leir/trajectory`). */
export interface TrajectoryStep {
  id: string;
  args?: unknown;
  title?: string;
  latency_before_ms?: number;
  latency_after_ms?: number;
  speedup?: number;
  reasoning?: string;
  /** Set on a step of a plan (`leir optimize --strategy plans`): only its last step carries latencies, the whole plan's. */
  plan?: { goal: string; step: number; of: number };
}

/** `leir/trajectory` {uri, kernel, steps, done, final?}; `leir.showTrajectory` {uri, kernel, steps}. */
export interface Trajectory {
  uri: string;
  kernel?: string | null;
  steps: TrajectoryStep[];
  done?: boolean;
  final?: string;
  start_ms?: number;
}

export function trajectoryKey(t: { uri: string; kernel?: string | null }): string {
  return `${t.uri}#${t.kernel ?? ""}`;
}

const finite = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v) && v > 0;

/** One point per measured latency: the start, then after each step. */
export interface PlotPoint {
  step: number; // 0 = before any step
  ms: number;
  label: string;
}

export function latencyPoints(t: Trajectory): PlotPoint[] {
  const points: PlotPoint[] = [];
  // The first timed step's own "before" was timed against its "after"
  // (paired rounds); `start_ms` may come from a separate, earlier
  // measurement. The plot's ratios are the steps' own, so the paired figure
  // wins. A plan's steps before its last are not timed: its last step's
  // "before" is the program before the whole plan, the start.
  const leading = t.steps.findIndex((s) => !s.plan || finite(s.latency_before_ms));
  const first = leading >= 0 && (leading === 0 || t.steps[leading].plan) ? t.steps[leading] : undefined;
  const start = first && finite(first.latency_before_ms) ? first.latency_before_ms : finite(t.start_ms) ? t.start_ms : undefined;
  if (start !== undefined) {
    points.push({ step: 0, ms: start, label: "start" });
  }
  t.steps.forEach((s, i) => {
    if (finite(s.latency_after_ms)) {
      points.push({ step: i + 1, ms: s.latency_after_ms, label: s.title ?? s.id });
    }
  });
  return points;
}

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

function fmt(ms: number): string {
  return ms < 1 ? `${(ms * 1000).toPrecision(3)} µs` : ms < 1000 ? `${ms.toPrecision(3)} ms` : `${(ms / 1000).toPrecision(3)} s`;
}

export interface PlotGeometry {
  width: number;
  height: number;
  left: number;
  right: number;
  top: number;
  bottom: number;
}

export const GEOMETRY: PlotGeometry = { width: 560, height: 240, left: 64, right: 16, top: 16, bottom: 36 };

/** The decades (powers of ten) that bracket the values, at least one apart. */
export function logRange(values: number[]): [number, number] {
  const lo = Math.floor(Math.log10(Math.min(...values)));
  let hi = Math.ceil(Math.log10(Math.max(...values)));
  if (hi === lo) {
    hi = lo + 1;
  }
  return [lo, hi];
}

/** Pixel coordinates: x by step index, y by log10(latency). */
export function project(points: PlotPoint[], g: PlotGeometry = GEOMETRY): { x: number; y: number }[] {
  const [lo, hi] = logRange(points.map((p) => p.ms));
  const maxStep = Math.max(1, ...points.map((p) => p.step));
  const w = g.width - g.left - g.right;
  const h = g.height - g.top - g.bottom;
  return points.map((p) => ({
    x: g.left + (p.step / maxStep) * w,
    y: g.top + (1 - (Math.log10(p.ms) - lo) / (hi - lo)) * h,
  }));
}

export function plotSvg(points: PlotPoint[], g: PlotGeometry = GEOMETRY): string {
  if (points.length === 0) {
    return `<p class="empty">No measured latency yet.</p>`;
  }
  const [lo, hi] = logRange(points.map((p) => p.ms));
  const xy = project(points, g);
  const maxStep = Math.max(1, ...points.map((p) => p.step));
  const h = g.height - g.top - g.bottom;
  const w = g.width - g.left - g.right;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${g.width} ${g.height}" role="img" aria-label="Latency per step, log scale">`);
  for (let d = lo; d <= hi; d++) {
    const y = g.top + (1 - (d - lo) / (hi - lo)) * h;
    parts.push(`<line class="grid" x1="${g.left}" x2="${g.width - g.right}" y1="${y.toFixed(1)}" y2="${y.toFixed(1)}"/>`);
    parts.push(`<text class="tick" x="${g.left - 6}" y="${(y + 4).toFixed(1)}" text-anchor="end">${escapeHtml(fmt(10 ** d))}</text>`);
  }
  for (let s = 0; s <= maxStep; s++) {
    const x = g.left + (s / maxStep) * w;
    parts.push(`<text class="tick" x="${x.toFixed(1)}" y="${g.height - g.bottom + 16}" text-anchor="middle">${s}</text>`);
  }
  parts.push(`<text class="axis" x="${g.left + w / 2}" y="${g.height - 4}" text-anchor="middle">step</text>`);
  parts.push(`<polyline class="line" points="${xy.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" ")}"/>`);
  xy.forEach((p, i) => {
    parts.push(
      `<circle class="point" cx="${p.x.toFixed(1)}" cy="${p.y.toFixed(1)}" r="4"><title>${escapeHtml(`${points[i].step}: ${points[i].label} — ${fmt(points[i].ms)}`)}</title></circle>`,
    );
  });
  parts.push(`</svg>`);
  return parts.join("\n");
}

export interface PageOptions {
  /** The webview's `cspSource`. */
  cspSource: string;
  /** A fresh random nonce for the one inline style block. */
  nonce: string;
}

function describeArgs(args: unknown): string {
  if (args === undefined || args === null) {
    return "";
  }
  return JSON.stringify(args);
}

export function trajectoryHtml(t: Trajectory | undefined, opts: PageOptions): string {
  const csp = [
    "default-src 'none'",
    `style-src 'nonce-${opts.nonce}'`,
    `img-src ${opts.cspSource} data:`,
    `font-src ${opts.cspSource}`,
  ].join("; ");
  let body: string;
  if (!t) {
    body = `<p class="empty">No trajectory yet: run “LEIR: Optimize Kernel” or apply a code action.</p>`;
  } else {
    const file = decodeURIComponent(t.uri.replace(/[?#].*$/, "").split("/").pop() || t.uri);
    const title = `${t.kernel ? `${t.kernel} — ` : ""}${file}`;
    const points = latencyPoints(t);
    const status = t.done === false ? `<p class="running">Optimizing… (${t.steps.length} step${t.steps.length === 1 ? "" : "s"} so far)</p>` : "";
    const total =
      points.length >= 2
        ? `<p class="total">${escapeHtml(fmt(points[0].ms))} → ${escapeHtml(fmt(points[points.length - 1].ms))} (${(points[0].ms / points[points.length - 1].ms).toFixed(2)}×)</p>`
        : "";
    const rows = t.steps
      .map((s) => {
        const measured =
          finite(s.latency_before_ms) && finite(s.latency_after_ms)
            ? `${fmt(s.latency_before_ms)} → ${fmt(s.latency_after_ms)}${finite(s.speedup) ? ` (${s.speedup.toFixed(2)}×)` : ""}`
            : undefined;
        const lat = s.plan
          ? `plan step ${s.plan.step} of ${s.plan.of} toward ${s.plan.goal}: ${measured ? `${measured}, the whole plan` : "not timed alone"}`
          : measured ?? "not measured";
        return [
          `<li>`,
          `<div class="step"><span class="id">${escapeHtml(s.title ?? s.id)}</span> <code>${escapeHtml(describeArgs(s.args))}</code></div>`,
          `<div class="latency">${escapeHtml(lat)}</div>`,
          s.reasoning ? `<div class="reasoning">${escapeHtml(s.reasoning)}</div>` : "",
          `</li>`,
        ].join("");
      })
      .join("\n");
    body = [
      `<h1 title="${escapeHtml(t.uri)}">${escapeHtml(title)}</h1>`,
      status,
      total,
      plotSvg(points),
      t.steps.length
        ? `<ol class="steps">${rows}</ol>`
        : // An optimize run that ended (done) found nothing; a document's own trajectory is just empty.
          `<p class="empty">${t.done === true ? "No step made this kernel faster within the budget." : "No step applied yet."}</p>`,
    ].join("\n");
  }
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>LEIR trajectory</title>
<style nonce="${opts.nonce}">
body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); padding: 0 1em; }
h1 { font-size: 1.1em; font-weight: 600; }
svg { max-width: 640px; width: 100%; height: auto; }
.grid { stroke: var(--vscode-editorLineNumber-foreground); stroke-opacity: 0.3; }
.tick, .axis { fill: var(--vscode-descriptionForeground); font-size: 11px; }
.line { fill: none; stroke: var(--vscode-charts-blue, #3794ff); stroke-width: 2; }
.point { fill: var(--vscode-charts-blue, #3794ff); }
.steps li { margin: 0.6em 0; }
.id { font-weight: 600; }
.latency { color: var(--vscode-charts-green, #89d185); }
.reasoning { color: var(--vscode-descriptionForeground); white-space: pre-wrap; }
.empty, .running { font-style: italic; }
</style>
</head>
<body>
${body}
</body>
</html>`;
}
