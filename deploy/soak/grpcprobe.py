#!/usr/bin/env python3
"""gRPC clients of the chaos soak (deploy/soak.sh), written with the stubs
protoc makes from proto/ktune.proto (directory --pb):

  probe  a second client that times QueryBest on one long-lived channel while
         the chaos runs: every --interval seconds one call (a random known
         workload key, or a random job's tasks), deadline --deadline; one JSON
         line per call to --out: {"t": CLOCK_MONOTONIC, "lat": seconds,
         "ok": bool, "code": status name}. The keys and job ids come from
         ListJobs, refreshed every 20 calls (not timed).
  hang   a client that opens --streams WatchJob streams on each of --channels
         connections (separate subchannels, so the tracker sees separate
         clients) for running jobs and never reads them, for --hold seconds.

Both send the token as "authorization: Bearer <token>" and verify the
tracker's certificate against --ca.
"""
import argparse
import json
import os
import random
import sys
import time


def connect(args, grpc):
    with open(args.ca, "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    opts = [("grpc.use_local_subchannel_pool", 1),
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 1000)]
    return grpc.secure_channel(args.tracker, creds, options=opts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["probe", "hang"])
    ap.add_argument("--pb", required=True)
    ap.add_argument("--tracker", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--out")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--deadline", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--hold", type=float, default=20.0)
    args = ap.parse_args()
    sys.path.insert(0, args.pb)
    import grpc  # noqa: E402
    import ktune_pb2 as pb  # noqa: E402
    import ktune_pb2_grpc as pbg  # noqa: E402

    with open(args.token_file) as f:
        md = (("authorization", "Bearer " + f.readline().strip()),)
    rng = random.Random(args.seed)

    if args.mode == "probe":
        ch = connect(args, grpc)
        stub = pbg.TrackerStub(ch)
        keys, jobs = [], []
        out = open(args.out, "a", buffering=1)
        n = unavailable = 0
        while True:
            if n % 20 == 0 or not (keys or jobs):
                try:
                    r = stub.ListJobs(pb.ListJobsRequest(), metadata=md, timeout=args.deadline)
                    jobs = [j.job_id for j in r.jobs]
                    keys = sorted({t.workload_key for j in r.jobs for t in j.tasks})
                except grpc.RpcError:
                    pass
            n += 1
            if not (keys or jobs):
                time.sleep(args.interval)
                continue
            if keys and (not jobs or rng.random() < 0.5):
                req = pb.QueryBestRequest(workload_key=rng.choice(keys), top_k=5)
            else:
                req = pb.QueryBestRequest(job_id=rng.choice(jobs), top_k=5)
            t = time.monotonic()
            code, detail = "OK", ""
            try:
                stub.QueryBest(req, metadata=md, timeout=args.deadline)
                unavailable = 0
            except grpc.RpcError as e:
                code = e.code().name if e.code() else "UNKNOWN"
                detail = (e.details() or "")[:120]
            lat = time.monotonic() - t
            out.write(json.dumps({"t": t, "lat": lat, "ok": code == "OK", "code": code,
                                  "detail": detail}) + "\n")
            if code == "UNAVAILABLE":
                # A channel whose tracker went away can sit in its reconnect
                # backoff well after the tracker is back (python's minimum
                # connect timeout is 20 s): a client that wants answers dials
                # again, as a new `ktune` command would.
                unavailable += 1
                if unavailable >= 4:
                    ch.close()
                    ch = connect(args, grpc)
                    stub = pbg.TrackerStub(ch)
                    unavailable = 0
            time.sleep(max(0.0, args.interval - lat))

    # hang: streams opened and never read
    chans = [connect(args, grpc) for _ in range(args.channels)]
    calls = []
    opened = refused = 0
    for ch in chans:
        stub = pbg.TrackerStub(ch)
        try:
            r = stub.ListJobs(pb.ListJobsRequest(state="running"), metadata=md, timeout=5)
            ids = [j.job_id for j in r.jobs]
        except grpc.RpcError:
            ids = []
        if not ids:
            try:
                r = stub.ListJobs(pb.ListJobsRequest(), metadata=md, timeout=5)
                ids = [j.job_id for j in r.jobs][-4:]
            except grpc.RpcError:
                ids = []
        for _ in range(args.streams if ids else 0):
            # The call starts at once; nothing ever asks for its messages.
            calls.append(stub.WatchJob(pb.JobRef(job_id=rng.choice(ids)), metadata=md))
            opened += 1
    print(json.dumps({"opened": opened, "channels": len(chans), "pid": os.getpid()}), flush=True)
    end = time.monotonic() + args.hold
    while time.monotonic() < end:
        time.sleep(0.5)
    for c in calls:
        if not c.running():
            refused += 1
    print(json.dumps({"ended_early": refused}), flush=True)
    os._exit(0)   # leave without reading or cancelling anything


if __name__ == "__main__":
    main()
