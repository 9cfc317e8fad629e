export const thousands = (n: number) => n.toLocaleString("en-US");
