#!/usr/bin/python3
"""Recomputes the AWS Signature V4 of requests det-cpp really sent, with
botocore's own S3 signer (Debian's python3-botocore), for the SigV4 test of
common/s3/s3_client_test.cc.

Input (--requests FILE): a JSON list of captured requests
  {"method", "target" (path and query as sent), "headers" {name: value},
   "body_hex"}.
The secret is read from --secret-key-file (never argv). For each request the
headers named in its Authorization's SignedHeaders, its body and its
X-Amz-Date are given to botocore.auth.S3SigV4Auth with botocore's clock set
to that date. Prints a JSON list {"target", "captured", "computed", "match"}.
Exit status 0 when it ran (the caller compares), 2 on bad input.
"""
import argparse
import datetime
import json
import re
import sys
import types

import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def header(headers, name):
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return None


def recompute(req, access_key, secret_key, region, session_token):
    """A session token, when the request carried one, is the captured one."""
    captured = header(req["headers"], "Authorization") or ""
    m = re.search(r"SignedHeaders=([^,\s]+)", captured)
    if not m:
        return captured, "(no SignedHeaders in the captured Authorization)"
    signed = m.group(1).split(";")
    headers = {}
    for name in signed:
        value = header(req["headers"], name)
        if value is not None:
            headers[name] = value
    amz_date = header(req["headers"], "X-Amz-Date")
    when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ")

    class Clock(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return when

    host = header(req["headers"], "Host")
    aws = AWSRequest(method=req["method"], url="http://" + host + req["target"], headers=headers,
                     data=bytes.fromhex(req["body_hex"]))
    aws.context["payload_signing_enabled"] = False
    creds = Credentials(access_key, secret_key, session_token or None)
    signer = botocore.auth.S3SigV4Auth(creds, "s3", region)
    saved = botocore.auth.datetime
    botocore.auth.datetime = types.SimpleNamespace(datetime=Clock)
    try:
        signer.add_auth(aws)
    finally:
        botocore.auth.datetime = saved
    return captured, aws.headers["Authorization"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", required=True)
    p.add_argument("--access-key", required=True)
    p.add_argument("--secret-key-file", required=True)
    p.add_argument("--region", default="us-east-1")
    a = p.parse_args()
    with open(a.secret_key_file) as f:
        secret = f.read().strip()
    with open(a.requests) as f:
        reqs = json.load(f)
    if not isinstance(reqs, list) or not reqs:
        print("sigv4_check: --requests must hold a non-empty JSON list", file=sys.stderr)
        return 2
    out = []
    for r in reqs:
        token = header(r["headers"], "X-Amz-Security-Token")
        captured, computed = recompute(r, a.access_key, secret, a.region, token)
        out.append({"target": r["target"], "method": r["method"], "captured": captured,
                    "computed": computed, "match": captured == computed})
    json.dump(out, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
