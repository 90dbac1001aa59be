// The MCP TypeScript SDK's client against `toolsrv mcp --http` (tests/mcpface/test_progress.py):
// a call of `halfway` (its tool reports `progress 2/4 halfway there` on stderr, then waits)
// with resetTimeoutOnProgress; the client aborts it once the tool's report has arrived.
// argv: URL TOKEN.  Prints one JSON object of what it saw; every wait is bounded.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const out = { progress: [] };
const client = new Client({ name: "ts-progress-test", version: "1.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } } });
await client.connect(transport);

const abort = new AbortController();
const giveUp = setTimeout(() => abort.abort(new Error("no report within 60 s")), 60000);
try {
  await client.callTool({ name: "halfway", arguments: {} }, undefined, {
    signal: abort.signal, timeout: 6000, resetTimeoutOnProgress: true,
    onprogress: (p) => {
      out.progress.push(p);
      if (p.total !== undefined && /9 bytes of output/.test(p.message || "")) {
        abort.abort(new Error("aborted by the test: the report arrived"));
      }
    } });
  out.ended = "answered";
} catch (e) {
  out.ended = String(e.message || e);
}
clearTimeout(giveUp);
await client.close();
console.log(JSON.stringify(out));
