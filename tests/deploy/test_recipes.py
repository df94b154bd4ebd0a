"""The deployment recipes run: the Slurm script on simulated nodes, the
Kubernetes manifests checked against each other and against the CLI."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from support.servers import run_process_tree

from pyg_dist.cli import build_parser
from pyg_dist.datasets import cora
from pyg_dist.partitioning.writer import partition

REPO = Path(__file__).resolve().parents[2]
SBATCH = REPO / "examples" / "deploy" / "slurm" / "pyg-dist.sbatch"
K8S = REPO / "examples" / "deploy" / "k8s"
FAKE_SLURM = REPO / "tests" / "support" / "fake_slurm"
EXAMPLE = REPO / "examples" / "train_sage_dist.py"


def test_sbatch_is_valid_bash():
    out = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_sbatch_trains_on_simulated_slurm_nodes(sim_hosts, tmp_path):
    """One server node serving both parts (one process), two trainer nodes,
    ``srun`` and ``scontrol`` stand-ins placing commands on the hosts."""
    import sys

    nodes = sim_hosts(3, prefix="node")
    root = tmp_path / "cora2"
    partition(cora(), 2, root)
    env = {**os.environ,
           "PATH": f"{FAKE_SLURM}:{os.environ['PATH']}",
           "FAKE_SLURM_NETNS": ",".join(f"{n.name}={n.netns}" for n in nodes),
           "SLURM_JOB_NODELIST": ",".join(n.name for n in nodes),
           "SLURM_JOB_ID": "42", "SLURM_SUBMIT_DIR": str(tmp_path),
           "PYG_DIST_PYTHON": sys.executable, "PYG_DIST_SERVE_ARGS": "--workers 1",
           "GLOO_SOCKET_IFNAME": "eth0"}
    out = run_process_tree(["bash", str(SBATCH), str(root), str(EXAMPLE), "--epochs", "3"],
                           timeout=450, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert re.search(r"^test_acc=0\.\d+$", out.stdout, flags=re.M), out.stdout[-2000:]
    listed = (tmp_path / "pyg-dist-42" / "servers.txt").read_text().splitlines()
    assert listed == ["node0:5555  # part 0", "node0:5556  # part 1"]
    ready = (tmp_path / "pyg-dist-42" / "server-0.out").read_text()
    assert ready.startswith("ready tcp://0.0.0.0:5555 tcp://0.0.0.0:5556")


def test_sbatch_refuses_an_allocation_without_trainer_nodes(tmp_path):
    env = {**os.environ, "PATH": f"{FAKE_SLURM}:{os.environ['PATH']}",
           "SLURM_JOB_NODELIST": "node0", "SLURM_SUBMIT_DIR": str(tmp_path)}
    out = subprocess.run(["bash", str(SBATCH), str(tmp_path), "train.py"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "at least one trainer node" in out.stderr


def _manifests() -> dict[str, dict]:
    yaml = pytest.importorskip("yaml", reason="pyyaml (in the 'test' extra) reads the "
                                              "Kubernetes manifests")
    docs = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            docs[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return docs


def _shell_words(container: dict, env: dict[str, str]) -> list[str]:
    """The container's command line after the shell's expansion (by a real
    shell, with ``env``), as the program would receive it."""
    assert container["command"] == ["sh", "-c"]
    script = container["args"][0].replace("exec ", "", 1)
    printed = subprocess.run(["sh", "-c", f"set -- {script}; printf '%s\\n' \"$@\""],
                             env=env, capture_output=True, text=True, check=True).stdout
    return printed.splitlines()


def test_k8s_servers_serve_each_part_once_at_the_listed_names():
    docs = _manifests()
    service, servers = docs["Service/pyg-dist-server"], docs["StatefulSet/pyg-dist-server"]
    assert service["spec"]["clusterIP"] == "None"  # headless: stable per-pod names
    assert servers["spec"]["serviceName"] == service["metadata"]["name"]
    labels = servers["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    replicas = servers["spec"]["replicas"]
    container = servers["spec"]["template"]["spec"]["containers"][0]
    port = container["ports"][0]["containerPort"]
    parser = build_parser()
    for k in range(replicas):
        words = _shell_words(container, {"HOSTNAME": f"pyg-dist-server-{k}"})
        assert words[0] == "pyg-dist"
        args = parser.parse_args(words[1:])  # a usage error exits the test
        assert (args.subcommand, args.part, args.bind) == \
            ("serve", [k], f"tcp://0.0.0.0:{port}")
    listed = docs["ConfigMap/pyg-dist-servers"]["data"]["servers.txt"].split()
    assert listed == [f"pyg-dist-server-{k}.pyg-dist-server:{port}" for k in range(replicas)]
    from pyg_dist.discovery import server_groups

    assert len(server_groups(",".join(listed))) == replicas


def test_k8s_trainers_rendezvous_at_pod_zero_with_one_node_per_pod():
    docs = _manifests()
    job = docs["Job/pyg-dist-trainer"]
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"]
    headless = docs[f"Service/{pod['subdomain']}"]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    mount = next(m["mountPath"] for m in container["volumeMounts"])
    assert env["PYG_DIST_SERVERS_FILE"].startswith(mount + "/")
    words = _shell_words(container, {"JOB_COMPLETION_INDEX": "1"})
    assert words[0] == "torchrun"
    from torch.distributed.run import get_args_parser

    args = get_args_parser().parse_args(words[1:])
    assert args.nnodes == str(spec["completions"]) and args.node_rank == 1
    assert args.rdzv_endpoint == f"{job['metadata']['name']}-0.{pod['subdomain']}:" \
                                 f"{headless['spec']['ports'][0]['port']}"
    assert "--pg-timeout" in args.training_script_args


def test_docs_name_every_recipe():
    text = (REPO / "docs" / "multi-node.md").read_text()
    for path in [SBATCH, *sorted(K8S.glob("*.yaml"))]:
        assert str(path.relative_to(REPO)).rsplit("/", 1)[0] in text, path
