import { basename, join } from "node:path";
import { isEmbeddedPath } from "../server/shared/compiled.ts";

/** ISLANDS names the browser bundles: console/islands/NAME.tsx is served as /console/assets/NAME.js. */
export const ISLANDS = ["deliveries", "rotation", "secret-rotation", "copy"] as const;

/** bundleIslands compiles each island with preact and signals into one minified browser file. */
export async function bundleIslands(): Promise<Record<string, string>> {
  const result = await Bun.build({
    entrypoints: ISLANDS.map((name) => join(import.meta.dir, "islands", `${name}.tsx`)),
    target: "browser",
    format: "esm",
    minify: true,
    naming: "[name].[ext]",
  });
  if (!result.success) throw new AggregateError(result.logs, "bundling the console islands failed");
  return Object.fromEntries(await Promise.all(result.outputs.map(async (output) => [basename(output.path), await output.text()] as const)));
}

// A compiled binary has no sources to bundle: scripts/build-console.ts wrote the bundles to
// console/dist/islands.json before `bun build --compile`, which embeds that file through the import below.
const compiled = isEmbeddedPath(import.meta.dir);
let scripts: Promise<Record<string, string>> | undefined;

/** islandScripts returns the island bundles by file name, bundled once per process from source or embedded in the binary. */
export function islandScripts(): Promise<Record<string, string>> {
  scripts ??= compiled ? import("./dist/islands.json").then((m) => m.default as Record<string, string>) : bundleIslands();
  return scripts;
}
