import { Elysia } from "elysia";
import { docsAssetResponse, docsPageResponse, openApiDocument, type Documentation } from "./service.ts";

const hidden = { detail: { hide: true } };

/** docsRoutes serves the API reference: /docs (Swagger UI, no CDN), /docs/json (OpenAPI 3.1) and /docs/assets. */
export function docsRoutes(documentation: Documentation) {
  const docs = new Elysia({ name: "docs", prefix: "/docs" });
  return docs
    .get("", () => docsPageResponse(documentation), hidden)
    .get("/json", () => openApiDocument(docs, documentation), hidden)
    .get("/assets/swagger-ui-bundle.js", () => docsAssetResponse("swagger-ui-bundle.js"), hidden)
    .get("/assets/swagger-ui.css", () => docsAssetResponse("swagger-ui.css"), hidden)
    .get("/assets/init.js", () => docsAssetResponse("init.js"), hidden);
}
