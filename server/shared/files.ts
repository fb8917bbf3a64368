import { accessSync, chmodSync, chownSync, closeSync, constants, existsSync, fchmodSync, fsyncSync, linkSync, mkdirSync, openSync, readdirSync, readFileSync, readlinkSync, realpathSync, renameSync, rmSync, statSync, type Dirent, type Stats } from "node:fs";
import { hostname } from "node:os";
import { basename, dirname, join, relative, resolve } from "node:path";
import { sha256 } from "./crypto.ts";
import { errorCode } from "./thrown.ts";

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
  if (!createOwnerOnlyFileIfAbsent(path)) keepOwnerOnlyOpen(openSync(path, "w", 0o600), false);
}

/**
 * createOwnerOnlyFileIfAbsent creates an empty file 0600 whatever the umask, before SQLite opens it
 * (SQLite would create it 0644 & ~umask), and tells whether it did; through a symbolic link to a
 * file not there yet too (a database kept on another volume), which SQLite would otherwise create
 * 0644 for the moment before it is made 0600, and a descriptor another user took then reads it
 * for good. A file already there, or behind a link, is left as it is.
 */
export function createOwnerOnlyFileIfAbsent(path: string): boolean {
  let fd: number;
  try {
    fd = openSync(path, "wx", 0o600);
  } catch (error) {
    if (errorCode(error) !== "EEXIST") throw error;
    if (pathExists(path)) return false;
    // "wx" refuses every symbolic link, one to a file not there yet too: that file is made through it (never emptied, without O_TRUNC).
    fd = openSync(path, constants.O_WRONLY | constants.O_CREAT, 0o600);
  }
  keepOwnerOnlyOpen(fd, true);
  return true;
}

function keepOwnerOnlyOpen(fd: number, created: boolean): void {
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
  // existsSync would take a parent the process may not enter for missing, and report a mkdir of it.
  if (parent !== path && !pathExists(parent)) makeOwnerOnlyDirectory(parent);
  try {
    mkdirSync(path, { mode: 0o700 });
  } catch (error) {
    if (errorCode(error) === "EEXIST") return;
    throw error;
  }
  // The umask narrows the mode mkdir creates with: 0277 left 0500, in which its owner could not create the database.
  chmodSync(path, 0o700);
}

/**
 * PROCESS_NAMESPACE names where this process's id means something: the kernel's boot (its boot_id,
 * shared by the containers of one host, different on another host) and the PID namespace (each
 * container has its own), as 12 hex digits. The host name stands in where /proc does not tell them.
 */
const PROCESS_NAMESPACE = Buffer.from(sha256(`${readProcFile("/proc/sys/kernel/random/boot_id") ?? hostname()} ${readProcLink("/proc/self/ns/pid") ?? ""}`)).toString("hex").slice(0, 12);

/** readProcFile is the trimmed text of a /proc file, or null where there is none (not Linux, /proc not mounted). */
function readProcFile(path: string): string | null {
  try {
    return readFileSync(path, "utf8").trim();
  } catch {
    return null;
  }
}

/** readProcLink is where a /proc link points (a namespace's "pid:[INODE]"), or null where there is none. */
function readProcLink(path: string): string | null {
  try {
    return readlinkSync(path);
  } catch {
    return null;
  }
}

/**
 * partialName is where a file is written before it is published: beside it (same filesystem, so
 * it can be linked into place), marked as unfinished, and unique to its writer, process `pid` of
 * this boot and PID namespace (PROCESS_NAMESPACE), so a run killed half-way never blocks the next
 * one, and two hosts or containers writing one name on a shared volume never share a partial file.
 */
export function partialName(path: string, pid = process.pid): string {
  return join(dirname(path), `${basename(path)}.partial-${PROCESS_NAMESPACE}-${pid}`);
}

/**
 * FOREIGN_PARTIAL_MAX_AGE_MS is how old a partial file written in another boot or PID namespace
 * (another host or container sharing the volume), or named without one (by a crm before the
 * namespace was in the name), must be before it is taken for abandoned: its writer's PID cannot
 * be looked up from here, and no backup runs for a day.
 */
