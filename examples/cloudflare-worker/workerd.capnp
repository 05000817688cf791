# Runs the Worker locally in workerd, the runtime of Cloudflare Workers (see README.md). Not used
# by `wrangler deploy`, which reads wrangler.toml.
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
  # Bundled from src/index.ts by esbuild (README.md); wrangler bundles the same way on deploy.
  modules = [ (name = "worker.js", esModule = embed "build/worker.js") ],
  # As wrangler.toml: no nodejs_compat.
  compatibilityDate = "2026-08-01",
  # wrangler.toml's [vars], here read from the environment workerd is started in.
  bindings = [
    (name = "MAILCHANNELS_CUSTOMER_HANDLE", fromEnvironment = "MAILCHANNELS_CUSTOMER_HANDLE"),
    (name = "MAILCHANNELS_PUBLIC_KEY", fromEnvironment = "MAILCHANNELS_PUBLIC_KEY"),
    (name = "MAILCHANNELS_BASE_URL", fromEnvironment = "MAILCHANNELS_BASE_URL"),
  ],
  globalOutbound = "local",
);
