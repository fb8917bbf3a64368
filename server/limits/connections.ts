interface Connection {
  inFlight: number;
  lastActive: number;
}

/**
 * ConnectionGate caps the client connections served at once. Bun.serve 1.4 accepts every TCP
 * connection and reports neither opens nor closes, so the gate learns of a connection from its
 * first request (peer address and port) and counts it as open until it cannot be any more: it
 * sent `Connection: close`, or it has been idle longer than Bun keeps idle connections. A client
 * that hangs up early is counted until then, so the count errs on the high side.
 */
export class ConnectionGate {
  private readonly open = new Map<string, Connection>();

  /**
   * @param max connections served at once
   * @param idleHorizonMs how long after its last response an idle connection may still be open
   * @param busyHorizonMs how long a connection with a request in flight may stay silent before
   *   it is presumed gone (a response that never finished)
   */
  constructor(
    private readonly max: number,
    private readonly idleHorizonMs: number,
    private readonly busyHorizonMs: number,
  ) {}

  /** admit records a request on a connection; false when it is a new connection beyond the cap. */
  admit(key: string, now = performance.now()): boolean {
    const known = this.open.get(key);
    if (known) {
      known.inFlight++;
      known.lastActive = now;
      return true;
    }
    if (this.open.size >= this.max) {
      this.sweep(now);
      if (this.open.size >= this.max) return false;
    }
    this.open.set(key, { inFlight: 1, lastActive: now });
    return true;
  }

  /** release records the end of a request; a connection the client asked to close is forgotten. */
  release(key: string, closing: boolean, now = performance.now()): void {
    const connection = this.open.get(key);
    if (!connection) return;
    connection.inFlight = Math.max(0, connection.inFlight - 1);
    connection.lastActive = now;
    if (closing && connection.inFlight === 0) this.open.delete(key);
  }

  /** size is the number of connections counted as open (after forgetting expired ones). */
  size(now = performance.now()): number {
    this.sweep(now);
    return this.open.size;
  }

  private sweep(now: number): void {
    for (const [key, connection] of this.open) {
      if (now - connection.lastActive > (connection.inFlight > 0 ? this.busyHorizonMs : this.idleHorizonMs)) this.open.delete(key);
    }
  }
}
