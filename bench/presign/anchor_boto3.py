#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""anchor_boto3.py — presigned URLs per second with boto3's
S3 client generate_presigned_url(), the Python anchor for bench/presign.

Design: the same request as sign_bench.c (PUT, path-style bucket "answers",
http://127.0.0.1:9000, us-east-1/s3, 900 s, content-length 4000000 and
content-type audio/webm signed, UNSIGNED-PAYLOAD). One client, created once
with explicit credentials (no credential chain, no ~/.aws files). First the
fixed-time check: botocore's clock (botocore.auth.get_current_datetime) is
pinned to 20261129T120000Z for one call and the URL is compared with the
shared test vector; on a mismatch the script exits 1 without a rate. The
clock is then restored (one live call must give the same URL but for date,
signature and question) and the timed loop calls the SDK exactly as an
application would, with the question number q01..q15 varying per call.
Median over rounds of wall time; run it pinned to one core
(bench/presign/run does). Prints one JSON object on stdout.
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import sys
import time

# Isolate from the host's AWS configuration before importing the SDK.
for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
    os.environ.pop(var, None)
os.environ["AWS_CONFIG_FILE"] = os.devnull
os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

import boto3  # noqa: E402
import botocore  # noqa: E402
import botocore.auth  # noqa: E402
from botocore.config import Config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_VECTOR = os.path.join(
    os.environ.get("SLUICE_TEST_VECTORS",
                   os.path.join(HERE, "..", "..", "tests", "vectors")),
    "sigv4-presign-put.txt")
VECTOR_TIME = datetime.datetime(2026, 11, 29, 12, 0, 0)  # naive UTC
KEY_FMT = "submissions/0b7e0b4e-0000-4000-8000-000000000001/q{:02d}.webm"
QUESTIONS = 15


def vector_url(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    return lines[lines.index("--- url ---") + 1].strip()


def same_url(got, want):
    """'exact', 'same-params-reordered' (same scheme/host/path and the same
    raw name=value parameters, signature included) or None."""
    if got == want:
        return "exact"
    g, _, gq = got.partition("?")
    w, _, wq = want.partition("?")
    if g == w and sorted(gq.split("&")) == sorted(wq.split("&")):
        return "same-params-reordered"
    return None


def shape(url):
    """url with the time-dependent parts (date, credential date, signature)
    and the question number blanked: what must not change off the vector."""
    url = re.sub(r"/q\d\d\.webm\?", "/qNN.webm?", url)
    url = re.sub(r"X-Amz-Date=\d{8}T\d{6}Z", "X-Amz-Date=D", url)
    url = re.sub(r"%2F\d{8}%2F", "%2FD%2F", url)
    return re.sub(r"X-Amz-Signature=[0-9a-f]{64}", "X-Amz-Signature=S", url)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--vector", default=DEFAULT_VECTOR)
    args = ap.parse_args()

    session = boto3.session.Session(
        aws_access_key_id="AKIAIOSFODNN7EXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        region_name="us-east-1")
    s3 = session.client(
        "s3", endpoint_url="http://127.0.0.1:9000",
        config=Config(signature_version="s3v4",
                      s3={"addressing_style": "path"}))

    def presign(q):
        return s3.generate_presigned_url(
            "put_object",
            Params={"Bucket": "answers", "Key": KEY_FMT.format(q),
                    "ContentLength": 4000000, "ContentType": "audio/webm"},
            ExpiresIn=900)

    # 1. The fixed-time check: no number without the right URL.
    want = vector_url(args.vector)
    real_clock = botocore.auth.get_current_datetime
    botocore.auth.get_current_datetime = (
        lambda remove_tzinfo=True: VECTOR_TIME)
    try:
        got = presign(1)
    finally:
        botocore.auth.get_current_datetime = real_clock
    match = same_url(got, want)
    if match is None:
        sys.stderr.write("anchor_boto3: URL does not match the test vector\n"
                         f"  got:  {got}\n  want: {want}\n"
                         "refusing to report a rate\n")
        return 1
    # ... and the live-clock call the loop makes signs the same request.
    live = presign(2)
    if same_url(shape(live), shape(want)) is None:
        sys.stderr.write("anchor_boto3: live-clock URL differs in shape\n"
                         f"  got:  {live}\n  want: {want}\n"
                         "refusing to report a rate\n")
        return 1

    # 2. Timed rounds (the first, untimed, is the warm-up).
    rates, total, q = [], 0, 0
    cpu0 = wall = 0.0
    lens = [args.warmup] + [args.seconds] * args.rounds
    for r, length in enumerate(lens):
        if r == 1:
            cpu0 = time.process_time()
        n = 0
        t0 = t1 = time.perf_counter()
        end = t0 + length
        while t1 < end:
            presign(q % QUESTIONS + 1)
            q += 1
            n += 1
            t1 = time.perf_counter()
        if r > 0:
            rates.append(n / (t1 - t0))
            total += n
            wall += t1 - t0
    cpu = time.process_time() - cpu0

    print(json.dumps({
        "impl": "boto3",
        "api": "S3.Client.generate_presigned_url",
        "version": f"boto3 {boto3.__version__} / botocore "
                   f"{botocore.__version__} / CPython "
                   f"{platform.python_version()}",
        "rate_per_s": round(statistics.median(rates), 1),
        "rounds": [round(x, 1) for x in rates],
        "seconds_per_round": args.seconds,
        "warmup_s": args.warmup,
        "iterations": total,
        "cpu_per_wall": round(cpu / wall, 3),
        "vector_match": match,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
