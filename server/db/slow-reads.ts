import type { Db, ReaderName } from "./sql.ts";

/** SlowRead is a read waiting for its turn, or running. */
interface SlowRead {
  work: (db: Db) => Promise<unknown>;
  reader: ReaderName;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/**
 * ReadLaneFull refuses a read when the lane holds `capacity` reads already, or all but the place
 * kept for readers with none there and `yours` of them are the reader's (the caller answers 503).
 */
export class ReadLaneFull extends Error {
  override readonly name = "ReadLaneFull";

  constructor(
    readonly capacity: number,
    readonly held: number,
    readonly yours: number,
  ) {
    super(`the read lane holds ${held} of ${capacity} reads, ${yours} of them the reader's`);
  }
}

/**
 * SlowReads admits slow reads (a count of many rows) and runs at most `concurrency` of them at
 * once through `run`, so they never take every connection or thread the other requests need. It
 * holds at most `capacity` reads, the running ones included; one more is refused at once
 * (ReadLaneFull), so a flood grows no queue. Its last place is kept for a reader with no read
 * there, so one client cannot lock the others out. Readers take turns, one read each, so a client
 * with many reads waiting delays another's by at most one of its own, not by all of them.
 */
export class SlowReads {
  /** the reads waiting, by reader, in turn order: the first reader's first read runs next */
  private readonly waiting = new Map<ReaderName, SlowRead[]>();
  private waitingCount = 0;
  private readonly running = new Set<SlowRead>();
  private drained: PromiseWithResolvers<void> | null = null;

  constructor(
    private readonly capacity: number,
    private readonly concurrency: number,
    private readonly run: (work: (db: Db) => Promise<unknown>) => Promise<unknown>,
  ) {}

  /** held counts the reads admitted: waiting, and running. */
  get held(): number {
    return this.waitingCount + this.running.size;
  }

  /** read runs `reader`'s `work` in its turn; ReadLaneFull when there is no place for it. */
  read<T>(work: (db: Db) => Promise<T>, reader: ReaderName): Promise<T> {
    const held = this.held;
    let yours = this.waiting.get(reader)?.length ?? 0;
    for (const read of this.running) if (read.reader === reader) yours++;
    if (held >= this.capacity || (yours > 0 && held >= this.capacity - 1)) return Promise.reject(new ReadLaneFull(this.capacity, held, yours));
    return new Promise<T>((resolve, reject) => {
      const read = { work, reader, resolve: resolve as (value: unknown) => void, reject };
      const queue = this.waiting.get(reader);
      if (queue) queue.push(read);
      else this.waiting.set(reader, [read]);
      this.waitingCount++;
      this.startWaiting();
    });
  }

  /** idle resolves once no read is running or waiting. */
  idle(): Promise<void> {
    if (this.held === 0) return Promise.resolve();
    return (this.drained ??= Promise.withResolvers<void>()).promise;
  }

  /** startWaiting starts waiting reads, in turns, while fewer than `concurrency` run. */
  private startWaiting(): void {
    let read: SlowRead | undefined;
    while (this.running.size < this.concurrency && (read = this.nextTurn())) {
      const started = read;
      this.running.add(started);
      // Its place is given up before its caller hears: a caller reading again at once finds it free.
      // A run that throws at once fails its read like one that rejects, and frees its place.
      new Promise((resolve) => resolve(this.run(started.work))).then(
        (value) => {
          this.finish(started);
          started.resolve(value);
        },
        (error: unknown) => {
          this.finish(started);
          started.reject(error);
        },
      );
    }
  }

  /** finish gives up a read's place and starts the next waiting one. */
  private finish(read: SlowRead): void {
    this.running.delete(read);
    this.startWaiting();
    if (this.held === 0) {
      this.drained?.resolve();
      this.drained = null;
    }
  }

  /** nextTurn takes the first waiting reader's next read and sends that reader to the back of the turns. */
  private nextTurn(): SlowRead | undefined {
    for (const [reader, queue] of this.waiting) {
      const read = queue.shift()!;
      this.waiting.delete(reader);
      if (queue.length > 0) this.waiting.set(reader, queue);
      this.waitingCount--;
      return read;
    }
    return undefined;
  }
}
