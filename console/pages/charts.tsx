/** @jsxImportSource preact */

/** ChartBar is one bar of a deliveries chart: the deliveries created in its span, by current status. */
export interface ChartBar {
  /** start of the span, RFC 3339 */
  from: string;
  succeeded: number;
  failed: number;
  pending: number;
}

const STACK = ["succeeded", "failed", "pending"] as const;

/** PATTERNS tells the stacked statuses apart without colour (green and red differ by 1.29:1 only): failed is hatched, pending dotted, succeeded solid. */
const PATTERNS = { succeeded: "solid", failed: "hatched", pending: "dotted" } as const;

/** ChartSize is the drawing size of a chart in SVG units; CSS scales it to the space it gets. */
export interface ChartSize {
  width: number;
  height: number;
}

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/** barLabel names a bar's span for people: the hour "14:00" or the day "21 Nov" (UTC). Not toLocaleDateString: it cost 40 us a label, most of a start page's time. */
function barLabel(from: string, unit: "hour" | "day"): string {
  if (unit === "hour") return from.slice(11, 16);
  return `${Number(from.slice(8, 10))} ${MONTHS[Number(from.slice(5, 7)) - 1]}`;
}

/** roundMax rounds a chart's top up to a number that reads well on the axis (1, 2, 5 times a power of ten). */
function roundMax(max: number): number {
  if (max <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  return [1, 2, 5, 10].map((m) => m * power).find((m) => m >= max)!;
}

/** barHeights returns each status's height of a bar in a plot `height` tall whose top stands for `top` deliveries. */
function barHeights(bar: ChartBar, top: number, height: number): Record<(typeof STACK)[number], number> {
  const scale = (n: number) => Math.round((n / top) * height * 100) / 100;
  return { succeeded: scale(bar.succeeded), failed: scale(bar.failed), pending: scale(bar.pending) };
}

const round2 = (n: number) => Math.round(n * 100) / 100;

/**
 * chartSvg draws deliveries per hour or per day as stacked bars (succeeded, failed, pending) in
 * SVG markup: styled by class, so the strict CSP holds, and every bar carries its counts as data
 * attributes. Failed and pending segments are filled with patterns of the chart's own (PATTERNS). Built as a string: rendered as Preact elements the 40 charts of a start page took
 * 6 ms, a third of the page.
 */
function chartSvg({ id, summary, bars, unit, size }: { id: string; summary: string; bars: ChartBar[]; unit: "hour" | "day"; size: ChartSize }): string {
  const axis = 28;
  const foot = 16;
  const plot = { width: size.width - axis, height: size.height - foot - 4 };
  const top = roundMax(Math.max(0, ...bars.map((b) => b.succeeded + b.failed + b.pending)));
  const slot = plot.width / bars.length;
  const gap = Math.min(2, slot * 0.2);
  const every = unit === "hour" ? 6 : 1;
  const e = Bun.escapeHTML;
  const parts = [
    `<svg viewBox="0 0 ${size.width} ${size.height}" width="${size.width}" height="${size.height}" role="img" aria-labelledby="${e(id)}-title" data-top="${top}" data-plot-height="${plot.height}" preserveAspectRatio="none">`,
    `<title id="${e(id)}-title">${e(summary)}</title>`,
    `<defs><pattern id="${e(id)}-failed" data-pattern="${PATTERNS.failed}" width="4" height="4" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect class="pattern-failed" width="4" height="4"></rect><rect class="pattern-mark" width="1.5" height="4"></rect></pattern>`,
    `<pattern id="${e(id)}-pending" data-pattern="${PATTERNS.pending}" width="4" height="4" patternUnits="userSpaceOnUse"><rect class="pattern-pending" width="4" height="4"></rect><circle class="pattern-mark" cx="2" cy="2" r="1"></circle></pattern></defs>`,
    `<line class="chart-axis" x1="${axis}" y1="${plot.height + 4}" x2="${size.width}" y2="${plot.height + 4}"></line>`,
    `<text class="chart-tick" x="${axis - 4}" y="10" text-anchor="end">${top}</text>`,
    `<text class="chart-tick" x="${axis - 4}" y="${plot.height + 4}" text-anchor="end">0</text>`,
    // The hours and days below are UTC's: said once, beside them.
    `<text class="chart-tick chart-zone" x="${axis - 4}" y="${size.height - 2}" text-anchor="end">UTC</text>`,
  ];
  bars.forEach((bar, i) => {
    const heights = barHeights(bar, top, plot.height);
    const x = axis + i * slot + gap / 2;
    let y = plot.height + 4;
    parts.push(`<g class="chart-bar" data-from="${e(bar.from)}" data-succeeded="${bar.succeeded}" data-failed="${bar.failed}" data-pending="${bar.pending}">`);
    for (const status of STACK) {
      if (heights[status] === 0) continue;
      y -= heights[status];
      const fill = status === "succeeded" ? "" : ` fill="url(#${e(id)}-${status})"`;
      parts.push(`<rect class="bar-${status}" data-status="${status}"${fill} x="${round2(x)}" y="${round2(y)}" width="${round2(slot - gap)}" height="${heights[status]}"></rect>`);
    }
    if (i % every === 0) parts.push(`<text class="chart-tick" x="${round2(x + (slot - gap) / 2)}" y="${size.height - 2}" text-anchor="middle">${e(barLabel(bar.from, unit))}</text>`);
    parts.push("</g>");
  });
  parts.push("</svg>");
  return parts.join("");
}

/**
 * DeliveriesChart is a deliveries chart (chartSvg) with its text alternative: the summary, and with
 * `table` every bar's numbers, shown on request ("Show as table") to anyone.
 */
export function DeliveriesChart({ id, title, bars, unit, size, table }: { id: string; title: string; bars: ChartBar[]; unit: "hour" | "day"; size: ChartSize; table: boolean }) {
  const count = (status: (typeof STACK)[number]) => bars.reduce((sum, b) => sum + b[status], 0);
  const [succeeded, failed, pending] = [count("succeeded"), count("failed"), count("pending")];
  // Each status by name: "2550 deliveries, 2 failed" hid a backlog of 2,489 pending from whoever reads only this.
  const summary = `${title}: ${succeeded + failed + pending} deliveries: ${succeeded} succeeded, ${failed} failed, ${pending} pending.`;
  return (
    <figure class="chart" id={id}>
      <div class="chart-drawing" dangerouslySetInnerHTML={{ __html: chartSvg({ id, summary, bars, unit, size }) }} />
      {table && (
        <details class="chart-numbers">
          <summary>Show as table</summary>
          {/* Its own scroller, reached by Tab: at 320 px the card clips what is wider than itself. */}
          <div class="table-wrap" role="region" aria-label={`${title}: the numbers`} tabIndex={0}>
            <table class="data">
              <caption class="visually-hidden">{summary}</caption>
              <thead>
                <tr>
                  <th scope="col">{unit === "hour" ? "Hour (UTC)" : "Day (UTC)"}</th>
                  <th scope="col">Succeeded</th>
                  <th scope="col">Failed</th>
                  <th scope="col">Pending</th>
                </tr>
              </thead>
              <tbody>
                {bars.map((bar) => (
                  <tr>
                    <th scope="row">{barLabel(bar.from, unit)}</th>
                    <td>{bar.succeeded}</td>
                    <td>{bar.failed}</td>
                    <td>{bar.pending}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </details>
      )}
      <figcaption class="visually-hidden">{summary}</figcaption>
    </figure>
  );
}

/** ChartLegend names the stacked statuses and their patterns once per page, for screen readers too. */
export function ChartLegend() {
  return (
    <ul class="chart-legend" aria-label="Legend">
      {STACK.map((status) => (
        <li class={`legend-${status}`}>
          {status} ({PATTERNS[status]})
        </li>
      ))}
    </ul>
  );
}
