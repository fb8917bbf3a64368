/**
 * waitForListening reads a server's stdout until its `listening on URL` line and returns the URL.
 * The rest of its output is read on and handed to `onOutput` (dropped without one): a server whose
 * stdout pipe fills up blocks on its next write.
 */
export async function waitForListening(name: string, stdout: ReadableStream<Uint8Array>, onOutput: (text: string) => void = () => {}): Promise<string> {
  const reader = stdout.getReader();
  const decoder = new TextDecoder();
  let seen = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`${name} exited before listening:\n${seen}`);
    seen += decoder.decode(value, { stream: true });
    // up to the line's end: a chunk may stop inside the URL
    const url = /listening on (http:\/\/\S+)\r?\n/.exec(seen)?.[1];
    if (url) {
      void (async () => {
        for (;;) {
          const next = await reader.read();
          if (next.done) return;
          onOutput(decoder.decode(next.value, { stream: true }));
        }
      })();
      return url;
    }
  }
}
