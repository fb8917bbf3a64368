// Swagger UI's files are imported `with { type: "file" }`: the import is the file's path (embedded when compiled).
declare module "swagger-ui-dist/swagger-ui-bundle.js" {
  const path: string;
  export default path;
}
declare module "swagger-ui-dist/swagger-ui.css" {
  const path: string;
  export default path;
}
