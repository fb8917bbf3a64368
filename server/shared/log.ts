import type { LogLevel } from "../config.ts";

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/** createLogger writes one JSON object per line to the given sink, dropping lines below the level. */
export function createLogger(level: LogLevel, write: (line: string) => void = (line) => process.stdout.write(line + "\n")): Logger {
  const emit = (lineLevel: LogLevel) => (msg: string, fields?: Record<string, unknown>) => {
    if (ORDER[lineLevel] < ORDER[level]) return;
    write(JSON.stringify({ time: new Date().toISOString(), level: lineLevel, msg, ...fields }));
  };
  return { debug: emit("debug"), info: emit("info"), warn: emit("warn"), error: emit("error") };
}
