export const upper = (s: string) => s.toUpperCase();
