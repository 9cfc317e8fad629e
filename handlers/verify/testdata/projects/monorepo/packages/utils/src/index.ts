import { clamp } from "#internal/math";

export function percent(n: number): string {
  return `${clamp(n, 0, 100)}%`;
}
