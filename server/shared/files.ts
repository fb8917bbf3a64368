import { chmodSync, closeSync, existsSync, fchmodSync, fsyncSync, linkSync, mkdirSync, openSync, renameSync, rmSync, statSync } from "node:fs";
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
 * createOwnerOnlyFile creates an empty file only its owner may read and write (0600), for data that
 * is someone's (a backup, customer rows) whatever the umask; a file already there is emptied and
 * keeps its mode (perhaps /dev/full, or one the user made on purpose).
 */
export function createOwnerOnlyFile(path: string): void {
  let created = true;
  let fd: number;
  try {
    fd = openSync(path, "wx", 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    // "wx" refuses any symbolic link, one to a file not there yet too, which "w" then creates.
    created = !pathExists(path);
    fd = openSync(path, "w", 0o600);
  }
  try {
    // The umask narrows the mode open creates with: 0277 left 0400, which its owner could not write.
    if (created) fchmodSync(fd, 0o600);
  } finally {
    closeSync(fd);
  }
}

/**
 * makeOwnerOnlyDirectory creates a directory, and each parent it lacks, only its owner may enter
 * (0700) whatever the umask; a directory already there keeps its mode.
 */
export function makeOwnerOnlyDirectory(path: string): void {
  const parent = dirname(path);
  if (parent !== path && !existsSync(parent)) makeOwnerOnlyDirectory(parent);
  try {
    mkdirSync(path, { mode: 0o700 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return;
    throw error;
  }
  // The umask narrows the mode mkdir creates with: 0277 left 0500, in which its owner could not create the database.
  chmodSync(path, 0o700);
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

/** isAbsent tells whether a file system error means nothing is at the path (no such name, or a part of it not a directory). */
export function isAbsent(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException).code;
  return code === "ENOENT" || code === "ENOTDIR";
}

/**
 * pathExists tells whether something is at `path`. existsSync says false for any error, so a file
 * in a directory the process may not enter read as missing; here such an error is thrown.
 */
export function pathExists(path: string): boolean {
  try {
    statSync(path);
    return true;
  } catch (error) {
    if (isAbsent(error)) return false;
    throw error;
  }
}

/**
 * fileErrorText words a file system error for a one-line message; a permission denied says who
 * should run the command (`remedy`: by default the service's user, whose files these are), a
 * directory given for a file says so.
 */
export function fileErrorText(error: unknown, remedy = "run the command as the user the service runs as"): string {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === "EACCES" || code === "EPERM") return `permission denied (${remedy})`;
  if (code === "EISDIR") return "it is a directory, not a file";
  return (error as Error).message;
}
