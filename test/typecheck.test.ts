import { expect, test } from "bun:test";
import { join } from "node:path";

// The code is strict TypeScript; a type error anywhere fails the suite.
test("the whole project type-checks with tsc --strict", () => {
  const root = join(import.meta.dir, "..");
  const result = Bun.spawnSync([process.execPath, join(root, "node_modules/typescript/bin/tsc"), "-p", root], { cwd: root });
  const output = result.stdout.toString() + result.stderr.toString();
  expect(output).toBe("");
  expect(result.exitCode).toBe(0);
}, 120_000);
