import { secured } from "../http/openapi-docs.ts";
import type { Runtime } from "../runtime.ts";
import { problemResponses } from "../shared/problem.ts";
import { TombstoneListEnvelope, TombstoneListQuery } from "./model.ts";
import { listDeletedPage } from "./service.ts";
import type { Resource } from "./store.ts";

/**
 * deletedList is the handler and route options of a GET .../deleted: the tombstones of `resource`
 * after `since` (listDeletedPage); `doc` names the operation and the records in the plural.
 */
export function deletedList(rt: Runtime, resource: Resource, doc: { operationId: string; plural: string; tags: string[] }) {
  const handler = ({ query }: { query: Record<string, unknown> }) => listDeletedPage(rt, resource, query);
  const options = {
    query: TombstoneListQuery,
    response: { 200: TombstoneListEnvelope, ...problemResponses(401, 403, 410, 422) },
    detail: {
      operationId: doc.operationId,
      summary: `List deleted ${doc.plural}`,
      description: `Ids, deletion times and versions of ${doc.plural} deleted after \`since\`, oldest first, kept for the tombstone retention (90 days by default). A \`since\` older than that is 410: resync in full.`,
      tags: doc.tags,
      ...secured,
    },
  };
  return [handler, options] as const;
}
