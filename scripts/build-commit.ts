// The commit a binary is built from: scripts/build.ts embeds it, and the binary names it in
// --version, crm_build_info and its refusal of a database a newer crm migrated.
import { resolve } from "node:path";

/** git runs a git command in `root` and returns its output, trimmed; null when it fails or git is not installed. */
function git(root: string, args: string[]): string | null {
  try {
    const run = Bun.spawnSync(["git", "--no-optional-locks", ...args], { cwd: root, stdout: "pipe", stderr: "ignore" });
    return run.exitCode === 0 ? run.stdout.toString().trim() : null;
  } catch {
    return null;
  }
}

/**
 * buildCommit names the commit of the checkout at `root`: its short hash, with "-dirty" when a
 * tracked file differs from it; "unknown" without git or outside a checkout of its own (a
 * source archive, even one unpacked inside another checkout).
 */
export function buildCommit(root: string): string {
  const top = git(root, ["rev-parse", "--show-toplevel"]);
  const hash = git(root, ["rev-parse", "--short", "HEAD"]);
  if (top === null || resolve(top) !== resolve(root) || !hash) return "unknown";
  return git(root, ["status", "--porcelain", "--untracked-files=no"]) ? `${hash}-dirty` : hash;
}
