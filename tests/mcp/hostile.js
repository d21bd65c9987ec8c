#!/usr/bin/env node
// A hostile MCP server over stdio, for the attack tests: it speaks JSON-RPC by hand
// (no SDK) so that it can break the protocol on purpose. `node hostile.js MODE`:
//
//   garbage         prints lines that are not JSON-RPC, forever, and never answers
//   silent          reads its input and never answers (hangs on initialize)
//   garbage-first   prints a line of garbage, then serves one tool `ping`
//   many-tools N    lists N tools
//   bad-tools       lists one good tool among tools that break the rules
//   endless-pages   every page of its tool list says there is another
//   malformed-list  answers tools/list with a result that is not a tool list
//   huge-list       answers tools/list with one line of several megabytes
//   vanish          lists `vanishing` and `stay`; a call of `vanishing` is answered the
//                   way the TypeScript SDK answers an unknown tool, and it is gone from
//                   every later list
//   hang-calls      serves `ping` but never answers a call
//   wrong-id        answers every call with another request's id
"use strict";

const mode = process.argv[2];
const send = (message) => process.stdout.write(JSON.stringify(message) + "\n");
const tool = (name, extra = {}) => ({
  name,
  description: `the ${name} tool`,
  inputSchema: { type: "object", properties: {} },
  ...extra,
});

if (mode === "garbage") {
  setInterval(() => process.stdout.write("garbage { not json\n"), 20);
}
if (mode === "garbage-first") {
  process.stdout.write("this is not a message\n");
}

let vanished = false;

function tools(params) {
  switch (mode) {
    case "many-tools": {
      const n = Number(process.argv[3] || 5000);
      return { tools: Array.from({ length: n }, (_, i) => tool(`tool_${i}`)) };
    }
    case "bad-tools":
      return {
        tools: [
          tool("good"),
          tool("has space"),
          tool(""),
          { name: "no_schema_type", inputSchema: { properties: {} } },
          tool("array_schema", { inputSchema: { type: "array" } }),
          tool("good"),
          tool("x".repeat(200)),
          tool("wordy", { description: "w".repeat(100000) }),
          tool("evil\u001b[2J"),
        ],
      };
    case "endless-pages": {
      const page = Number((params && params.cursor) || 0);
      return { tools: [tool(`page_${page}`)], nextCursor: String(page + 1) };
    }
    case "malformed-list":
      return { tools: "none of your business" };
    case "huge-list":
      return { tools: [tool("huge", { description: "h".repeat(4 * 1024 * 1024) })] };
    case "vanish":
      return { tools: vanished ? [tool("stay")] : [tool("vanishing"), tool("stay")] };
    default:
      return { tools: [tool("ping")] };
  }
}

function call(id, params) {
  if (mode === "hang-calls") return;
  if (mode === "wrong-id") {
    send({ jsonrpc: "2.0", id: 987654, result: { content: [{ type: "text", text: "not yours" }] } });
    return;
  }
  if (mode === "vanish" && params.name === "vanishing") {
    vanished = true;
    send({
      jsonrpc: "2.0",
      id,
      result: {
        content: [{ type: "text", text: `MCP error -32602: Tool ${params.name} not found` }],
        isError: true,
      },
    });
    return;
  }
  send({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "pong" }] } });
}

let buffer = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  buffer += chunk;
  let newline;
  while ((newline = buffer.indexOf("\n")) >= 0) {
    const line = buffer.slice(0, newline);
    buffer = buffer.slice(newline + 1);
    if (!line.trim()) continue;
    let message;
    try {
      message = JSON.parse(line);
    } catch {
      continue;
    }
    if (mode === "silent" || mode === "garbage" || message.id === undefined) continue;
    switch (message.method) {
      case "initialize":
        send({
          jsonrpc: "2.0",
          id: message.id,
          result: {
            protocolVersion: message.params.protocolVersion,
            capabilities: { tools: { listChanged: true } },
            serverInfo: { name: "hostile", version: "0.0.0" },
          },
        });
        break;
      case "tools/list":
        send({ jsonrpc: "2.0", id: message.id, result: tools(message.params) });
        break;
      case "tools/call":
        call(message.id, message.params);
        break;
      default:
        send({ jsonrpc: "2.0", id: message.id, error: { code: -32601, message: "no such method" } });
    }
  }
});
process.stdin.on("end", () => process.exit(0));
