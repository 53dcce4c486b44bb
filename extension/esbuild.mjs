// Bundles the extension into dist/extension.js: the .vsix then ships one file
// instead of node_modules (`vscode` stays external: the editor provides it).
import * as esbuild from "esbuild";

await esbuild.build({
  entryPoints: ["src/extension.ts"],
  bundle: true,
  outfile: "dist/extension.js",
  external: ["vscode"],
  format: "cjs",
  platform: "node",
  target: "node18",
  sourcemap: false,
  minify: process.argv.includes("--minify"),
  logLevel: "warning",
});
