"""Provision/release latency of the slurm backend's Slurm calls, against a real Slurm.

Runs, ROUNDS times, what SlurmBackend does for a one-node lease — ``salloc --no-shell
--immediate`` as the holder, ``squeue --name`` + ``scontrol show job -d`` to read the
devices back (provision), then ``squeue`` + ``scancel`` and waiting until squeue no longer
lists the job (release) — and prints the median and worst of each. No database: the
Cardpool part (a few queries) is small next to these.

    LAB_NODES="gpu01:a100=4,h800=2 gpu02:a100=2" bash tests/slurm/slurm-lab.sh up
    .venv/bin/python bench/slurm_roundtrip.py --rounds 20 --user alice --gres gpu:h800:2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from leasing.backends.slurm import SlurmCli  # noqa: E402
from leasing.backends.slurm_parse import parse_salloc  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--user", default="alice")
    parser.add_argument("--node", default="gpu01")
    parser.add_argument("--gres", default="gpu:h800:2")
    parser.add_argument(
        "--conf", default=os.environ.get("SLURM_CONF", "/tmp/slurmlab/etc/slurm.conf")
    )
    parser.add_argument("--run-as", default="runuser", choices=["runuser", "sudo", "uid", "none"])
    args = parser.parse_args()
    cli = SlurmCli({"BIN_DIR": "", "CONF": args.conf, "RUN_AS": args.run_as, "COMMAND_TIMEOUT": 30})
    name = "cardpool-bench"
    provision, release = [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        out = cli.run(
            "salloc",
            ["--no-shell", "--immediate=5", f"--nodelist={args.node}", f"--gres={args.gres}",
             "--time=10", f"--job-name={name}"],
            as_user=args.user,
        )  # fmt: skip
        job_id = parse_salloc(out.output)
        if job_id is None:
            sys.exit(f"salloc failed: {out.output}")
        (queued,) = [j for j in cli.queue([name]) if j.live]
        cli.job(queued.job_id)
        t1 = time.perf_counter()
        cli.cancel([j.job_id for j in cli.queue([name]) if j.live])
        while any(j.live for j in cli.queue([name])):
            time.sleep(0.01)
        t2 = time.perf_counter()
        provision.append(t1 - t0)
        release.append(t2 - t1)
    for label, values in (("provision", provision), ("release", release)):
        ms = sorted(v * 1000 for v in values)
        print(
            f"{label:9s} n={len(ms)} median={statistics.median(ms):.0f} ms "
            f"max={ms[-1]:.0f} ms min={ms[0]:.0f} ms"
        )


if __name__ == "__main__":
    main()
