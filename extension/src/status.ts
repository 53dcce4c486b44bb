/**
 * What the status bar item shows, as a pure function of the state that the
 * server's `leir/status` notifications and the client's lifecycle change.
 *
 * No `vscode` import: the states are unit-tested in plain Node; extension.ts
 * copies a `StatusView` onto the real item.
 */

/** `leir/status` from the server (the shared contract). */
export interface StatusNotification {
  target: string;
  device: string;
  measuring: boolean;
  lastLatencyMs?: number;
  uri?: string;
}

/**
 * `leir/ranker` from the server: what ranks the suggestions ("heuristic", or the local model's name), sent once the
 * model worker knows; `reasoning` says how the model's reasoning is decoded ("reasoning decoded with SOL at budget 0.5
 * (net keep 0.53, torch (cpu))", or "reasoning decoded densely (...)"), sent again when the net keep it reached changes.
 */
export interface RankerNotification {
  ranker: string;
  reasoning?: string;
}

export type ServerState = "starting" | "running" | "stopped" | "failed";

export interface StatusState {
  server: ServerState;
  trusted: boolean;
  target?: string;
  device?: string;
  measuring: boolean;
  lastLatencyMs?: number;
  /** The document the last latency was measured on. */
  lastUri?: string;
  /** Why the server failed, when it did. */
  failure?: string;
  /** What ranks the suggestions, once the server has said (kept until it says otherwise). */
  ranker?: string;
  /** How that ranker's reasoning is decoded, when it said. */
  rankerReasoning?: string;
}

export function initialState(trusted: boolean): StatusState {
  return { server: "starting", trusted, measuring: false };
}

export type StatusEvent =
  | { kind: "server"; state: ServerState; failure?: string }
  | { kind: "status"; status: StatusNotification }
  | { kind: "ranker"; ranker: RankerNotification }
  | { kind: "trust"; trusted: boolean };

export function reduce(state: StatusState, event: StatusEvent): StatusState {
  switch (event.kind) {
    case "server":
      return {
        ...state,
        server: event.state,
        failure: event.state === "failed" ? event.failure : undefined,
        // A stopped server measures nothing, whatever it said last.
        measuring: event.state === "running" ? state.measuring : false,
      };
    case "trust":
      return { ...state, trusted: event.trusted };
    case "ranker":
      return typeof event.ranker.ranker === "string" && event.ranker.ranker
        ? {
            ...state,
            ranker: event.ranker.ranker,
            // Each notification says it whole: one without `reasoning` (a ranker that writes none) clears it.
            rankerReasoning: typeof event.ranker.reasoning === "string" ? event.ranker.reasoning : undefined,
          }
        : state;
    case "status": {
      const s = event.status;
      const latency = typeof s.lastLatencyMs === "number" && Number.isFinite(s.lastLatencyMs) ? s.lastLatencyMs : undefined;
      return {
        ...state,
        target: s.target,
        device: s.device,
        measuring: Boolean(s.measuring),
        // A notification without a latency keeps the last one shown.
        lastLatencyMs: latency ?? state.lastLatencyMs,
        lastUri: latency !== undefined ? s.uri : state.lastUri,
      };
    }
  }
}

export interface StatusView {
  text: string;
  tooltip: string;
  /** A command id; extension.ts maps it to the real command. */
  command: "cancel" | "showOutput" | "openSettings";
}

/** 0.0123 -> "12.3 µs", 1.234 -> "1.23 ms", 1234 -> "1.23 s": three digits. */
export function formatLatency(ms: number): string {
  if (ms < 1) {
    return `${(ms * 1000).toPrecision(3)} µs`;
  }
  if (ms < 1000) {
    return `${ms.toPrecision(3)} ms`;
  }
  return `${(ms / 1000).toPrecision(3)} s`;
}

export function render(state: StatusState): StatusView {
  if (state.server === "failed") {
    return {
      text: "$(error) LEIR",
      tooltip: `LEIR language server failed to start: ${state.failure ?? "see the LEIR output"}. Click for the log.`,
      command: "showOutput",
    };
  }
  if (state.server === "starting") {
    return { text: "$(loading~spin) LEIR", tooltip: "LEIR language server starting", command: "showOutput" };
  }
  if (state.server === "stopped") {
    return { text: "$(circle-slash) LEIR", tooltip: "LEIR language server stopped", command: "showOutput" };
  }
  const where = state.target ? (state.device ? `${state.target} · ${state.device}` : state.target) : "LEIR";
  if (!state.trusted) {
    return {
      text: `$(shield) ${where}`,
      tooltip: "Restricted mode: LEIR checks files but compiles and measures nothing until the workspace is trusted.",
      command: "showOutput",
    };
  }
  if (state.measuring) {
    return {
      text: `$(sync~spin) ${where}: measuring`,
      tooltip: "Measuring on " + where + ". Click to cancel.",
      command: "cancel",
    };
  }
  const latency = state.lastLatencyMs !== undefined ? ` $(watch) ${formatLatency(state.lastLatencyMs)}` : "";
  return {
    text: `$(pulse) ${where}${latency}`,
    tooltip:
      (state.lastLatencyMs !== undefined
        ? `Last measured kernel: ${formatLatency(state.lastLatencyMs)} (median)${state.lastUri ? ` — ${state.lastUri}` : ""}. `
        : "No kernel measured yet. ") +
      rankerText(state.ranker, state.rankerReasoning) +
      "Click to change the target (leir.target).",
    command: "openSettings",
  };
}

/** The tooltip's sentence on what ranks the suggestions, and how its reasoning is decoded ("" before the server has said). */
export function rankerText(ranker: string | undefined, reasoning?: string): string {
  if (!ranker) {
    return "";
  }
  if (ranker === "heuristic") {
    return "Suggestions ranked by the heuristic (no local model loaded). ";
  }
  return `Suggestions ranked by the local model (${ranker})${reasoning ? `, ${reasoning}` : ""}. `;
}
