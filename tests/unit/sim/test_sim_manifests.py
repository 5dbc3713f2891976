"""The sample Dask manifests for `smetric simulate --cluster` are valid Kubernetes objects and
point the client at the scheduler Service they define."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[3]
K8S_VERSION = "1.33.0"
FOLDER = ROOT / "manifests" / "sim-dask"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FOLDER / name).read_text()) if d]


def test_manifests_validate_strictly() -> None:
    for name in ("cluster.yaml", "regime-map-job.yaml"):
        for doc in docs(name):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_workers_and_job_use_the_scheduler_service() -> None:
    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs("cluster.yaml")}
    svc = objs[("Service", "smetric-sim-scheduler")]
    address = (
        f"tcp://{svc['metadata']['name']}.{svc['metadata']['namespace']}:{svc['spec']['ports'][0]['port']}"
    )
    worker = objs[("Deployment", "smetric-sim-worker")]["spec"]["template"]["spec"]["containers"][0]
    assert address in worker["command"] and "--nthreads" in worker["command"]
    (job,) = [d for d in docs("regime-map-job.yaml") if d["kind"] == "Job"]
    cmd = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--cluster") + 1] == address
    assert "--regime-map" in cmd and "--resume" in cmd
