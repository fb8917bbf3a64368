#!/usr/bin/env bun
// Writes the console's island bundles to console/dist/islands.json. `bun build --compile` embeds
// that file (console/bundle.ts imports it in a compiled binary), so run this first.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { bundleIslands } from "../console/bundle.ts";

/** CONSOLE_BUNDLE_FILE is where the island bundles are written for the binary to embed. */
const CONSOLE_BUNDLE_FILE = join(import.meta.dir, "..", "console", "dist", "islands.json");

/** buildConsoleBundles bundles every island and writes them to `file`; it returns the bundle names. */
export async function buildConsoleBundles(file = CONSOLE_BUNDLE_FILE): Promise<string[]> {
  const bundles = await bundleIslands();
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(bundles));
  return Object.keys(bundles);
}

if (import.meta.main) {
  const names = await buildConsoleBundles();
  process.stdout.write(`wrote ${names.join(", ")} to ${CONSOLE_BUNDLE_FILE}\n`);
}
