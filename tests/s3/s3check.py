#!/usr/bin/python3
"""The S3 tests' independent client: Debian's boto3 (python3-boto3), not
det-cpp's code, checks what det-cpp wrote to the test's S3 server.

Usage: s3check.py --endpoint URL --access-key ID --secret-key-file FILE
                  [--ca-bundle PEM] CMD...
  list BUCKET PREFIX        -> [{"key", "size", "etag"}] in key order
  get BUCKET KEY OUT_FILE   -> {"size", "md5"} of the bytes written to OUT_FILE
  put BUCKET KEY IN_FILE    -> {"etag"}
  delete BUCKET KEY         -> {}
  head BUCKET KEY           -> {"size", "etag"}
The secret is read from a file (never argv). Path-style addressing. Prints
JSON on stdout; on an error prints {"error": ...} and exits 1.
"""
import argparse
import hashlib
import json
import sys

import boto3
import botocore.config
import botocore.exceptions


def client(args):
    with open(args.secret_key_file, encoding="ascii") as f:
        secret = f.read().strip()
    return boto3.session.Session().client(
        "s3",
        endpoint_url=args.endpoint,
        region_name="us-east-1",
        aws_access_key_id=args.access_key,
        aws_secret_access_key=secret,
        verify=args.ca_bundle if args.ca_bundle else True,
        config=botocore.config.Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            connect_timeout=10,
            read_timeout=60,
        ),
    )


def run(s3, cmd, rest):
    if cmd == "list" and len(rest) == 2:
        out = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=rest[0], Prefix=rest[1]):
            for o in page.get("Contents", []):
                out.append({"key": o["Key"], "size": o["Size"], "etag": o["ETag"].strip('"')})
        return sorted(out, key=lambda o: o["key"])
    if cmd == "get" and len(rest) == 3:
        body = s3.get_object(Bucket=rest[0], Key=rest[1])["Body"]
        md5 = hashlib.md5()
        size = 0
        with open(rest[2], "wb") as f:
            for chunk in iter(lambda: body.read(1 << 20), b""):
                md5.update(chunk)
                size += len(chunk)
                f.write(chunk)
        return {"size": size, "md5": md5.hexdigest()}
    if cmd == "put" and len(rest) == 3:
        with open(rest[2], "rb") as f:
            r = s3.put_object(Bucket=rest[0], Key=rest[1], Body=f.read())
        return {"etag": r["ETag"].strip('"')}
    if cmd == "delete" and len(rest) == 2:
        s3.delete_object(Bucket=rest[0], Key=rest[1])
        return {}
    if cmd == "head" and len(rest) == 2:
        r = s3.head_object(Bucket=rest[0], Key=rest[1])
        return {"size": r["ContentLength"], "etag": r["ETag"].strip('"')}
    raise ValueError("unknown command or wrong arguments: %s %s (see --help)" % (cmd, rest))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--access-key", required=True)
    p.add_argument("--secret-key-file", required=True)
    p.add_argument("--ca-bundle", default=None, help="PEM file to verify an https endpoint with")
    p.add_argument("cmd")
    p.add_argument("rest", nargs="*")
    args = p.parse_args()
    try:
        result = run(client(args), args.cmd, args.rest)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, OSError, ValueError) as e:
        print(json.dumps({"error": "%s: %s" % (type(e).__name__, e)}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
