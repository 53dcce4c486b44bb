import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { answerConfigurationRequest, DEFAULTS, serverConfiguration } from "../../src/configuration";

/** What `workspace.getConfiguration("leir").get(key)` returns for these user settings. */
function getter(values: Record<string, unknown>) {
  return (key: string) => values[key];
}

describe("serverConfiguration", () => {
  it("sends the server's defaults when nothing is set", () => {
    assert.deepEqual(serverConfiguration(getter({})), DEFAULTS);
  });

  it("maps every contract key, model.enabled and model.tier in both spellings", () => {
    const config = serverConfiguration(
      getter({
        target: "rpc",
        rpcTracker: " 127.0.0.1:9190 ",
        rpcKey: "rk3399",
        autoMeasure: true,
        measurementBudget: 64,
        memoryBudgetMB: 2500,
        "model.enabled": false,
        "model.tier": "smollm2",
        "model.sol.budget": 0.7,
        "model.sol.runtime": "onnx",
        "model.sol.precision": "int8",
        suggestionsOnSave: true,
      }),
    );
    assert.deepEqual(config, {
      target: "rpc",
      rpcTracker: "127.0.0.1:9190",
      rpcKey: "rk3399",
      autoMeasure: true,
      measurementBudget: 64,
      memoryBudgetMB: 2500,
      model: { enabled: false, tier: "smollm2", sol: { budget: 0.7, runtime: "onnx", precision: "int8" } },
      modelEnabled: false,
      modelTier: "smollm2",
      suggestionsOnSave: true,
    });
  });

  it("sends a null SOL budget as null (dense decoding), not as the default", () => {
    const config = serverConfiguration(getter({ "model.sol.budget": null }));
    assert.deepEqual(config.model.sol, { budget: null, runtime: "torch", precision: "fp32" });
    assert.deepEqual(serverConfiguration(getter({})).model.sol, { budget: 0.5, runtime: "torch", precision: "fp32" });
  });

  it("never sends client-only settings", () => {
    const config = serverConfiguration(getter({ "server.path": "/x", interpreter: ["/py"], "trace.server": "verbose" }));
    assert.deepEqual(Object.keys(config).sort(), Object.keys(DEFAULTS).sort());
  });

  it("replaces values of the wrong type by the defaults", () => {
    const config = serverConfiguration(
      getter({
        target: "tpu",
        measurementBudget: 2.5,
        autoMeasure: "yes",
        "model.enabled": 0,
        rpcKey: 7,
        "model.tier": "huge",
        "model.sol.budget": "half",
        "model.sol.runtime": "tensorrt",
        "model.sol.precision": 8,
      }),
    );
    assert.equal(config.target, "llvm");
    assert.equal(config.measurementBudget, 24);
    assert.equal(config.autoMeasure, false);
    assert.equal(config.modelEnabled, true);
    assert.equal(config.modelTier, "embedded");
    assert.deepEqual(config.model, { enabled: true, tier: "embedded", sol: DEFAULTS.model.sol });
    assert.equal(config.rpcKey, "");
  });
});

describe("answerConfigurationRequest", () => {
  it("answers the leir section, keys below it, and null for other sections", () => {
    const get = getter({ target: "cuda", "model.enabled": false });
    const answer = answerConfigurationRequest(
      [{ section: "leir" }, { section: "leir.target" }, { section: "leir.model.enabled" }, { section: "python" }, {}],
      get,
    );
    assert.equal((answer[0] as { target: string }).target, "cuda");
    assert.equal(answer[1], "cuda");
    assert.equal(answer[2], false);
    assert.equal(answer[3], null);
    assert.equal(answer[4], null);
  });
});
