import { expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";

const ROOT = join(import.meta.dir, "..", "..");

/** brokenLinks lists the relative link targets of a Markdown file that leave `root` or name no file. */
function brokenLinks(file: string, root: string): string[] {
  const targets = [...readFileSync(file, "utf8").matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!).filter((target) => !/^(https?:|mailto:|#)/.test(target));
  return targets.filter((target) => {
    const path = resolve(dirname(file), target.split("#")[0]!);
    return relative(root, path).startsWith("..") || !existsSync(path);
  });
}

// A user has the repository, not the workspace it was written in: every document it links to must be in it.
test("the READMEs link only to files inside the repository that exist", () => {
  expect(["README.md", "client/README.md"].flatMap((readme) => brokenLinks(join(ROOT, readme), ROOT).map((target) => `${readme}: ${target}`))).toEqual([]);
});

test("the check catches a link out of the repository and a link to a missing file", () => {
  const root = mkdtempSync(join(tmpdir(), "crm-readme-"));
  try {
    writeFileSync(join(root, "README.md"), "[the design](../shared/DESIGN.md), [here](README.md), [gone](docs/gone.md), [site](https://example.com), [top](#top)\n");
    expect(brokenLinks(join(root, "README.md"), root)).toEqual(["../shared/DESIGN.md", "docs/gone.md"]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
