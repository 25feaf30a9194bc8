/**
 * A static server for the browser tests' pages: the page at `/`, and below `base` the files whose path (normalised,
 * so `..` cannot climb out) starts with one of `allowed`. @opentelemetry/api's ESM before 1.10 imports its modules
 * without the `.js` a browser needs (a bundler adds it): added here.
 */
import { existsSync, readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { extname, join, posix } from "node:path";

const TYPES: Record<string, string> = {
  ".js": "text/javascript",
  ".mjs": "text/javascript",
  ".map": "application/json",
  ".html": "text/html",
};

export interface PageServer {
  server: Server;
  url: string;
}

export function servePage(html: string, base: string, allowed: readonly string[]): Promise<PageServer> {
  const server = createServer((req, res) => {
    const path = posix.normalize(decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname));
    if (path === "/favicon.ico") {
      res.writeHead(204).end();
      return;
    }
    if (path === "/" || path === "/index.html") {
      res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" }).end(html);
      return;
    }
    let file = join(base, path);
    if (path.startsWith("/node_modules/@opentelemetry/api/") && !existsSync(file)) {
      file = existsSync(`${file}.js`) ? `${file}.js` : join(file, "index.js");
    }
    if (!allowed.some((prefix) => path.startsWith(prefix)) || !existsSync(file)) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "Content-Type": TYPES[extname(file)] ?? "application/octet-stream" }).end(readFileSync(file));
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => {
    const address = server.address();
    resolve({ server, url: `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}/` });
  }));
}
