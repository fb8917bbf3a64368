import type { TSchema } from "elysia";
import { AccountInput, AccountSchema } from "../accounts/model.ts";
import { BatchResultSchema } from "../batch/model.ts";
import { Contact, ContactInput } from "../contacts/model.ts";
import { ListMetaSchema } from "../http/list-query.ts";
import { ProblemSchema } from "../shared/problem.ts";
import { Health, Readiness } from "../ops/model.ts";
import { UserSchema } from "../users/model.ts";
import { Attempt, Delivery, DeliveryDetail, Subscription, SubscriptionInput } from "../webhooks/model.ts";

/**
 * NAMED_SCHEMAS are the schemas the OpenAPI document names in components.schemas and references
 * wherever a route uses them (the generated client's types carry these names). A schema may
 * contain the ones listed before it.
 */
export const NAMED_SCHEMAS: Record<string, TSchema> = {
  Problem: ProblemSchema,
  ListMeta: ListMetaSchema,
  Account: AccountSchema,
  AccountInput,
  User: UserSchema,
  Contact,
  ContactInput,
  Subscription,
  SubscriptionInput,
  Delivery,
  Attempt,
  DeliveryDetail,
  BatchResult: BatchResultSchema,
  Health,
  Readiness,
};
