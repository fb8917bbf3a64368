import type { ChangeOrigin } from "../shared/made-by.ts";
import type { Db } from "../db/sql.ts";
import { saveIdempotentResponse, type IdempotencyScope } from "../idempotency/service.ts";
import { BATCH_ITEMS_PER_WRITE } from "../limits/limits.ts";
import type { Runtime } from "../runtime.ts";
import type { FieldError } from "../shared/problem.ts";
import type { BatchResult } from "./model.ts";

/** itemResult points an item's errors into the batch body (/email of item 3 becomes /items/3/email). */
function itemResult(index: number, result: BatchResult): BatchResult {
  if (!result.errors) return result;
  return { ...result, errors: result.errors.map((error) => ({ ...error, pointer: `/items/${index}${error.pointer ?? ""}` })) };
}

/** batchWrites is what a batch of `items` items costs the write rate limit: one write per BATCH_ITEMS_PER_WRITE items or part of them, at least one. */
export function batchWrites(items: number): number {
  return Math.max(1, Math.ceil(items / BATCH_ITEMS_PER_WRITE));
}

/** BatchKind is how one record type is upserted: each item checked alone, then the valid ones written in order, as the batch's options say. */
export interface BatchKind<T, O extends object = object> {
  /** itemErrors checks an item on its own (schema and limits), with pointers into the item */
  itemErrors: (item: unknown) => FieldError[];
  /** upsert writes one valid item inside the batch's transaction; its events are made by the request `origin` */
  upsert: (db: Db, input: T, now: number, origin: ChangeOrigin, options: O) => Promise<BatchResult>;
}

/**
 * runBatch checks every item, then upserts the valid ones in order, as `options` say, in one commit
 * with their events and the idempotent response (unless every item was refused); an invalid item
 * is refused alone, with pointers into the batch. Every event is made by the request `origin`.
 */
export async function runBatch<T, O extends object>(rt: Runtime, kind: BatchKind<T, O>, items: unknown[], options: O, idempotency: IdempotencyScope | null, origin: ChangeOrigin): Promise<{ status: number; body: { data: BatchResult[] } }> {
  const checked = items.map((item) => ({ input: item as T, errors: kind.itemErrors(item) }));
  return rt.db.write(async (tx) => {
    const now = await rt.db.changeClock.stamp(tx);
    // One item after the other: each may see the ones before it.
    const data: BatchResult[] = [];
    for (const [i, { input, errors }] of checked.entries()) data.push(itemResult(i, errors.length > 0 ? { status: "invalid", errors } : await kind.upsert(tx, input, now, origin, options)));
    const body = { data };
    // A batch whose every item was refused changed nothing: like any refused request it is not
    // kept, so the key runs the batch again once its items can succeed (the user created).
    if (data.some((result) => result.status !== "invalid")) await saveIdempotentResponse(tx, idempotency, 200, body, now);
    return { status: 200, body };
  });
}
