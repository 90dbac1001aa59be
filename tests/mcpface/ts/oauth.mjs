// The MCP TypeScript SDK's client against `toolsrv mcp --http --oauth-issuer …`
// (tests/mcpface/test_oauth.py).  argv: URL GOOD_TOKEN BAD_TOKEN.  Prints one JSON object:
// the good token's listing and call, and what the SDK says of the bad one's refusal.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, good, bad] = process.argv.slice(2);
const connect = async (token) => {
  const client = new Client({ name: "ts-oauth-test", version: "1.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return client;
};
const out = {};
const client = await connect(good);
out.names = (await client.listTools()).tools.map((t) => t.name);
const r = await client.callTool({ name: "echo", arguments: { from: "ts" } });
out.echo = { isError: r.isError ?? false, text: r.content[0].text };
await client.close();
try {
  await connect(bad);
  out.bad = "connected";
} catch (e) {
  out.bad = { code: e.code ?? null, message: String(e.message || e) };
}
console.log(JSON.stringify(out));
