import type { User } from "../types.js";

const users = new Map<string, User>();

export default {
  save(u: User): User {
    users.set(u.id, u);
    return u;
  },
};