const FOREIGN_PARTIAL_MAX_AGE_MS = 24 * 3600_000;

/** PARTIAL_FILE_NAME matches a name partialName gives, or its SQLite journal: the file's own name, then its writer's namespace (absent from the names of a crm before it) and process id. */
const PARTIAL_FILE_NAME = /^(.+)\.partial-(?:([0-9a-f]{12})-)?([0-9]+)(?:-journal)?$/;

/**
 * removeStalePartials removes what runs killed half-way left beside `path` under partialName (the
 * partial file and its SQLite journal): a killed backup's half copy holds customers' rows, and a
 * killed first start's partial secrets key an unused key. See removeStalePartialsIn.
 */
export function removeStalePartials(path: string): void {
  removeStalePartialsIn(dirname(path), basename(path));
}

/**
 * removeStalePartialsIn removes, from `directory`, the partial files (and their journals) of runs
 * killed half-way, of every name or only those of the file `named`, and returns the paths it
 * removed. One of this boot and PID namespace goes when its process is gone; another's only once
 * FOREIGN_PARTIAL_MAX_AGE_MS old, since the same PID here says nothing of its writer, which may be
 * writing it still. Only regular files named exactly as partialName names them are looked at.
 */
export function removeStalePartialsIn(directory: string, named?: string): string[] {
  let entries: Dirent[];
  try {
    entries = readdirSync(directory, { withFileTypes: true });
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const entry of entries) {
    const partial = entry.isFile() ? PARTIAL_FILE_NAME.exec(entry.name) : null;
    if (!partial || (named !== undefined && partial[1] !== named)) continue;
    const [, , namespace, pid] = partial;
    const file = join(directory, entry.name);
    const stale = namespace === PROCESS_NAMESPACE ? !processRunning(Number(pid)) : olderThan(file, FOREIGN_PARTIAL_MAX_AGE_MS);
    if (!stale) continue;
    rmSync(file, { force: true });
    removed.push(file);
  }
  return removed;
}

/** olderThan tells whether a file was last modified more than `ms` ago; false when it is gone. */
function olderThan(file: string, ms: number): boolean {
  const modified = statIfThere(file)?.mtimeMs;
  return modified !== undefined && Date.now() - modified > ms;
}

/** processRunning tells whether a process of that id exists (one of another user's too). */
function processRunning(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return errorCode(error) === "EPERM";
  }
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
    const code = errorCode(error);
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
  const code = errorCode(error);
  return code === "ENOENT" || code === "ENOTDIR";
}

/**
 * pathExists tells whether something is at `path`. existsSync says false for any error, so a file
 * in a directory the process may not enter read as missing; here such an error is thrown.
 */
export function pathExists(path: string): boolean {
  return statIfThere(path) !== undefined;
}

/**
 * statIfThere is what is at `path`, undefined when nothing is (no such name, or a part of it not a
 * directory); any other error (a folder the process may not enter) is thrown, as pathExists does.
 */
export function statIfThere(path: string): Stats | undefined {
  try {
    return statSync(path);
  } catch (error) {
    if (isAbsent(error)) return undefined;
    throw error;
  }
}

/**
 * openToOthers words why a file of secrets (`what`, whose reader gains `risk`) that its group or
 * other users may read or write should be its owner's alone, with the fix, or null when it is, or
 * is no regular file (a pipe, a terminal) or is gone. A warning, not a refusal: secret stores mount
 * such files so on purpose (a Kubernetes Secret 0644, or root:fsGroup 0440 behind symlinks; a
 * Docker secret 0444; with fsGroup the data directory's own key turns 0660 at each mount),
 * read-only, where neither chmod nor chown can be run, and a refusal stopped every instance at its
 * next start.
 */
export function openToOthers(path: string, what: string, risk: string): string | null {
  const stats = statIfThere(path);
  if (!stats?.isFile() || (stats.mode & 0o077) === 0) return null;
  const me = process.getuid?.() ?? stats.uid;
  const chown = me !== stats.uid && me !== 0 ? `chown ${userName(me)} ${path} && ` : "";
  return `${what} is open to other users (mode 0${(stats.mode & 0o777).toString(8)}): ${risk}; unless a secret store mounts it so, make it the owner's alone: ${chown}chmod 600 ${path}`;
}

