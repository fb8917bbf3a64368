/** @jsxImportSource preact */
import { MADE_BY_WORDS, type MadeBy, type MakerNames } from "../../server/shared/made-by.ts";
import { bidiBalanced } from "./parts.tsx";

/**
 * MadeByText says who made a token, a subscription or an event: an operator by email ("removed"
 * once they are), the command line, an API token by name and start, or "unknown" for one made
 * before the service recorded it (migration 0047). An operator there is now links their row of
 * the Operators page, and a token its row of the API tokens page (a revoked one's too): where its
 * maker is revoked, removed or asked about.
 */
export function MadeByText({ madeBy, names }: { madeBy: MadeBy | null; names: MakerNames }) {
  if (madeBy === null) return <span class="muted">{MADE_BY_WORDS.unknown}</span>;
  if (madeBy.kind === "command_line") return <span class="muted">{MADE_BY_WORDS.commandLine}</span>;
  if (madeBy.kind === "operator") {
    if (!names.operators.has(madeBy.id)) {
      return (
        <span>
          {madeBy.email}
          <span class="muted"> {MADE_BY_WORDS.removed}</span>
        </span>
      );
    }
    return <a href={`/console/operators#${madeBy.id}`}>{madeBy.email}</a>;
  }
  const token = names.tokens.get(madeBy.id);
  if (!token) {
    return (
      <span>
        {MADE_BY_WORDS.apiToken} <code>{madeBy.id}</code>
      </span>
    );
  }
  return (
    <a href={`/console/tokens#${madeBy.id}`}>
      {MADE_BY_WORDS.apiToken} <bdi>{bidiBalanced(token.name)}</bdi> (<code>{token.prefix}…</code>)
    </a>
  );
}
