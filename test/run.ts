// Runs `bun test` and ends with the plain line CI reads: "N passed, M failed".
const child = Bun.spawn([process.execPath, "test", "--timeout", "30000", ...process.argv.slice(2)], { stdout: "pipe", stderr: "pipe", stdin: "ignore" });
let passed = 0;
let failed = 0;
let ranTests = false;

async function relay(stream: ReadableStream<Uint8Array>, sink: NodeJS.WriteStream): Promise<void> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of stream) {
    sink.write(chunk);
    pending += decoder.decode(chunk, { stream: true });
    const lines = pending.split("\n");
    pending = lines.pop()!;
    for (const line of lines) {
      const pass = /^\s*(\d+) pass\s*$/.exec(line);
      const fail = /^\s*(\d+) fail\s*$/.exec(line);
      if (pass) { passed = Number(pass[1]); ranTests = true; }
      if (fail) { failed = Number(fail[1]); ranTests = true; }
    }
  }
}

await Promise.all([relay(child.stdout, process.stdout), relay(child.stderr, process.stderr)]);
const code = await child.exited;
if (!ranTests && code !== 0) failed = Math.max(failed, 1);
console.log(`${passed} passed, ${failed} failed`);
process.exit(code !== 0 || failed > 0 || !ranTests ? 1 : 0);
export {};
