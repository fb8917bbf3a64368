/** isEmbeddedPath tells whether a module path lies in a compiled binary's embedded file system (bun build --compile). */
export function isEmbeddedPath(path: string): boolean {
  return path.startsWith("/$bunfs/") || path.includes("~BUN");
}
