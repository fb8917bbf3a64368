import { expect, test } from "bun:test";
import { findChromium } from "../support/chromium.ts";
import { launchBrowser, OPERATOR, startConsoleServer } from "./support.ts";

// A machine with only Node.js and npm has no system Chromium: the npm package's must run the console.
test("the npm package's Chromium launches headless with the console tests' flags and runs the console's first-run setup", async () => {
  const npm = await findChromium("npm");
  expect(npm.source).toBe("npm");
  const server = await startConsoleServer();
  const browser = await launchBrowser(npm);
  try {
    const page = await browser.context.newPage();
    await page.goto(server.setupUrl!);
    await page.fill("input[name=email]", OPERATOR.email);
    await page.fill("input[name=password]", OPERATOR.password);
    await page.fill("input[name=password_again]", OPERATOR.password);
    await Promise.all([page.waitForURL(`${server.url}/console/`), page.click("button[type=submit]")]);
    expect(await page.textContent("h1")).toBe("Deliveries");
  } finally {
    await browser.close();
    await server.close();
  }
}, 60_000);

test("CRM_TEST_CHROMIUM names a browser: npm forces the package's, a path is used as given", async () => {
  expect((await findChromium("npm")).source).toBe("npm");
  expect(await findChromium("/opt/chrome/chrome")).toEqual({ executablePath: "/opt/chrome/chrome", env: {}, source: "path" });
});
