import { closeSync, existsSync, fsyncSync, linkSync, openSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";

/** fsyncPath flushes a file, or a directory's entries (a name created or renamed in it), to disk. */
export function fsyncPath(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * partialName is where a file is written before it is published: beside it (same filesystem, so
 * it can be linked into place), marked as unfinished, and unique to this process, so a run killed
 * half-way never blocks the next one.
 */
export function partialName(path: string): string {
  return join(dirname(path), `${basename(path)}.partial-${process.pid}`);
}

/**
 * publishFile gives a finished, synced file at `partial` its final name `path`, never over an
 * existing file, and makes the name durable; false (and the partial file removed) when `path`
 * exists. A hard link fails on an existing name in one step; a filesystem without links gets a
 * rename after a check.
 */
export function publishFile(partial: string, path: string): boolean {
  try {
    linkSync(partial, path);
    rmSync(partial, { force: true });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== "EEXIST" && code !== "EPERM" && code !== "ENOTSUP" && code !== "EOPNOTSUPP") throw error;
    if (code === "EEXIST" || existsSync(path)) {
      rmSync(partial, { force: true });
      return false;
    }
    renameSync(partial, path);
  }
  fsyncPath(dirname(path));
  return true;
}

