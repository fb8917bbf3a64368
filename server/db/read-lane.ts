import { join } from "node:path";
import { isEmbeddedPath } from "../shared/compiled.ts";
import type { Logger } from "../shared/log.ts";
import type { FileId } from "./database.ts";
import { SlowReads } from "./slow-reads.ts";
import type { Db, ReaderName, SqlValue } from "./sql.ts";

/** LaneStatement is a statement of a session, sent to the lane's thread. */
type LaneStatement = { kind: "all" | "get"; sql: string; params: SqlValue[] };

/**
 * LaneOpen is the first message to the lane's thread: the database's path and the file the service
 * opened there. No answer when it opened that file; LaneRefusal when the path names another; the
 * thread ends when it cannot open it.
 */
export type LaneOpen = { kind: "open"; path: string; file: FileId };

/** LaneRefusal is the thread's answer to LaneOpen when the path no longer names the file the service opened. */
export type LaneRefusal = { refused: string };

/** LaneCall is a call to the lane's thread: run a statement of the session, end the session's snapshot, or close the connection. */
export type LaneCall = { id: number } & (LaneStatement | { kind: "end" } | { kind: "close" });

/** LaneAnswer is the thread's answer to the call of the same id: a value, or the error it threw. */
export type LaneAnswer = { id: number; value: unknown } | { id: number; error: { message: string; code: string | undefined } } | LaneRefusal;

interface PendingCall {
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/**
 * ReadLane runs slow reads of a SQLite database on a thread of their own: a Bun Worker holding its
 * own read-only connection to the file (WAL lets it read beside the writer), one read at a time
 * (SlowReads, in turns, at most `capacity` held), each in one snapshot that begins after the read
 * was submitted, so it sees every commit answered before. bun:sqlite is synchronous: a count of
 * half a million rows held up every other request of the process for its 150 ms. The thread
 * starts with the lane, when the service opens the database, and opens the file the service
 * opened (`file`): should the path name another by then (a backup moved over it), the thread
 * refuses it and every read runs through `fallback` (the main thread) from then on. Should the
 * thread end (crash, exit), the read it was running starts over through `fallback`, and the next
 * read starts a new thread, which checks the file the same way.
 */
export class ReadLane {
  private worker: Worker | null = null;
  private readonly reads: SlowReads;
  private readonly calls = new Map<number, PendingCall>();
  private nextCallId = 0;
  private closed = false;
  /** refused is set once a thread found the path naming another file than `file`: no thread is started again */
  private refused = false;

  constructor(
    private readonly path: string,
    private readonly file: FileId,
    capacity: number,
    private readonly fallback: <T>(work: (db: Db) => Promise<T>) => Promise<T>,
    private readonly log: Logger,
  ) {
    this.reads = new SlowReads(capacity, 1, (work) => this.runOnThread(work));
    this.startWorker();
  }

  /** held counts the reads on the lane: waiting, and the one running. */
  get held(): number {
    return this.reads.held;
  }

  /** read runs `reader`'s `work` on the lane in one snapshot; ReadLaneFull when the lane has no place for it. */
  read<T>(work: (db: Db) => Promise<T>, reader: ReaderName): Promise<T> {
    return this.closed || this.refused ? this.fallback(work) : this.reads.read(work, reader);
  }

  /** runOnThread runs one read on the lane's thread, in a snapshot of its own. */
  private async runOnThread(work: (db: Db) => Promise<unknown>): Promise<unknown> {
    try {
      const value = await work(this.sessionDb);
      await this.call({ kind: "end" });
      return value;
    } catch (error) {
      // Its snapshot ended with the thread, or none began: the read starts over, whole, on the main thread.
      if (error instanceof LaneThreadLost) return this.fallback(work);
      // A failed statement leaves its snapshot open on the thread; the next read needs a new one.
      await this.call({ kind: "end" }).catch(() => {});
      throw error;
    }
  }

