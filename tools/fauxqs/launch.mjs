// Starts fauxqs (an SQS-protocol server) on 127.0.0.1 for errand's tests.
// Usage: node launch.mjs PORT
import { startFauxqs } from "fauxqs";

const port = Number(process.argv[2] ?? 9324);
await startFauxqs({ port, host: "127.0.0.1", logger: false });
console.log(`fauxqs listening on 127.0.0.1:${port}`);
