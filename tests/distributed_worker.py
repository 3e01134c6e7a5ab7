"""One rank of the distributed-index tests (launched by tests/test_distributed.py).

Usage: python distributed_worker.py RANK WORLD PORT CASES_JSON OUT_JSON. Runs every case
(index directory, or one per rank; queries file, scope, K, k, w) and writes, per case, the result or the
error this rank raised.
"""
import datetime
import json
import sys

import numpy as np
import torch
import torch.distributed as dist


def main():
    rank, world, port, cases_path, out_path = sys.argv[1:6]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=int(rank),
                            world_size=int(world), timeout=datetime.timedelta(seconds=60))
    from rasfast.distributed import DistributedThemeIndex
    cases = json.loads(open(cases_path).read())
    loaded, out = {}, []
    for c in cases:
        try:
            d = c["dir"][int(rank)] if isinstance(c["dir"], list) else c["dir"]  # per-rank copies
            if d not in loaded:
                loaded[d] = DistributedThemeIndex.load(d)
            ix = loaded[d]
            q = np.load(c["queries"])
            ids, sc = ix.search(q["qp"], q["qe"], c["K"], c["k"], scope=c["scope"],
                                theme_weight=c["w"])
            out.append({"ids": ids.tolist(), "scores": sc.view(np.int32).tolist()})
        except Exception as e:  # recorded for the test to inspect
            out.append({"error": f"{type(e).__name__}: {e}"})
    open(out_path, "w").write(json.dumps(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
