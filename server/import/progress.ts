/** ProgressSink is where progress goes: a terminal gets a bar redrawn in place, anything else plain lines. */
export interface ProgressSink {
  isTTY?: boolean;
  write(text: string): unknown;
}

const BAR_WIDTH = 30;
const REDRAW_MS = 100;
const LINE_EVERY_MS = 5000;

const seconds = (s: number) => (s >= 3600 ? `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m` : s >= 60 ? `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, "0")}s` : `${Math.round(s)}s`);

/**
 * Progress reports rows done out of a total: on a terminal a bar with rows/s and ETA, redrawn at
 * most 10 times a second; otherwise a plain line at each tenth of the way and at least every 5 s.
 */
export class Progress {
  private readonly started = performance.now();
  private lastDraw = 0;
  private lastTenth = 0;

  constructor(
    private readonly total: number,
    private readonly sink: ProgressSink,
  ) {}

  /** update reports `done` rows finished. */
  update(done: number): void {
    const now = performance.now();
    const elapsed = (now - this.started) / 1000;
    const rate = elapsed > 0 ? done / elapsed : 0;
    const eta = rate > 0 ? (this.total - done) / rate : 0;
    const share = this.total === 0 ? 1 : done / this.total;
    if (this.sink.isTTY) {
      if (now - this.lastDraw < REDRAW_MS && done < this.total) return;
      const filled = Math.round(share * BAR_WIDTH);
      this.sink.write(`\r[${"#".repeat(filled)}${"-".repeat(BAR_WIDTH - filled)}] ${String(Math.floor(share * 100)).padStart(3)}% ${done}/${this.total} rows  ${Math.round(rate)} rows/s  ETA ${seconds(eta)}  `);
    } else {
      const tenth = Math.floor(share * 10);
      if (tenth === this.lastTenth && now - this.lastDraw < LINE_EVERY_MS) return;
      this.lastTenth = tenth;
      this.sink.write(`progress: ${done}/${this.total} rows (${Math.floor(share * 100)}%), ${Math.round(rate)} rows/s, ETA ${seconds(eta)}\n`);
    }
    this.lastDraw = now;
  }

  /** note prints a message without breaking the bar. */
  note(message: string): void {
    this.sink.write(this.sink.isTTY ? `\r\x1b[K${message}\n` : `${message}\n`);
    this.lastDraw = 0;
  }

  /** finish ends the bar's line. */
  finish(): void {
    if (this.sink.isTTY) this.sink.write("\n");
  }
}
