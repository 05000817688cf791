/** The package version, sent in `user-agent` (a test keeps it equal to package.json). */
export const CLIENT_VERSION = '0.1.0'
