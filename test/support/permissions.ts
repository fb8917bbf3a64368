/**
 * SHUT_OUT is the command prefix that runs a child process shut out by file modes as a user other
 * than the file's owner would be. Root reads any file whatever its mode: as root the child runs
 * without that power (setpriv drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH); as anyone else it
 * needs no prefix.
 */
export const SHUT_OUT: string[] = process.getuid?.() === 0 ? [Bun.which("setpriv")!, "--bounding-set=-dac_override,-dac_read_search"] : [];

/** underUmask is the command prefix that runs a child process with the file mode creation mask `mask` (octal, as umask takes it: "0277"). */
export const underUmask = (mask: string): string[] => ["sh", "-c", `umask ${mask} && exec "$@"`, "sh"];

/** NOBODY is the user id AS_NOBODY runs a child process as. */
export const NOBODY = 65534;

/**
 * AS_NOBODY is the command prefix that runs a child process as nobody: a real unprivileged user, as
 * a VM's service user is. SHUT_OUT's root keeps CAP_FOWNER and may still chmod another user's file;
 * nobody has no capability. Only root may switch users: tests using it skip otherwise.
 */
export const AS_NOBODY: string[] = [Bun.which("setpriv") ?? "setpriv", `--reuid=${NOBODY}`, `--regid=${NOBODY}`, "--clear-groups"];
