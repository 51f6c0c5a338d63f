// SPDX-License-Identifier: Apache-2.0
// anchor_awsjs.mjs — presigned URLs per second with the AWS SDK for
// JavaScript v3 (getSignedUrl from @aws-sdk/s3-request-presigner on a
// PutObjectCommand), the Node anchor for bench/presign.
//
// Design: the same request as sign_bench.c (PUT, path-style bucket "answers",
// http://127.0.0.1:9000, us-east-1/s3, 900 s, content-length 4000000 and
// content-type audio/webm signed, UNSIGNED-PAYLOAD). One S3Client, created
// once with explicit credentials (no credential chain, no ~/.aws files).
// Left alone, this SDK version presigns a different request than the vector:
// it adds a CRC32 checksum of an empty body, an "x-id=PutObject" parameter and
// an X-Amz-Content-Sha256 parameter, and leaves content-type unsigned. So the
// anchor asks for the same request with the SDK's own switches
// (requestChecksumCalculation "WHEN_REQUIRED", signableHeaders content-type,
// x-amz-content-sha256 neither hoisted nor signed) plus one build-step
// middleware deleting x-id; all of that stays inside the timed calls.
// The SDK always sorts the query, so X-Amz-Signature is not last: the vector
// check accepts the same scheme/host/path and the same raw name=value
// parameters (signature included) in another order, and says so in
// "vector_match". First the fixed-time check (signingDate 20261129T120000Z)
// against tests/vectors/sigv4-presign-put.txt — on a mismatch exit 1,
// no rate — then one live-clock call must give the same URL but for date,
// signature and question, then warm-up and timed rounds of sequential
// `await getSignedUrl(...)` with the question q01..q15 varying per call.
// Median over rounds of wall time; run it pinned to one core
// (bench/presign/run does). Prints one JSON object on stdout.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";

import { PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";

const HERE = dirname(fileURLToPath(import.meta.url));
const KEY_PREFIX = "submissions/0b7e0b4e-0000-4000-8000-000000000001/q";
const QUESTIONS = 15;
const VECTOR_TIME = new Date(Date.UTC(2026, 10, 29, 12, 0, 0));

// Isolate from the host's AWS configuration (read when the client is built).
for (const v of ["AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ACCESS_KEY_ID",
  "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
  "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"])
  delete process.env[v];
process.env.AWS_CONFIG_FILE = "/dev/null";
process.env.AWS_SHARED_CREDENTIALS_FILE = "/dev/null";
process.env.AWS_EC2_METADATA_DISABLED = "true";

const { values: args } = parseArgs({
  options: {
    seconds: { type: "string", default: "3" },
    rounds: { type: "string", default: "5" },
    warmup: { type: "string", default: "1" },
    vector: {
      type: "string",
      default: join(process.env.SLUICE_TEST_VECTORS ??
        join(HERE, "..", "..", "tests", "vectors"),
      "sigv4-presign-put.txt"),
    },
  },
});

function vectorUrl(path) {
  const lines = readFileSync(path, "utf8").split("\n");
  return lines[lines.indexOf("--- url ---") + 1].trim();
}

// "exact", "same-params-reordered" or null (see the design note).
function sameUrl(got, want) {
  if (got === want) return "exact";
  const [g, gq = ""] = got.split("?", 2);
  const [w, wq = ""] = want.split("?", 2);
  const norm = (q) => q.split("&").sort().join("&");
  return g === w && norm(gq) === norm(wq) ? "same-params-reordered" : null;
}

// The URL with date, credential date, signature and question blanked.
function shape(url) {
  return url.replace(/\/q\d\d\.webm\?/, "/qNN.webm?")
    .replace(/X-Amz-Date=\d{8}T\d{6}Z/, "X-Amz-Date=D")
    .replace(/%2F\d{8}%2F/, "%2FD%2F")
    .replace(/X-Amz-Signature=[0-9a-f]{64}/, "X-Amz-Signature=S");
}

const s3 = new S3Client({
  region: "us-east-1",
  endpoint: "http://127.0.0.1:9000",
  forcePathStyle: true,
  requestChecksumCalculation: "WHEN_REQUIRED",
  credentials: {
    accessKeyId: "AKIAIOSFODNN7EXAMPLE",
    secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
  },
});
s3.middlewareStack.add(
  (next) => (a) => {
    delete a.request.query["x-id"];
    return next(a);
  },
  { step: "build", name: "sluiceBenchDropXId" },
);

const presign = (q, extra = {}) =>
  getSignedUrl(
    s3,
    new PutObjectCommand({
      Bucket: "answers",
      Key: `${KEY_PREFIX}${String(q).padStart(2, "0")}.webm`,
      ContentLength: 4000000,
      ContentType: "audio/webm",
    }),
    {
      expiresIn: 900,
      signableHeaders: new Set(["content-type"]),
      unhoistableHeaders: new Set(["x-amz-content-sha256"]),
      unsignableHeaders: new Set(["x-amz-content-sha256"]),
      ...extra,
    },
  );

const refuse = (what, got, want) => {
  process.stderr.write(`anchor_awsjs: ${what}\n  got:  ${got}\n  want: ${want}\n` +
    "refusing to report a rate\n");
  process.exit(1);
};

// 1. The fixed-time check: no number without the right URL.
const want = vectorUrl(args.vector);
const got = await presign(1, { signingDate: VECTOR_TIME });
const match = sameUrl(got, want);
if (match === null) refuse("URL does not match the test vector", got, want);
const live = await presign(2);
if (sameUrl(shape(live), shape(want)) === null)
  refuse("live-clock URL differs in shape", live, want);

// 2. Timed rounds (the first, untimed, is the warm-up).
const seconds = Number(args.seconds), rounds = Number(args.rounds);
const lens = [Number(args.warmup), ...Array(rounds).fill(seconds)];
const rates = [];
let total = 0, q = 0, wall = 0, cpu0 = process.cpuUsage();
for (let r = 0; r < lens.length; r++) {
  if (r === 1) cpu0 = process.cpuUsage();
  let n = 0;
  const t0 = performance.now(), end = t0 + lens[r] * 1000;
  let t1 = t0;
  while (t1 < end) {
    await presign((q++ % QUESTIONS) + 1);
    n++;
    t1 = performance.now();
  }
  if (r > 0) {
    rates.push(n / ((t1 - t0) / 1000));
    total += n;
    wall += (t1 - t0) / 1000;
  }
}
const cpu = process.cpuUsage(cpu0);
const sorted = [...rates].sort((a, b) => a - b);
const mid = sorted.length >> 1;
const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;

const require = createRequire(import.meta.url);
const ver = (p) => require(`${p}/package.json`).version;
console.log(JSON.stringify({
  impl: "aws-sdk-js-v3",
  api: "getSignedUrl(S3Client, PutObjectCommand)",
  version: `@aws-sdk/client-s3 ${ver("@aws-sdk/client-s3")} / ` +
    `@aws-sdk/s3-request-presigner ${ver("@aws-sdk/s3-request-presigner")} / ` +
    `Node ${process.versions.node}`,
  rate_per_s: Math.round(median * 10) / 10,
  rounds: rates.map((x) => Math.round(x * 10) / 10),
  seconds_per_round: seconds,
  warmup_s: Number(args.warmup),
  iterations: total,
  cpu_per_wall: Math.round(((cpu.user + cpu.system) / 1e6 / wall) * 1000) / 1000,
  vector_match: match,
}));
