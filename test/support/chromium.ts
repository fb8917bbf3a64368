import { existsSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { brotliDecompressSync } from "node:zlib";

/** Browser is the Chromium the browser tests launch, and the environment it needs. */
export interface Browser {
  executablePath: string;
  env: Record<string, string>;
  source: "system" | "npm" | "path";
}

const SYSTEM_CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser"];

/**
 * findChromium picks the browser for the console tests: CRM_TEST_CHROMIUM=npm forces the one the
 * @sparticuz/chromium package ships, CRM_TEST_CHROMIUM=/path names one, and otherwise a system
 * Chromium is used when installed and the npm one when not, so `npm install && npm test` needs no apt.
 */
export async function findChromium(choice = process.env.CRM_TEST_CHROMIUM ?? ""): Promise<Browser> {
  if (choice !== "" && choice !== "npm") return { executablePath: choice, env: {}, source: "path" };
  const system = choice === "npm" ? undefined : SYSTEM_CHROMIUM.find((path) => existsSync(path)) ?? Bun.which("chromium") ?? undefined;
  if (system) return { executablePath: system, env: {}, source: "system" };
  return npmChromium();
}

/**
 * npmChromium unpacks the package's headless Chromium into the temp directory (once per machine).
 * The binary links NSS and expat; the package carries those libraries but unpacks them only on
 * AWS Lambda, so they are unpacked here too and put first on the library path: then the browser
 * needs nothing from the system but glibc.
 */
async function npmChromium(): Promise<Browser> {
  const { default: chromium } = await import("@sparticuz/chromium");
  const executablePath = await chromium.executablePath();
  const libraries = join(tmpdir(), "crm-chromium-libs");
  if (!existsSync(join(libraries, "lib", "libnss3.so"))) {
    const packed = join(import.meta.dir, "..", "..", "node_modules", "@sparticuz", "chromium", "bin", "al2023.tar.br");
    await new Bun.Archive(brotliDecompressSync(readFileSync(packed))).extract(libraries);
  }
  const libraryPath = [join(libraries, "lib"), process.env.LD_LIBRARY_PATH].filter(Boolean).join(":");
  return { executablePath, env: { LD_LIBRARY_PATH: libraryPath, FONTCONFIG_PATH: join(tmpdir(), "fonts") }, source: "npm" };
}
