// A strict reader of the Prometheus text exposition format 0.0.4, so tests can tell a scrape
// parses the way Prometheus would read it, not only that some substring appears.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  types: Map<string, string>;
  samples: Sample[];
  /** value returns the one sample with this name and exactly these labels, or undefined */
  value(name: string, labels?: Record<string, string>): number | undefined;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/;
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"\s*(,|$)/y;

function parseValue(text: string): number {
  if (text === "+Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  if (text === "NaN") return NaN;
  if (!/^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(text)) throw new Error(`bad sample value ${text}`);
  return Number(text);
}

function parseLabels(text: string): Record<string, string> {
  const labels: Record<string, string> = {};
  LABEL.lastIndex = 0;
  while (LABEL.lastIndex < text.length) {
    const start = LABEL.lastIndex;
    const match = LABEL.exec(text);
    if (!match || match.index !== start) throw new Error(`bad labels {${text}}`);
    if (match[1]! in labels) throw new Error(`repeated label ${match[1]}`);
    labels[match[1]!] = match[2]!.replace(/\\(["\\n])/g, (_, c: string) => (c === "n" ? "\n" : c));
  }
  return labels;
}

function familyOf(name: string, types: Map<string, string>): string | undefined {
  if (types.has(name)) return name;
  for (const suffix of ["_bucket", "_sum", "_count"]) {
    const base = name.endsWith(suffix) ? name.slice(0, -suffix.length) : undefined;
    if (base && types.get(base) === "histogram") return base;
  }
  return undefined;
}

/**
 * parseExposition reads a scrape and throws on anything Prometheus would reject or misread:
 * malformed lines, samples before their TYPE, repeated TYPE lines or series, and histograms
 * whose buckets are not cumulative or whose +Inf bucket differs from _count.
 */
export function parseExposition(text: string): Exposition {
  if (!text.endsWith("\n")) throw new Error("the exposition must end with a newline");
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  const seen = new Set<string>();
  for (const line of text.slice(0, -1).split("\n")) {
    if (line.startsWith("# HELP ")) {
      if (!NAME.test(line.split(" ")[2] ?? "")) throw new Error(`bad HELP line: ${line}`);
      continue;
    }
    if (line.startsWith("# TYPE ")) {
      const [, , name, type, extra] = line.split(" ");
      if (!name || !NAME.test(name) || !["counter", "gauge", "histogram", "summary", "untyped"].includes(type ?? "") || extra !== undefined) throw new Error(`bad TYPE line: ${line}`);
      if (types.has(name)) throw new Error(`TYPE repeated for ${name}`);
      types.set(name, type!);
      continue;
    }
    const match = SAMPLE.exec(line);
    if (!match) throw new Error(`bad sample line: ${JSON.stringify(line)}`);
    const name = match[1]!;
    if (!familyOf(name, types)) throw new Error(`sample ${name} has no TYPE before it`);
    const labels = match[3] ? parseLabels(match[3]) : {};
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (seen.has(key)) throw new Error(`series repeated: ${line}`);
    seen.add(key);
    samples.push({ name, labels, value: parseValue(match[4]!) });
  }
  const value = (name: string, labels: Record<string, string> = {}) => {
    const want = JSON.stringify(Object.entries(labels).sort());
    return samples.find((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want)?.value;
  };
  for (const [family, type] of types) {
    if (type !== "histogram") continue;
    const series = new Map<string, Sample[]>();
    for (const s of samples.filter((x) => x.name === `${family}_bucket`)) {
      const { le, ...rest } = s.labels;
      if (le === undefined) throw new Error(`${family}_bucket without le`);
      const key = JSON.stringify(Object.entries(rest).sort());
      series.set(key, [...(series.get(key) ?? []), s]);
    }
    for (const [key, buckets] of series) {
      const rest = Object.fromEntries(JSON.parse(key) as [string, string][]);
      let previous = -Infinity;
      let previousCount = 0;
      for (const b of buckets) {
        const le = parseValue(b.labels.le!);
        if (le <= previous || b.value < previousCount) throw new Error(`${family} buckets not ascending and cumulative at le=${b.labels.le}`);
        previous = le;
        previousCount = b.value;
      }
      if (buckets.at(-1)!.labels.le !== "+Inf") throw new Error(`${family} lacks the +Inf bucket`);
      if (value(`${family}_count`, rest) !== buckets.at(-1)!.value) throw new Error(`${family}_count differs from the +Inf bucket`);
      if (value(`${family}_sum`, rest) === undefined) throw new Error(`${family} lacks _sum`);
    }
  }
  return { types, samples, value };
}
