/** @jsxImportSource preact */
import { RotationLive } from "../pages/rotation-live.tsx";
import { hydrateIsland } from "./mount.ts";

hydrateIsland("rotation", RotationLive);
