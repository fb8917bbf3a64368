import { writeSync } from "node:fs";
import { errorCode } from "./thrown.ts";

/**
 * OutputFailed is a command's output that could not be written (a full disk, a reader gone): it
 * reached no one. readerGone is a pipe whose reader left (`crm token list | head -1`), which the
 * reader chose: the command ends quietly then, as one a SIGPIPE ends does.
 */
export class OutputFailed extends Error {
  constructor(
    message: string,
    readonly readerGone = false,
  ) {
    super(message);
  }
}

/**
 * printOut writes a command's output to stdout before going on, throwing OutputFailed when it
 * cannot: process.stdout.write tells a failure only to a listener, once the command has exited 0
 * with its output lost (`crm token create > /dev/full`: a live token nobody has).
 */
export function printOut(text: string): void {
  const bytes = Buffer.from(text);
  for (let at = 0; at < bytes.length; ) {
    try {
      at += writeSync(1, bytes, at);
    } catch (error) {
      // A non-blocking stdout (inherited so from the parent) is full for now, not failed.
      if (errorCode(error) === "EAGAIN") Bun.sleepSync(1);
      else throw new OutputFailed(`could not write to standard output (${(error as Error).message})`, errorCode(error) === "EPIPE");
    }
  }
}
