import net from "node:net";

/** RawResponse is one HTTP/1.1 response as read off the wire. */
export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Connection is one raw TCP connection: write bytes, read whole HTTP/1.1 responses, see it close. */
export class Connection {
  private readonly socket: net.Socket;
  private buffer = "";
  private waiters: (() => void)[] = [];
  readonly closed: Promise<void>;
  isClosed = false;
  /** the code of the socket error that ended the connection (ECONNRESET: reset, not closed); null after a clean close */
  errorCode: string | null = null;

  /** @param from the local address to connect from (any 127.x address is this machine's loopback) */
  constructor(port: number, from = "127.0.0.1") {
    this.socket = net.connect({ port, host: "127.0.0.1", localAddress: from });
    this.socket.on("data", (chunk) => {
      this.buffer += chunk.toString("latin1");
      this.wake();
    });
    this.socket.on("error", (error: NodeJS.ErrnoException) => (this.errorCode = error.code ?? error.message));
    this.closed = new Promise((resolve) =>
      this.socket.on("close", () => {
        this.isClosed = true;
        this.wake();
        resolve();
      }),
    );
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  write(text: string): void {
    this.socket.write(text);
  }

  writeBytes(bytes: Uint8Array): void {
    this.socket.write(bytes);
  }

  /** drained resolves when everything written has been handed to the kernel (or the connection closed). */
  drained(): Promise<void> {
    if (this.socket.writableLength === 0 || this.isClosed) return Promise.resolve();
    return new Promise((resolve) => {
      this.socket.once("drain", () => resolve());
      this.closed.then(() => resolve());
    });
  }

  /** request sends a request head (and body) with Host and returns the whole response. */
  request(method: string, path: string, headers: Record<string, string> = {}, body = ""): Promise<RawResponse> {
    const lines = Object.entries({ host: "127.0.0.1", ...headers, ...(body ? { "content-length": String(Buffer.byteLength(body)) } : {}) }).map(([k, v]) => `${k}: ${v}\r\n`);
    this.write(`${method} ${path} HTTP/1.1\r\n${lines.join("")}\r\n${body}`);
    return this.response();
  }

  /** response waits for one complete response (Content-Length framed) or for the close. */
  async response(): Promise<RawResponse> {
    for (;;) {
      const end = this.buffer.indexOf("\r\n\r\n");
      if (end >= 0) {
        const [statusLine, ...headerLines] = this.buffer.slice(0, end).split("\r\n");
        const headers = Object.fromEntries(headerLines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
        const length = Number(headers["content-length"] ?? 0);
        if (this.buffer.length >= end + 4 + length) {
          const body = this.buffer.slice(end + 4, end + 4 + length);
          this.buffer = this.buffer.slice(end + 4 + length);
          return { status: Number(statusLine!.split(" ")[1]), headers, body };
        }
      }
      if (this.isClosed) throw new Error(`connection ${this.errorCode ? `failed (${this.errorCode})` : "closed"}; received ${JSON.stringify(this.buffer)}`);
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  /** received is everything read and not yet consumed as a response. */
  get received(): string {
    return this.buffer;
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** closedWithin tells whether the connection closes before `ms` pass (a bound for a hung test, not a measurement). */
export async function closedWithin(connection: Connection, ms: number): Promise<boolean> {
  return Promise.race([connection.closed.then(() => true), Bun.sleep(ms).then(() => false)]);
}

/** stringOfJsonBytes wraps a run of "x" so that the JSON of the result is exactly `bytes` long. */
export function stringOfJsonBytes(bytes: number, wrap: (s: string) => unknown): unknown {
  const overhead = JSON.stringify(wrap("")).length;
  return wrap("x".repeat(bytes - overhead));
}

/** domainOfLength builds a host name of exactly `length` characters (more than 192), its labels 63 characters at most. */
export function domainOfLength(length: number): string {
  return `${"d".repeat(63)}.${"e".repeat(63)}.${"f".repeat(63)}.${"g".repeat(length - 3 * 64)}`;
}

/** emailOfLength builds a valid address of exactly `length` characters. */
export function emailOfLength(length: number): string {
  const local = "a".repeat(64);
  const domainRest = length - local.length - 1 - 63 - 1 - 63 - 1 - ".com".length;
  return `${local}@${"b".repeat(63)}.${"c".repeat(63)}.${"d".repeat(domainRest)}.com`;
}
