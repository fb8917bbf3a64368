import { ConfigError } from "../config.ts";
import { MAX_OPERATOR_PASSWORD_LENGTH } from "../limits/limits.ts";

// How `operator create` and `operator reset-password` take a password from standard input: never
// as an argument, which `ps` and the shell history would show.

/**
 * PASSWORD_INPUT_BYTES is how much of standard input --password-stdin reads at most: the longest
 * password in UTF-8 (up to 4 bytes a character) and room for line breaks. Read to its end,
 * `yes | crm operator create ...` grew without bound.
 */
export const PASSWORD_INPUT_BYTES = 4 * MAX_OPERATOR_PASSWORD_LENGTH + 1024;

const ONE_LINE = "give the password alone on one line";

/** passwordInputTooLong is the refusal of input longer than PASSWORD_INPUT_BYTES. */
const passwordInputTooLong = () => new ConfigError(`--password-stdin: standard input holds more than ${PASSWORD_INPUT_BYTES} bytes; ${ONE_LINE} (${MAX_OPERATOR_PASSWORD_LENGTH} characters at most)`);

/**
 * passwordLine is the password in what --password-stdin read: its first line, without its line
 * break (LF, CRLF or CR). Blank lines after it are a file's ending; another line with text is
 * refused, as the line breaks a browser strips from a password would make one nobody can type.
 */
function passwordLine(text: string): string {
  const [first = "", ...rest] = text.split(/\r\n|\r|\n/);
  if (rest.some((line) => line !== "")) throw new ConfigError(`--password-stdin: standard input holds more than one line; ${ONE_LINE}`);
  return first;
}

/**
 * readPasswordInput reads the password from standard input: typed at a terminal after a prompt
 * on stderr, not shown, or else the first line of what is piped in, reading no more than
 * PASSWORD_INPUT_BYTES.
 */
export async function readPasswordInput(): Promise<string> {
  if (process.stdin.isTTY) return typedPassword();
  const reader = Bun.stdin.stream().getReader();
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      chunks.push(value);
      bytes += value.length;
      if (bytes > PASSWORD_INPUT_BYTES) throw passwordInputTooLong();
    }
  } finally {
    reader.releaseLock();
  }
  return passwordLine(new TextDecoder().decode(Buffer.concat(chunks)));
}

const ENTER = new Set(["\r", "\n"]);
const CTRL_C = "\x03";
const CTRL_D = "\x04";
const CTRL_U = "\x15";
const BACKSPACE = new Set(["\x7f", "\b"]);
/** Exit statuses of a process ended by these signals (128 + the signal's number), as a shell reports them. */
const SIGNAL_EXITS = { SIGINT: 130, SIGHUP: 129, SIGTERM: 143 } as const;

/**
 * typedPassword prompts on stderr and reads one line from the terminal with echo off (raw mode,
 * so the line is edited here: Backspace, Ctrl-U), ended by Enter or Ctrl-D. The terminal is put
 * back as it was on every path: Enter, Ctrl-C (no SIGINT in raw mode: the process then ends as
 * if interrupted), a signal from elsewhere, a line too long.
 */
function typedPassword(): Promise<string> {
  const stdin = process.stdin;
  // Echo goes off before the prompt shows: keys typed (or pasted) as soon as it shows are not echoed.
  stdin.setRawMode(true);
  process.stderr.write("Password (not shown): ");
  return new Promise<string>((resolve, reject) => {
    const decoder = new TextDecoder();
    let typed = "";
    const restore = () => {
      stdin.off("data", onData);
      for (const signal of Object.keys(SIGNAL_EXITS)) process.off(signal, onSignal);
      stdin.setRawMode(false);
      stdin.pause();
      // Enter was not echoed either: the next output starts on a line of its own.
      process.stderr.write("\n");
    };
    const onSignal = (signal: keyof typeof SIGNAL_EXITS) => {
      restore();
      process.exit(SIGNAL_EXITS[signal]);
    };
    const onData = (data: Buffer) => {
      for (const key of decoder.decode(data, { stream: true })) {
        if (key === CTRL_C) return onSignal("SIGINT");
        if (ENTER.has(key) || key === CTRL_D) {
          restore();
          return resolve(typed);
        }
        if (BACKSPACE.has(key)) typed = [...typed].slice(0, -1).join("");
        else if (key === CTRL_U) typed = "";
        else if (key >= " ") typed += key;
        if (Buffer.byteLength(typed) > PASSWORD_INPUT_BYTES) {
          restore();
          return reject(passwordInputTooLong());
        }
      }
    };
    for (const signal of Object.keys(SIGNAL_EXITS)) process.on(signal, onSignal);
    stdin.on("data", onData);
    stdin.resume();
  });
}
