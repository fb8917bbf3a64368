import { writeSync } from "node:fs";
import type { LogLevel } from "../config.ts";
import { printable } from "./text.ts";
import { errorCode } from "./thrown.ts";

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

const FLUSH_BYTES = 64 * 1024;

let stdoutSink: ((line: string) => void) | undefined;
let pending = "";

/** FLUSH_INTERVAL_MS is the longest a log line waits in the buffer. */
const FLUSH_INTERVAL_MS = 10;

/**
 * bufferedStdout returns a sink that writes the lines of up to 10 ms (or 64 KiB) to stdout in one
 * call, and whatever is left at exit. A write per request line cost ~5% of a busy server's time;
 * a write per event-loop turn still ~3%, as a busy server turns every few requests.
 */
function bufferedStdout(): (line: string) => void {
  process.on("exit", flushLogs);
  process.stdout.on("error", stopWritingStdout);
  process.on("exit", sayDroppedSinceStdoutFailed);
  return (line) => {
    if (pending === "") setTimeout(flushLogs, FLUSH_INTERVAL_MS).unref();
    pending += `${line}\n`;
    if (pending.length >= FLUSH_BYTES) flushLogs();
  };
}

/**
 * MAX_UNWRITTEN_LOG_CHARACTERS bounds the log output handed to stdout and not yet taken by its
 * reader: Bun holds it all in memory, and a log shipper or journald that stalls under a flood of
 * requests grew the server by 300 MB in a few minutes. Beyond it lines are dropped and counted.
 */
const MAX_UNWRITTEN_LOG_CHARACTERS = 8 * 1024 * 1024;
let unwritten = 0;
let droppedLines = 0;

/** stdoutFailed is set once a write to stdout failed for good (EPIPE: its reader gone): log lines are dropped from then on. */
let stdoutFailed = false;

/**
 * PASSING_WRITE_FAILURES are the failures of a write to stdout that mend themselves (a redirect's
 * disk full, then room made): the next flush tries again, as nginx does with its log.
 */
const PASSING_WRITE_FAILURES = new Set(["ENOSPC", "EDQUOT", "EFBIG", "EIO"]);

/** writeFailure is the error of the last write to stdout, if it failed for one of PASSING_WRITE_FAILURES: said with the count once a write succeeds. */
let writeFailure: string | null = null;

/** writeStderr writes a line about the log itself to stderr, at once (at exit too); stderr gone as well, it is lost. */
function writeStderr(line: string): void {
  try {
    writeSync(2, line);
  } catch {
    // Nowhere left to say it.
  }
}

/**
 * stopWritingStdout handles a failed write to stdout (`crm serve | head -1`, a log shipper that
 * restarted): the log sink gone must not take the service with it, as nginx goes on serving when
 * its log cannot be written. Unhandled, the error killed the server at its next log line, with no
 * graceful stop. The lines are dropped and counted from then on; said once, on stderr. One of
 * PASSING_WRITE_FAILURES stops nothing: the lines are counted until a write succeeds.
 */
function stopWritingStdout(error: Error): void {
  if (stdoutFailed) return;
  if (PASSING_WRITE_FAILURES.has(errorCode(error) ?? "")) {
    if (writeFailure === null) writeStderr(`crm: standard output failed (${error.message}); its log lines are dropped and counted until a write succeeds\n`);
    writeFailure = error.message;
    return;
  }
  stdoutFailed = true;
  writeStderr(`crm: standard output failed (${error.message}); the service goes on serving, and its log lines are dropped from now on\n`);
}

/** sayDroppedSinceStdoutFailed tells on stderr, at exit, how many log lines stdout's failure lost. */
function sayDroppedSinceStdoutFailed(): void {
  if (stdoutFailed) writeStderr(`crm: stopped with log lines dropped since standard output failed: ${droppedLines}\n`);
}

/** jsonLine renders one log line: time, level and message first, then the fields (which never name those three). */
function jsonLine(time: string, level: LogLevel, msg: string, fields?: Record<string, unknown>): string {
  // Spliced rather than spread into one object: every request logs a line.
  const head = `{"time":"${time}","level":"${level}","msg":${JSON.stringify(msg)}`;
  const rest = fields === undefined ? "}" : JSON.stringify(fields);
  // JSON.stringify escapes C0 controls only: a C1 one (a receiver's header, decoded as Latin-1) or
  // U+2028 split the line for some readers. They occur in strings only, where an escape keeps them.
  return printable(rest.length > 2 ? `${head},${rest.slice(1)}` : `${head}}`);
}

