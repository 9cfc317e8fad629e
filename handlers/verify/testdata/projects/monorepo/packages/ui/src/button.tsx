"use client";

import { ReactNode } from "react";

export const Button = ({ children, appName }: { children: ReactNode; appName: string }) => {
  return <button onClick={() => alert(`Hello from your ${appName} app!`)}>{children}</button>;
};
