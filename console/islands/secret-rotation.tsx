/** @jsxImportSource preact */
import { SecretRotationLive } from "../pages/rotation-live.tsx";
import { hydrateIsland } from "./mount.ts";

hydrateIsland("secret-rotation", SecretRotationLive);