/** countLines counts the lines of buffered log output (each ends in a newline). */
function countLines(out: string): number {
  let lines = 0;
  for (let at = out.indexOf("\n"); at >= 0; at = out.indexOf("\n", at + 1)) lines++;
  return lines;
}

/**
 * flushLogs writes the buffered log lines now, so output written directly to stdout comes after
 * them, unless stdout's reader is too far behind: then they are dropped, and the next lines
 * written say how many were.
 */
export function flushLogs(): void {
  if (pending === "") return;
  const lines = pending;
  pending = "";
  if (stdoutFailed || unwritten > MAX_UNWRITTEN_LOG_CHARACTERS) {
    droppedLines += countLines(lines);
    return;
  }
  const dropped = droppedLines;
  const failure = writeFailure;
  droppedLines = 0;
  let out = lines;
  if (dropped > 0) {
    const line = failure === null
      ? jsonLine(new Date().toISOString(), "warn", "log lines dropped: stdout was not read as fast as they came", { dropped_lines: dropped })
      : jsonLine(new Date().toISOString(), "warn", "log lines dropped: writing stdout failed", { error: failure, dropped_lines: dropped });
    out = `${line}\n${out}`;
  }
  // A failed write may have left part of its last line: a newline ends it, so the lines after it stay whole.
  if (failure !== null) out = `\n${out}`;
  const length = out.length;
  unwritten += length;
  process.stdout.write(out, (error) => {
    unwritten -= length;
    if (!error) {
      if (writeFailure === failure) writeFailure = null;
      return;
    }
    droppedLines += dropped + countLines(lines);
    stopWritingStdout(error);
  });
}

/** createLogger writes one JSON object per line to the given sink (stdout by default), dropping lines below the level. */
export function createLogger(level: LogLevel, write: (line: string) => void = (stdoutSink ??= bufferedStdout())): Logger {
  let lastMs = -1;
  let lastTime = "";
  const emit = (lineLevel: LogLevel) => (msg: string, fields?: Record<string, unknown>) => {
    if (ORDER[lineLevel] < ORDER[level]) return;
    const now = Date.now();
    if (now !== lastMs) {
      lastMs = now;
      lastTime = new Date(now).toISOString();
    }
    write(jsonLine(lastTime, lineLevel, msg, fields));
  };
  return { debug: emit("debug"), info: emit("info"), warn: emit("warn"), error: emit("error") };
}

/** SPACED_LINE_INTERVAL_MS is how far apart the lines of a recurring condition are written (SpacedLine): one a minute says it all. */
const SPACED_LINE_INTERVAL_MS = 60_000;

/**
 * SpacedLine spaces the lines of one kind to one per SPACED_LINE_INTERVAL_MS while what they say
 * goes on (every request meets it), counting the occurrences left unlogged in between.
 */
export class SpacedLine {
  private at = -Infinity;
  private unlogged = 0;

  /** due tells whether an occurrence now would be logged. */
  due(now: number): boolean {
    return now - this.at >= SPACED_LINE_INTERVAL_MS;
  }

  /** occurred counts an occurrence at `now`; when it is to be logged, it returns how many were left unlogged since the last line (null before the first), otherwise undefined. */
  occurred(now: number): number | null | undefined {
    if (!this.due(now)) {
      this.unlogged += 1;
      return undefined;
    }
    const unlogged = this.at === -Infinity ? null : this.unlogged;
    this.at = now;
    this.unlogged = 0;
    return unlogged;
  }
}

/** SpacedLines is a SpacedLine for each kind of a recurring condition, made at its first occurrence. */
export class SpacedLines<Kind> {
  private readonly lines = new Map<Kind, SpacedLine>();

  /** occurred is SpacedLine.occurred for the line of `kind`. */
  occurred(kind: Kind, now: number): number | null | undefined {
    let line = this.lines.get(kind);
    if (!line) this.lines.set(kind, (line = new SpacedLine()));
    return line.occurred(now);
  }
}
