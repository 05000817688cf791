# Runs the Hono app's Worker (worker.ts) locally in workerd, the runtime of Cloudflare Workers. Not used
# by `wrangler deploy`, which reads a wrangler.toml (README.md).
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    # Outbound fetches (the signing key) may reach this machine: the local sandbox.
    (name = "local", network = (allow = ["local", "private"])),
  ],
  sockets = [ (name = "http", address = "127.0.0.1:8000", http = (), service = "main") ],
);

const worker :Workerd.Worker = (
  # Bundled from worker.ts by esbuild (README.md); wrangler bundles the same way on deploy.
  modules = [ (name = "worker.js", esModule = embed "build/worker.js") ],
  # No nodejs_compat: the library and Hono use web APIs only.
  compatibilityDate = "2026-08-01",
  # A wrangler.toml's [vars], here read from the environment workerd is started in.
  bindings = [
    (name = "MAILCHANNELS_CUSTOMER_HANDLE", fromEnvironment = "MAILCHANNELS_CUSTOMER_HANDLE"),
    (name = "MAILCHANNELS_PUBLIC_KEY", fromEnvironment = "MAILCHANNELS_PUBLIC_KEY"),
    (name = "MAILCHANNELS_BASE_URL", fromEnvironment = "MAILCHANNELS_BASE_URL"),
  ],
  globalOutbound = "local",
);
