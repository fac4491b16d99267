"""Why two one-thread model servers do not give 2x on this host: compute vs memory bandwidth (issue 37 item 3).

Runs one, then two single-thread processes of each kind for 8 s and sums their rates:
* compute: a 256x256 float32 matrix product (fits in cache);
* memory: the sum of a 512 MB array (streams from RAM, as decoding streams the model's weights per token).
The ratio two/one per kind bounds what a second server can add: decoding sits near the memory figure.
No model involved; nothing else may run meanwhile.

    python -m bench.tag.host_scaling

Prints both ratios and writes bench/results/tag/host_scaling.json.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time

from bench import common


def _compute(q: mp.Queue) -> None:
    import numpy as np

    a = np.random.default_rng(0).random((256, 256), dtype=np.float32)
    t, n = time.perf_counter(), 0
    while time.perf_counter() - t < 8:
        a @ a
        n += 1
    q.put(n / (time.perf_counter() - t))


def _memory(q: mp.Queue) -> None:
    import numpy as np

    a = np.ones(64 * 1024 * 1024, dtype=np.float64)
    t, n = time.perf_counter(), 0
    while time.perf_counter() - t < 8:
        a.sum()
        n += 1
    q.put(n * a.nbytes / (time.perf_counter() - t) / 1e9)


def rates(kind) -> dict[int, float]:
    out = {}
    for procs in (1, 2):
        q: mp.Queue = mp.Queue()
        ps = [mp.Process(target=kind, args=(q,)) for _ in range(procs)]
        for p in ps:
            p.start()
        for p in ps:
            p.join()
        out[procs] = sum(q.get() for _ in ps)
    return out


def main() -> None:
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"  # inherited by the worker processes before numpy loads there
    run = common.Run(__spec__, [])
    summary = {}
    for name, kind, unit in (("compute", _compute, "matmuls/s"), ("memory", _memory, "GB/s")):
        r = rates(kind)
        summary[name] = {"one": round(r[1], 2), "two": round(r[2], 2), "unit": unit, "scaling": round(r[2] / r[1], 2)}
        print(f"{name:<8} one {r[1]:8.2f} {unit}  two {r[2]:8.2f} {unit}  scaling {r[2] / r[1]:.2f}x")
    out = run.save(common.result_path("tag", "host_scaling"), {"summary": summary})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
