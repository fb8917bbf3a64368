import { describe, expect, test } from "bun:test";
import { createHarness } from "../support/harness.ts";

// Elysia reads the parameters of every hook and handler to learn what a request needs, and builds
// each request's context for the most demanding one. A hook that names `server` made every request
// redefine it on its context (Object.defineProperty): 10-15% of a lookup by email's CPU. `headers`
// would copy every request's headers into an object, `cookie` parse its cookies.
describe("request pipeline", () => {
  test("no hook or handler takes the server, the headers or the cookies from its context, so no request pays for them", async () => {
    const h = await createHarness();
    try {
      h.app.compile();
      const { inference } = h.app as unknown as { inference: Record<string, boolean> };
      expect({ server: inference.server, headers: inference.headers, cookie: inference.cookie }).toEqual({ server: false, headers: false, cookie: false });
    } finally {
      await h.close();
    }
  });
});
