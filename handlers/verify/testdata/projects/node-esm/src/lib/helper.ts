export const helper = (s: string) => s.trim();
