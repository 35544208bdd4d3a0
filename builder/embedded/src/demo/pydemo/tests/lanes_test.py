"""pydemo's acceptance test, run on the nodes by `epbuild test`.

Each of --procs processes opens a channel of libdemo through pydemo and copies a buffer;
each prints its copy bandwidth, as DeepEP's tests print theirs. PYDEMO_TEST_MODE=fail
makes it fail and PYDEMO_TEST_MODE=hang makes it hang, to show what `epbuild test`
reports then.
"""
import argparse
import multiprocessing
import os
import sys
import time

import pydemo


def worker(rank, mode):
    channel = pydemo.Channel(rank)
    if mode == "hang":
        time.sleep(3600)
    data = bytearray(4 << 20)
    copied, start = 0, time.perf_counter()
    for _ in range(16):
        copied += len(bytes(data))
    seconds = max(time.perf_counter() - start, 1e-9)
    print("[rank %d] %s: copy bandwidth: %.2f GB/s" % (rank, channel.describe(), copied / 1e9 / seconds), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=1, help="processes to start")
    args = parser.parse_args()
    mode = os.environ.get("PYDEMO_TEST_MODE", "")
    if mode == "fail":
        print("[rank 0] channel 0: expected 2 lanes, found 0", flush=True)
        sys.exit(1)
    procs = [multiprocessing.Process(target=worker, args=(rank, mode)) for rank in range(args.procs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    failed = [rank for rank, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        print("ranks %s failed" % failed, flush=True)
        sys.exit(1)
    print("%d processes passed" % args.procs, flush=True)


if __name__ == "__main__":
    main()