/**
 * fileErrorText words a file system error for a one-line message; a permission denied says who
 * should run the command (`remedy`: by default the service's user, whose files these are), a
 * directory given for a file says so.
 */
export function fileErrorText(error: unknown, remedy = "run the command as the user the service runs as"): string {
  const code = errorCode(error);
  if (code === "EACCES" || code === "EPERM") return `permission denied (${remedy})`;
  if (code === "EISDIR") return "it is a directory, not a file";
  return (error as Error).message;
}

/** userName is the name of the user with id `uid` (from /etc/passwd), else the number. */
export function userName(uid: number): string {
  let passwd = "";
  try {
    passwd = readFileSync("/etc/passwd", "utf8");
  } catch {
    // No passwd file (a bare container): the number names the user as well, chown takes it.
  }
  for (const line of passwd.split("\n")) {
    const [name, , id] = line.split(":");
    if (name && id === String(uid)) return name;
  }
  return String(uid);
}

/**
 * notOwnedText words, for a one-line message, what keeps the process from a file of the service's
 * (in its data directory `home`, or its secrets key) that another user owns, and the fix: the
 * first folder above it the process may not enter, else the file when it is not the process's.
 * A root-owned one (a restore or a command done as root) is given to the process's user with
 * chown (-R on a folder's real path); another user's means the command runs as the wrong user.
 * Null when no other user's file or folder is in the way (the file's own mode, or a missing file).
 */
export function notOwnedText(path: string, home: string): string | null {
  const me = process.getuid?.();
  if (me === undefined || me === 0) return null;
  const file = resolve(path);
  const inHome = (p: string) => !relative(resolve(home), p).startsWith("..");
  const folders: string[] = [];
  for (let dir = dirname(file); ; dir = dirname(dir)) {
    folders.unshift(dir);
    if (dir === dirname(dir)) break;
  }
  const runsAs = `not by ${userName(me)} (the user this command runs as)`;
  // A chown -R names the folder's real path: GNU chown -R does not follow a symlink given on its
  // command line (a data directory moved to a bigger disk, /var/lib/crm -> /srv/disk/crm), and
  // changed the link alone. A plain chown follows it, so a file keeps the path it was given by.
  const named = (dir: string) => (realpathSync(dir) === dir ? dir : `${dir} (that is ${realpathSync(dir)})`);
  try {
    for (const dir of folders) {
      try {
        accessSync(dir, constants.X_OK);
      } catch {
        const owner = statSync(dir).uid;
        if (owner === me) return null;
        if (!inHome(dir)) return `${userName(me)} may not enter ${dir} (owned by ${userName(owner)}): choose a path outside it`;
        return `${named(dir)} is owned by ${userName(owner)}, ${runsAs}: ${owner === 0 ? `chown -R ${userName(me)} ${realpathSync(dir)}` : `run the command as ${userName(owner)}`}`;
      }
    }
    const stat = statSync(file);
    if (stat.uid === me) return null;
    const [shown, chown] = stat.isDirectory() ? [named(file), `chown -R ${userName(me)} ${realpathSync(file)}`] : [file, `chown ${userName(me)} ${file}`];
    return `${shown} is owned by ${userName(stat.uid)}, ${runsAs}: ${stat.uid === 0 ? chown : `run the command as ${userName(stat.uid)}`}`;
  } catch {
    return null;
  }
}

/**
 * giveToFolderOwner gives a file root has just created to the owner of its folder when that is
 * another user: a command run as root in the service's data directory (`crm migrate` during an
 * upgrade) would otherwise leave a file the service's user cannot open, and every later start refused.
 */
export function giveToFolderOwner(path: string): void {
  if (process.getuid?.() !== 0) return;
  const folder = statSync(dirname(path));
  if (folder.uid !== 0) chownSync(path, folder.uid, folder.gid);
}
