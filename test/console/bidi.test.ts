import { expect, test } from "bun:test";
import { bidiBalanced, isolated } from "../../console/pages/parts.tsx";

// Client text goes inside the console's own isolates (FSI ... PDI, <bdi>, CSS isolate): a closer of
// its own would close the console's isolate early, and an override it opens would run on over the
// console's words after it.
const [LRE, RLE, PDF, LRO, RLO] = ["\u202A", "\u202B", "\u202C", "\u202D", "\u202E"];
const [LRI, RLI, FSI, PDI] = ["\u2066", "\u2067", "\u2068", "\u2069"];

test("bidiBalanced leaves text without bidi controls, and balanced text, as it is", () => {
  expect(["", "Ada Lovelace", "שלום Ada", `${RLO}cba${PDF} ${FSI}x${PDI}`, `${RLI}${LRE}a${PDF}${PDI}`].map(bidiBalanced)).toEqual([
    "",
    "Ada Lovelace",
    "שלום Ada",
    `${RLO}cba${PDF} ${FSI}x${PDI}`,
    `${RLI}${LRE}a${PDF}${PDI}`,
  ]);
});

test("bidiBalanced drops a closer that closes nothing the text opened", () => {
  expect([`Ada${PDI}${RLO}`, `${PDF}Ada`, `${PDI}${PDF}x`, `${LRI}a${PDF}b${PDI}`].map(bidiBalanced)).toEqual([
    `Ada${RLO}${PDF}`,
    "Ada",
    "x",
    // A PDF inside an isolate cannot close an embedding outside it (UAX #9 X7), nor one that is not there.
    `${LRI}ab${PDI}`,
  ]);
});

test("bidiBalanced closes at the end, innermost first, what the text leaves open", () => {
  expect([`${RLO}cba`, `${LRE}a${RLI}b`, `${FSI}${RLE}${LRO}x`, `${RLO}a${LRI}b${PDI}`].map(bidiBalanced)).toEqual([
    `${RLO}cba${PDF}`,
    `${LRE}a${RLI}b${PDI}${PDF}`,
    `${FSI}${RLE}${LRO}x${PDF}${PDF}${PDI}`,
    `${RLO}a${LRI}b${PDI}${PDF}`,
  ]);
});

test("bidiBalanced lets a PDI close the embeddings opened inside its isolate, as it does in the bidi algorithm", () => {
  expect(bidiBalanced(`${RLI}${RLO}a${PDI}b${PDF}`)).toBe(`${RLI}${RLO}a${PDI}b`);
});

test("isolated balances the text it wraps, so the console's PDI closes the console's FSI", () => {
  expect([isolated(`Ledger${PDI}${RLO}`), isolated("Ledger")]).toEqual([`${FSI}Ledger${RLO}${PDF}${PDI}`, `${FSI}Ledger${PDI}`]);
});
