/**
 * The `leir` settings the server reads (its `Settings.from_json`), built from
 * VS Code's configuration.
 *
 * The server pulls the section with `workspace/configuration` on
 * `initialized` and after each `workspace/didChangeConfiguration`. VS Code's
 * own answer would be the whole `leir` tree, client-only keys included
 * (`server.path`, `interpreter`, `trace`); the client answers with exactly
 * the keys of the shared contract instead, in the form the server documents.
 */

export const SECTION = "leir";

export type Target = "llvm" | "cuda" | "rpc";

/** `leir.model.tier`: the embedded model, or the larger SmolLM2 one. */
export type ModelTier = "embedded" | "smollm2";

/** `leir.model.sol.runtime` and `.precision`: where the SOL decoding's MLPs run, and their weights. */
export type SolRuntime = "torch" | "onnx";
export type SolPrecision = "fp32" | "int8";

/** `leir.model.sol`: the reasoning the model writes, decoded under the SOL policy at `budget` (null: densely). */
export interface SolConfiguration {
  budget: number | null;
  runtime: SolRuntime;
  precision: SolPrecision;
}

/** The contract's keys, as the server accepts them. */
export interface ServerConfiguration {
  target: Target;
  rpcTracker: string;
  rpcKey: string;
  autoMeasure: boolean;
  measurementBudget: number;
  /** MB a program may need to be verified, run or measured; null: the server's default (LEIR_MEMORY_BUDGET_MB or 1000). */
  memoryBudgetMB: number | null;
  model: { enabled: boolean; tier: ModelTier; sol: SolConfiguration };
  modelEnabled: boolean;
  modelTier: ModelTier;
  suggestionsOnSave: boolean;
}

/** Reads one key below `leir.` (what `WorkspaceConfiguration.get` does). */
export type ConfigGetter = (key: string) => unknown;

export const DEFAULTS: ServerConfiguration = {
  target: "llvm",
  rpcTracker: "",
  rpcKey: "",
  autoMeasure: false,
  measurementBudget: 24,
  memoryBudgetMB: null,
  model: { enabled: true, tier: "embedded", sol: { budget: 0.5, runtime: "torch", precision: "fp32" } },
  modelEnabled: true,
  modelTier: "embedded",
  suggestionsOnSave: false,
};

const TARGETS: readonly string[] = ["llvm", "cuda", "rpc"];
const MODEL_TIERS: readonly string[] = ["embedded", "smollm2"];
const SOL_RUNTIMES: readonly string[] = ["torch", "onnx"];
const SOL_PRECISIONS: readonly string[] = ["fp32", "int8"];

/**
 * The section to send. A value of the wrong type falls back to the default
 * rather than reaching the server, which would report it as ignored.
 * Values the server checks further (an rpc target without a tracker, a port
 * out of range) are passed through: the server says why it ignores them.
 */
export function serverConfiguration(get: ConfigGetter): ServerConfiguration {
  const str = (key: string, fallback: string): string => {
    const v = get(key);
    return typeof v === "string" ? v.trim() : fallback;
  };
  const bool = (key: string, fallback: boolean): boolean => {
    const v = get(key);
    return typeof v === "boolean" ? v : fallback;
  };
  const target = str("target", DEFAULTS.target);
  const budget = get("measurementBudget");
  const memory = get("memoryBudgetMB");
  const modelEnabled = bool("model.enabled", DEFAULTS.modelEnabled);
  const tier = str("model.tier", DEFAULTS.modelTier);
  const modelTier = (MODEL_TIERS.includes(tier) ? tier : DEFAULTS.modelTier) as ModelTier;
  return {
    target: (TARGETS.includes(target) ? target : DEFAULTS.target) as Target,
    rpcTracker: str("rpcTracker", DEFAULTS.rpcTracker),
    rpcKey: str("rpcKey", DEFAULTS.rpcKey),
    autoMeasure: bool("autoMeasure", DEFAULTS.autoMeasure),
    measurementBudget: Number.isInteger(budget) ? (budget as number) : DEFAULTS.measurementBudget,
    memoryBudgetMB: typeof memory === "number" && memory >= 1 ? memory : DEFAULTS.memoryBudgetMB,
    model: { enabled: modelEnabled, tier: modelTier, sol: solConfiguration(get) },
    modelEnabled,
    modelTier,
    suggestionsOnSave: bool("suggestionsOnSave", DEFAULTS.suggestionsOnSave),
  };
}

/**
 * `leir.model.sol.*`. A budget of `null` is sent as it is: it turns SOL off
 * (dense decoding). A budget outside (0, 1] is passed through for the server
 * to name and ignore; one that is not a number, the default.
 */
function solConfiguration(get: ConfigGetter): SolConfiguration {
  const defaults = DEFAULTS.model.sol;
  const budget = get("model.sol.budget");
  const runtime = get("model.sol.runtime");
  const precision = get("model.sol.precision");
  return {
    budget: budget === null || typeof budget === "number" ? budget : defaults.budget,
    runtime: (typeof runtime === "string" && SOL_RUNTIMES.includes(runtime) ? runtime : defaults.runtime) as SolRuntime,
    precision: (typeof precision === "string" && SOL_PRECISIONS.includes(precision)
      ? precision
      : defaults.precision) as SolPrecision,
  };
}

/**
 * The answer to one `workspace/configuration` request: one entry per item,
 * our section for `leir` (or a key below it), `null` for anything else.
 */
export function answerConfigurationRequest(
  items: ReadonlyArray<{ section?: string }>,
  get: ConfigGetter,
): unknown[] {
  return items.map((item) => {
    const section = item.section ?? "";
    if (section === SECTION) {
      return serverConfiguration(get);
    }
    if (section.startsWith(`${SECTION}.`)) {
      const config = serverConfiguration(get) as unknown as Record<string, unknown>;
      let value: unknown = config;
      for (const part of section.slice(SECTION.length + 1).split(".")) {
        value = value !== null && typeof value === "object" ? (value as Record<string, unknown>)[part] : undefined;
      }
      return value ?? null;
    }
    return null;
  });
}
