#!/usr/bin/env python3
"""Run a strata program on a Ray cluster, as Ray Train runs DeepSpeed: N workers (Ray
actors, one per process, placed by a placement group) each start the program with the
variables torchrun would give it (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT),
so its world forms over Gloo (no MPI), and a fresh job secret (STRATA_JOB_SECRET), so its
rendezvous admits only this job's processes. Their output streams to this driver,
prefixed by rank; at the end the driver prints rank 0's report and where its export is.

usage: train.py [--address ADDR] [--workers N] [--cpus-per-worker C] [--report-out FILE]
                -- PROGRAM [ARGS...]

  --address ADDR        a running cluster ("auto", "ray://host:10001", host:port);
                        default: start a local Ray on loopback for this run
  --workers N           processes (default 2)
  --cpus-per-worker C   CPUs Ray reserves for each (default 1)
  --report-out FILE     write rank 0's report (the program's --report) here too
  -h, --help            this text

PROGRAM and its paths must exist on every node (a shared filesystem or the same image).
PROGRAM's own --report FILE and --export DIR are rank 0's, on rank 0's node; the
driver returns the report's contents and the export's node and path.
"""
import json
import os
import secrets
import subprocess
import sys


def usage_error(msg):
    print(f"train.py: {msg}", file=sys.stderr)
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    sys.exit(2)


def parse(argv):
    opts = {"address": None, "workers": 2, "cpus": 1.0, "report_out": None}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__.strip())
            sys.exit(0)
        if a == "--":
            i += 1
            break
        if a in ("--address", "--workers", "--cpus-per-worker", "--report-out"):
            if i + 1 >= len(argv):
                usage_error(f"{a} needs a value")
            v = argv[i + 1]
            if a == "--workers":
                if not v.isdigit() or int(v) < 1:
                    usage_error(f"--workers {v}: not a positive integer")
                opts["workers"] = int(v)
            elif a == "--cpus-per-worker":
                try:
                    opts["cpus"] = float(v)
                except ValueError:
                    usage_error(f"--cpus-per-worker {v}: not a number")
                if opts["cpus"] <= 0:
                    usage_error(f"--cpus-per-worker {v}: must be positive")
            elif a == "--address":
                opts["address"] = v
            else:
                opts["report_out"] = v
            i += 2
            continue
        usage_error(f"unknown option {a}")
    program = argv[i:]
    if not program:
        usage_error("no program to run (give it after --)")
    return opts, program


def option_value(program, name):
    """The value of PROGRAM's --name VALUE, if given."""
    for k, a in enumerate(program[:-1]):
        if a == name:
            return program[k + 1]
    return None


def main():
    opts, program = parse(sys.argv[1:])
    if os.sep in program[0] and os.path.exists(program[0]):  # the workers start it elsewhere
        program[0] = os.path.abspath(program[0])
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if opts["address"]:
        ray.init(address=opts["address"], log_to_driver=True)
    else:  # a Ray of its own for this run, on loopback only
        ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=True,
                 num_cpus=max(int(opts["workers"] * opts["cpus"] + 0.999), 1))

    @ray.remote
    class Worker:
        def address(self):
            """This node's address, and a free port on it (rank 0's become the rendezvous)."""
            import socket
            ip = ray.util.get_node_ip_address()
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((ip, 0))
                return ip, s.getsockname()[1]

        def run(self, env, program, rank, cwd):
            """Runs the program with torchrun's variables; its lines reach the driver."""
            proc = subprocess.Popen(program, env=dict(os.environ, **env), cwd=cwd, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, bufsize=1)
            for line in proc.stdout:
                print(f"[{rank}] {line}", end="", flush=True)
            return proc.wait()

        def read(self, path):
            with open(path) as f:
                return f.read()

    n = opts["workers"]
    pg = placement_group([{"CPU": opts["cpus"]}] * n, strategy="PACK")
    ray.get(pg.ready())
    workers = [
        Worker.options(num_cpus=opts["cpus"], scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=r)).remote()
        for r in range(n)
    ]
    addrs = ray.get([w.address.remote() for w in workers])
    master_addr, master_port = addrs[0]
    # LOCAL_RANK: the index among the workers on the same node.
    seen = {}
    local = []
    for ip, _ in addrs:
        local.append(seen.get(ip, 0))
        seen[ip] = local[-1] + 1
    print(f"train.py: {n} workers on {len(seen)} node(s); rendezvous {master_addr}:{master_port}", flush=True)
    secret = os.environ.get("STRATA_JOB_SECRET") or secrets.token_hex(32)
    runs = [
        w.run.remote({"RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(local[r]),
                      "LOCAL_WORLD_SIZE": str(seen[addrs[r][0]]), "MASTER_ADDR": master_addr,
                      "MASTER_PORT": str(master_port), "STRATA_JOB_SECRET": secret}, program, r, os.getcwd())
        for r, w in enumerate(workers)
    ]
    codes = ray.get(runs)
    failed = [(r, c) for r, c in enumerate(codes) if c != 0]
    if failed:
        r, c = failed[0]
        print(f"train.py: rank {r} exited with status {c}", file=sys.stderr)
        return c if c > 0 else 1
    report_path = option_value(program, "--report")
    if report_path:
        report = json.loads(ray.get(workers[0].read.remote(os.path.abspath(report_path))))
        print("train.py: rank 0's report: final_loss", report.get("final_loss"), "weights_hash",
              report.get("weights_hash"), "launch", report.get("launch"), flush=True)
        if opts["report_out"]:
            with open(opts["report_out"], "w") as f:
                json.dump(report, f, indent=2)
    export = option_value(program, "--export")
    if export:
        print(f"train.py: the Hugging Face directory is {os.path.abspath(export)} on {master_addr}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