  /** sessionDb runs the running read's statements on the lane's thread. */
  private readonly sessionDb: Db = {
    dialect: "sqlite",
    all: <T>(sql: string, params: readonly SqlValue[] = []) => this.call({ kind: "all", sql, params: [...params] }) as Promise<T[]>,
    get: <T>(sql: string, params: readonly SqlValue[] = []) => this.call({ kind: "get", sql, params: [...params] }) as Promise<T | null>,
    run: () => Promise.reject(new Error("the read lane only reads")),
  };

  private call(message: LaneStatement | { kind: "end" } | { kind: "close" }): Promise<unknown> {
    if (this.refused) return Promise.reject(new LaneThreadLost());
    const worker = this.worker ?? this.startWorker();
    const id = this.nextCallId++;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { resolve, reject });
      worker.postMessage({ ...message, id } satisfies LaneCall);
    });
  }

  private startWorker(): Worker {
    // Referenced (the default), so close() must end it. Unreferenced, Bun's event loop spun while it
    // waited for the thread's answers: a count of 57 ms on the thread cost 60 to 120 ms of the main
    // thread's CPU besides.
    const worker = new Worker(laneThreadModule());
    worker.onmessage = (event: MessageEvent<LaneAnswer>) => {
      const answer = event.data;
      if ("refused" in answer) return this.refuse(worker, answer.refused);
      const pending = this.calls.get(answer.id);
      if (!pending) return;
      this.calls.delete(answer.id);
      if ("error" in answer) pending.reject(Object.assign(new Error(answer.error.message), { code: answer.error.code }));
      else pending.resolve(answer.value);
    };
    const lost = (event: Event) => {
      if (this.worker !== worker) return;
      this.worker = null;
      // After an uncaught error the thread might live on, holding its connection: it is ended.
      worker.terminate();
      this.log.warn("the slow-list lane's thread ended; the list it was reading starts over on the main thread, and the next one starts a new thread", {
        error: event instanceof ErrorEvent ? event.message : "it exited",
      });
      this.rejectCalls();
    };
    worker.addEventListener("error", lost);
    worker.addEventListener("close", lost);
    this.worker = worker;
    worker.postMessage({ kind: "open", path: this.path, file: this.file } satisfies LaneOpen);
    return worker;
  }

  /** refuse ends a thread that found the path naming another file, and has every read run on the main thread from then on. */
  private refuse(worker: Worker, reason: string): void {
    if (this.worker !== worker) return;
    this.worker = null;
    this.refused = true;
    worker.terminate();
    this.log.warn("the slow-list lane's thread did not open the database: its path names another file than the service opened; slow lists run on the main thread until the service is restarted", { path: this.path, reason });
    this.rejectCalls();
  }

  private rejectCalls(): void {
    for (const pending of this.calls.values()) pending.reject(new LaneThreadLost());
    this.calls.clear();
  }

  /**
   * close lets the reads submitted finish, has the thread close its connection and stops it; reads
   * submitted afterwards run through the fallback. A thread ended with its connection open leaves
   * that connection to the process: the service's own close is then not the file's last, and SQLite
   * keeps the WAL beside the file, with the pages a change overwrote (a secret sealed since).
   */
  async close(): Promise<void> {
    this.closed = true;
    await this.reads.idle();
    const worker = this.worker;
    if (!worker) return;
    await this.call({ kind: "close" }).catch(() => {});
    this.worker = null;
    worker.terminate();
  }
}

/**
 * laneThreadModule names the module the lane's thread runs: in the compiled binary, the entry point
 * scripts/build.ts embeds beside main's, under their common folder (server/), which a worker's
 * relative path starts from; from source, the file beside this one (a relative path would start
 * from the working directory).
 */
function laneThreadModule(): string {
  return isEmbeddedPath(Bun.main) ? "./db/read-lane-worker.ts" : join(import.meta.dir, "read-lane-worker.ts");
}

/** LaneThreadLost fails the statements of a lane whose thread ended, or refused the file, before answering them. */
class LaneThreadLost extends Error {
  override readonly name = "LaneThreadLost";
}
