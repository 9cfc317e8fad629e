/** @type {import('next').NextConfig} */
const nextConfig = { transpilePackages: ["@repo/ui"] };

export default nextConfig;
