import type { Server } from "bun";

// Bun's idle timer closes a connection once nothing has passed on it for the idle timeout, and it
// runs while a request is being served too: a request that waits longer than that before its
// answer (for its body, for the database) would lose its connection, though the server goes on
// and serves it. Each such wait moves the timer and puts it back to the idle timeout once over,
// so that the keep-alive wait after the answer is timed again.

/** IdleTimer is the listening server (null under app.handle, where there is no connection) and its idle timeout. */
export interface IdleTimer {
  server: Server<unknown> | null;
  idleTimeoutSeconds: number;
}

/** holdIdleTimer sets the idle timer of a request's connection to `seconds` (0: off) and returns what puts it back to the idle timeout. */
export function holdIdleTimer(request: Request, { server, idleTimeoutSeconds }: IdleTimer, seconds: number): () => void {
  if (!server) return () => {};
  server.timeout(request, seconds);
  return () => server.timeout(request, idleTimeoutSeconds);
}

/** heldOpenWhile keeps a request's connection open (its idle timer off) until `waiting` settles, a wait on the database before the handler; then it times the connection again. */
export async function heldOpenWhile<T>(request: Request, timer: IdleTimer, waiting: Promise<T>): Promise<T> {
  const restore = holdIdleTimer(request, timer, 0);
  try {
    return await waiting;
  } finally {
    restore();
  }
}
