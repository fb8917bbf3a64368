// Builds dist/crm: one executable carrying the server, its migrations (imported as text), the
// console's scripts, styles and fonts and the /docs UI (imported as files). Nothing is read from
// beside the binary at run time. `bun scripts/build.ts [--target=bun-linux-arm64] [--outfile=PATH]`.
import { existsSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { buildCommit } from "./build-commit.ts";

const root = join(import.meta.dir, "..");
const option = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const outfile = option("outfile") ?? join(root, "dist", "crm");
const target = option("target") as Bun.Build.CompileTarget | undefined;

// The console's islands are bundled by their own script when it exists; the server embeds its output.
const consoleBuild = join(root, "scripts", "build-console.ts");
if (existsSync(consoleBuild)) {
  const child = Bun.spawnSync([process.execPath, consoleBuild], { cwd: root, stdout: "inherit", stderr: "inherit" });
  if (child.exitCode !== 0) {
    console.error("build: the console build failed");
    process.exit(1);
  }
}

const commit = buildCommit(root);
const started = performance.now();
const result = await Bun.build({
  // The slow-list lane's thread runs a module of its own, embedded beside main's (server/db/read-lane.ts finds it).
  entrypoints: [join(root, "server", "main.ts"), join(root, "server", "db", "read-lane-worker.ts")],
  minify: true,
  // Precompiled bytecode roughly halves the time from exec to the first answered request.
  bytecode: true,
  sourcemap: "inline",
  // server/version.ts names the build by it; run from source, it is not defined.
  define: { CRM_BUILD_COMMIT: JSON.stringify(commit) },
  compile: {
    outfile,
    ...(target ? { target } : {}),
    // Configuration is flags, environment and --config only: a stray .env or bunfig.toml in the
    // working directory must not change how the service runs.
    autoloadDotenv: false,
    autoloadBunfig: false,
  },
});
if (!result.success) {
  for (const message of result.logs) console.error(message);
  process.exit(1);
}
// The source maps are embedded in the binary already; the copies written beside it are not needed.
for (const map of [`${outfile}.map`, join(dirname(outfile), "read-lane-worker.js.map")]) rmSync(map, { force: true });
const size = Bun.file(outfile).size;
console.log(`built ${outfile} (commit ${commit}, ${(size / 1024 / 1024).toFixed(1)} MiB) in ${Math.round(performance.now() - started)} ms`);
